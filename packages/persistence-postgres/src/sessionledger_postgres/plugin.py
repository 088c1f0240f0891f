"""The ``postgresql:`` / ``postgres:`` store URLs, registered through ``ledger_backends``.

A store URL is an ordinary PostgreSQL connection URL, as asyncpg takes it, plus a few
query parameters that belong to sessionledger and are removed before asyncpg sees it::

    postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE?schema=ledger&pool_max_size=16
    postgresql://USER@/DATABASE?host=/run/postgresql       (Unix socket directory)

- ``schema`` — the PostgreSQL schema holding the tables (default ``sessionledger``);
- ``pool_min_size`` / ``pool_max_size`` — connections kept open / at most (1 / 8);
- ``exclusive`` — accepted as ``true`` only: every session has one writer, always;
- ``connect_timeout`` / ``command_timeout`` — seconds (10 / none);
- ``upgrade`` — ``1`` upgrades a schema of the previous release (v1) in place on first
  use, in one transaction (docs/formats.md, "PostgreSQL"); without it such a schema is
  refused (``FORMAT_OLDER``).

Every other parameter goes to asyncpg unchanged (``host``, ``port``, ``sslmode``,
``passfile``…; names asyncpg does not know become server settings, such as
``application_name``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from sessionledger import hookimpl
from sessionledger._errors import ConfigError
from sessionledger.model._registry import EventTypeRegistry
from sessionledger.plugins._hookspecs import BackendFactory
from sessionledger_postgres.store import PostgresPersistence

__all__ = ["SCHEMES", "ledger_backends", "open_postgres_store", "parse_postgres_url"]

#: The URL schemes this package serves.
SCHEMES: Final = ("postgresql", "postgres")

_TRUE: Final = frozenset(("1", "true", "yes", "on"))
_FALSE: Final = frozenset(("0", "false", "no", "off"))


def _integer(name: str, value: str) -> int:
    try:
        return int(value, 10)
    except ValueError as error:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from error


def _seconds(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError as error:
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from error


def _flag(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


_OPTIONS: Final[Mapping[str, Callable[[str, str], Any]]] = {
    "schema": lambda _name, value: value,
    "pool_min_size": _integer,
    "pool_max_size": _integer,
    "exclusive": _flag,
    "connect_timeout": _seconds,
    "command_timeout": _seconds,
    "upgrade": _flag,
}


def parse_postgres_url(url: str) -> tuple[str, dict[str, Any]]:
    """Split a store URL into asyncpg's DSN and ``PostgresPersistence`` keywords.

    The DSN keeps every part of *url* but sessionledger's own query parameters, verbatim.
    Raises ``ConfigError`` for another scheme, a URL without ``//``, a repeated or
    malformed option of ours.
    """
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise ConfigError(f"malformed PostgreSQL URL {url!r}: {error}") from error
    if parts.scheme not in SCHEMES or not url.startswith(f"{parts.scheme}://"):
        raise ConfigError(
            f"not a PostgreSQL store URL: {url!r} (expected postgresql://USER@HOST/DATABASE)"
        )
    options: dict[str, Any] = {}
    kept: list[str] = []
    for segment in parts.query.split("&") if parts.query else []:
        raw_name, equals, raw_value = segment.partition("=")
        name = unquote_plus(raw_name)
        convert = _OPTIONS.get(name)
        if convert is None:
            kept.append(segment)
            continue
        if not equals:
            raise ConfigError(f"option {name!r} in the store URL needs a value ({name}=...)")
        if name in options:
            raise ConfigError(f"option {name!r} is given twice in the store URL")
        options[name] = convert(name, unquote_plus(raw_value))
    dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, "&".join(kept), parts.fragment))
    return dsn, options


def open_postgres_store(url: str, *, event_types: EventTypeRegistry) -> PostgresPersistence:
    """Build the backend for a PostgreSQL URL; nothing is connected until first use."""
    dsn, options = parse_postgres_url(url)
    return PostgresPersistence(dsn, event_types=event_types, **options)


@hookimpl
def ledger_backends() -> Mapping[str, BackendFactory]:
    """Serve ``postgresql:`` and ``postgres:`` URLs."""
    return dict.fromkeys(SCHEMES, open_postgres_store)
