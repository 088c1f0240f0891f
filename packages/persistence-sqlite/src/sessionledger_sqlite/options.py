"""What a ``SqliteLogStore`` is built from, checked before anything is opened: the
database path and the ``synchronous`` and ``busy_timeout`` options (``sqlite:`` URL
options are parsed by ``plugin``, then checked here like any keyword)."""

from __future__ import annotations

import math
import os
from typing import Final, Literal

from sessionledger._errors import ConfigError
from sessionledger.storage._links import pinned

__all__ = ["MEMORY", "check_options", "check_path"]

#: The path that names a private in-memory database (``sqlite::memory:``).
MEMORY: Final = ":memory:"


def check_options(synchronous: str, busy_timeout: float) -> Literal["FULL", "NORMAL"]:
    """Return *synchronous* as the pragma value; ``ConfigError`` for a mode or a
    timeout SQLite would not take."""
    mode = synchronous.upper() if type(synchronous) is str else synchronous
    if mode not in ("FULL", "NORMAL"):
        raise ConfigError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
    if (
        type(busy_timeout) not in (int, float)
        or not math.isfinite(busy_timeout)
        or busy_timeout < 0
    ):
        raise ConfigError(
            f"busy_timeout must be a non-negative number of seconds, got {busy_timeout!r}"
        )
    return "FULL" if mode == "FULL" else "NORMAL"


def check_path(path: str | os.PathLike[str]) -> str:
    """Return *path* absolute (``~`` expanded, the links of its parent directories
    resolved: ``links.pinned``) or ``MEMORY``: the store's one name for its database,
    whatever the working directory is later or a parent link points to then."""
    try:
        text = os.fspath(path)
    except TypeError as error:
        raise ConfigError(f"database path must be a str or path, got {path!r}") from error
    if type(text) is not str or not text or "\0" in text:
        raise ConfigError(f"invalid database path {path!r}")
    return text if text == MEMORY else pinned(os.path.expanduser(text))
