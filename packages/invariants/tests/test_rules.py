"""Each invariant rule, accepted and refused, through a live session (cases I1 to I37)."""

from __future__ import annotations

import pytest
from invariants_builders import (
    AM,
    CH,
    END_SEED,
    NOT_STARTED,
    OUTCOME_UNKNOWN,
    PLUGIN,
    RC,
    RH,
    SE,
    SS,
    TC,
    TE,
    TP,
    TR,
    TS,
    UM,
    log,
    put,
    refused,
)

from sessionledger import Ledger
from sessionledger._errors import EventDataError, InvariantError
from sessionledger.model._events import SessionEvent
from sessionledger.model._session import Session
from sessionledger_invariants import EMPTY_TRACE, RULES, InvariantsPlugin, Trace, check_log
from sessionledger_invariants import rules as R


def test_full_turn_with_a_tool_round_trip_is_accepted(session, plugin):  # I2
    put(
        session,
        TS(1),
        UM("hi"),
        SS(1, 1),
        CH(1, 1, "h"),
        AM(1, 1, ("c1",)),
        TC(1, 1, "c1"),
        TR(1, 1, "c1"),
        SE(1, 1),
        SS(1, 2),
        AM(1, 2),
        SE(1, 2),
        TE(1),
        TS(2),
    )
    assert plugin.trace(session) == Trace(open_turn=2, next_turn=3)
    assert plugin.last_seq_of(session) == 12


def test_the_trace_follows_turns_steps_and_pending_calls(session, plugin):
    put(session, TS(1), SS(1, 1), TC(1, 1, "a"), TC(1, 1, "b"))
    assert plugin.trace(session) == Trace(1, 1, 2, 2, frozenset({"a", "b"}))
    put(session, TR(1, 1, "b"))
    assert plugin.trace(session) == Trace(1, 1, 2, 2, frozenset({"a"}))
    put(session, SE(1, 1))
    assert plugin.trace(session) == Trace(1, None, 2, 2, frozenset())
    put(session, TE(1))
    assert plugin.trace(session) == Trace(None, None, 2, 2, frozenset())


def test_chunks_leave_the_trace_object_as_it_is(session, plugin):
    put(session, TS(1), SS(1, 1))
    trace = plugin.trace(session)
    put(session, CH(1, 1), CH(1, 1), AM(1, 1))
    assert plugin.trace(session) is trace


# -- turns -------------------------------------------------------------------------------------


def test_turn_start_while_a_turn_is_open_is_refused(session, plugin):  # I6
    put(session, TS(1))
    error = refused(session, TS(2), R.TURN_START_WHILE_OPEN, plugin)
    assert "expected turn 1 to end first" in str(error)
    assert "saw it still open" in str(error)


def test_turn_end_must_name_the_open_turn(session, plugin):  # I7
    put(session, TS(1))
    error = refused(session, TE(2), R.TURN_END_MISMATCH, plugin)
    assert "expected turn 1 (the open turn), saw turn 2" in str(error)


def test_turn_end_without_an_open_turn_is_refused(session, plugin):  # I36
    error = refused(session, TE(1), R.TURN_END_MISMATCH, plugin)
    assert "expected an open turn, saw none open" in str(error)


def test_turn_numbers_count_up_from_one(session, plugin):  # I8
    error = refused(session, TS(2), R.TURN_NUMBER, plugin)
    assert "expected turn 1, saw turn 2" in str(error)
    put(session, TS(1), TE(1))
    error = refused(session, TS(3), R.TURN_NUMBER, plugin)
    assert "expected turn 2, saw turn 3" in str(error)
    put(session, TS(2))


@pytest.mark.parametrize("turn", [True, 1.0, "1", None])
def test_a_turn_number_must_be_an_integer(session, plugin, turn):
    # The core's data shapes refuse it at the append, before any validator runs; in a
    # stored log (written by another tool) the rule reports it.
    with pytest.raises(EventDataError):
        session.append("turn/start", {"turn": turn})
    assert session.seq == 0
    violations = check_log(log(TS(turn)))
    assert [violation.rule for violation in violations] == [R.TURN_NUMBER]
    assert "expected turn 1" in violations[0].message


def test_a_turn_without_data_is_reported_not_crashed_on():
    stored = SessionEvent.from_json({"type": "turn/start", "seq": 0, "time": 0, "data": None})
    violations = check_log([stored])
    assert [violation.rule for violation in violations] == [R.TURN_NUMBER]
    assert "saw turn none" in violations[0].message


