"""``LedgerChatMessageHistory``: a LangChain chat history kept in a sessionledger ledger."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from sessionledger import Ledger, LedgerLoopError, Replace, Session, snapshot
from sessionledger.runtime._hopping import LedgerThread as CoreLedgerThread
from sessionledger.runtime._hopping import on_ledger_loop, wait_on_ledger_loop
from sessionledger_langchain._mapping import (
    Planner,
    TurnState,
    clear_marker,
    history_view,
)

__all__ = ["LedgerChatMessageHistory", "LedgerThread"]

T = TypeVar("T")


class LedgerChatMessageHistory(BaseChatMessageHistory):
    """The chat history of session *session_id* in *ledger*.

    The async methods run on the event loop the ledger serves (the loop running when the
    history was built binds a ledger that serves none yet; *loop*, the ledger's loop, is
    accepted for compatibility). From another loop or thread they are handed to it and
    wait there (``sessionledger.runtime._hopping``). The sync methods (``messages``,
    ``add_messages``, ``clear``) hand the same coroutines over and wait, so they need a
    ledger whose loop runs in another thread: a :class:`LedgerThread`. When the ledger's
    loop is not running, every method raises ``LedgerLoopError`` instead of waiting.
    ``title`` and ``meta`` describe a session this history creates (``sessionledger ls``
    shows them); a stored session keeps its own.
    """

    def __init__(
        self,
        session_id: str,
        ledger: Ledger,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.ledger = ledger
        if loop is None:
            with contextlib.suppress(LedgerLoopError):
                loop = ledger.serving_loop()  # binds the running loop if none is served
        self._loop = loop
        self._title = title
        self._meta = meta
        self._session: Session | None = None
        self._state = TurnState()
        self._processed = 0

    # --- the ledger side (runs on the ledger's loop) ----------------------------------

    async def _live(self) -> Session:
        session = self.ledger.get(self.session_id)
        if session is None:
            session = await self.ledger.resume_or_create(
                self.session_id, title=self._title, meta=self._meta
            )
        if session is not self._session:  # first use, or resumed again after a release
            self._session, self._state, self._processed = session, TurnState(), 0
        for event in session.events_from(self._processed):
            self._state.advance(event.type, event.data, event.seq, event.surface_op)
        self._processed = session.seq
        return session

    async def _get(self) -> list[BaseMessage]:
        session = await self._live()
        return history_view(session.event_log(), session.surface.nodes, self._state)

    async def _add(self, messages: Sequence[BaseMessage]) -> None:
        session = await self._live()
        planner = Planner(self._state, session.seq)
        for message in messages:
            planner.add(message)
        planned = [(step, snapshot(step.data)) for step in planner.out]  # refuse non-JSON first
        for step, data in planned:
            session.append(
                step.type, data, surface_op=step.surface_op, source_event_seqs=step.sources
            )
        await self._live()
        await self.ledger.flush(session)

    async def _clear(self) -> None:
        session = await self._live()
        nodes = session.surface.nodes
        visible = [seq for seq in self._state.systems if seq > self._state.cleared_at]
        if nodes and not (len(nodes) == 1 and self._state.cleared_at == nodes[0]):
            session.append(
                "user/message",
                clear_marker(),
                surface_op=Replace(nodes[0], nodes[-1]),
                source_event_seqs=list(nodes),
            )
        elif visible:  # only SystemMessages are visible: nothing on the surface to shadow
            session.append("user/message", clear_marker(), surface_op="append")
        else:
            return
        await self._live()
        await self.ledger.flush(session)

    # --- reaching the ledger's loop ---------------------------------------------------

    async def _on_loop(self, call: Callable[[], Awaitable[T]]) -> T:
        return await on_ledger_loop(self.ledger, call)

    def _wait(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return wait_on_ledger_loop(self.ledger, call)
        except LedgerLoopError as error:
            if error.code != "LOOP_NOT_RUNNING":
                raise
            raise LedgerLoopError(
                f"{error}; the sync methods of LedgerChatMessageHistory need the ledger's "
                "event loop running in another thread: build the history with "
                "LedgerThread.history(), or use aget_messages/aadd_messages/aclear"
            ) from error

    # --- BaseChatMessageHistory --------------------------------------------------------

    async def aget_messages(self) -> list[BaseMessage]:
        """The history: the messages added (equal to them), minus what ``aclear`` hid,
        plus crash repair's closers as ToolMessages."""
        return await self._on_loop(self._get)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Record *messages*; durable when it returns."""
        batch = list(messages)
        await self._on_loop(lambda: self._add(batch))

    async def aclear(self) -> None:
        """Shadow every message on the surface; the log and the transcript keep them."""
        await self._on_loop(self._clear)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The history, read synchronously (see the class docstring)."""
        return self._wait(self._get)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        batch = list(messages)
        self._wait(lambda: self._add(batch))

    def clear(self) -> None:
        self._wait(self._clear)


class LedgerThread(CoreLedgerThread):
    """A ledger that lives on its own event loop in a daemon thread, for sync code.

    ``LedgerThread(url, **options)`` opens ``Ledger.open(url, **options)`` on that loop;
    ``history(session_id)`` returns a :class:`LedgerChatMessageHistory` whose sync and
    async methods all reach it; ``close()`` (or leaving ``with``) closes the ledger (which
    flushes it) and stops the thread.
    """

    def history(
        self,
        session_id: str,
        *,
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> LedgerChatMessageHistory:
        return LedgerChatMessageHistory(
            session_id, self.ledger, loop=self.loop, title=title, meta=meta
        )

    def __enter__(self) -> LedgerThread:
        return self
