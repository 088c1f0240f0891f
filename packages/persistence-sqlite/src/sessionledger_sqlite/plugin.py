"""The ``sqlite:`` store URL, registered through the ``ledger_backends`` hook.

Forms: ``sqlite:PATH`` (relative paths resolve against the working directory when the
URL is opened, ``~`` expands to the home directory) and ``sqlite::memory:`` for a
private in-memory database. Options go in a query string after the first ``?``:
``synchronous=FULL|NORMAL``, ``busy_timeout=SECONDS`` and ``upgrade=1`` (upgrade a
database of an older schema in place when it is opened), as in
``sqlite:ledger.db?synchronous=NORMAL&busy_timeout=2``. A path that itself contains
``?`` cannot be written as a URL; construct ``SqlitePersistence`` directly for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from sessionledger import hookimpl
from sessionledger._errors import ConfigError
from sessionledger.model._registry import EventTypeRegistry
from sessionledger.plugins._hookspecs import BackendFactory
from sessionledger_sqlite.store import SqlitePersistence

__all__ = ["SCHEME", "ledger_backends", "open_sqlite_store", "parse_sqlite_url"]

#: The URL scheme this package serves.
SCHEME = "sqlite"

_OPTIONS = ("synchronous", "busy_timeout", "upgrade")


def parse_sqlite_url(url: str) -> tuple[str, dict[str, Any]]:
    """Split ``sqlite:PATH[?OPTIONS]`` into the path and ``SqlitePersistence`` keywords.

    Raises ``ConfigError`` for another scheme, an empty path, an unknown or repeated
    option, a ``busy_timeout`` that is not a number or an ``upgrade`` that is not 0 or 1.
    """
    scheme, colon, rest = url.partition(":")
    if scheme != SCHEME or not colon:
        raise ConfigError(f"not a {SCHEME}: URL: {url!r}")
    path, question, query = rest.partition("?")
    if not path:
        raise ConfigError(f"{SCHEME}: URL {url!r} names no database (use sqlite::memory:)")
    options: dict[str, Any] = {}
    if question:
        try:
            pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
        except ValueError as error:
            raise ConfigError(f"malformed options in {url!r}: {error}") from error
        for name, value in pairs:
            if name not in _OPTIONS:
                raise ConfigError(
                    f"unknown option {name!r} in {url!r} (known: {', '.join(_OPTIONS)})"
                )
            if name in options:
                raise ConfigError(f"option {name!r} is given twice in {url!r}")
            if name == "busy_timeout":
                try:
                    options[name] = float(value)
                except ValueError as error:
                    raise ConfigError(
                        f"busy_timeout must be a number of seconds, got {value!r}"
                    ) from error
            elif name == "upgrade":
                if value not in ("0", "1"):
                    raise ConfigError(f"upgrade must be 0 or 1, got {value!r}")
                options[name] = value == "1"
            else:
                options[name] = value
    return path, options


def open_sqlite_store(url: str, *, event_types: EventTypeRegistry) -> SqlitePersistence:
    """Build the backend for a ``sqlite:`` URL; nothing is opened until first use."""
    path, options = parse_sqlite_url(url)
    return SqlitePersistence(path, event_types=event_types, **options)


@hookimpl
def ledger_backends() -> Mapping[str, BackendFactory]:
    """Serve ``sqlite:`` URLs."""
    return {SCHEME: open_sqlite_store}