def test_turn_end_with_a_step_open_is_refused(session, plugin):  # I16
    put(session, TS(1), SS(1, 1))
    error = refused(session, TE(1), R.TURN_END_STEP_OPEN, plugin)
    assert "expected step 1 to end first" in str(error)


def test_turn_brackets_alone_are_accepted(session):  # I1, I9
    put(session, TS(1), TE(1), TS(2), SS(2, 1), SE(2, 1), TE(2))


# -- steps -------------------------------------------------------------------------------------


def test_step_start_must_name_the_open_turn(session, plugin):  # I14
    put(session, TS(1))
    error = refused(session, SS(2, 1), R.STEP_START_TURN, plugin)
    assert "expected turn 1 (the open turn), saw turn 2" in str(error)


def test_step_start_outside_any_turn_is_refused(session, plugin):
    error = refused(session, SS(1, 1), R.STEP_START_TURN, plugin)
    assert "expected an open turn, saw none open" in str(error)


def test_step_start_while_a_step_is_open_is_refused(session, plugin):  # I15
    put(session, TS(1), SS(1, 1))
    error = refused(session, SS(1, 2), R.STEP_START_WHILE_OPEN, plugin)
    assert "expected step 1 to end first" in str(error)


def test_step_numbers_count_up_from_one_in_each_turn(session, plugin):  # I19
    put(session, TS(1))
    refused(session, SS(1, 2), R.STEP_NUMBER, plugin)
    put(session, SS(1, 1), SE(1, 1))
    error = refused(session, SS(1, 3), R.STEP_NUMBER, plugin)
    assert "expected step 2, saw step 3" in str(error)
    put(session, TE(1), TS(2))
    error = refused(session, SS(2, 2), R.STEP_NUMBER, plugin)
    assert "expected step 1, saw step 2" in str(error)
    put(session, SS(2, 1))


@pytest.mark.parametrize(
    ("event", "seen"),
    [
        (SE(1, 2), "saw turn 1/step 2"),  # I17
        (AM(1, 2), "saw turn 1/step 2"),  # I18
        (CH(2, 1), "saw turn 2/step 1"),
        (TC(1, 2, "c"), "saw turn 1/step 2"),
        (TR(1, 2, "c"), "saw turn 1/step 2"),
    ],
)
def test_step_events_must_name_the_open_step(session, plugin, event, seen):
    put(session, TS(1), SS(1, 1))
    error = refused(session, event, R.STEP_SCOPE, plugin)
    assert "expected turn 1/step 1 (the open step)" in str(error)
    assert seen in str(error)


def test_a_step_number_that_is_not_an_integer_is_reported_in_a_stored_log():
    # (At the append the core's data shapes refuse it before the rule runs.)
    violations = check_log(log(TS(1), SS(1, 1), CH(1, True)))
    assert [violation.rule for violation in violations] == [R.STEP_SCOPE]
    assert "saw turn 1/step True" in violations[0].message


@pytest.mark.parametrize(
    "event",
    [CH(1, 1), AM(1, 1), TC(1, 1, "c"), SE(1, 1), TR(1, 1, "closed")],  # I20, I22
)
def test_step_events_need_an_open_step(session, plugin, event):
    put(session, TS(1))
    error = refused(session, event, R.STEP_SCOPE, plugin)
    assert "expected an open step" in str(error)
    assert "turn 1 open with no step open" in str(error)


def test_step_events_outside_any_turn_are_refused(session, plugin):
    error = refused(session, CH(1, 1), R.STEP_SCOPE, plugin)
    assert "no turn open" in str(error)


# -- tool calls and results --------------------------------------------------------------------


def test_a_result_must_answer_a_pending_call(session, plugin):  # I21
    put(session, TS(1), SS(1, 1))
    error = refused(session, TR(1, 1, "ghost"), R.TOOL_RESULT_UNPAIRED, plugin)
    assert "tool/result for call 'ghost'" in str(error)
    assert "(pending: none), saw none" in str(error)


def test_a_second_result_for_one_call_is_refused(session, plugin):  # I34
    put(session, TS(1), SS(1, 1), TC(1, 1, "c1"), TR(1, 1, "c1"))
    refused(session, TR(1, 1, "c1"), R.TOOL_RESULT_UNPAIRED, plugin)


