"""What reading and repairing a stored session returns: ``StoredSession``, ``SalvageReport``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import final

from sessionledger.model._eventlog import EventLog
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._session import Session
from sessionledger.storage._committed import ScannedLog, TornTail


@final
@dataclasses.dataclass(frozen=True, slots=True)
class StoredSession:
    """A stored session as read: header, events and the storage revision they came from.

    ``events`` is a read-only sequence of the events (a compact ``EventLog`` when read
    whole, a tuple otherwise): index it, slice it, iterate it, compare it to a tuple.
    ``torn_batches`` counts the trailing batches of a torn tail the read left out (an
    ``inspect`` drops them from its view; a ``load`` moved them into quarantine), and
    ``torn_tail`` says what it holds (and, after a load, where it went).
    """

    header: SessionHeader
    events: Sequence[SessionEvent]
    revision: str
    torn_batches: int = 0
    torn_tail: TornTail | None = None


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SalvageReport:
    """What ``salvage`` did: the intact prefix it kept, exactly what it moved aside (the
    medium's batches and records, the seqs among them that still decode, their bytes and
    where they went), and how many crash-repair closers it appended after the cut."""

    session_id: str
    kept_events: int
    moved_batches: int
    moved_records: int
    moved_seqs: tuple[int, int] | None
    moved_bytes: int
    quarantine: str | None
    closers: int

    @property
    def moved(self) -> bool:
        """Whether anything was moved aside (False: the log had no damage to cut)."""
        return self.moved_records > 0


@dataclasses.dataclass(frozen=True, slots=True)
@final
class ValidatedLog:
    """A stored log as read and validated: what going live needs (the scan, the closers of
    an interrupted turn, the session rebuilt from them), and what a read shows."""

    scan: ScannedLog
    closers: list[SessionEvent]
    session: Session

    def stored(self, revision: str, torn: TornTail | None = None) -> StoredSession:
        """The session as read at *revision*, with its torn tail (by default, as read)."""
        events = self.scan.events
        log = events.plus(self.closers) if type(events) is EventLog else (*events, *self.closers)
        torn = self.scan.torn if torn is None else torn
        return StoredSession(self.scan.header, log, revision, self.scan.torn_batches, torn)
