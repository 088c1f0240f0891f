"""Session claims of the PostgreSQL store: advisory-lock keys and who holds them.

A session's one writer holds a session-level advisory lock whose key derives from the
schema and the session id; the lock connection's ``application_name`` names the holder,
so a refused writer learns who holds the session (docs/durability.md).
"""

from __future__ import annotations

import hashlib
import os
import socket
from typing import Final

import asyncpg

__all__ = [
    "HOLDER",
    "NAME_BYTES",
    "TRY_LOCK",
    "UNLOCK",
    "describe",
    "holder_name",
    "key_halves",
    "lock_key",
]

TRY_LOCK: Final = "SELECT pg_try_advisory_lock($1::bigint)"
UNLOCK: Final = "SELECT pg_advisory_unlock($1::bigint)"
# Who holds a bigint advisory lock: its key is split into classid (high half) and objid
# (low half), objsubid 1. pg_stat_activity shows another role's application_name only to
# members of pg_read_all_stats; the holder is then unknown.
HOLDER: Final = (
    "SELECT a.application_name, a.backend_start FROM pg_locks l "
    "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1 LIMIT 1"
)
#: application_name holds at most 63 bytes.
NAME_BYTES: Final = 63


def lock_key(schema: str, session_id: str) -> int:
    """Return the 64-bit advisory-lock key of one session of one schema."""
    text = f"{schema}\0{session_id}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def holder_name() -> str:
    """The lock connection's ``application_name``: who holds its sessions."""
    name = f"sessionledger pid {os.getpid()} on {socket.gethostname()}"
    return name.encode("utf-8")[:NAME_BYTES].decode("utf-8", "ignore")


def key_halves(key: int) -> tuple[int, int]:
    """Split a lock key as pg_locks shows it: classid (high half), objid (low half)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


def describe(holder: asyncpg.Record | None) -> str:
    """Name a lock holder from its connection's application name and start time."""
    if holder is None or not holder[0]:
        return "holder unknown"
    since = (
        "" if holder[1] is None else f", connected since {holder[1].isoformat(timespec='seconds')}"
    )
    return f"{str(holder[0])[:NAME_BYTES]}{since}"
