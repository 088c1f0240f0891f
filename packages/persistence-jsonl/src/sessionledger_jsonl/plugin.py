"""The ``sessionledger`` entry point of this package: serves ``jsonl:DIR`` store URLs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sessionledger._errors import ConfigError
from sessionledger.plugins._hookspecs import BackendFactory, hookimpl

if TYPE_CHECKING:
    from sessionledger.model._registry import EventTypeRegistry
    from sessionledger_jsonl.store import JsonlPersistence

__all__ = ["ledger_backends", "open_jsonl_store"]

SCHEME = "jsonl"


def open_jsonl_store(url: str, *, event_types: EventTypeRegistry) -> JsonlPersistence:
    """Open ``jsonl:DIR``: a relative DIR is resolved against the current directory now,
    and a leading ``~`` is expanded; an empty DIR raises ``ConfigError``."""
    scheme, colon, location = url.partition(":")
    if scheme != SCHEME or not colon:
        raise ConfigError(f"not a jsonl store URL: {url!r} (expected 'jsonl:DIR')")
    if not location:
        raise ConfigError("a jsonl store URL needs a directory, e.g. 'jsonl:./sessions'")
    from sessionledger_jsonl.store import JsonlPersistence

    return JsonlPersistence(os.path.expanduser(location), event_types=event_types)


@hookimpl
def ledger_backends() -> Mapping[str, BackendFactory]:
    """Serve the ``jsonl:`` scheme."""
    return {SCHEME: open_jsonl_store}
