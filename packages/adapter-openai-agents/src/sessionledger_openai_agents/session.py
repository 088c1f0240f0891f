"""``LedgerSession``: the SDK's ``Session`` protocol on a sessionledger ledger.

Mapping (items in the order the SDK saves them):

- an input message (``role`` user, system or developer) opens a turn: ``turn/start`` and a
  ``user/message`` (further input messages before the first step join the same turn);
- a model item (``message`` with role assistant, ``reasoning``, ``function_call``, any other
  model-side item) goes inside ``step/start`` … ``step/end`` as an ``assistant/message``
  with a model source; a ``function_call`` also gets its ``tool/call``;
- a ``function_call_output`` answering a call of the open step is a ``tool/result`` citing
  that ``tool/call`` (``source_event_seqs``); one that answers nothing open is kept as a
  ``user/message`` so that nothing the SDK saves is refused;
- a batch ending with an assistant message (no call left unanswered) closes the step and
  the turn (``turn/end {reason: {kind: "completed"}}``);
- a ``function_call`` saved without its output in the same batch is a run stopped for an
  approval (the SDK saves a call alone only then): it gets a ``tool/paused``, so crash
  repair leaves it open (docs/reading.md, "Pausing is not crashing"); ``start_paused_call``
  (called by ``LedgerRunHooks`` when the approved tool starts) records its start.

Every message the adapter writes holds the SDK item, exactly, under ``openaiItem``.
``pop_item`` and ``clear_session`` append a ``user/message`` tombstone (empty content, a
plugin source, ``openaiRemoved``) that replaces the hidden nodes on the surface.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from sessionledger import APPEND, Ledger, Replace, Session, SessionEvent, snapshot, thaw
from sessionledger.runtime._hopping import on_ledger_loop

#: The message key holding the exact SDK item a message was written from.
ITEM_KEY: Final = "openaiItem"
#: The key marking a tombstone written by ``pop_item`` / ``clear_session`` (its value says which).
REMOVED_KEY: Final = "openaiRemoved"
#: On a tombstone: the items of the shadowed nodes that stay visible (normally none).
KEPT_KEY: Final = "openaiItems"
#: The provider named in the model source of every assistant message.
PROVIDER: Final = "openai"
#: The plugin named in the source of tombstones and of outputs that answer no open call.
PLUGIN_NAME: Final = "sessionledger-openai-agents"

_INPUT_ROLES: Final = frozenset({"user", "system", "developer"})
_FrozenItem = Mapping[str, Any]


class _Trace:
    """The turn/step position at the end of the log, kept up to date incrementally."""

    __slots__ = (
        "last_turn",
        "paused",
        "pending",
        "scanned",
        "step",
        "step_has_results",
        "step_open",
        "turn",
        "turn_has_steps",
        "turn_open",
    )

    def __init__(self) -> None:
        self.scanned = 0
        self.last_turn = 0
        self.turn = 0
        self.turn_open = False
        self.turn_has_steps = False
        self.step = 0
        self.step_open = False
        self.step_has_results = False
        self.pending: dict[str, int] = {}
        #: Calls of the open step whose latest marker is ``tool/paused``.
        self.paused: set[str] = set()

    def advance(self, session: Session) -> None:
        if self.scanned >= session.seq:
            return
        for event in session.events_from(self.scanned):
            self._see(event)
        self.scanned = session.seq

    def _see(self, event: SessionEvent) -> None:
        kind = event.type
        data = event.data
        if kind in _RESETS:
            self.paused = set()
        if kind == "turn/start":
            self.turn = self.last_turn = max(self.last_turn, _int(data.get("turn")))
            self.turn_open = True
            self.turn_has_steps = False
            self.step = 0
            self.step_open = False
            self.pending = {}
        elif kind == "turn/end":
            self.turn_open = self.step_open = False
            self.pending = {}
        elif kind == "step/start":
            self.step = _int(data.get("step"))
            self.step_open = self.turn_has_steps = True
            self.step_has_results = False
            self.pending = {}
        elif kind == "step/end":
            self.step_open = False
            self.pending = {}
        elif kind == "tool/call":
            self.pending[str(data.get("callId"))] = event.seq
            self.paused.discard(str(data.get("callId")))
        elif kind == "tool/paused":
            self.paused.add(str(data.get("callId")))
        elif kind == "tool/result" and event.surface_op == APPEND:
            source = data.get("message", {}).get("source", {})
            self.pending.pop(str(source.get("callId")), None)
            self.paused.discard(str(source.get("callId")))
            self.step_has_results = True


_RESETS: Final = frozenset({"turn/start", "turn/end", "step/start", "step/end"})


def _int(value: Any) -> int:
    return value if type(value) is int else 0


class LedgerSession:
    """The OpenAI Agents SDK ``Session`` protocol on a ``sessionledger.Ledger``.

    ``Runner.run(agent, input, session=LedgerSession("id", ledger))``. The ledger session is
    obtained with ``await ledger.resume_or_create(session_id)`` on first use (so a stored
    session is resumed, with crash repair, and a new one is created otherwise).
    ``model`` names the model in the source of assistant messages (``"unknown"`` when not
    given: the SDK does not tell a session which model produced an item). ``title`` and
    ``meta`` describe a session this object creates (``sessionledger ls`` shows them); a
    stored session keeps its own.

    Every method runs on the event loop the ledger serves: called from another loop or
    thread, it is handed to that loop and waits there (``sessionledger.runtime._hopping``); when
    that loop is not running it raises ``LedgerLoopError`` instead of waiting forever.
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        ledger: Ledger,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        model: str | None = None,
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self._ledger = ledger
        self._model = model or "unknown"
        self._title = title
        self._meta = {"adapter": PLUGIN_NAME, **(meta or {})}
        self._session: Session | None = None
        self._trace = _Trace()
        self._items_by_seq: dict[int, tuple[_FrozenItem, ...]] = {}
        self._lock: asyncio.Lock | None = None  # made on the ledger's loop, used only there

    @property
    def ledger(self) -> Ledger:
        return self._ledger

    async def session(self) -> Session:
        """The live ledger session behind this SDK session (resumed or created on first use)."""
        return await on_ledger_loop(self._ledger, self._live)

    async def _live(self) -> Session:
        live = self._session
        if live is not None and self._ledger.get(self.session_id) is live:
            return live
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            live = self._ledger.get(self.session_id)
            if live is None:
                live = await self._ledger.resume_or_create(
                    self.session_id, title=self._title, meta=self._meta
                )
            if live is not self._session:
                self._session = live
                self._trace = _Trace()
                self._items_by_seq = {}
            return live

    # -- reading -------------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items on the surface, oldest first; ``limit``: the latest N of them."""
        return await on_ledger_loop(self._ledger, lambda: self._get_items(limit))

    async def _get_items(self, limit: int | None) -> list[TResponseInputItem]:
        session = await self._live()
        items = self._surface_items(session)
        effective = resolve_session_limit(limit, self.session_settings)
        if effective is not None:
            if effective == 0:
                items = []
            elif effective > 0:
                items = items[-effective:]
        return [cast(TResponseInputItem, thaw(item)) for item in items]

    def _surface_items(self, session: Session) -> list[_FrozenItem]:
        items: list[_FrozenItem] = []
        cache = self._items_by_seq
        for seq in session.surface.nodes:
            mapped = cache.get(seq)
            if mapped is None:
                mapped = cache[seq] = _items_of(session.event_at(seq))
            items.extend(mapped)
        return items

    # -- writing -------------------------------------------------------------------------

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items as ledger events; durable when this returns."""
        await on_ledger_loop(self._ledger, lambda: self._add_items(items))

    async def _add_items(self, items: list[TResponseInputItem]) -> None:
        # Every item is checked as JSON before the first append: a bad item refuses the
        # whole batch (JsonValueError) and writes nothing.
        plain = [snapshot(_plain_item(item), f"items[{i}]") for i, item in enumerate(items)]
        session = await self._live()
        if plain:
            self._append_items(session, plain)
        await self._ledger.flush(session)

    def _append_items(self, session: Session, items: Sequence[Mapping[str, Any]]) -> None:
        # Synchronous from the first append to the last: a batch is never interleaved with
        # another task's, and it reaches the store in one write (or not at all).
        trace = self._trace
        trace.advance(session)
        last_is_answer = False
        called: list[str] = []
        for item in items:
            kind = item.get("type")
            role = item.get("role")
            last_is_answer = False
            if role in _INPUT_ROLES and kind in (None, "message"):
                self._input_message(session, item)
            elif kind == "function_call_output":
                self._call_output(session, item)
            else:
                self._model_item(session, item)
                last_is_answer = role == "assistant" and kind in (None, "message")
                if kind == "function_call":
                    called.append(str(item.get("call_id") or ""))
            trace.advance(session)
        self._pause_unanswered(session, called)
        if last_is_answer and trace.step_open and not trace.pending:
            session.append("step/end", {"turn": trace.turn, "step": trace.step})
            session.append("turn/end", {"turn": trace.turn, "reason": {"kind": "completed"}})
            trace.advance(session)

    def _pause_unanswered(self, session: Session, called: Sequence[str]) -> None:
        # The SDK saves a call together with its output once the tool ran; a call saved
        # alone is one the run stopped on to wait for an approval (README, "Approvals").
        trace = self._trace
        for call_id in called:
            if trace.step_open and call_id in trace.pending and call_id not in trace.paused:
                pause = {"kind": "approval", "by": PLUGIN_NAME}
                data = {"turn": trace.turn, "step": trace.step, "callId": call_id, "reason": pause}
                session.append("tool/paused", data)
        trace.advance(session)

    async def start_paused_call(self, call_id: str) -> bool:
        """Record that a paused call starts now (its approval came); durable on return.

        Appends the call's ``tool/call`` again after its ``tool/paused``, so a crash while
        the tool runs is repaired as "outcome unknown", not left waiting. ``False`` (and
        nothing written) when *call_id* is not a paused call of the open step.
        """
        return await on_ledger_loop(self._ledger, lambda: self._start_paused_call(call_id))

    async def _start_paused_call(self, call_id: str) -> bool:
        session = await self._live()
        trace = self._trace
        trace.advance(session)
        call_seq = trace.pending.get(call_id)
        if call_seq is None or call_id not in trace.paused or not trace.step_open:
            return False
        requested = session.event_at(call_seq).data
        data = {key: requested[key] for key in ("turn", "step", "callId", "name", "arguments")}
        session.append("tool/call", thaw(data))
        trace.advance(session)
        await self._ledger.flush(session)
        return True

    def _input_message(self, session: Session, item: Mapping[str, Any]) -> None:
        trace = self._trace
        if trace.turn_open and trace.turn_has_steps:
            # New input after a run that stopped without a final answer (max turns, an
            # error, a pending approval): that turn is over.
            if trace.step_open:
                session.append("step/end", {"turn": trace.turn, "step": trace.step})
            cause = {"kind": "new-input", "by": PLUGIN_NAME}
            session.append(
                "turn/end", {"turn": trace.turn, "reason": {"kind": "aborted", "cause": cause}}
            )
            trace.advance(session)
        if not trace.turn_open:
            session.append("turn/start", {"turn": trace.last_turn + 1})
        message = {
            "id": _new_id(),
            "role": "user",
            "content": _text_blocks(item.get("content")),
            "source": {"kind": "user"},
            ITEM_KEY: item,
        }
        session.append("user/message", message, surface_op=APPEND)

    def _open_step(self, session: Session) -> None:
        trace = self._trace
        if not trace.turn_open:
            session.append("turn/start", {"turn": trace.last_turn + 1})
            trace.advance(session)
        if trace.step_open and trace.step_has_results:
            session.append("step/end", {"turn": trace.turn, "step": trace.step})
            trace.advance(session)
        if not trace.step_open:
            session.append("step/start", {"turn": trace.turn, "step": trace.step + 1})
            trace.advance(session)

    def _model_item(self, session: Session, item: Mapping[str, Any]) -> None:
        self._open_step(session)
        trace = self._trace
        kind = item.get("type")
        if kind == "function_call":
            call_id = str(item.get("call_id") or "")
            name = str(item.get("name") or "")
            arguments = item.get("arguments")
            arguments = arguments if isinstance(arguments, str) else ""
            content: list[dict[str, Any]] = [
                {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}
            ]
        elif kind == "reasoning":
            content = [
                {"type": "reasoning", "text": part["text"]}
                for field in ("summary", "content")
                for part in _parts(item.get(field))
                if isinstance(part.get("text"), str)
            ]
        else:
            content = _text_blocks(item.get("content"))
        message = {
            "id": _new_id(),
            "role": "assistant",
            "content": content,
            "source": {"kind": "model", "provider": PROVIDER, "model": self._model},
            ITEM_KEY: item,
        }
        data = {"turn": trace.turn, "step": trace.step, "message": message}
        session.append("assistant/message", data, surface_op=APPEND)
        if kind == "function_call" and call_id and name:
            call = {
                "turn": trace.turn,
                "step": trace.step,
                "callId": call_id,
                "name": name,
                "arguments": arguments,
            }
            session.append("tool/call", call)

    def _call_output(self, session: Session, item: Mapping[str, Any]) -> None:
        trace = self._trace
        call_id = str(item.get("call_id") or "")
        blocks = _text_blocks(item.get("output"))
        call_seq = trace.pending.get(call_id) if trace.step_open else None
        if call_seq is None:
            # Answers no call open in this step (the call was closed by crash repair, or
            # popped and saved again): keep it, outside the tool pairing.
            message = {
                "id": _new_id(),
                "role": "user",
                "content": blocks,
                "source": {"kind": "plugin", "plugin": PLUGIN_NAME},
                ITEM_KEY: item,
            }
            session.append("user/message", message, surface_op=APPEND)
            return
        result = {
            "id": _new_id(),
            "role": "user",
            "content": [{"type": "tool-result", "toolCallId": call_id, "content": blocks}],
            "source": {"kind": "tool", "callId": call_id},
            ITEM_KEY: item,
        }
        data = {"turn": trace.turn, "step": trace.step, "message": result}
        session.append("tool/result", data, surface_op=APPEND, source_event_seqs=[call_seq])

    async def pop_item(self) -> TResponseInputItem | None:
        """Hide the latest item behind a tombstone and return it (``None`` when empty)."""
        return await on_ledger_loop(self._ledger, self._pop_item)

    async def _pop_item(self) -> TResponseInputItem | None:
        session = await self._live()
        nodes = session.surface.nodes
        cache = self._items_by_seq
        self._surface_items(session)  # fill the cache for every node
        for seq in reversed(nodes):
            mapped = cache[seq]
            if not mapped:
                continue
            popped, kept = mapped[-1], mapped[:-1]
            self._tombstone(session, seq, seq, [seq], "pop_item", kept)
            await self._ledger.flush(session)
            return cast(TResponseInputItem, thaw(popped))
        return None

    async def clear_session(self) -> None:
        """Hide every item behind one tombstone; the log and the transcript keep them."""
        await on_ledger_loop(self._ledger, self._clear_session)

    async def _clear_session(self) -> None:
        session = await self._live()
        if not self._surface_items(session):
            return
        nodes = session.surface.nodes
        self._tombstone(session, nodes[0], nodes[-1], list(nodes), "clear_session", ())
        await self._ledger.flush(session)

    def _tombstone(
        self,
        session: Session,
        start: int,
        end: int,
        shadowed: list[int],
        by: str,
        kept: Sequence[_FrozenItem],
    ) -> None:
        message: dict[str, Any] = {
            "id": _new_id(),
            "role": "user",
            "content": [],
            "source": {"kind": "plugin", "plugin": PLUGIN_NAME},
            REMOVED_KEY: by,
        }
        if kept:
            message[KEPT_KEY] = list(kept)
        session.append(
            "user/message", message, surface_op=Replace(start, end), source_event_seqs=shadowed
        )


# -- mapping helpers ---------------------------------------------------------------------


def _new_id() -> str:
    return str(uuid.uuid4())


def _plain_item(item: Any) -> Mapping[str, Any]:
    if isinstance(item, Mapping):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        dumped = dump(mode="json", exclude_unset=True)
        if isinstance(dumped, Mapping):
            return dumped
    raise TypeError(f"a session item must be a JSON object, got {type(item).__name__}")


def _parts(value: Any) -> list[Mapping[str, Any]]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [part for part in value if isinstance(part, Mapping)]
    return []


def _text_blocks(value: Any) -> list[dict[str, Any]]:
    """Text blocks for an SDK content value: a string, or a list of content parts."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    blocks: list[dict[str, Any]] = []
    for part in _parts(value):
        text = part.get("text", part.get("refusal"))
        if isinstance(text, str):
            blocks.append({"type": "text", "text": text})
    return blocks


