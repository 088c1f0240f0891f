"""Crash repair: the closers of an interrupted turn (docs/reading.md)."""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.model._events import SessionEvent
from sessionledger.model._repair import (
    TOOL_NOT_STARTED_TEXT,
    TOOL_OUTCOME_UNKNOWN_TEXT,
    interrupted_turn_closers,
)

# --- builders: events in envelope form; `log` numbers them with time == seq ----------------

MODEL = {"kind": "model", "provider": "mock", "model": "mock"}


def TS(turn: int) -> dict[str, Any]:
    return {"type": "turn/start", "data": {"turn": turn}}


def TE(turn: int, kind: str = "completed") -> dict[str, Any]:
    return {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": kind}}}


def SS(turn: int, step: int) -> dict[str, Any]:
    return {"type": "step/start", "data": {"turn": turn, "step": step}}


def SE(turn: int, step: int) -> dict[str, Any]:
    return {"type": "step/end", "data": {"turn": turn, "step": step}}


def UM(text: str, id: str = "u") -> dict[str, Any]:
    return {
        "type": "user/message",
        "data": {
            "id": id,
            "role": "user",
            "content": [{"type": "text", "text": text}],
            "source": {"kind": "user"},
        },
        "surfaceOp": "append",
    }


def call(id: str, name: str = "bash", arguments: str = "{}") -> dict[str, Any]:
    return {"type": "tool-call", "id": id, "name": name, "arguments": arguments}


def AM(turn: int, step: int, blocks: list[Any], id: str | None = None) -> dict[str, Any]:
    return {
        "type": "assistant/message",
        "data": {
            "turn": turn,
            "step": step,
            "message": {
                "id": id or f"am-{turn}-{step}",
                "role": "assistant",
                "content": blocks,
                "source": MODEL,
            },
        },
        "surfaceOp": "append",
    }


def TC(turn: int, step: int, id: str, name: str = "echo") -> dict[str, Any]:
    return {
        "type": "tool/call",
        "data": {"turn": turn, "step": step, "callId": id, "name": name, "arguments": "{}"},
    }


def TR(turn: int, step: int, id: str, text: str = "ok") -> dict[str, Any]:
    block = {
        "type": "tool-result",
        "toolCallId": id,
        "content": [{"type": "text", "text": text}],
        "isError": False,
    }
    message = {
        "id": f"tr-{id}",
        "role": "user",
        "content": [block],
        "source": {"kind": "tool", "callId": id},
    }
    return {
        "type": "tool/result",
        "data": {"turn": turn, "step": step, "message": message},
        "surfaceOp": "append",
    }


def TP(turn: int, step: int, id: str, kind: str = "approval") -> dict[str, Any]:
    return {
        "type": "tool/paused",
        "data": {"turn": turn, "step": step, "callId": id, "reason": {"kind": kind}},
    }


def END_SEED() -> dict[str, Any]:
    return {"type": "session/end-seed", "data": {}}


def log(*items: dict[str, Any], start: int = 0) -> list[dict[str, Any]]:
    """Number *items* from *start* with ``time == seq`` in ``to_json`` key order."""
    out = []
    for offset, item in enumerate(items):
        seq = start + offset
        envelope = {"type": item["type"], "seq": seq, "time": seq, "data": item["data"]}
        for key in ("surfaceOp", "sourceEventSeqs"):
            if key in item:
                envelope[key] = item[key]
        out.append(envelope)
    return out


def extend(events: list[dict[str, Any]], *items: dict[str, Any]) -> list[dict[str, Any]]:
    return events + log(*items, start=len(events))


def types(closers: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in closers]


def not_started(call_id: str, turn: int, step: int, seq: int, time: int) -> dict[str, Any]:
    return {
        "type": "tool/result",
        "seq": seq,
        "time": time,
        "data": {
            "turn": turn,
            "step": step,
            "message": {
                "id": f"interrupted-tool-result-{call_id}-{seq}",
                "role": "user",
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": call_id,
                        "content": [{"type": "text", "text": TOOL_NOT_STARTED_TEXT}],
                        "isError": True,
                    }
                ],
                "source": {"kind": "tool", "callId": call_id},
            },
            "error": {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"},
        },
        "surfaceOp": "append",
    }


