"""The durability bridge: a live session's committed events on their way to the store.

``Session.append`` commits an event and hands it to its ``SessionHooks.recorder``; for a
ledger with a store that is ``Durability.record``, which queues it in the session's
``WriteBehind`` (``sessionledger.storage._writebehind``); each batch the window releases goes to a
``SessionSink``, which writes it through the persistence policy
(``SessionPersistence.append``), which drives the store's primitives. So the way from
``append`` to the file reads top-down: session, this bridge, write-behind, policy, store.

Before an event is committed, ``Durability.admit`` (the ``SessionHooks.admission``) refuses
one the store could never hold and one that would overfill the ledger's backlog
(docs/durability.md, "limits and the backlog"); it measures the event once, and the
recorder queues it with that size.
"""

from __future__ import annotations

from typing import Final, final

from sessionledger._errors import BacklogFullError
from sessionledger.model._deltas import DeltaFields
from sessionledger.model._eventlog import LogRuns
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._session import Session
from sessionledger.storage._lifecycle import LoopBinding
from sessionledger.storage._limits import Backlog, delta_bytes, event_bytes, event_limit, too_large
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.storage._writebehind import Tally, WriteBehind

#: The limit ``Durability.admit`` finds for a session this bridge does not write.
_NOT_WRITTEN: Final = -1


@final
class SessionSink:
    """Write one session's batches as *owner* (its ledger): register its header before
    the first one."""

    __slots__ = ("_created", "_header", "_owner", "_persistence", "_runs")

    def __init__(
        self,
        persistence: SessionPersistence,
        header: SessionHeader,
        *,
        created: bool,
        owner: object | None = None,
        runs: LogRuns | None = None,
    ) -> None:
        self._persistence = persistence
        self._header = header
        self._created = created
        self._owner = owner
        self._runs = runs  # the session's log: its batches are packed from its runs

    async def __call__(self, batch: list[SessionEvent], sizes: list[int]) -> None:
        if not self._created:
            await self._persistence.create(self._header, owner=self._owner)
            self._created = True
        await self._persistence.append(
            self._header.id, batch, sizes=sizes, owner=self._owner, runs=self._runs
        )


@final
class Durability:
    """One ledger's write-behind for each of its live sessions, writing to *persistence*.

    *delay* is the write-behind window in seconds (docs/durability.md, "write-behind");
    *max_pending_bytes* bounds what all sessions together hold unwritten ("limits and the
    backlog"); *owner* is the ledger the sessions are written for ("one writer per
    session"); *loop* is the event loop binding appends must come from.
    """

    __slots__ = (
        "_delay",
        "_limits",
        "_loop",
        "_max_pending",
        "_measured",
        "_measured_size",
        "_owner",
        "_persistence",
        "_tally",
        "_writers",
    )

    def __init__(
        self,
        persistence: SessionPersistence,
        *,
        delay: float,
        max_pending_bytes: int,
        owner: object | None = None,
        loop: LoopBinding | None = None,
    ) -> None:
        self._persistence = persistence
        self._loop = loop
        self._delay = delay
        self._max_pending = max_pending_bytes
        self._owner = owner
        self._writers: dict[Session, WriteBehind] = {}
        self._limits: dict[Session, int | None] = {}  # each session's largest event
        self._tally = Tally()
        # The last event admit measured, so that record need not measure it again.
        self._measured: SessionEvent | None = None
        self._measured_size = 0

    def attach(self, session: Session, *, stored_length: int | None) -> None:
        """Start writing *session*: queue whatever of its log is not stored yet (all of
        it for a new session, or what follows the *stored_length* events it was loaded
        with); its later events arrive through ``record``. An event of that log the
        store cannot hold raises ``TOO_LARGE`` here, with nothing attached."""
        store = self._persistence.log_store
        limit = event_limit(store, session.id)
        unstored = session.events_from(stored_length or 0)
        sizes = [event_bytes(event) for event in unstored]
        for event, size in zip(unstored, sizes, strict=True):
            if limit is not None and size > limit:
                raise too_large(session.id, event.seq, size, limit, store.scheme)
        writer = WriteBehind(
            SessionSink(
                self._persistence,
                session.header,
                created=stored_length is not None,
                owner=self._owner,
                runs=session.runs(),
            ),
            delay=self._delay,
            label=session.id,
            max_batch_bytes=store.max_batch_bytes,
            tally=self._tally,
        )
        self._writers[session] = writer
        self._limits[session] = limit
        for event, size in zip(unstored, sizes, strict=True):
            writer.admit(event, size)

    def admit(self, session: Session, event: SessionEvent, fields: DeltaFields | None) -> None:
        """Refuse *event* before *session* commits it (the ``SessionHooks.admission``):
        ``TOO_LARGE`` when the store could never hold it, ``BACKLOG_FULL`` when the
        ledger's backlog is not empty and would grow past its bound. *fields* are a
        streamed delta's, when the append has them. An append from outside the event
        loop the ledger serves is refused too: its write-behind timer would be armed on
        another loop, or on none (docs/durability.md, "one event loop per ledger")."""
        if self._loop is not None:
            self._loop.serve_append()
        limit = self._limits.get(session, _NOT_WRITTEN)
        if limit == _NOT_WRITTEN:
            return
        size = event_bytes(event) if fields is None else delta_bytes(event, fields)
        if limit is not None and size > limit:
            raise too_large(session.id, event.seq, size, limit, self._persistence.scheme)
        tally = self._tally
        if tally.events and tally.bytes + size > self._max_pending:
            raise BacklogFullError(
                f"the ledger holds {tally.events:,} committed event(s), {tally.bytes:,} "
                f"bytes, not yet written, and this event of {size:,} bytes would pass its "
                f"bound of {self._max_pending:,} (max_pending_bytes): the store is slow or "
                "failing; flush, then append again",
                session_id=session.id,
                seq=event.seq,
            )
        self._measured = event
        self._measured_size = size

    def record(self, session: Session, event: SessionEvent) -> None:
        """Queue a committed event of *session* (the ``SessionHooks.recorder``); never
        blocks and never writes by itself."""
        writer = self._writers.get(session)
        if writer is not None:
            measured = self._measured is event
            writer.admit(event, self._measured_size if measured else event_bytes(event))
            self._measured = None

    async def flush(self, session: Session) -> None:
        """Make everything *session* committed so far durable (nothing for a session
        this bridge does not write)."""
        writer = self._writers.get(session)
        if writer is not None:
            await writer.flush()

    def pending(self, session: Session) -> int:
        """Count *session*'s events committed and not yet durable."""
        writer = self._writers.get(session)
        return 0 if writer is None else writer.pending

    def unwritten(self, session: Session) -> list[SessionEvent]:
        """Return *session*'s events committed and not yet durable, oldest first."""
        writer = self._writers.get(session)
        return [] if writer is None else writer.unwritten()

    def backlog(self, session: Session | None = None) -> Backlog:
        """What *session* (or, without one, every session) holds unwritten."""
        if session is None:
            return Backlog(self._tally.events, self._tally.bytes)
        writer = self._writers.get(session)
        return Backlog() if writer is None else Backlog(writer.pending, writer.pending_bytes)

    def has_pending(self) -> bool:
        """Tell whether any session has events committed and not yet durable."""
        return any(writer.pending for writer in self._writers.values())

    def detach(self, session: Session) -> None:
        """Stop writing *session*; what it still had pending is not written."""
        writer = self._writers.pop(session, None)
        self._limits.pop(session, None)
        if writer is not None:
            writer.cancel()
