"""The durability bridge: a live session's committed events on their way to the store.

``Session.append`` commits an event and hands it to its ``SessionHooks.recorder``; for a
ledger with a store that is ``Durability.record``, which queues it in the session's
``WriteBehind`` (``sessionledger.writebehind``); each batch the window releases goes to a
``SessionSink``, which writes it through the persistence policy
(``SessionPersistence.append``), which drives the store's primitives. So the way from
``append`` to the file reads top-down: session, this bridge, write-behind, policy, store.
"""

from __future__ import annotations

from typing import final

from sessionledger.events import SessionEvent, SessionHeader
from sessionledger.persistence import SessionPersistence
from sessionledger.session import Session
from sessionledger.writebehind import WriteBehind

__all__ = ["Durability", "SessionSink"]


@final
class SessionSink:
    """Write one session's batches as *owner* (its ledger): register its header before
    the first one."""

    __slots__ = ("_created", "_header", "_owner", "_persistence")

    def __init__(
        self,
        persistence: SessionPersistence,
        header: SessionHeader,
        *,
        created: bool,
        owner: object | None = None,
    ) -> None:
        self._persistence = persistence
        self._header = header
        self._created = created
        self._owner = owner

    async def __call__(self, batch: list[SessionEvent]) -> None:
        if not self._created:
            await self._persistence.create(self._header, owner=self._owner)
            self._created = True
        await self._persistence.append(self._header.id, batch, owner=self._owner)


@final
class Durability:
    """One ledger's write-behind for each of its live sessions, writing to *persistence*.

    *delay* is the write-behind window in seconds (docs/durability.md, "write-behind");
    *owner* is the ledger the sessions are written for (docs/durability.md, "one writer
    per session").
    """

    __slots__ = ("_delay", "_owner", "_persistence", "_writers")

    def __init__(
        self, persistence: SessionPersistence, *, delay: float, owner: object | None = None
    ) -> None:
        self._persistence = persistence
        self._delay = delay
        self._owner = owner
        self._writers: dict[Session, WriteBehind] = {}

    def attach(self, session: Session, *, stored_length: int | None) -> None:
        """Start writing *session*: queue whatever of its log is not stored yet (all of
        it for a new session, or what follows the *stored_length* events it was loaded
        with); its later events arrive through ``record``."""
        writer = WriteBehind(
            SessionSink(
                self._persistence,
                session.header,
                created=stored_length is not None,
                owner=self._owner,
            ),
            delay=self._delay,
            label=session.id,
        )
        self._writers[session] = writer
        for event in session.events_from(stored_length or 0):
            writer.admit(event)

    def record(self, session: Session, event: SessionEvent) -> None:
        """Queue a committed event of *session* (the ``SessionHooks.recorder``); never
        blocks and never writes by itself."""
        writer = self._writers.get(session)
        if writer is not None:
            writer.admit(event)

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

    def has_pending(self) -> bool:
        """Tell whether any session has events committed and not yet durable."""
        return any(writer.pending for writer in self._writers.values())

    def detach(self, session: Session) -> None:
        """Stop writing *session*; what it still had pending is not written."""
        writer = self._writers.pop(session, None)
        if writer is not None:
            writer.cancel()