def outcome_unknown(
    call_id: str, turn: int, step: int, seq: int, time: int, call_seq: int
) -> dict[str, Any]:
    closer = not_started(call_id, turn, step, seq, time)
    closer["data"]["message"]["content"][0]["content"][0]["text"] = TOOL_OUTCOME_UNKNOWN_TEXT
    closer["data"]["error"] = {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
    closer["sourceEventSeqs"] = [call_seq]
    return closer


# --- the model-facing texts ------------------------------------------------------------------


def test_texts_are_the_module_constants():
    assert TOOL_NOT_STARTED_TEXT == (
        "The session was interrupted before this tool call started, so the tool never ran "
        "and changed nothing. Call it again if you still need its result."
    )
    assert TOOL_OUTCOME_UNKNOWN_TEXT == (
        "The session was interrupted while this tool call was running, and no result was "
        "saved. The tool may or may not have run, so its effects are unknown. "
        "Retry only if the operation is read-only or idempotent. "
        "If it may have side effects, first verify the external state or ask the user. "
        "Do not retry it blindly."
    )


def test_outcome_unknown_text_says_when_retrying_is_safe():
    text = TOOL_OUTCOME_UNKNOWN_TEXT
    assert "read-only or idempotent" in text
    assert "verify the external state or ask the user" in text
    assert "not retry it blindly" in text


# --- R cases ----------------------------------------------------------------------------------


def test_balanced_log_needs_no_closers():  # R1
    assert interrupted_turn_closers(log(TS(1), TE(1))) == []


def test_empty_log_needs_no_closers():  # R2
    assert interrupted_turn_closers([]) == []


def test_open_turn_without_step_gets_only_a_turn_end():  # R3
    assert interrupted_turn_closers(log(TS(1))) == [
        {
            "type": "turn/end",
            "seq": 1,
            "time": 0,
            "data": {"turn": 1, "reason": {"kind": "interrupted"}},
        }
    ]


def test_open_step_is_closed_before_the_turn():  # R4
    closers = interrupted_turn_closers(log(TS(1), SS(1, 1)))
    assert closers == [
        {"type": "step/end", "seq": 2, "time": 1, "data": {"turn": 1, "step": 1}},
        {
            "type": "turn/end",
            "seq": 3,
            "time": 1,
            "data": {"turn": 1, "reason": {"kind": "interrupted"}},
        },
    ]


def test_requested_call_never_started_gets_not_started_result():  # R5
    events = log(
        TS(2), SS(2, 1), AM(2, 1, [{"type": "text", "text": "calling a tool"}, call("call-1")])
    )
    closers = interrupted_turn_closers(events)
    assert types(closers) == ["tool/result", "step/end", "turn/end"]
    assert [c["seq"] for c in closers] == [3, 4, 5]
    assert closers[0] == not_started("call-1", turn=2, step=1, seq=3, time=2)
    assert "sourceEventSeqs" not in closers[0]
    assert closers[0]["data"]["message"]["id"] == "interrupted-tool-result-call-1-3"


def test_closer_envelopes_follow_to_json_key_order():
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("a"), call("b")]), TC(1, 1, "b"))
    for closer in interrupted_turn_closers(events):
        assert list(closer) == list(SessionEvent.from_json(closer).to_json())
    result = interrupted_turn_closers(events)[1]
    assert list(result) == ["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs"]
    assert list(result["data"]) == ["turn", "step", "message", "error"]
    assert list(result["data"]["message"]) == ["id", "role", "content", "source"]


def test_answered_call_gets_no_synthetic_result():  # R6
    events = log(TS(2), SS(2, 1), AM(2, 1, [call("call-1")]), TR(2, 1, "call-1"))
    assert types(interrupted_turn_closers(events)) == ["step/end", "turn/end"]


def test_closed_step_leaves_only_the_turn_to_close():  # R7
    events = log(TS(2), SS(2, 1), AM(2, 1, [call("call-1")]), SE(2, 1))
    closers = interrupted_turn_closers(events)
    assert types(closers) == ["turn/end"]
    assert closers[0]["seq"] == 4


def test_only_the_open_turn_is_repaired():  # R8
    events = log(
        TS(1),
        SS(1, 1),
        AM(1, 1, [call("old-call")]),
        TR(1, 1, "old-call"),
        SE(1, 1),
        TE(1),
        TS(2),
        SS(2, 1),
        AM(2, 1, [call("new-call")]),
    )
    closers = interrupted_turn_closers(events)
    assert types(closers) == ["tool/result", "step/end", "turn/end"]
    assert [c["seq"] for c in closers] == [9, 10, 11]
    assert closers[0] == not_started("new-call", turn=2, step=1, seq=9, time=8)
    assert closers[2]["data"] == {"turn": 2, "reason": {"kind": "interrupted"}}