def test_results_may_answer_pending_calls_in_any_order(session, plugin):  # I35
    put(session, TS(1), SS(1, 1), TC(1, 1, "c1"), TC(1, 1, "c2"))
    error = refused(session, TR(1, 1, "c3"), R.TOOL_RESULT_UNPAIRED, plugin)
    assert "(pending: 'c1', 'c2')" in str(error)
    put(session, TR(1, 1, "c2"), TR(1, 1, "c1"), SE(1, 1), TE(1))


def test_pairing_does_not_cross_steps(session, plugin):  # I27
    put(session, TS(1), SS(1, 1), TC(1, 1, "c1"), SE(1, 1), SS(1, 2))
    refused(session, TR(1, 2, "c1"), R.TOOL_RESULT_UNPAIRED, plugin)


def test_a_pause_names_a_requested_unanswered_call_of_the_open_step(session, plugin):
    # docs/reading.md, "Pausing is not crashing": before or after the call's tool/call,
    # then the call starts (tool/call) and its result answers it.
    put(session, TS(1), SS(1, 1), AM(1, 1, ("a", "b")), TP(1, 1, "a"), TC(1, 1, "b"))
    put(session, TP(1, 1, "b", "deferred"))
    assert plugin.trace(session).requested == frozenset({"a", "b"})
    put(session, TC(1, 1, "a"), TR(1, 1, "a"), TR(1, 1, "b"), SE(1, 1), TE(1))
    assert plugin.trace(session) == Trace(None, None, 2, 2)


def test_a_pause_for_a_call_nobody_requested_or_already_answered_is_refused(session, plugin):
    put(session, TS(1), SS(1, 1), TC(1, 1, "orphan"))
    error = refused(session, TP(1, 1, "orphan"), R.TOOL_PAUSE_UNREQUESTED, plugin)
    assert "tool/paused for call 'orphan'" in str(error)
    assert "(requested: none)" in str(error)
    put(session, AM(1, 1, ("a",)), TC(1, 1, "a"), TR(1, 1, "a"))
    refused(session, TP(1, 1, "a"), R.TOOL_PAUSE_UNREQUESTED, plugin)


def test_a_pause_is_step_scoped_and_forgotten_with_its_step(session, plugin):
    put(session, TS(1), SS(1, 1), AM(1, 1, ("a",)))
    refused(session, TP(1, 2, "a"), R.STEP_SCOPE, plugin)
    put(session, SE(1, 1), SS(1, 2))
    refused(session, TP(1, 2, "a"), R.TOOL_PAUSE_UNREQUESTED, plugin)


def test_a_pause_without_its_tool_call_does_not_pair_a_result(session, plugin):
    put(session, TS(1), SS(1, 1), AM(1, 1, ("a",)), TP(1, 1, "a"))
    refused(session, TR(1, 1, "a"), R.TOOL_RESULT_UNPAIRED, plugin)


def test_a_step_may_end_with_unanswered_calls(session):  # I26
    put(session, TS(1), SS(1, 1), TC(1, 1, "c1"), SE(1, 1), TE(1, "error"))


def test_a_not_started_repair_result_needs_no_tool_call(session, plugin):  # I25
    put(
        session,
        TS(1),
        SS(1, 1),
        AM(1, 1, ("crashed",)),
        TR(1, 1, "crashed", is_error=True, error=NOT_STARTED),
        SE(1, 1),
        TE(1, "interrupted"),
    )
    assert plugin.trace(session) == Trace(None, None, 2, 2)


def test_the_not_started_exemption_still_needs_the_open_step(session, plugin):
    put(session, TS(1))
    result = TR(1, 1, "crashed", is_error=True, error=NOT_STARTED)
    refused(session, result, R.STEP_SCOPE, plugin)


def test_the_not_started_exemption_needs_an_error_result(session, plugin):
    put(session, TS(1), SS(1, 1))
    result = TR(1, 1, "crashed", is_error=False, error=NOT_STARTED)
    refused(session, result, R.TOOL_RESULT_UNPAIRED, plugin)


def test_an_unknown_outcome_result_needs_its_tool_call(session, plugin):  # I37
    put(session, TS(1), SS(1, 1))
    result = TR(1, 1, "x", is_error=True, error=OUTCOME_UNKNOWN)
    refused(session, result, R.TOOL_RESULT_UNPAIRED, plugin)
    put(session, TC(1, 1, "x"), result)


def _turn_with_result(session: Session) -> SessionEvent:
    put(session, TS(1), SS(1, 1), TC(1, 1, "rewrite"))
    (result,) = put(session, TR(1, 1, "rewrite", text="original"))
    put(session, SE(1, 1), TE(1))
    return result


