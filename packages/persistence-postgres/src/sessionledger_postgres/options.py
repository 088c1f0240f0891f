"""The PostgreSQL store's connection options: their checks, and the DSN as messages show it."""

from __future__ import annotations

import math
from urllib.parse import urlsplit, urlunsplit

from sessionledger._errors import ConfigError

__all__ = ["check_options", "redact"]


def redact(dsn: str) -> str:
    """Return *dsn* without its password and query, for messages."""
    try:
        parts = urlsplit(dsn)
        netloc = parts.netloc.rpartition("@")
        user = netloc[0].partition(":")[0]
        host = f"{user}@{netloc[2]}" if netloc[1] else netloc[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return "postgresql://?"


def check_options(
    pool_min_size: int, pool_max_size: int, connect_timeout: float, command_timeout: float | None
) -> None:
    """Refuse pool sizes and timeouts a pool cannot be made with (``ConfigError``)."""
    for name, size, low in (
        ("pool_min_size", pool_min_size, 0),
        ("pool_max_size", pool_max_size, 1),
    ):
        if type(size) is not int or size < low:
            raise ConfigError(f"{name} must be an integer >= {low}, got {size!r}")
    if pool_min_size > pool_max_size:
        raise ConfigError(f"pool_min_size {pool_min_size} exceeds pool_max_size {pool_max_size}")
    timeouts = [("connect_timeout", connect_timeout)]
    if command_timeout is not None:
        timeouts.append(("command_timeout", command_timeout))
    for name, value in timeouts:
        if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