def test_only_unanswered_calls_get_results():  # R9
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("call-a"), call("call-b")]), TR(1, 1, "call-a"))
    closers = interrupted_turn_closers(events)
    assert types(closers) == ["tool/result", "step/end", "turn/end"]
    assert closers[0] == not_started("call-b", turn=1, step=1, seq=4, time=3)
    assert [c["seq"] for c in closers] == [4, 5, 6]


def test_several_unanswered_calls_are_answered_in_block_order():  # R9, derived
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("call-b"), call("call-a")]))
    closers = interrupted_turn_closers(events)
    assert closers[:2] == [
        not_started("call-b", turn=1, step=1, seq=3, time=2),
        not_started("call-a", turn=1, step=1, seq=4, time=2),
    ]


def test_started_call_gets_outcome_unknown_citing_its_tool_call():  # R10
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("call-1")]), TC(1, 1, "call-1"))
    closers = interrupted_turn_closers(events)
    assert types(closers) == ["tool/result", "step/end", "turn/end"]
    assert [c["seq"] for c in closers] == [4, 5, 6]
    assert closers[0] == outcome_unknown("call-1", turn=1, step=1, seq=4, time=3, call_seq=3)
    assert closers[0]["data"]["message"]["id"] == "interrupted-tool-result-call-1-4"


def test_orphan_tool_call_gets_no_synthetic_result():  # R11
    events = log(TS(1), SS(1, 1), TC(1, 1, "orphan"))
    closers = interrupted_turn_closers(events)
    assert types(closers) == ["step/end", "turn/end"]
    assert [c["seq"] for c in closers] == [3, 4]


def test_tool_call_before_the_requesting_message_does_not_count_as_started():
    events = log(TS(1), SS(1, 1), TC(1, 1, "early"), AM(1, 1, [call("early")]))
    assert interrupted_turn_closers(events)[0]["data"]["error"]["code"] == "TOOL_NOT_STARTED"


def test_call_requested_again_forgets_its_earlier_start():
    events = log(
        TS(1),
        SS(1, 1),
        AM(1, 1, [call("x"), call("y")], id="m1"),
        TC(1, 1, "x"),
        AM(1, 1, [call("x")], id="m2"),
    )
    closers = interrupted_turn_closers(events)
    assert [c["data"]["message"]["source"]["callId"] for c in closers[:2]] == ["x", "y"]
    assert closers[0]["data"]["error"]["code"] == "TOOL_NOT_STARTED"


def test_last_tool_call_for_an_id_is_the_one_cited():
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("x")]), TC(1, 1, "x"), TC(1, 1, "x"))
    assert interrupted_turn_closers(events)[0]["sourceEventSeqs"] == [4]


def test_calls_of_an_earlier_closed_step_are_not_answered():
    events = log(
        TS(1),
        SS(1, 1),
        AM(1, 1, [call("lost")]),
        SE(1, 1),
        SS(1, 2),
        AM(1, 2, [call("open")]),
        TC(1, 2, "open"),
    )
    closers = interrupted_turn_closers(events)
    assert types(closers) == ["tool/result", "step/end", "turn/end"]
    assert closers[0] == outcome_unknown("open", turn=1, step=2, seq=7, time=6, call_seq=6)
    assert closers[1]["data"] == {"turn": 1, "step": 2}


def test_message_outside_a_step_keeps_its_own_step_and_closes_no_step():
    # A malformed log (no rule covers it): the result names the requesting step.
    events = log(TS(1), AM(1, 3, [call("c")]))
    closers = interrupted_turn_closers(events)
    assert types(closers) == ["tool/result", "turn/end"]
    assert closers[0]["data"]["step"] == 3


def test_replace_tool_result_also_answers_its_call():
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("c")]), TR(1, 1, "c"))
    replaced = TR(1, 1, "c", text="pruned")
    replaced["surfaceOp"] = {"op": "replace", "start": 3, "end": 3}
    replaced["sourceEventSeqs"] = [3]
    events = extend(events, TC(1, 1, "c"), replaced)
    assert types(interrupted_turn_closers(events)) == ["step/end", "turn/end"]


