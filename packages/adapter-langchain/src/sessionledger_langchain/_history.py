"""``LedgerChatMessageHistory``: a LangChain chat history kept in a sessionledger ledger."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from sessionledger import Ledger, Replace, Session, snapshot
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

    The async methods run on the event loop the ledger lives on: *loop* when given, else
    the loop running when the history was built, else the one running at the first async
    call. From another loop or thread they hop onto it. The sync methods (``messages``,
    ``add_messages``, ``clear``) submit the same coroutines to that loop and wait, so they
    need a ledger whose loop runs in another thread: a :class:`LedgerThread`.
    """

    def __init__(
        self, session_id: str, ledger: Ledger, *, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.session_id = session_id
        self.ledger = ledger
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self._loop = loop
        self._session: Session | None = None
        self._state = TurnState()
        self._processed = 0

    # --- the ledger side (runs on the ledger's loop) ----------------------------------

    async def _live(self) -> Session:
        session = self.ledger.get(self.session_id)
        if session is None:
            session = await self.ledger.resume_or_create(self.session_id)
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
        running = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = running
        if self._loop is running:
            return await call()
        return await asyncio.wrap_future(self._submit(call))

    def _submit(self, call: Callable[[], Awaitable[T]]) -> Future[T]:
        async def run() -> T:
            return await call()

        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def _wait(self, call: Callable[[], Awaitable[T]]) -> T:
        loop = self._loop
        if loop is None or not loop.is_running():
            raise RuntimeError(
                "the sync methods of LedgerChatMessageHistory need the ledger's event loop "
                "running in another thread: build the history with LedgerThread.history(), "
                "or use aget_messages/aadd_messages/aclear"
            )
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError(
                "a sync method of LedgerChatMessageHistory was called on the ledger's own "
                "event loop, where it would block it: use the async methods there"
            )
        return self._submit(call).result()

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


class LedgerThread:
    """A ledger that lives on its own event loop in a daemon thread, for sync code.

    ``LedgerThread(url, **options)`` opens ``Ledger.open(url, **options)`` on that loop;
    ``history(session_id)`` returns a :class:`LedgerChatMessageHistory` whose sync and
    async methods all reach it; ``close()`` (or leaving ``with``) closes the ledger (which
    flushes it) and stops the thread.
    """

    def __init__(self, url: str, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run, name="sessionledger-langchain", daemon=True
        )
        self._thread.start()
        try:
            self.ledger: Ledger = self._call(self._open(url, options))
        except BaseException:
            self._stop()
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @staticmethod
    async def _open(url: str, options: dict[str, Any]) -> Ledger:
        return await Ledger.open(url, **options)

    def _call(self, coro: Awaitable[T]) -> T:
        async def run() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def history(self, session_id: str) -> LedgerChatMessageHistory:
        return LedgerChatMessageHistory(session_id, self.ledger, loop=self.loop)

    def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self._call(self.ledger.close())
        finally:
            self._stop()

    def __enter__(self) -> LedgerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
