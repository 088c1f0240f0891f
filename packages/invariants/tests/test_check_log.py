"""``check_log``: the same rules offline, every violation reported."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from invariants_builders import (
    AM,
    CH,
    END_SEED,
    PLUGIN,
    RC,
    RH,
    SE,
    SS,
    TC,
    TE,
    TR,
    TS,
    UM,
    HarnessTypes,
    log,
    put,
)

from sessionledger import Ledger
from sessionledger._errors import EventEnvelopeError, InvariantError
from sessionledger.model._events import SessionEvent
from sessionledger.model._snapshot import thaw
from sessionledger.testing.strategies import session_logs
from sessionledger_invariants import InvariantsPlugin, Violation, check_log
from sessionledger_invariants import rules as R


def test_a_valid_log_has_no_violations():
    events = log(TS(1), UM(), SS(1, 1), CH(1, 1), AM(1, 1, ("c",)), TC(1, 1, "c"))
    events += log(TR(1, 1, "c"), SE(1, 1), TE(1), PLUGIN(), TS(2), TE(2), start=len(events))
    assert check_log(events) == []


def test_an_empty_log_has_no_violations():
    assert check_log([]) == []


def test_every_violation_is_reported_and_the_check_carries_on():
    events = log(
        TS(1),
        TS(2),  # 1: turn 1 still open; carries on with turn 2 open
        CH(2, 1),  # 2: no step open
        SS(2, 1),
        SE(2, 1),
        TE(2),
        TS(4),  # 6: expected turn 3; carries on with turn 4 open
        TE(4),
        RC(),  # 8: outside any turn
        TS(5),
    )
    found = check_log(events)
    assert [(v.seq, v.rule) for v in found] == [
        (1, R.TURN_START_WHILE_OPEN),
        (2, R.STEP_SCOPE),
        (6, R.TURN_NUMBER),
        (8, R.TURN_SCOPE),
    ]
    assert found[2].message == "turn/start: expected turn 3, saw turn 4"


def test_a_mistake_is_reported_once_not_at_every_later_event():
    # A skipped step number: the steps after it count on from the number the log used.
    events = log(TS(1), SS(1, 2), SE(1, 2), SS(1, 3), SE(1, 3), TE(1))
    assert [(v.seq, v.rule) for v in check_log(events)] == [(1, R.STEP_NUMBER)]


def test_a_recorded_call_outside_its_step_is_still_answerable():
    events = log(TS(1), SS(1, 1), TC(1, 9, "c"), TR(1, 1, "c"), SE(1, 1), TE(1))
    assert [(v.seq, v.rule) for v in check_log(events)] == [(2, R.STEP_SCOPE)]


def test_a_step_end_for_the_wrong_step_still_closes_the_open_one():
    events = log(TS(1), SS(1, 1), SE(1, 2), TE(1))
    assert [(v.seq, v.rule) for v in check_log(events)] == [(2, R.STEP_SCOPE)]


def test_turn_end_with_a_step_open_closes_both():
    events = log(TS(1), SS(1, 1), TE(1), TS(2))
    assert [(v.seq, v.rule) for v in check_log(events)] == [(2, R.TURN_END_STEP_OPEN)]


def test_seqs_that_do_not_increase_are_reported():
    events = [
        SessionEvent.from_json({**event, "seq": seq, "time": 0})
        for event, seq in [(TS(1), 0), (UM(), 1), (PLUGIN(), 1), (SS(1, 1), 2), (SE(1, 1), 0)]
    ]
    found = check_log(events)
    assert [(v.seq, v.rule) for v in found] == [(1, R.SEQ_ORDER), (0, R.SEQ_ORDER)]
    assert found[0].message == "plugin/marker: expected a seq above 1, saw seq 1"


def test_one_event_can_break_the_seq_rule_and_its_own_rule():
    events = [
        SessionEvent.from_json({**TS(1), "seq": 5, "time": 0}),
        SessionEvent.from_json({**TS(2), "seq": 5, "time": 0}),
    ]
    rules = [v.rule for v in check_log(events)]
    assert rules == [R.SEQ_ORDER, R.TURN_START_WHILE_OPEN]


def test_envelope_dicts_are_checked_like_events():
    envelopes = [{**event, "seq": seq, "time": seq} for seq, event in enumerate([TS(1), TE(2)])]
    assert check_log(envelopes) == [
        Violation(1, R.TURN_END_MISMATCH, "turn/end: expected turn 1 (the open turn), saw turn 2")
    ]


def test_a_result_without_a_surface_op_is_held_to_the_append_rules():
    # Session never commits one (docs/surface.md), but a hand-made log can hold one.
    bare = {key: value for key, value in TR(1, 1, "c").items() if key != "surfaceOp"}
    events = log(TS(1), bare, TE(1))
    assert [(v.seq, v.rule) for v in check_log(events)] == [(1, R.STEP_SCOPE)]


def test_an_envelope_that_is_not_an_event_raises():
    with pytest.raises(EventEnvelopeError):
        check_log([{"type": "turn/start", "seq": 0}])


@pytest.mark.parametrize("data", [None, [1, 2], "turn", 7, {"turn": {"n": 1}}])
def test_odd_payloads_are_reported_not_crashed_on(data):
    events = [
        SessionEvent.from_json({"type": kind, "seq": i, "time": 0, "data": data})
        for i, kind in enumerate(["turn/start", "step/start", "assistant/chunk", "turn/end"])
    ]
    assert [v.rule for v in check_log(events)] == [
        R.TURN_NUMBER,
        R.STEP_START_TURN,
        R.STEP_SCOPE,
        R.TURN_END_MISMATCH,
    ]


def test_check_log_never_raises_for_a_violation():
    events = log(*([TE(1), SE(1, 1), TR(1, 1, "x"), RH()] * 5))
    assert len(check_log(events)) == 20


# -- properties --------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(session_logs(max_turns=3, open_tail=False))
def test_generated_well_formed_logs_pass(envelopes):
    assert check_log(envelopes) == []


def _ops() -> st.SearchStrategy[tuple[Any, ...]]:
    numbers = st.integers(1, 3)
    calls = st.sampled_from(("a", "b"))
    return st.one_of(
        st.tuples(st.just("TS"), numbers),
        st.tuples(st.just("TE"), numbers),
        st.tuples(st.just("SS"), numbers, numbers),
        st.tuples(st.just("SE"), numbers, numbers),
        st.tuples(st.just("CH"), numbers, numbers),
        st.tuples(st.just("AM"), numbers, numbers, calls),
        st.tuples(st.just("TC"), numbers, numbers, calls),
        st.tuples(st.just("TR"), numbers, numbers, calls, st.booleans()),
        st.tuples(st.just("PRUNE")),
        st.tuples(st.sampled_from(("UM", "RH", "RC", "PLUGIN", "END_SEED"))),
    )


def _build(op: tuple[Any, ...], session) -> dict[str, Any] | None:
    kind, *args = op
    if kind == "AM":
        return AM(args[0], args[1], (args[2],))
    if kind == "TR":
        turn, step, call, not_started = args
        if not_started:
            error = {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}
            return TR(turn, step, call, is_error=True, error=error)
        return TR(turn, step, call)
    if kind == "PRUNE":
        # Rewrite the content of the oldest tool/result still on the surface.
        nodes = set(session.surface.nodes)
        for event in session.events:
            if event.type == "tool/result" and event.seq in nodes:
                data = thaw(event.data)
                data["message"]["content"][0]["content"] = [{"type": "text", "text": "pruned"}]
                return {
                    "type": "tool/result",
                    "data": data,
                    "surfaceOp": {"op": "replace", "start": event.seq, "end": event.seq},
                    "sourceEventSeqs": [event.seq],
                }
        return None
    builders = {
        "TS": TS, "TE": TE, "SS": SS, "SE": SE, "CH": CH, "TC": TC,
        "UM": UM, "RH": RH, "RC": RC, "PLUGIN": PLUGIN, "END_SEED": END_SEED,
    }  # fmt: skip
    return builders[kind](*args)


@settings(max_examples=150, deadline=None)
@given(st.lists(_ops(), max_size=40))
def test_the_live_plugin_and_the_offline_check_agree(ops):
    plugin = InvariantsPlugin()
    session = Ledger(plugins=[plugin, HarnessTypes()], load_entrypoints=False).create("s")
    for op in ops:
        candidate = _build(op, session)
        if candidate is None:
            continue
        before = list(session.events)
        refusal: InvariantError | None = None
        try:
            put(session, candidate)
        except InvariantError as error:
            refusal = error
        if refusal is None:
            assert check_log(session.events) == []
        else:
            offline = SessionEvent.from_json({**candidate, "seq": len(before), "time": 0})
            found = check_log([*before, offline])
            assert found == [Violation(len(before), refusal.rule, refusal.args[0])]
            assert session.events == tuple(before)
    assert check_log(session.events) == []