def test_closers_reuse_the_last_time_even_when_it_went_back():  # R13
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("c")]))
    events[0]["time"] = 500
    events[1]["time"] = 900
    events[2]["time"] = 7
    assert {c["time"] for c in interrupted_turn_closers(events)} == {7}


def test_session_events_and_envelopes_give_the_same_closers():
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("a"), call("b")]), TC(1, 1, "a"))
    frozen = [SessionEvent.from_json(e) for e in events]
    assert interrupted_turn_closers(frozen) == interrupted_turn_closers(events)
    assert interrupted_turn_closers(iter(frozen)) == interrupted_turn_closers(events)


def test_closers_are_fresh_mutable_dicts():
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("a")]))
    first = interrupted_turn_closers(events)
    first[0]["data"]["error"]["code"] = "CHANGED"
    first[0]["data"]["message"]["content"][0]["content"].clear()
    assert interrupted_turn_closers(events)[0]["data"]["error"]["code"] == "TOOL_NOT_STARTED"
    assert interrupted_turn_closers(events)[0]["data"]["message"]["content"][0]["content"]


R_CASES = {
    "R1": log(TS(1), TE(1)),
    "R2": [],
    "R3": log(TS(1)),
    "R4": log(TS(1), SS(1, 1)),
    "R5": log(TS(2), SS(2, 1), AM(2, 1, [{"type": "text", "text": "calling"}, call("call-1")])),
    "R6": log(TS(2), SS(2, 1), AM(2, 1, [call("call-1")]), TR(2, 1, "call-1")),
    "R7": log(TS(2), SS(2, 1), AM(2, 1, [call("call-1")]), SE(2, 1)),
    "R8": log(
        TS(1),
        SS(1, 1),
        AM(1, 1, [call("old-call")]),
        TR(1, 1, "old-call"),
        SE(1, 1),
        TE(1),
        TS(2),
        SS(2, 1),
        AM(2, 1, [call("new-call")]),
    ),
    "R9": log(TS(1), SS(1, 1), AM(1, 1, [call("call-a"), call("call-b")]), TR(1, 1, "call-a")),
    "R10": log(TS(1), SS(1, 1), AM(1, 1, [call("call-1")]), TC(1, 1, "call-1")),
    "R11": log(TS(1), SS(1, 1), TC(1, 1, "orphan")),
}


@pytest.mark.parametrize("case", sorted(R_CASES))
def test_applying_the_closers_leaves_nothing_to_close(case):  # R12
    events = R_CASES[case]
    closed = events + interrupted_turn_closers(events)
    assert interrupted_turn_closers(closed) == []
    assert interrupted_turn_closers(extend(closed, END_SEED())) == []


@pytest.mark.parametrize("case", sorted(set(R_CASES) - {"R7"}))
def test_repaired_case_seeds_a_session_that_pairs_every_call(case):
    session = _seeded(R_CASES[case] + interrupted_turn_closers(R_CASES[case]))
    assert _unanswered_calls(session.derive_messages()) == []


def test_call_left_unanswered_by_a_closed_step_stays_unanswered():
    # step/end clears pending calls, so repair never answers a call its step
    # already closed over (R7); pairing such a call is the writer's job, not repair's.
    events = R_CASES["R7"]
    session = _seeded(events + interrupted_turn_closers(events))
    assert _unanswered_calls(session.derive_messages()) == ["call-1"]


def test_open_turn_after_end_seed_is_still_closed():
    events = log(END_SEED(), TS(1), SS(1, 1))
    closers = interrupted_turn_closers(events)
    assert types(closers) == ["step/end", "turn/end"]
    assert interrupted_turn_closers(extend(events + closers, END_SEED())) == []


# --- pausing is not crashing (docs/reading.md) ---------------------------------------------------


def test_a_paused_call_is_never_answered_and_keeps_the_turn_open():
    events = log(TS(1), UM("deploy"), SS(1, 1), AM(1, 1, [call("a")]), TP(1, 1, "a"))
    assert interrupted_turn_closers(events) == []
    assert interrupted_turn_closers(extend(events, END_SEED())) == []


def test_a_call_paused_after_its_tool_call_is_paused():
    # A harness that records the call when the model asks, then learns it needs approval.
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("a")]), TC(1, 1, "a"), TP(1, 1, "a"))
    assert interrupted_turn_closers(events) == []


