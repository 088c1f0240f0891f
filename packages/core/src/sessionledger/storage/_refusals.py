"""Why a store refused a batch, and how much of a retried batch had landed anyway.

A store refuses a batch whose first seq is not where its log ends. Before the policy
words that refusal it reads what the store holds from there: a write whose caller was
cancelled (or whose reply was lost) may have landed, and write-behind retries it with
newer events behind it, so the part storage already holds counts as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sessionledger._errors import (
    LedgerError,
    SeqMismatchError,
    SessionExistsError,
    SessionNotFoundError,
)
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.storage._committed import ScannedLog, scan_log
from sessionledger.storage._logstore import RawLog


def readable_scan(session_id: str, raw: RawLog | None, first: int) -> ScannedLog | None:
    """Scan what a refused write found, or None when nothing (readable) is stored."""
    if raw is None:
        return None
    try:
        return scan_log(session_id, raw, contiguous_from=0 if first == 0 else None)
    except LedgerError:
        return None


def held_prefix(
    scan: ScannedLog | None,
    header: SessionHeader,
    events: Sequence[SessionEvent],
    *,
    creates: bool,
) -> int:
    """Count the events of a batch that storage already holds at their seqs as its tail
    (a prefix of the batch, nothing after it), so a retried write can skip them; 0 when
    the stored log continues otherwise (then the refusal is real)."""
    if scan is None:
        return 0
    if creates and _stored_bytes(scan.header.to_json()) != _stored_bytes(header.to_json()):
        return 0  # another writer's log under this id
    start = events[0].seq
    stored = [event for event in scan.events if event.seq >= start]
    if len(stored) > len(events):
        return 0
    # Compared as stored bytes: data may be nested deeper than == can recurse.
    for held, event in zip(stored, events, strict=False):
        if _stored_bytes(held.to_json()) != _stored_bytes(event.to_json()):
            return 0
    return len(stored)


def refusal(
    session_id: str, first: int, *, creates: bool, raw: RawLog | None, scan: ScannedLog | None
) -> LedgerError:
    """Say why a store refused a batch starting at *first*, from what it holds now."""
    if creates and raw is not None:
        return SessionExistsError(
            "session already has a stored log (another writer created it first)",
            session_id=session_id,
        )
    if raw is None:
        return SessionNotFoundError(
            "session is no longer stored (deleted by another writer?)", session_id=session_id
        )
    if scan is None:
        return SeqMismatchError(
            f"batch starts at seq {first} but the stored log no longer reads as this "
            "instance left it; load the session again",
            session_id=session_id,
            seq=first,
        )
    if scan.torn_at is not None and scan.end_seq <= first:
        return SeqMismatchError(
            "the stored log ends with a partial record written after this instance read it; "
            "load the session again to repair it",
            session_id=session_id,
            seq=first,
        )
    return SeqMismatchError(
        f"batch starts at seq {first} but the stored log continues at seq {scan.end_seq} "
        "(another writer appended first)",
        session_id=session_id,
        seq=first,
    )


def _stored_bytes(value: Any) -> bytes:
    return jsoncodec.dumps(value)


def changed_meanwhile(session_id: str, seq: int) -> SeqMismatchError:
    """The refusal of a repair whose log another writer changed since it was read."""
    return SeqMismatchError(
        "the stored log changed since it was read; not repairing it (load the session again)",
        session_id=session_id,
        seq=seq,
    )
