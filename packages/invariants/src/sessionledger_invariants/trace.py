"""The turn/step/tool state of one log and the pure rule that advances it.

``advance(trace, event)`` returns the trace after *event* or raises ``RuleBroken`` naming
the rule, with a message saying what was expected and what was seen. It is a dict
dispatch on ``event.type`` followed by a few comparisons, because the plugin runs it on
every append (the chunk stream included). Types without an entry (``user/message``,
``session/end-seed``, plugin types) leave the trace as it is.

The seq of the last committed event is part of the per-session trace too, but it is kept
beside the ``Trace`` value by whoever walks the log (``SessionChecker``), so that the
events that change no turn state — almost all of them are chunks — return the very same
``Trace`` object and cost no allocation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple, Protocol, final

from sessionledger.model._events import Replace
from sessionledger.model._repair import TOOL_NOT_STARTED
from sessionledger.model._snapshot import FrozenDict
from sessionledger.model._vocabulary import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_PAUSED,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
)
from sessionledger_invariants.rules import (
    REPLACE_OUTSIDE_TURN,
    STEP_NUMBER,
    STEP_SCOPE,
    STEP_START_TURN,
    STEP_START_WHILE_OPEN,
    TOOL_PAUSE_UNREQUESTED,
    TOOL_RESULT_UNPAIRED,
    TURN_END_MISMATCH,
    TURN_END_STEP_OPEN,
    TURN_NUMBER,
    TURN_SCOPE,
    TURN_START_WHILE_OPEN,
)

__all__ = ["EMPTY_TRACE", "TRANSITIONS", "EventView", "RuleBroken", "Trace", "advance"]


class EventView(Protocol):
    """What the rules read of an event: a ``SessionEvent`` or anything shaped like one."""

    @property
    def type(self) -> str: ...

    @property
    def seq(self) -> int: ...

    @property
    def data(self) -> Any: ...

    @property
    def surface_op(self) -> object: ...


class Trace(NamedTuple):
    """The turn/step/tool state after a prefix of a log.

    ``open_step`` is only set while ``open_turn`` is; ``next_turn`` and ``next_step`` are
    the only numbers the next ``turn/start`` and ``step/start`` may carry; ``pending``
    holds the call ids recorded by ``tool/call`` in the open step and not answered yet;
    ``requested`` the call ids the open step's assistant messages asked for and no result
    answered yet (what a ``tool/paused`` may name).
    """

    open_turn: int | None = None
    open_step: int | None = None
    next_turn: int = 1
    next_step: int = 1
    pending: frozenset[str] = frozenset()
    requested: frozenset[str] = frozenset()


#: The trace of an empty log.
EMPTY_TRACE: Final = Trace()

_NO_CALLS: Final[frozenset[str]] = frozenset()


@final
class RuleBroken(Exception):
    """*event* breaks *rule*; ``recovered`` is the best-effort trace after it.

    The live plugin turns this into an ``InvariantError`` and keeps its trace; an offline
    check reports it and carries on from ``recovered`` (the state the event claims, so
    one mistake is reported once rather than at every later event).
    """

    def __init__(self, rule: str, message: str, recovered: Trace) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message
        self.recovered = recovered


def _show(value: object) -> str:
    """Render a value seen in an event for a message (``none`` for a missing one)."""
    if value is None:
        return "none"
    if type(value) is int:
        return str(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _field(data: Any, key: str) -> Any:
    # Core validates only the messages of surface events; any other payload may be
    # shaped arbitrarily by a caller, so a missing or non-object payload reads as None.
    try:
        return data.get(key)
    except AttributeError:
        return None


def _open_at(trace: Trace) -> str:
    if trace.open_turn is None:
        return "no turn open"
    if trace.open_step is None:
        return f"turn {trace.open_turn} open with no step open"
    return f"turn {trace.open_turn}/step {trace.open_step} open"


# -- turns ----------------------------------------------------------------------------------


def _turn_opened(trace: Trace, turn: object) -> Trace:
    number = turn if type(turn) is int else trace.next_turn
    return Trace(number, None, number + 1, 1, _NO_CALLS)


def _turn_start(trace: Trace, event: EventView) -> Trace:
    turn = _field(event.data, "turn")
    if trace.open_turn is not None:
        raise RuleBroken(
            TURN_START_WHILE_OPEN,
            f"turn/start {_show(turn)}: expected turn {trace.open_turn} to end first, "
            "saw it still open",
            _turn_opened(trace, turn),
        )
    if type(turn) is not int or turn != trace.next_turn:
        raise RuleBroken(
            TURN_NUMBER,
            f"turn/start: expected turn {trace.next_turn}, saw turn {_show(turn)}",
            _turn_opened(trace, turn),
        )
    return Trace(turn, None, turn + 1, 1, _NO_CALLS)


def _turn_closed(trace: Trace) -> Trace:
    return Trace(None, None, trace.next_turn, trace.next_step, _NO_CALLS)


def _turn_end(trace: Trace, event: EventView) -> Trace:
    turn = _field(event.data, "turn")
    open_turn = trace.open_turn
    if open_turn is None:
        raise RuleBroken(
            TURN_END_MISMATCH,
            f"turn/end {_show(turn)}: expected an open turn, saw none open",
            trace,
        )
    if type(turn) is not int or turn != open_turn:
        raise RuleBroken(
            TURN_END_MISMATCH,
            f"turn/end: expected turn {open_turn} (the open turn), saw turn {_show(turn)}",
            _turn_closed(trace),
        )
    if trace.open_step is not None:
        raise RuleBroken(
            TURN_END_STEP_OPEN,
            f"turn/end {turn}: expected step {trace.open_step} to end first, saw it still open",
            _turn_closed(trace),
        )
    return _turn_closed(trace)


# -- steps ----------------------------------------------------------------------------------


def _step_opened(trace: Trace, step: object) -> Trace:
    number = step if type(step) is int else trace.next_step
    return Trace(trace.open_turn, number, trace.next_turn, number + 1, _NO_CALLS)


def _step_start(trace: Trace, event: EventView) -> Trace:
    data = event.data
    turn = _field(data, "turn")
    step = _field(data, "step")
    open_turn = trace.open_turn
    if open_turn is None:
        raise RuleBroken(
            STEP_START_TURN,
            f"step/start {_show(step)} of turn {_show(turn)}: expected an open turn, saw none open",
            trace,
        )
    if type(turn) is not int or turn != open_turn:
        raise RuleBroken(
            STEP_START_TURN,
            f"step/start: expected turn {open_turn} (the open turn), saw turn {_show(turn)}",
            _step_opened(trace, step),
        )
    if trace.open_step is not None:
        raise RuleBroken(
            STEP_START_WHILE_OPEN,
            f"step/start {_show(step)}: expected step {trace.open_step} to end first, "
            "saw it still open",
            _step_opened(trace, step),
        )
    if type(step) is not int or step != trace.next_step:
        raise RuleBroken(
            STEP_NUMBER,
            f"step/start in turn {open_turn}: expected step {trace.next_step}, "
            f"saw step {_show(step)}",
            _step_opened(trace, step),
        )
    return Trace(open_turn, step, trace.next_turn, step + 1, _NO_CALLS)


def _outside_step(trace: Trace, event: EventView, turn: object, step: object) -> RuleBroken:
    """The error for a step-scoped event that does not name the open turn and step."""
    if trace.open_step is None:
        expected = "an open step"
    else:
        expected = f"turn {trace.open_turn}/step {trace.open_step} (the open step)"
    return RuleBroken(
        STEP_SCOPE,
        f"{event.type}: expected {expected}, saw turn {_show(turn)}/step {_show(step)} "
        f"with {_open_at(trace)}",
        trace,
    )


def _in_step(trace: Trace, event: EventView) -> Trace:
    # The hot path (assistant/chunk): two lookups and four comparisons, no allocation.
    try:
        data = event.data
        turn = data.get("turn")
        step = data.get("step")
    except AttributeError:
        turn = step = None
    if (
        type(step) is int
        and type(turn) is int
        and step == trace.open_step
        and turn == trace.open_turn
    ):
        return trace
    raise _outside_step(trace, event, turn, step)


def _step_end(trace: Trace, event: EventView) -> Trace:
    data = event.data
    turn = _field(data, "turn")
    step = _field(data, "step")
    # Ending a step forgets its unanswered calls: a failed or aborted step may end with
    # calls that never got a result, and pairing never crosses steps.
    closed = Trace(trace.open_turn, None, trace.next_turn, trace.next_step, _NO_CALLS)
    if (
        type(step) is int
        and type(turn) is int
        and step == trace.open_step
        and turn == trace.open_turn
    ):
        return closed
    broken = _outside_step(trace, event, turn, step)
    broken.recovered = closed if trace.open_step is not None else trace
    raise broken


def _with_call(trace: Trace, call_id: object) -> Trace:
    if type(call_id) is not str:
        return trace
    return Trace(
        trace.open_turn,
        trace.open_step,
        trace.next_turn,
        trace.next_step,
        trace.pending | {call_id},
        trace.requested,
    )


def _requested_ids(data: Any) -> frozenset[str]:
    content = _field(_field(data, "message"), "content")
    if type(content) is not tuple and type(content) is not list:
        return _NO_CALLS
    return frozenset(
        ident
        for block in content
        if _field(block, "type") == "tool-call" and type(ident := _field(block, "id")) is str
    )


def _assistant_message(trace: Trace, event: EventView) -> Trace:
    in_step = _in_step(trace, event)
    requested = _requested_ids(event.data)
    if not requested:
        return in_step
    return Trace(
        in_step.open_turn,
        in_step.open_step,
        in_step.next_turn,
        in_step.next_step,
        in_step.pending,
        in_step.requested | requested,
    )


def _tool_paused(trace: Trace, event: EventView) -> Trace:
    data = event.data
    call_id = _field(data, "callId")
    _in_step(trace, event)
    if call_id in trace.requested:
        return trace
    requested = ", ".join(repr(ident) for ident in sorted(trace.requested)) or "none"
    raise RuleBroken(
        TOOL_PAUSE_UNREQUESTED,
        f"tool/paused for call {_show(call_id)}: expected a call the open step's assistant "
        f"messages requested and nothing answered yet (requested: {requested}), saw none",
        trace,
    )


def _tool_call(trace: Trace, event: EventView) -> Trace:
    data = event.data
    turn = _field(data, "turn")
    step = _field(data, "step")
    call_id = _field(data, "callId")
    if (
        type(step) is int
        and type(turn) is int
        and step == trace.open_step
        and turn == trace.open_turn
    ):
        return _with_call(trace, call_id)
    broken = _outside_step(trace, event, turn, step)
    # The call was recorded all the same: keep it pending so its result is not reported
    # a second time.
    if trace.open_step is not None:
        broken.recovered = _with_call(trace, call_id)
    raise broken


# -- tool results ---------------------------------------------------------------------------


def _result_call_id(data: Any) -> object:
    return _field(_field(_field(data, "message"), "source"), "callId")


def _not_started(data: Any) -> bool:
    """Tell whether a result is crash repair's answer to a call that never started.

    Such a result answers a call the model requested but the harness never recorded
    with ``tool/call`` (docs/reading.md, "resume and crash repair"), so it has no pending
    call to pair with.
    """
    if _field(_field(data, "error"), "code") != TOOL_NOT_STARTED:
        return False
    content = _field(_field(data, "message"), "content")
    if (type(content) is not tuple and type(content) is not list) or not content:
        return False
    return _field(content[0], "isError") is True


def _without_call(trace: Trace, call_id: object) -> Trace:
    if type(call_id) is not str or (
        call_id not in trace.pending and call_id not in trace.requested
    ):
        return trace
    return Trace(
        trace.open_turn,
        trace.open_step,
        trace.next_turn,
        trace.next_step,
        trace.pending - {call_id},
        trace.requested - {call_id},
    )


def _tool_result(trace: Trace, event: EventView) -> Trace:
    data = event.data
    surface_op = event.surface_op
    if isinstance(surface_op, Replace):
        # A replacement (tool-output pruning) rewrites an old result from a later turn;
        # it answers nothing, so it needs no step and no pending call.
        if trace.open_turn is None:
            raise RuleBroken(
                REPLACE_OUTSIDE_TURN,
                f"tool/result replacing seqs {surface_op.start}..{surface_op.end}: "
                "expected an open turn, saw none open",
                trace,
            )
        return trace
    turn = _field(data, "turn")
    step = _field(data, "step")
    call_id = _result_call_id(data)
    if not (
        type(step) is int
        and type(turn) is int
        and step == trace.open_step
        and turn == trace.open_turn
    ):
        broken = _outside_step(trace, event, turn, step)
        broken.recovered = _without_call(trace, call_id)
        raise broken
    if call_id in trace.pending:
        return _without_call(trace, call_id)
    if _not_started(data):
        return _without_call(trace, call_id)
    pending = ", ".join(repr(pending) for pending in sorted(trace.pending)) or "none"
    raise RuleBroken(
        TOOL_RESULT_UNPAIRED,
        f"tool/result for call {_show(call_id)}: expected a tool/call for it pending in "
        f"turn {turn}/step {step} (pending: {pending}), saw none",
        trace,
    )


# -- turn-scoped ----------------------------------------------------------------------------


def _in_turn(trace: Trace, event: EventView) -> Trace:
    if trace.open_turn is None:
        raise RuleBroken(TURN_SCOPE, f"{event.type}: expected an open turn, saw none open", trace)
    return trace


#: Event type → its rule. Absent types (``user/message``, ``session/end-seed``, plugin
#: types) are unconstrained: their owners bring their own rules (docs/plugins.md).
TRANSITIONS: Final[Mapping[str, Callable[[Trace, EventView], Trace]]] = FrozenDict(
    {
        TURN_START: _turn_start,
        TURN_END: _turn_end,
        STEP_START: _step_start,
        STEP_END: _step_end,
        ASSISTANT_CHUNK: _in_step,
        ASSISTANT_MESSAGE: _assistant_message,
        TOOL_CALL: _tool_call,
        TOOL_PAUSED: _tool_paused,
        TOOL_RESULT: _tool_result,
        REQUEST_HEADER: _in_turn,
        REQUEST_CONTEXT: _in_turn,
    }
)


def advance(trace: Trace, event: EventView) -> Trace:
    """Return the trace after *event*, or raise ``RuleBroken`` naming the broken rule.

    Pure: *trace* is never changed, and an event that changes no turn state returns
    *trace* itself. The seq rule is not checked here (see the module docstring).
    """
    rule = TRANSITIONS.get(event.type)
    return trace if rule is None else rule(trace, event)