def test_a_tool_call_after_the_pause_means_it_ran_so_its_outcome_is_unknown():
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("a")]), TP(1, 1, "a"), TC(1, 1, "a"))
    assert interrupted_turn_closers(events) == [
        outcome_unknown("a", 1, 1, 5, 4, 4),
        {"type": "step/end", "seq": 6, "time": 4, "data": {"turn": 1, "step": 1}},
        {
            "type": "turn/end",
            "seq": 7,
            "time": 4,
            "data": {"turn": 1, "reason": {"kind": "interrupted"}},
        },
    ]


def test_only_the_unpaused_calls_are_answered_and_the_turn_stays_open():
    events = log(
        TS(1),
        SS(1, 1),
        AM(1, 1, [call("a"), call("b"), call("c")]),
        TC(1, 1, "a"),
        TP(1, 1, "b"),
    )
    closers = interrupted_turn_closers(events)
    assert closers == [outcome_unknown("a", 1, 1, 5, 4, 3), not_started("c", 1, 1, 6, 4)]
    assert interrupted_turn_closers(events + closers) == []
    session = _append_closers(events)
    assert _unanswered_calls(session.derive_messages()) == ["b"]


def test_a_paused_call_answered_later_closes_like_any_turn():
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("a")]), TC(1, 1, "a"), TP(1, 1, "a"))
    events = extend(events, TR(1, 1, "a"))
    assert types(interrupted_turn_closers(events)) == ["step/end", "turn/end"]


def test_a_pause_is_forgotten_with_its_step_or_when_the_call_is_requested_again():
    closed = log(TS(1), SS(1, 1), AM(1, 1, [call("a")]), TP(1, 1, "a"), SE(1, 1))
    assert types(interrupted_turn_closers(closed)) == ["turn/end"]
    again = log(TS(1), SS(1, 1), AM(1, 1, [call("a")]), TP(1, 1, "a"), AM(1, 1, [call("a")]))
    assert types(interrupted_turn_closers(again)) == ["tool/result", "step/end", "turn/end"]


def test_a_pause_naming_no_requested_call_pauses_nothing():
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("a")]), TP(1, 1, "zzz"))
    assert types(interrupted_turn_closers(events)) == ["tool/result", "step/end", "turn/end"]


def test_generated_logs_draw_paused_and_unpaused_open_steps():
    # Guards the strategy itself: both branches of the pause rule are exercised.
    seen: set[bool] = set()

    @settings(max_examples=200, deadline=None)
    @given(open_turn_logs())
    def check(case: Case) -> None:
        seen.add(bool(case.paused))

    check()
    assert seen == {True, False}


# --- the closers against a real session --------------------------------------------------------


def _seeded(events: list[dict[str, Any]]) -> Any:
    from sessionledger.model._session import Session

    return Session.create(seed=events)


def _unanswered_calls(messages: list[Any]) -> list[str]:
    """Return the ids of tool calls no later tool-result block answers (with duplicates)."""
    calls: list[str] = []
    answered: set[str] = set()
    for message in messages:
        for block in message["content"]:
            if block["type"] == "tool-call":
                calls.append(block["id"])
            elif block["type"] == "tool-result":
                assert block["toolCallId"] in calls, "a result answers a call made before it"
                answered.add(block["toolCallId"])
    return [c for c in calls if c not in answered]


def _append_closers(events: list[dict[str, Any]]) -> Any:
    """Seed a session with the interrupted log, then append its closers one by one."""
    session = _seeded(events)
    for closer in interrupted_turn_closers(events):
        session.append(
            closer["type"],
            closer["data"],
            surface_op=closer.get("surfaceOp"),
            source_event_seqs=closer.get("sourceEventSeqs"),
        )
    return session


def test_appended_closers_pass_the_surface_rules_and_answer_every_call():
    events = log(
        TS(1),
        UM("run both"),
        SS(1, 1),
        AM(1, 1, [{"type": "text", "text": "on it"}, call("a"), call("b"), call("c")]),
        TC(1, 1, "a"),
        TR(1, 1, "a"),
        TC(1, 1, "b"),
    )
    assert _unanswered_calls(_seeded(events).derive_messages()) == ["b", "c"]
    session = _append_closers(events)
    messages = session.derive_messages()
    assert _unanswered_calls(messages) == []
    synthetic = [m for m in messages if m["id"].startswith("interrupted-tool-result-")]
    assert [m["source"]["callId"] for m in synthetic] == ["b", "c"]
    assert [m["content"][0]["isError"] for m in synthetic] == [True, True]
    b_result = session.events[-4]
    assert b_result.type == "tool/result"
    assert b_result.source_event_seqs == (6,)
    assert b_result.surface_op == "append"
    assert [e.type for e in session.events[-2:]] == ["step/end", "turn/end"]
    assert interrupted_turn_closers(session.events) == []


