"""Hypothesis strategies for sessionledger values, storage batches and session logs.

Shared by the core tests and by any backend's tests: JSON values as docs/events.md
defines them, write batches that exercise every edge of the chunk-row codec, and
plausible, well-formed session logs. Every envelope dict these strategies build has its
keys in ``SessionEvent.to_json`` order, so byte-level comparisons after a storage round
trip are meaningful. Needs ``hypothesis`` (a test-time dependency).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal, TypeAlias

from hypothesis import strategies as st

from sessionledger.model._events import SessionEvent
from sessionledger.model._snapshot import MAX_SAFE_INTEGER
from sessionledger.model._vocabulary import (
    assistant_message,
    tool_call_block,
    tool_result,
    user_message,
)

__all__ = [
    "BatchForm",
    "chunk_event_batches",
    "json_texts",
    "json_values",
    "session_logs",
    "surface_logs",
]

#: How ``chunk_event_batches`` delivers items: envelope dicts, ``SessionEvent``s, or both.
BatchForm: TypeAlias = Literal["dicts", "events", "mixed"]

_Draw: TypeAlias = st.DrawFn
_M = MAX_SAFE_INTEGER

# Strings that tend to break encoders: quotes, escapes, control and non-BMP characters.
_AWKWARD_TEXTS = ("", " ", '"', "\\", "\n", "\x00", "\x1f", "é", "\u2028", "😀", '{"a":1}')


def json_texts(max_size: int = 8) -> st.SearchStrategy[str]:
    """Draw strings that are valid JSON text (no lone surrogates), awkward ones often."""
    return st.sampled_from(_AWKWARD_TEXTS) | st.text(
        st.characters(codec="utf-8"), max_size=max_size
    )


# Built once: constructing and validating strategies on every draw dominates run time.
_TEXTS = json_texts()
_SMALL_VALUES = st.deferred(lambda: json_values(6))
_PERCENT = st.integers(0, 19)
_FIFTHS = st.integers(0, 4)
_SPOILS = st.integers(0, 12)
_OTHERS = st.integers(0, 5)
_SMALL_STEP = st.integers(-20, 50)
_EXTREME_TIME = st.sampled_from((-_M, -_M + 1, 0, _M - 1, _M)) | st.integers(-_M, _M)
_SEQ_STEP = st.sampled_from((1,) * 12 + (0, 2, 5, -1))
_FIRST_SEQ = st.sampled_from((0, 1, 1000, _M - 500)) | st.integers(0, 10_000)
_FIRST_TIME = st.sampled_from((0, 1000, -_M, _M)) | st.integers(-_M, _M)
_BLOCK = st.tuples(
    st.sampled_from(("text-delta", "reasoning-delta", "tool-call-delta")),
    st.integers(0, 1),
    st.integers(0, 1),
    st.integers(0, 2),
    st.sampled_from(("c1", "c2")),
    st.sampled_from((None, "write", "read")),
)


def json_values(max_leaves: int = 20) -> st.SearchStrategy[Any]:
    """Draw JSON values as ``snapshot`` accepts them (plain ``dict``/``list`` containers).

    Integers stay within ±(2**53 - 1); floats are finite and never ``-0.0``.
    """
    floats = st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f if f else 0.0)
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-_M, _M)
        | st.sampled_from((0, 1, -1, _M, -_M))
        | floats
        | json_texts()
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(json_texts(), children, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def _time_after(draw: _Draw, previous: int) -> int:
    """Mostly small steps (backwards too); sometimes a jump to an extreme of the range."""
    if draw(_FIFTHS):
        return max(-_M, min(_M, previous + draw(_SMALL_STEP)))
    return int(draw(_EXTREME_TIME))


def _delta_chunk(draw: _Draw, kind: str, index: int, tool_id: str, name: str | None) -> Any:
    if kind == "tool-call-delta":
        chunk: dict[str, Any] = {"type": kind, "index": index, "id": tool_id}
        if name is not None:
            chunk["name"] = name
        chunk["argumentsDelta"] = draw(_TEXTS)
        return chunk
    return {"type": kind, "index": index, "text": draw(_TEXTS)}


def _boundary_chunk(draw: _Draw, index: int) -> Any:
    which = draw(_OTHERS) % 4
    if which == 0:
        return {"type": "block-start", "index": index, "blockType": "text"}
    if which == 1:
        return {"type": "block-end", "index": index, "block": {"type": "text", "text": "x"}}
    if which == 2:
        return {"type": "usage", "usage": {"inputTokens": 3, "outputTokens": 5}}
    return {"type": "finish", "reason": {"kind": "stop"}}


# Off-whitelist variants of a delta envelope: each must be stored verbatim.
# The flag says whether ``SessionEvent.from_json`` accepts the result.
def _spoil(draw: _Draw, envelope: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    data = dict(envelope["data"])
    chunk = dict(data["chunk"])
    how = draw(_SPOILS)
    if how == 0:
        return {**envelope, "surfaceOp": "append"}, True
    if how == 1:
        return {**envelope, "ignorable": True}, True
    if how == 2:
        return {**envelope, "sourceEventSeqs": [0]}, True
    if how == 3:
        return {**envelope, "time": envelope["time"] + 0.5}, False
    if how == 4:
        return {**envelope, "data": "chunk"}, True
    if how == 5:
        return {**envelope, "data": {**data, "extra": 1}}, True
    if how == 6:
        data["turn"] = draw(st.sampled_from((True, float(data["turn"]), "1")))
    elif how == 7:
        chunk["index"] = draw(st.sampled_from((True, False, 0.0, "0", None)))
    elif how == 8:
        chunk["extra"] = 1
    elif how == 9:
        payload = "argumentsDelta" if "argumentsDelta" in chunk else "text"
        chunk[payload] = draw(st.sampled_from((7, None, ["a"])))
    elif how == 10:
        chunk = {"type": "tool-call-delta", "index": 0, "id": 7, "argumentsDelta": "a"}
    elif how == 11:
        chunk = {
            "type": "tool-call-delta",
            "index": 0,
            "id": "c1",
            "name": 7,
            "argumentsDelta": "a",
        }
    else:
        chunk = {"type": "future-delta", "index": 0, "text": "a"}
    return {**envelope, "data": {**data, "chunk": chunk}}, True


def _other_event(draw: _Draw, seq: int, time: int, turn: int) -> dict[str, Any]:
    """A non-chunk event, surface events (with surfaceOp / sources) included."""
    kind = draw(_OTHERS)
    if kind == 0:
        return {"type": "step/end", "seq": seq, "time": time, "data": {"turn": turn, "step": 1}}
    if kind == 1:
        message = user_message("hi", id=f"u{seq}")
        return {
            "type": "user/message",
            "seq": seq,
            "time": time,
            "data": message,
            "surfaceOp": "append",
        }
    if kind == 2:
        message = assistant_message("ok", provider="p", model="m", id=f"a{seq}")
        return {
            "type": "assistant/message",
            "seq": seq,
            "time": time,
            "data": {"turn": turn, "step": 1, "message": message},
            "surfaceOp": "append",
            "sourceEventSeqs": [max(0, seq - 1)],
        }
    if kind == 3:
        return {
            "type": "plugin/note",
            "seq": seq,
            "time": time,
            "data": draw(_SMALL_VALUES),
            "ignorable": True,
        }
    if kind == 4:
        data = {"turn": turn, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"}
        return {"type": "tool/call", "seq": seq, "time": time, "data": data}
    return {"type": "turn/start", "seq": seq, "time": time, "data": {"turn": turn}}


@st.composite
def chunk_event_batches(
    draw: _Draw, min_size: int = 0, max_size: int = 40, form: BatchForm = "mixed"
) -> list[SessionEvent | dict[str, Any]]:
    """Draw one write batch that probes every rule of the chunk-row codec.

    Mostly ``assistant/chunk`` deltas (text, reasoning, tool calls with and without
    ``name``) that tend to continue the previous block, so runs of three and more are
    common; mixed with boundary chunks, other and surface events, and off-whitelist
    deltas. Times step by small amounts (backwards too) and sometimes jump to ±(2**53 - 1);
    seqs are mostly contiguous with occasional gaps and repeats. ``form`` chooses envelope
    dicts, ``SessionEvent``s (only envelopes ``from_json`` accepts) or a mix of both.
    """
    size = draw(st.integers(min_size, max_size))
    seq = draw(_FIRST_SEQ)
    time = draw(_FIRST_TIME)
    block: tuple[str, int, int, int, str, str | None]
    block = ("text-delta", 0, 0, 0, "c1", None)  # kind, turn, step, index, call id, name
    batch: list[SessionEvent | dict[str, Any]] = []
    for position in range(size):
        if position:
            step_by = draw(_SEQ_STEP)
            seq = max(0, seq + step_by)
            time = _time_after(draw, time)
        choice = draw(_PERCENT)
        usable = True
        if choice < 14:
            if choice >= 12:  # start a new block; otherwise continue the current one
                block = draw(_BLOCK)
            kind, turn, step, index, call_id, name = block
            chunk = _delta_chunk(draw, kind, index, call_id, name)
            envelope = {
                "type": "assistant/chunk",
                "seq": seq,
                "time": time,
                "data": {"turn": turn, "step": step, "chunk": chunk},
            }
        elif choice < 16:
            data = {"turn": block[1], "step": block[2], "chunk": _boundary_chunk(draw, block[3])}
            envelope = {"type": "assistant/chunk", "seq": seq, "time": time, "data": data}
        elif choice < 18:
            envelope = _other_event(draw, seq, time, block[1])
        else:
            data = {
                "turn": block[1],
                "step": block[2],
                "chunk": {"type": "text-delta", "index": 0, "text": "t"},
            }
            plain = {"type": "assistant/chunk", "seq": seq, "time": time, "data": data}
            envelope, usable = _spoil(draw, plain)
            if form == "events" and not usable:
                envelope = plain
                usable = True
        as_event = form == "events" or (form == "mixed" and usable and draw(st.booleans()))
        batch.append(SessionEvent.from_json(envelope) if as_event else envelope)
    return batch


@st.composite
def session_logs(
    draw: _Draw, max_turns: int = 3, open_tail: bool | None = None
) -> list[dict[str, Any]]:
    """Draw a plausible, well-formed session log as envelope dicts (seqs from 0).

    Each turn: ``turn/start``, a ``user/message``, then steps that stream blocks
    (``block-start``, deltas, ``block-end``, ``usage``, ``finish``), an
    ``assistant/message`` whose sources are the step's chunks, and a ``tool/call`` and
    ``tool/result`` per tool-call block; then ``turn/end``. Times never go backwards.
    With ``open_tail`` (drawn when None) the log is cut inside its last turn, as a crash
    would leave it. Message ids derive from seqs, so draws are reproducible.
    """
    log: list[dict[str, Any]] = []
    clock = draw(st.integers(0, 2**41))

    def add(event_type: str, data: Any, **extra: Any) -> int:
        nonlocal clock
        clock += draw(st.integers(0, 30))
        seq = len(log)
        log.append({"type": event_type, "seq": seq, "time": clock, "data": data, **extra})
        return seq

    def add_chunk(sources: list[int], turn: int, step: int, body: dict[str, Any]) -> None:
        sources.append(add("assistant/chunk", {"turn": turn, "step": step, "chunk": body}))

    turns = draw(st.integers(1, max_turns))
    for turn in range(1, turns + 1):
        turn_starts = len(log)
        add("turn/start", {"turn": turn})
        add(
            "user/message",
            user_message(draw(_TEXTS), id=f"user-{len(log)}"),
            surfaceOp="append",
        )
        for step in range(1, draw(st.integers(1, 3)) + 1):
            add("step/start", {"turn": turn, "step": step})
            sources: list[int] = []
            content: list[Any] = []
            chunk = partial(add_chunk, sources, turn, step)

            for index in range(draw(st.integers(1, 3))):
                kind = draw(st.sampled_from(("text", "reasoning", "tool-call")))
                chunk({"type": "block-start", "index": index, "blockType": kind})
                parts = draw(st.lists(_TEXTS, max_size=6))
                if kind == "tool-call":
                    call_id = f"call-{turn}-{step}-{index}"
                    for k, part in enumerate(parts):
                        delta: dict[str, Any] = {
                            "type": "tool-call-delta",
                            "index": index,
                            "id": call_id,
                        }
                        if k == 0:
                            delta["name"] = "echo"
                        delta["argumentsDelta"] = part
                        chunk(delta)
                    block: dict[str, Any] = dict(tool_call_block(call_id, "echo", "".join(parts)))
                else:
                    for part in parts:
                        chunk({"type": f"{kind}-delta", "index": index, "text": part})
                    block = {"type": kind, "text": "".join(parts)}
                chunk({"type": "block-end", "index": index, "block": block})
                content.append(block)
            chunk({"type": "usage", "usage": {"inputTokens": 10, "outputTokens": len(sources)}})
            chunk({"type": "finish", "reason": {"kind": "stop"}})
            message = assistant_message(
                content, provider="mock", model="mock", id=f"assistant-{len(log)}"
            )
            add(
                "assistant/message",
                {"turn": turn, "step": step, "message": message},
                surfaceOp="append",
                sourceEventSeqs=sources,
            )
            for block in content:
                if block["type"] == "tool-call":
                    call = block["id"]
                    add(
                        "tool/call",
                        {
                            "turn": turn,
                            "step": step,
                            "callId": call,
                            "name": "echo",
                            "arguments": block["arguments"],
                        },
                    )
                    result = tool_result(call, "done", id=f"result-{len(log)}")
                    add(
                        "tool/result",
                        {"turn": turn, "step": step, "message": result},
                        surfaceOp="append",
                    )
            add("step/end", {"turn": turn, "step": step})
        add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
        last_turn = turn_starts
    cut = draw(st.booleans()) if open_tail is None else open_tail
    if cut:
        # Keep turn/start of the last turn and anything up to (not including) its turn/end.
        del log[draw(st.integers(last_turn + 1, len(log) - 1)) :]
    return log


# --- Logs whose surface changes by appends and replaces ------------------------------------
# Added for the core surface/derive oracles; kept separate from the strategies above.


_SURFACE_LOG_STEPS = (
    *("noise", "noise", "user", "user", "assistant", "tool"),
    *("replace", "replace", "prune"),
)


@st.composite
def surface_logs(draw: _Draw, max_events: int = 30) -> list[dict[str, Any]]:
    """Draw a valid log (envelope dicts, seqs from 0) that exercises every surface rule.

    Mixes log-only noise (turn brackets, chunks, request header/context, ignorable plugin
    events) with surface appends of the three message types (sources absent, empty on
    ``assistant/message``, or citing earlier seqs; assistant messages sometimes have empty
    content) and replaces: a ``user/message`` or ``assistant/message`` shadowing any range
    of current nodes (citing every shadowed node, sometimes more), and content-only
    ``tool/result`` rewrites of a current ``tool/result``. Because replaces put a new seq
    where the range was, later ranges often run against seq order.
    """
    log: list[dict[str, Any]] = []
    nodes: list[int] = []
    clock = draw(st.integers(0, 2**41))

    def add(event_type: str, data: Any, **extra: Any) -> None:
        nonlocal clock
        clock += draw(st.integers(0, 5))
        seq = len(log)
        log.append({"type": event_type, "seq": seq, "time": clock, "data": data, **extra})

    def earlier(seq: int, min_size: int = 0) -> list[int]:
        if seq == 0:
            return []
        return draw(st.lists(st.integers(0, seq - 1), min_size=min_size, max_size=3, unique=True))

    for _ in range(draw(st.integers(0, max_events))):
        seq = len(log)
        kind = draw(st.sampled_from(_SURFACE_LOG_STEPS))
        if kind == "noise":
            which = draw(st.integers(0, 4))
            if which == 0:
                add("turn/start", {"turn": seq + 1})
            elif which == 1:
                chunk = {"type": "text-delta", "index": 0, "text": draw(json_texts(4))}
                add("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk})
            elif which == 2:
                config = {"provider": "mock", "model": draw(st.sampled_from(("a", "b")))}
                header: dict[str, Any] = {"config": config}
                if draw(st.booleans()):
                    header["system"] = draw(st.sampled_from(("", "be brief")))
                if draw(st.booleans()):
                    header["tools"] = draw(st.sampled_from(([], [{"name": "echo"}])))
                add("request/header", {"reason": "change", "header": header})
            elif which == 3:
                context: dict[str, Any] = {"provider": "mock", "model": "m"}
                if draw(st.booleans()):
                    context["contextWindow"] = draw(st.integers(1, 10**6))
                add("request/context", context)
            else:
                add("plugin/note", draw(json_values(4)), ignorable=True)
        elif kind == "user":
            extra: dict[str, Any] = {"surfaceOp": "append"}
            sources = earlier(seq, 1) if draw(st.booleans()) else []
            if sources:
                extra["sourceEventSeqs"] = sources
            add("user/message", user_message(draw(json_texts(4)), id=f"u{seq}"), **extra)
            nodes.append(seq)
        elif kind == "assistant":
            blocks: Any = [] if draw(st.integers(0, 3)) == 0 else draw(json_texts(4))
            message = assistant_message(blocks, provider="mock", model="mock", id=f"a{seq}")
            extra = {"surfaceOp": "append"}
            if draw(st.booleans()):
                extra["sourceEventSeqs"] = earlier(seq)
            add("assistant/message", {"turn": 1, "step": 1, "message": message}, **extra)
            nodes.append(seq)
        elif kind == "tool":
            result = tool_result(f"call-{seq}", draw(json_texts(4)), id=f"t{seq}")
            add("tool/result", {"turn": 1, "step": 1, "message": result}, surfaceOp="append")
            nodes.append(seq)
        elif kind == "replace" and nodes:
            i = draw(st.integers(0, len(nodes) - 1))
            j = draw(st.integers(i, len(nodes) - 1))
            shadowed = nodes[i : j + 1]
            cited = sorted(set(shadowed) | set(earlier(seq)))
            cited = draw(st.permutations(cited))
            op = {"op": "replace", "start": nodes[i], "end": nodes[j]}
            if draw(st.booleans()):
                data: Any = user_message(
                    "summary", id=f"s{seq}", source={"kind": "plugin", "plugin": "compact"}
                )
                add("user/message", data, surfaceOp=op, sourceEventSeqs=list(cited))
            else:
                message = assistant_message("summary", provider="mock", model="mock", id=f"s{seq}")
                data = {"turn": 1, "step": 1, "message": message}
                add("assistant/message", data, surfaceOp=op, sourceEventSeqs=list(cited))
            nodes[i : j + 1] = [seq]
        elif kind == "prune":
            results = [node for node in nodes if log[node]["type"] == "tool/result"]
            if not results:
                continue
            target = draw(st.sampled_from(results))
            original = log[target]["data"]
            block = dict(original["message"]["content"][0])
            block["content"] = [{"type": "text", "text": draw(json_texts(4))}]
            data = {**original, "message": {**original["message"], "content": [block]}}
            op = {"op": "replace", "start": target, "end": target}
            add("tool/result", data, surfaceOp=op, sourceEventSeqs=[target])
            nodes[nodes.index(target)] = seq
    return log