def test_a_replacement_result_only_needs_an_open_turn(session, plugin):  # I23
    result = _turn_with_result(session)
    put(session, TS(2))
    pruned = TR(1, 1, "rewrite", text="pruned", replace=(result.seq, result.seq))
    (event,) = put(session, pruned)
    assert event.data["turn"] == 1
    assert session.derive_messages()[-1]["content"][0]["content"][0]["text"] == "pruned"


def test_a_replacement_result_outside_any_turn_is_refused(session, plugin):  # I24
    result = _turn_with_result(session)
    pruned = TR(1, 1, "rewrite", text="pruned", replace=(result.seq, result.seq))
    error = refused(session, pruned, R.REPLACE_OUTSIDE_TURN, plugin)
    assert f"replacing seqs {result.seq}..{result.seq}" in str(error)
    assert "expected an open turn, saw none open" in str(error)


# -- turn-scoped and unconstrained types -------------------------------------------------------


def test_request_records_are_accepted_inside_a_turn(session):  # I10
    put(session, TS(1), RH(), SS(1, 1), RH(), RC(), SE(1, 1), RC(), TE(1))


@pytest.mark.parametrize("event", [RH(), RC()])  # I12
def test_request_records_outside_a_turn_are_refused(session, plugin, event):
    error = refused(session, event, R.TURN_SCOPE, plugin)
    assert f"{event['type']}: expected an open turn, saw none open" in str(error)


@pytest.mark.parametrize(
    "event",
    [
        UM("hi"),
        UM("note", source={"kind": "plugin", "plugin": "test"}),  # I11
        END_SEED(),
        PLUGIN(),  # I13
        PLUGIN("compaction/start", turn=None),
    ],
)
def test_user_messages_end_seed_and_plugin_types_are_unconstrained(session, plugin, event):
    put(session, event)
    put(session, TS(1), event, SS(1, 1), event, CH(1, 1), event, SE(1, 1), event, TE(1), event)
    assert plugin.trace(session) == Trace(None, None, 2, 2)


def test_sessions_are_independent(ledger):  # I29
    a = ledger.create("a")
    b = ledger.create("b")
    put(a, TS(1))
    put(b, TS(1), TE(1))
    put(a, TE(1))


# -- the error ---------------------------------------------------------------------------------


def test_the_error_names_session_seq_and_rule(session):
    put(session, TS(1), UM("hello"))
    with pytest.raises(InvariantError) as caught:
        put(session, TS(2))
    error = caught.value
    assert (error.code, error.rule, error.seq, error.session_id) == (
        "INVARIANT",
        "turn-start-while-open",
        2,
        "s",
    )
    assert str(error).endswith("[session 's', seq 2, rule 'turn-start-while-open']")


def test_a_seq_that_does_not_increase_is_refused_on_a_direct_hook_call(session, plugin):  # I5
    put(session, TS(1))
    replayed = SessionEvent.from_json({"type": "turn/end", "seq": 0, "time": 2, "data": {}})
    with pytest.raises(InvariantError) as caught:
        plugin.ledger_validate(session, replayed)
    assert caught.value.rule == R.SEQ_ORDER
    assert "expected a seq above 0, saw seq 0" in str(caught.value)


def test_every_rule_identifier_is_documented_and_distinct():
    identifiers = [value for name, value in vars(R).items() if name.isupper() and name != "RULES"]
    assert sorted(identifiers) == sorted(RULES)
    assert len(set(identifiers)) == len(identifiers)
    assert all(RULES.values())


def test_a_fresh_session_starts_from_the_empty_trace(session, plugin):
    assert plugin.trace(session) is EMPTY_TRACE
    assert plugin.last_seq_of(session) == -1


def test_a_plugin_instance_can_serve_two_ledgers():
    shared = InvariantsPlugin()
    first = Ledger(plugins=[shared], load_entrypoints=False).create("x")
    second = Ledger(plugins=[shared], load_entrypoints=False).create("x")
    put(first, TS(1))
    put(second, TS(1), TE(1))
    assert shared.trace(first) == Trace(1, None, 2, 1)
    assert shared.trace(second) == Trace(None, None, 2, 1)


def test_every_public_name_is_importable_and_documented():
    import sessionledger_invariants as package

    for name in package.__all__:
        value = getattr(package, name)
        if callable(value):
            assert value.__doc__, name