def test_seeding_log_plus_closers_is_what_a_cold_load_builds():
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("a"), call("b")]), TC(1, 1, "a"))
    closers = interrupted_turn_closers(events)
    session = _seeded(events + closers)
    assert [e.to_json() for e in session.events[: len(events) + len(closers)]] == [
        SessionEvent.from_json(e).to_json() for e in events + closers
    ]
    assert session.events[-1].type == "session/end-seed"
    assert _unanswered_calls(session.derive_messages()) == []
    assert interrupted_turn_closers(session.events) == []


ONE_TURN = log(
    TS(1), UM("hi"), SS(1, 1), AM(1, 1, [{"type": "text", "text": "hello"}]), SE(1, 1), TE(1)
)


def test_open_step_after_a_finished_turn_is_closed():  # P1, without storage
    events = extend(ONE_TURN, TS(2), SS(2, 1))
    session = _seeded(events + interrupted_turn_closers(events))
    assert [e.type for e in session.events[6:]] == [
        "turn/start",
        "step/start",
        "step/end",
        "turn/end",
        "session/end-seed",
    ]
    assert session.events[9].data["reason"] == {"kind": "interrupted"}
    session.append("turn/start", {"turn": 3})
    session.append("turn/end", {"turn": 3, "reason": {"kind": "completed"}})
    assert interrupted_turn_closers(session.events) == []


def test_not_started_result_is_derived_for_the_requested_call():  # P2, without storage
    events = extend(ONE_TURN, TS(2), SS(2, 1), AM(2, 1, [call("call-x")]))
    session = _seeded(events + interrupted_turn_closers(events))
    assert [e.type for e in session.events[-5:-1]] == [
        "assistant/message",
        "tool/result",
        "step/end",
        "turn/end",
    ]
    result = session.events[-4].data
    assert result["message"]["source"] == {"kind": "tool", "callId": "call-x"}
    assert result["error"]["code"] == "TOOL_NOT_STARTED"
    derived = session.derive_messages()[-1]
    assert derived["content"][0]["toolCallId"] == "call-x"
    assert derived["content"][0]["isError"] is True


def test_outcome_unknown_result_is_derived_for_the_started_call():  # P3, without storage
    events = log(TS(1), SS(1, 1), AM(1, 1, [call("call-risk", "write")]), TC(1, 1, "call-risk"))
    session = _seeded(events + interrupted_turn_closers(events))
    result = session.events[4]
    assert result.data["error"] == {
        "name": "ToolOutcomeUnknownError",
        "code": "TOOL_OUTCOME_UNKNOWN",
    }
    assert result.source_event_seqs == (3,)
    derived = session.derive_messages()[-1]
    assert derived["source"]["callId"] == "call-risk"
    assert derived["content"][0]["isError"] is True
    assert derived["content"][0]["content"][0]["text"] == TOOL_OUTCOME_UNKNOWN_TEXT


def test_repaired_log_satisfies_the_invariants_plugin():
    invariants = pytest.importorskip("sessionledger_invariants")
    events = log(
        TS(1),
        SS(1, 1),
        AM(1, 1, [call("a"), call("b")]),
        TC(1, 1, "a"),
    )
    repaired = [SessionEvent.from_json(e) for e in events + interrupted_turn_closers(events)]
    assert invariants.check_log(repaired) == []


# --- properties over generated open-turn logs ---------------------------------------------------


class Case(NamedTuple):
    """A drawn log ending inside a turn, with what an independent model expects of it."""

    events: list[dict[str, Any]]
    expected: list[dict[str, Any]]
    #: Calls a closed step left unanswered, in transcript order: repair must not answer them.
    abandoned: list[str]
    #: Calls of the open step whose latest marker is ``tool/paused``: never answered.
    paused: list[str]


