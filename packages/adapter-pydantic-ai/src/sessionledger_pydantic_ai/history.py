"""``LedgerHistory``: a pydantic-ai message history stored as sessionledger events."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from pydantic_ai import DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.run import AgentRun

from sessionledger import Ledger, thaw
from sessionledger.model._derive import project_message
from sessionledger.model._events import SessionEvent
from sessionledger.model._repair import TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN
from sessionledger.model._session import Session
from sessionledger.runtime._hopping import on_ledger_loop

__all__ = ["DEFAULT_PROVIDER", "META_KEY", "LedgerHistory"]

#: The key, on every ledger message this adapter writes, that holds its pydantic-ai side:
#: ``{"message": <ModelMessage JSON>}`` on the one ledger message that anchors a
#: pydantic-ai message, ``{"partOf": <anchor message id>}`` on the others it produced.
META_KEY: Final = "pydanticAi"

#: The provider named in an assistant message's source when the response names none.
DEFAULT_PROVIDER: Final = "pydantic-ai"

#: The error codes crash repair writes on the ``tool/result`` closers it appends.
_REPAIR_CODES: Final = (TOOL_OUTCOME_UNKNOWN, TOOL_NOT_STARTED)


@dataclass
class _Trace:
    """Where the log stands: the open turn and step, and the calls awaiting a result."""

    turn: int | None = None
    next_turn: int = 1
    step: int | None = None
    next_step: int = 1
    pending: dict[str, int] = field(default_factory=dict)  # call id -> tool/call seq
    paused: set[str] = field(default_factory=set)  # latest marker is tool/paused


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _trace(events: Sequence[SessionEvent]) -> _Trace:
    """Read the state of the last turn from the end of the log."""
    start = None
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.type == "turn/end":
            turn = _int(event.data.get("turn"))
            if turn is None:  # a lenient read of an old log: count the turns
                turn = sum(1 for e in events[:index] if e.type == "turn/start")
            return _Trace(next_turn=turn + 1)
        if event.type == "turn/start":
            start = index
            break
    if start is None:
        return _Trace()
    turn = _int(events[start].data.get("turn")) or 1
    trace = _Trace(turn=turn, next_turn=turn + 1)
    for event in events[start + 1 :]:
        if event.type == "step/start":
            trace.step = _int(event.data.get("step")) or trace.next_step
            trace.next_step = trace.step + 1
            trace.pending, trace.paused = {}, set()
        elif event.type == "step/end":
            trace.step = None
            trace.pending, trace.paused = {}, set()
        elif event.type == "tool/call" and trace.step is not None:
            trace.pending[str(event.data.get("callId"))] = event.seq
            trace.paused.discard(str(event.data.get("callId")))
        elif event.type == "tool/paused" and trace.step is not None:
            trace.paused.add(str(event.data.get("callId")))
        elif event.type == "tool/result" and event.surface_op == "append":
            source = event.data["message"]["source"]
            trace.pending.pop(str(source.get("callId")), None)
            trace.paused.discard(str(source.get("callId")))
    return trace


def _dump(message: ModelMessage) -> Any:
    dumped: list[Any] = ModelMessagesTypeAdapter.dump_python([message], mode="json")
    return dumped[0]


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _user_blocks(part: UserPromptPart) -> list[dict[str, Any]]:
    if isinstance(part.content, str):
        return [_text(part.content)]
    blocks: list[dict[str, Any]] = []
    for item in part.content:
        if isinstance(item, str):
            blocks.append(_text(item))
        elif getattr(item, "kind", None) == "image-url":
            blocks.append({"type": "image", "url": item.url})  # type: ignore[union-attr]
        else:  # files, audio, binary: the anchored JSON keeps them whole
            blocks.append(_text(f"[{getattr(item, 'kind', type(item).__name__)}]"))
    return blocks


class _Writer:
    """Appends the events of pydantic-ai messages to one live session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.trace = _trace(session.event_log())
        self.anchor: str | None = None
        self.answered = False  # the last message written answered tool calls

    def mark(self, message: dict[str, Any], model_message: ModelMessage) -> dict[str, Any]:
        """Put the pydantic-ai side on a ledger message: the JSON on the first one."""
        if self.anchor is None:
            self.anchor = message["id"]
            message[META_KEY] = {"message": _dump(model_message)}
        else:
            message[META_KEY] = {"partOf": self.anchor}
        return message

    def turn_start(self) -> None:
        turn = self.trace.next_turn
        self.session.append("turn/start", {"turn": turn})
        self.trace = _Trace(turn=turn, next_turn=turn + 1)

    def turn_end(self, kind: str = "completed") -> None:
        self.session.append("turn/end", {"turn": self.trace.turn, "reason": {"kind": kind}})
        self.trace = _Trace(next_turn=self.trace.next_turn)

    def step_start(self) -> None:
        step = self.trace.next_step
        self.session.append("step/start", {"turn": self.trace.turn, "step": step})
        self.trace.step, self.trace.next_step, self.trace.pending = step, step + 1, {}

    def step_end(self) -> None:
        self.session.append("step/end", {"turn": self.trace.turn, "step": self.trace.step})
        self.trace.step, self.trace.pending, self.trace.paused = None, {}, set()

    def pause(self, deferred: DeferredToolRequests) -> None:
        """Mark the calls a run ended on as waiting (docs/reading.md, "Pausing is not
        crashing"): for an approval, or for a result from outside the run."""
        trace = self.trace
        waiting = [(call, "approval") for call in deferred.approvals]
        waiting += [(call, "deferred") for call in deferred.calls]
        for call, kind in waiting:
            call_id = call.tool_call_id
            if trace.step is None or call_id not in trace.pending or call_id in trace.paused:
                continue
            reason = {"kind": kind, "tool": call.tool_name}
            data = {"turn": trace.turn, "step": trace.step, "callId": call_id, "reason": reason}
            self.session.append("tool/paused", data)
            trace.paused.add(call_id)

    def start(self, call_id: str) -> bool:
        """Record that a paused call starts now: its ``tool/call`` again, after the pause."""
        trace = self.trace
        call_seq = trace.pending.get(call_id)
        if call_seq is None or call_id not in trace.paused or trace.step is None:
            return False
        requested = self.session.event_at(call_seq).data
        data = {key: requested[key] for key in ("turn", "step", "callId", "name", "arguments")}
        trace.pending[call_id] = self.session.append("tool/call", thaw(data)).seq
        trace.paused.discard(call_id)
        return True

    def request(self, request: ModelRequest) -> None:
        self.anchor = None
        self.answered = False
        answers: list[tuple[ToolReturnPart | RetryPromptPart, int]] = []
        blocks: list[dict[str, Any]] = []
        prompt = False
        for part in request.parts:
            if isinstance(part, UserPromptPart):
                prompt = True
                blocks.extend(_user_blocks(part))
            elif isinstance(part, ToolReturnPart | RetryPromptPart):
                seq = self.trace.pending.get(part.tool_call_id)
                if part.tool_name is not None and seq is not None and self.trace.step is not None:
                    answers.append((part, seq))
                    del self.trace.pending[part.tool_call_id]
                elif isinstance(part, ToolReturnPart):
                    blocks.append(_text(part.model_response_str()))
                else:
                    blocks.append(_text(part.model_response()))
            # system prompts and other parts live in the anchored JSON only
        self.answered = bool(answers)
        for part, call_seq in answers:
            if isinstance(part, ToolReturnPart):
                text, failed = part.model_response_str(), part.outcome in ("failed", "retried")
            else:
                text, failed = part.model_response(), True
            block: dict[str, Any] = {
                "type": "tool-result",
                "toolCallId": part.tool_call_id,
                "content": [_text(text)],
            }
            if failed:
                block["isError"] = True
            message = {
                "id": str(uuid.uuid4()),
                "role": "user",
                "content": [block],
                "source": {"kind": "tool", "callId": part.tool_call_id},
            }
            data = {"turn": self.trace.turn, "step": self.trace.step, "message": message}
            self.mark(message, request)
            self.session.append(
                "tool/result", data, surface_op="append", source_event_seqs=[call_seq]
            )
        if self.trace.step is not None:
            self.step_end()
        if prompt or blocks or self.anchor is None:
            if self.trace.turn is None:
                self.turn_start()
            elif prompt and not answers:  # a new prompt while the last turn was left open
                self.turn_end()
                self.turn_start()
            message = {
                "id": str(uuid.uuid4()),
                "role": "user",
                "content": blocks,
                "source": {"kind": "user"},
            }
            self.session.append("user/message", self.mark(message, request), surface_op="append")

    def response(self, response: ModelResponse) -> None:
        self.anchor = None
        self.answered = False
        if self.trace.step is not None:  # the previous step's calls got no answer
            self.step_end()
        if self.trace.turn is None:
            self.turn_start()
        self.step_start()
        blocks: list[dict[str, Any]] = []
        calls: list[ToolCallPart] = []
        for part in response.parts:
            if isinstance(part, TextPart):
                blocks.append(_text(part.content))
            elif isinstance(part, ThinkingPart):
                blocks.append({"type": "reasoning", "text": part.content})
            elif isinstance(part, ToolCallPart):
                calls.append(part)
                blocks.append(
                    {
                        "type": "tool-call",
                        "id": part.tool_call_id,
                        "name": part.tool_name,
                        "arguments": part.args_as_json_str(),
                    }
                )
        if not blocks:  # an empty message would vanish from the surface with its anchor
            blocks.append(_text(""))
        message = {
            "id": str(uuid.uuid4()),
            "role": "assistant",
            "content": blocks,
            "source": {
                "kind": "model",
                "provider": response.provider_name or DEFAULT_PROVIDER,
                "model": response.model_name or "unknown",
            },
        }
        usage = {
            "inputTokens": response.usage.input_tokens,
            "outputTokens": response.usage.output_tokens,
        }
        turn, step = self.trace.turn, self.trace.step
        data = {"turn": turn, "step": step, "message": self.mark(message, response), "usage": usage}
        self.session.append("assistant/message", data, surface_op="append")
        for call in calls:
            event = self.session.append(
                "tool/call",
                {
                    "turn": turn,
                    "step": step,
                    "callId": call.tool_call_id,
                    "name": call.tool_name,
                    "arguments": call.args_as_json_str(),
                },
            )
            self.trace.pending[call.tool_call_id] = event.seq
        if not calls:
            self.step_end()
            self.turn_end()


