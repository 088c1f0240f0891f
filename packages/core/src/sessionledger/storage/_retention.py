"""``PrunePlan``: what a prune deletes, shown before it deletes anything.

Retention announces itself (docs/listing.md, "retention"): ``prune`` first computes a
plan — the sessions it would delete, with their summaries and sizes — and deletes only
when asked to with ``dry_run=False``. An executed prune is written to the store's
append-only audit log before the first deletion and again after the last, so even a prune
that was killed half way is on record.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import socket
from collections.abc import Mapping
from typing import Any, final

from sessionledger.storage._listing import SessionInfo


@final
@dataclasses.dataclass(frozen=True, slots=True)
class PruneCandidate:
    """A session a prune deletes: its listing row and its size in the medium (None when
    the store cannot tell)."""

    info: SessionInfo
    bytes: int | None

    def to_json(self) -> dict[str, Any]:
        """Return the candidate as its listing row with ``bytes``."""
        row = self.info.to_json()
        row["bytes"] = self.bytes
        return row


@final
@dataclasses.dataclass(frozen=True, slots=True)
class PrunePlan:
    """The sessions a prune deletes under ``criteria`` (as JSON) at time ``now``, and —
    once executed — which it deleted and which it skipped, and why (another writer holds
    it, it changed since the plan, this process uses it)."""

    criteria: Mapping[str, Any]
    now: int
    sessions: tuple[PruneCandidate, ...]
    executed: bool = False
    deleted: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    audit_id: str | None = None

    @property
    def bytes(self) -> int:
        """The bytes the planned sessions take (those whose size is known)."""
        return sum(item.bytes or 0 for item in self.sessions)

    @property
    def bytes_freed(self) -> int:
        """The bytes the sessions it deleted took."""
        gone = set(self.deleted)
        return sum(item.bytes or 0 for item in self.sessions if item.info.id in gone)

    def to_json(self) -> dict[str, Any]:
        """Return the plan (and its outcome) as a JSON object."""
        return {
            "criteria": dict(self.criteria),
            "now": self.now,
            "sessions": [item.to_json() for item in self.sessions],
            "bytes": self.bytes,
            "executed": self.executed,
            "deleted": list(self.deleted),
            "skipped": [{"id": id, "reason": reason} for id, reason in self.skipped],
            "bytesFreed": self.bytes_freed,
            "auditId": self.audit_id,
        }


def who_and_where() -> dict[str, Any]:
    """The host, user and process an audit record names."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return {"host": socket.gethostname(), "user": user, "pid": os.getpid()}