#: What happens to a requested call before the crash: nothing, a recorded start only, a
#: start and a result, or a result without a recorded start; paused (docs/reading.md,
#: "Pausing is not crashing") with no start, after its start (a harness that records the
#: call when the model asks), before its start (approved, then running), or before its
#: start and result.
CALL_FATES = (
    "requested",
    "started",
    "answered",
    "ran",
    "paused",
    "started-paused",
    "paused-started",
    "paused-answered",
)
#: The fates whose latest marker is the pause.
PAUSED_FATES = ("paused", "started-paused")
#: The fates with a recorded start, and those with a result.
STARTED_FATES = ("started", "answered", "started-paused", "paused-started", "paused-answered")
ANSWERED_FATES = ("answered", "ran", "paused-answered")


@st.composite
def open_turn_logs(draw: Any) -> Case:
    """Draw a log that ends inside a turn, and the closers it should get.

    Earlier turns are closed; each step has one or two assistant messages requesting up
    to three calls each, with every fate of CALL_FATES. A closed step either answers all
    its calls (what the agent loop writes) or, drawn "sloppy", abandons some of them. The
    open turn's last step is open or closed, and the log may carry chunks, user messages
    and a ``session/end-seed`` between turns.
    """
    items: list[dict[str, Any]] = []
    abandoned: list[str] = []
    numbers = itertools.count(1)

    def step(turn: int, number: int, *, close: bool) -> list[tuple[str, int | None, bool]]:
        """Add one step; return its unanswered calls as (id, tool/call seq or None, paused)."""
        sloppy = not close or draw(st.booleans())
        unanswered: list[tuple[str, int | None, bool]] = []
        items.append(SS(turn, number))
        for message in range(draw(st.integers(1, 2))):
            if draw(st.booleans()):
                items.append(UM("steer", id=f"u-{turn}-{number}-{message}"))
            ids = [f"call-{next(numbers)}" for _ in range(draw(st.integers(0, 3)))]
            text = [{"type": "text", "text": f"step {number}"}] if draw(st.booleans()) else []
            blocks = text + [call(i) for i in ids]
            items.append(AM(turn, number, blocks, id=f"am-{turn}-{number}-{message}"))
            fates = {i: draw(st.sampled_from(CALL_FATES)) if sloppy else "answered" for i in ids}
            started_at: dict[str, int] = {}
            for i in draw(st.permutations(ids)):
                if fates[i].startswith("paused"):
                    items.append(TP(turn, number, i, draw(st.sampled_from(["approval", "x"]))))
                if fates[i] in STARTED_FATES:
                    started_at[i] = len(items)
                    items.append(TC(turn, number, i))
                if fates[i] == "started-paused":
                    items.append(TP(turn, number, i, "deferred"))
                if draw(st.booleans()):
                    chunk = {"type": "text-delta", "index": 0, "text": "x"}
                    items.append(
                        {
                            "type": "assistant/chunk",
                            "data": {"turn": turn, "step": number, "chunk": chunk},
                        }
                    )
            for i in draw(st.permutations(ids)):
                if fates[i] in ANSWERED_FATES:
                    result = TR(turn, number, i)
                    if i in started_at:
                        result["sourceEventSeqs"] = [started_at[i]]
                    items.append(result)
            unanswered += [
                (i, started_at.get(i), fates[i] in PAUSED_FATES)
                for i in ids
                if fates[i] not in ANSWERED_FATES
            ]
        if close:
            items.append(SE(turn, number))
            abandoned.extend(i for i, _, _ in unanswered)
            return []
        return unanswered

    turns = draw(st.integers(0, 2))
    for turn in range(1, turns + 1):
        items.append(TS(turn))
        items.append(UM(f"turn {turn}", id=f"um-{turn}"))
        for number in range(1, draw(st.integers(0, 2)) + 1):
            step(turn, number, close=True)
        items.append(TE(turn))
    if draw(st.booleans()):
        items.append(END_SEED())
    turn = turns + 1
    items.append(TS(turn))
    items.append(UM("go", id="um-open"))
    closed_steps = draw(st.integers(0, 2))
    for number in range(1, closed_steps + 1):
        step(turn, number, close=True)
    step_open = draw(st.booleans())
    open_step = closed_steps + 1
    pending = step(turn, open_step, close=False) if step_open else []

    events = log(*items)
    seq, time = len(events), events[-1]["time"]
    expected: list[dict[str, Any]] = []
    for call_id, call_seq, paused in pending:
        if paused:
            continue
        if call_seq is None:
            expected.append(not_started(call_id, turn, open_step, seq, time))
        else:
            expected.append(outcome_unknown(call_id, turn, open_step, seq, time, call_seq))
        seq += 1
    paused_ids = [call_id for call_id, _, paused in pending if paused]
    if paused_ids:
        # A paused call keeps its step and turn open: only the others are answered.
        return Case(events, expected, abandoned, paused_ids)
    if step_open:
        step_end = {"turn": turn, "step": open_step}
        expected.append({"type": "step/end", "seq": seq, "time": time, "data": step_end})
        seq += 1
    turn_end = {"turn": turn, "reason": {"kind": "interrupted"}}
    expected.append({"type": "turn/end", "seq": seq, "time": time, "data": turn_end})
    return Case(events, expected, abandoned, [])