def _time(event: SessionEvent) -> datetime:
    return datetime.fromtimestamp(event.time / 1000, tz=UTC)


def _block_text(blocks: Sequence[Any]) -> str:
    return "\n".join(
        str(block["text"])
        for block in blocks
        if isinstance(block, Mapping) and block.get("type") == "text"
    )


class _Reader:
    """Turns the surface back into pydantic-ai messages."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.parts: list[ModelRequestPart] = []
        self.parts_time: datetime | None = None
        self.anchors: set[str] = set()
        self.calls: dict[str, ToolCallPart] = {}

    def flush(self) -> None:
        if self.parts:
            self.messages.append(ModelRequest(parts=self.parts, timestamp=self.parts_time))
            self.parts, self.parts_time = [], None

    def add_part(self, part: ModelRequestPart, event: SessionEvent) -> None:
        if not self.parts:
            self.parts_time = _time(event)
        self.parts.append(part)

    def anchored(self, json: Any, message_id: str) -> None:
        self.flush()
        [model_message] = ModelMessagesTypeAdapter.validate_python([thaw(json)])
        self.messages.append(model_message)
        self.anchors.add(message_id)
        if isinstance(model_message, ModelResponse):
            for part in model_message.parts:
                if isinstance(part, ToolCallPart):
                    self.calls[part.tool_call_id] = part

    def foreign(self, event: SessionEvent, message: Mapping[str, Any]) -> None:
        """A message this adapter did not write: a repair closer, a summary, a seed."""
        when = _time(event)
        content = message["content"]
        source = message["source"]
        if event.type == "tool/result":
            block = content[0]
            call_id = str(block["toolCallId"])
            call = self.calls.get(call_id)
            error = event.data.get("error")
            code = error.get("code") if isinstance(error, Mapping) else None
            if code in _REPAIR_CODES:
                outcome = "interrupted"
            else:
                outcome = "failed" if block.get("isError") else "success"
            part = ToolReturnPart(
                tool_name=call.tool_name if call else "unknown",
                content=_block_text(block["content"]),
                tool_call_id=call_id,
                tool_kind=call.tool_kind if call else None,
                metadata={"sessionledger": {"seq": event.seq, "code": code}},
                timestamp=when,
                outcome=outcome,  # type: ignore[arg-type]
            )
            self.add_part(part, event)
        elif message["role"] == "assistant":
            self.flush()
            parts: list[ModelResponsePart] = []
            for block in content:
                kind = block.get("type") if isinstance(block, Mapping) else None
                if kind == "text":
                    parts.append(TextPart(str(block["text"])))
                elif kind == "reasoning":
                    parts.append(ThinkingPart(str(block["text"])))
                elif kind == "tool-call":
                    call_part = ToolCallPart(
                        str(block["name"]), str(block["arguments"]), str(block["id"])
                    )
                    self.calls[call_part.tool_call_id] = call_part
                    parts.append(call_part)
            self.messages.append(
                ModelResponse(
                    parts=parts,
                    model_name=source.get("model"),
                    provider_name=source.get("provider"),
                    timestamp=when,
                )
            )
        elif message["role"] == "system":
            self.add_part(SystemPromptPart(_block_text(content), timestamp=when), event)
        else:
            self.add_part(UserPromptPart(_block_text(content), timestamp=when), event)

    def read(self, session: Session) -> list[ModelMessage]:
        for seq in session.surface.nodes:
            event = session.event_at(seq)
            message = project_message(event)
            if not isinstance(message, Mapping):
                continue
            meta = message.get(META_KEY)
            if isinstance(meta, Mapping) and "message" in meta:
                self.anchored(meta["message"], str(message["id"]))
            elif isinstance(meta, Mapping) and meta.get("partOf") in self.anchors:
                continue  # its pydantic-ai message came whole with the anchor
            else:
                self.foreign(event, message)
        self.flush()
        return self.messages


class LedgerHistory:
    """The message history of one ledger session, in pydantic-ai's terms.

    ``await load()`` returns the messages to pass as ``message_history=``;
    ``await record(messages)`` appends what a run produced and returns once it is durable.
    The session comes from ``ledger.resume_or_create(session_id)``, so a session that
    crashed mid-turn is repaired first (see the README). ``title`` and ``meta`` describe a
    session this history creates (``sessionledger ls`` shows them); a stored one keeps its
    own. Every method runs on the event loop the ledger serves, handed there from any other
    loop or thread (``LedgerLoopError`` when that loop is not running).
    """

    def __init__(
        self,
        session_id: str,
        ledger: Ledger,
        *,
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.ledger = ledger
        self._title = title
        self._meta = meta

    async def session(self) -> Session:
        """The live ledger session behind this history (resumed or created)."""
        return await on_ledger_loop(self.ledger, self._live)

    async def _live(self) -> Session:
        return await self.ledger.resume_or_create(
            self.session_id, title=self._title, meta=self._meta
        )

    async def load(self) -> list[ModelMessage]:
        """The history the model sees now: the messages on the session's surface."""
        return await on_ledger_loop(self.ledger, self._load)

    async def _load(self) -> list[ModelMessage]:
        return _Reader().read(await self._live())

    async def record(self, messages: Sequence[ModelMessage], *, output: object = None) -> None:
        """Append *messages* (e.g. ``result.new_messages()``); durable when this returns.

        Pass the run's ``output`` too: when it is a ``DeferredToolRequests`` (the run
        stopped on tools that need an approval or an outside result), its calls are
        recorded as paused, so crash repair leaves them open (see the README); any other
        output is ignored.
        """
        batch = list(messages)
        await on_ledger_loop(self.ledger, lambda: self._record(batch, output))

    async def _record(self, messages: Sequence[ModelMessage], output: object) -> None:
        session = await self._live()
        writer = _Writer(session)
        for message in messages:
            if isinstance(message, ModelRequest):
                writer.request(message)
            else:
                writer.response(message)
        if writer.answered and writer.trace.turn is not None and writer.trace.step is None:
            # A batch that ends with tool results and no response is the end of a run on
            # an output tool (pydantic-ai sends no further request): the turn is over.
            writer.turn_end()
        if isinstance(output, DeferredToolRequests):
            writer.pause(output)
        await self.ledger.flush(session)

    async def start_approved(self, results: DeferredToolResults) -> list[str]:
        """Record that the paused calls *results* approves start now; durable on return.

        Call it just before the run that gets *results* (pydantic-ai runs an approved
        tool before that run produces a message), so a crash while the tool runs is
        repaired as "outcome unknown" instead of leaving the call waiting. Returns the
        ids recorded as started; a denial or an outside result starts nothing.
        """
        return await on_ledger_loop(self.ledger, lambda: self._start_approved(results))

    async def _start_approved(self, results: DeferredToolResults) -> list[str]:
        session = await self._live()
        writer = _Writer(session)
        started: list[str] = []
        for call_id, approval in results.approvals.items():
            approved = approval is True or getattr(approval, "kind", None) == "tool-approved"
            if approved and writer.start(call_id):
                started.append(call_id)
        await self.ledger.flush(session)
        return started

    async def recording(self, run: AgentRun[Any, Any]) -> AsyncIterator[Any]:
        """Iterate *run* node by node, recording its new messages before each node runs.

        A model response is durable before the tools it calls start, so a crash while a
        tool runs leaves a ``tool/call`` whose outcome repair reports as unknown::

            async with agent.iter(prompt, message_history=await history.load()) as run:
                async for node in history.recording(run):
                    ...
        """
        done = 0
        async for node in run:
            new = run.new_messages()
            if len(new) > done:
                await self.record(new[done:])
                done = len(new)
            yield node
        result = run.result
        if result is not None and isinstance(result.output, DeferredToolRequests):
            await self.record(run.new_messages()[done:], output=result.output)