def _block_text(blocks: Any) -> str:
    return "\n".join(
        block["text"]
        for block in _parts(blocks)
        if block.get("type") == "text" and isinstance(block.get("text"), str)
    )


def _items_of(event: SessionEvent) -> tuple[_FrozenItem, ...]:
    """The SDK items a surface event stands for."""
    data = event.data
    message = data if event.type == "user/message" else data.get("message", {})
    if REMOVED_KEY in message:
        return tuple(message.get(KEPT_KEY, ()))
    item = message.get(ITEM_KEY)
    if isinstance(item, Mapping):
        return (item,)
    # Events the adapter did not write: crash repair's closers, a compaction summary…
    content = message.get("content", ())
    if event.type == "tool/result":
        block = content[0] if content else {}
        call_id = message.get("source", {}).get("callId", "")
        output = _block_text(block.get("content", ()))
        return ({"type": "function_call_output", "call_id": call_id, "output": output},)
    text = _block_text(content)
    if event.type == "user/message":
        return ({"role": "user", "content": text},) if text else ()
    mapped: list[_FrozenItem] = []
    if text:
        mapped.append({"role": "assistant", "content": text})
    mapped.extend(
        {
            "type": "function_call",
            "call_id": block.get("id", ""),
            "name": block.get("name", ""),
            "arguments": block.get("arguments", ""),
        }
        for block in _parts(content)
        if block.get("type") == "tool-call"
    )
    return tuple(mapped)