@settings(max_examples=300, deadline=None)
@given(open_turn_logs())
def test_closers_match_an_independent_model(case):
    assert interrupted_turn_closers(case.events) == case.expected


@settings(max_examples=200, deadline=None)
@given(open_turn_logs())
def test_closers_are_deterministic(case):
    frozen = [SessionEvent.from_json(e) for e in case.events]
    first = interrupted_turn_closers(case.events)
    assert interrupted_turn_closers(case.events) == first
    assert interrupted_turn_closers(frozen) == first


@settings(max_examples=200, deadline=None)
@given(open_turn_logs())
def test_closers_are_idempotent(case):
    closed = case.events + interrupted_turn_closers(case.events)
    assert interrupted_turn_closers(closed) == []
    assert interrupted_turn_closers(extend(closed, END_SEED())) == []


@settings(max_examples=200, deadline=None)
@given(open_turn_logs())
def test_closers_only_ever_close(case):
    events = case.events
    closers = interrupted_turn_closers(events)
    kinds = types(closers)
    if case.paused:
        # A paused call keeps the turn open: only results, none for a paused call.
        assert set(kinds) <= {"tool/result"}
        answered_now = {c["data"]["message"]["source"]["callId"] for c in closers}
        assert not answered_now & set(case.paused)
    else:
        assert kinds[-1] == "turn/end"
        assert closers[-1]["data"]["reason"] == {"kind": "interrupted"}
        assert kinds.count("turn/end") == 1
    assert set(kinds) <= {"tool/result", "step/end", "turn/end"}
    assert kinds.count("step/end") <= 1
    assert kinds == sorted(kinds, key=["tool/result", "step/end", "turn/end"].index)
    assert [c["seq"] for c in closers] == list(range(len(events), len(events) + len(closers)))
    assert {c["time"] for c in closers} <= {events[-1]["time"]}
    # A synthetic result only answers a call the model requested and nobody answered.
    requested = {
        block["id"]
        for e in events
        if e["type"] == "assistant/message"
        for block in e["data"]["message"]["content"]
        if block["type"] == "tool-call"
    }
    answered = {
        e["data"]["message"]["source"]["callId"] for e in events if e["type"] == "tool/result"
    }
    for closer in closers:
        if closer["type"] == "tool/result":
            call_id = closer["data"]["message"]["source"]["callId"]
            assert call_id in requested
            assert call_id not in answered
            assert call_id not in case.abandoned
            assert closer["data"]["message"]["content"][0]["isError"] is True


@settings(max_examples=100, deadline=None)
@given(open_turn_logs())
def test_appended_closers_are_accepted_and_answer_every_open_call(case):
    session = _append_closers(case.events)
    unanswered = _unanswered_calls(session.derive_messages())
    assert unanswered == [c for c in unanswered if c in case.abandoned or c in case.paused]
    assert sorted(unanswered) == sorted(case.abandoned + case.paused)
    assert interrupted_turn_closers(session.events) == []


@settings(max_examples=100, deadline=None)
@given(open_turn_logs())
def test_surface_accepts_the_repaired_log(case):
    from sessionledger.model._surface import fold_surface

    closers = interrupted_turn_closers(case.events)
    repaired = [SessionEvent.from_json(e) for e in case.events + closers]
    nodes = fold_surface(repaired).nodes
    results = tuple(c["seq"] for c in closers if c["type"] == "tool/result")
    assert nodes[len(nodes) - len(results) :] == results


def test_generated_logs_really_end_inside_a_turn():
    # Guards the strategy itself: every drawn log ends with a turn open.
    @settings(max_examples=50, deadline=None)
    @given(open_turn_logs())
    def check(case: Case) -> None:
        depth = 0
        for e in case.events:
            depth += {"turn/start": 1, "turn/end": -1}.get(e["type"], 0)
        assert depth == 1

    check()
