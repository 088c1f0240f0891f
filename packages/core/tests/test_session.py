"""``Session``: append, seeds, restore, the events snapshot and failure atomicity."""

from __future__ import annotations

import copy
import itertools
import re
import uuid
from collections import OrderedDict
from typing import Any

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from sessionledger import (
    EventDataError,
    EventEnvelopeError,
    FrozenDict,
    HeaderError,
    JsonValueError,
    LedgerError,
    MessageShapeError,
    ReentrantAppendError,
    Replace,
    SeedError,
    Session,
    SessionEvent,
    SessionHeader,
    SessionHooks,
    SurfaceError,
    assistant_message,
    thaw,
    tool_call_block,
    tool_result,
    user_message,
)
from sessionledger.testing.strategies import session_logs

# --- builders -------------------------------------------------------------------------------


def stable_id(value: object) -> str:
    """``repr`` without a memory address: every pytest-xdist worker collects the same ids."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


def clock(start: int = 1000) -> Any:
    return itertools.count(start).__next__


def new(id: str = "s", **kwargs: Any) -> Session:
    return Session.create(id, clock=clock(), **kwargs)


def U(text: str = "hello", **kwargs: Any) -> dict[str, Any]:
    return dict(user_message(text, **kwargs))


def A(text: str | None = "hi", turn: int = 1, step: int = 1, **extra: Any) -> dict[str, Any]:
    blocks: Any = [] if text is None else text
    message = assistant_message(blocks, provider="mock", model="mock")
    return {"turn": turn, "step": step, "message": message, **extra}


def A_blocks(blocks: list[Any], turn: int = 1, step: int = 1) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": assistant_message(blocks, provider="mock", model="mock"),
    }


def TR(call_id: str = "c1", text: str = "ok", *, is_error: bool = False) -> dict[str, Any]:
    return {"turn": 1, "step": 1, "message": tool_result(call_id, text, is_error=is_error)}


def TS(session: Session, turn: int = 1) -> SessionEvent:
    return session.append("turn/start", {"turn": turn})


def TE(session: Session, turn: int = 1, reason: Any = None) -> SessionEvent:
    return session.append("turn/end", {"turn": turn, "reason": reason or {"kind": "completed"}})


def raw(type_: str, seq: int, data: Any, **extra: Any) -> dict[str, Any]:
    return {"type": type_, "seq": seq, "time": 1, "data": data, **extra}


def texts(messages: list[Any]) -> list[str]:
    return [m["content"][0].get("text", m["content"][0].get("type")) for m in messages]


def all_frozen(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if type(item) is not FrozenDict:
                return False
            stack.extend(item.values())
        elif isinstance(item, list):
            return False
        elif isinstance(item, tuple):
            stack.extend(item)
    return True


def state(session: Session) -> tuple[Any, ...]:
    """Everything a rejected append must leave exactly as it was."""
    return (
        session.seq,
        len(session.events),
        session.surface.nodes,
        session.surface.replace_generation,
        session.derive_messages(),
        session.request_header(),
        session.request_context(),
        session.transcript(),
    )


# --- 11.B append and log basics -------------------------------------------------------------


def test_b1_fresh_session_derives_user_assistant_tool_result() -> None:
    s = new()
    TS(s)
    s.append("user/message", U("hello"), surface_op="append")
    s.append(
        "assistant/chunk",
        {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "hi"}},
    )
    s.append(
        "assistant/message",
        A_blocks([{"type": "text", "text": "let me check"}, tool_call_block("c1", "echo", "{}")]),
        surface_op="append",
    )
    s.append("tool/result", TR("c1", "ok"), surface_op="append")
    TE(s)
    messages = s.derive_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert len(messages[1]["content"]) == 2
    block = messages[2]["content"][0]
    assert (block["type"], block["toolCallId"]) == ("tool-result", "c1")
    assert [e.seq for e in s.events] == list(range(6))
    assert s.seq == 6


def test_b2_turn_end_reason_is_kept() -> None:
    s = new()
    TS(s)
    TE(s, reason={"kind": "max-tokens"})
    assert s.events[-1].data["reason"] == {"kind": "max-tokens"}


def test_b3_replay_through_seed_keeps_events_and_reason() -> None:
    s = new()
    TS(s)
    TE(s, reason={"kind": "aborted", "reason": {"kind": "user"}})
    replayed = Session.create("r", seed=copy.deepcopy([thaw(e.to_json()) for e in s.events]))
    assert replayed.events[:-1] == s.events
    assert replayed.events[1].data["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}


def test_b4_plugin_and_user_sourced_messages() -> None:
    s = new()
    s.append(
        "user/message",
        U("file changed: a.ts", source={"kind": "plugin", "plugin": "watcher"}),
        surface_op="append",
    )
    s.append("user/message", U("focus on tests"), surface_op="append")
    messages = s.derive_messages()
    assert [m["role"] for m in messages] == ["user", "user"]
    assert texts(messages) == ["file changed: a.ts", "focus on tests"]
    assert messages[0]["source"] == {"kind": "plugin", "plugin": "watcher"}


def test_b5_derived_message_is_the_appended_one() -> None:
    s = new()
    m = U(
        "<system-reminder>be brief</system-reminder>",
        source={"kind": "plugin", "plugin": "agent-instructions"},
    )
    s.append("user/message", m, surface_op="append")
    assert s.derive_messages() == [m | {"content": tuple(m["content"])}]
    assert s.events[0].data["source"] == {"kind": "plugin", "plugin": "agent-instructions"}


def test_b6_replay_adds_end_seed_and_sets_first_live_seq() -> None:
    s = new()
    TS(s)
    s.append("user/message", U("q"), surface_op="append")
    s.append("assistant/message", A("a"), surface_op="append")
    TE(s)
    replayed = Session.create("r", seed=[e.to_json() for e in s.events])
    assert replayed.derive_messages() == s.derive_messages()
    assert replayed.events[:4] == s.events
    assert replayed.seq == 5
    assert replayed.first_live_seq == 4
    assert replayed.events[4].type == "session/end-seed"
    assert replayed.events[4].data == {}


def test_b7_empty_seed_gets_marker_and_reseeding_adds_nothing() -> None:
    fresh = new()
    assert fresh.events == ()
    assert fresh.first_live_seq == 0
    empty = Session.create("e", seed=[], clock=clock())
    assert [(e.type, e.seq, e.data) for e in empty.events] == [("session/end-seed", 0, {})]
    assert empty.first_live_seq == 0
    third = Session.create("t", seed=empty.events, clock=clock(5000))
    assert third.events == empty.events
    assert third.first_live_seq == 1


@pytest.mark.parametrize(
    "extra",
    [
        10**20,
        lambda: None,
        object(),
        OrderedDict(a=1),
        float("inf"),
        float("nan"),
        -0.0,
        [1, 10**20, 3],
        {"nested": {"deep": print}},
        {1, 2},
        b"bytes",
        "lone \ud800",
    ],
    ids=stable_id,
)
def test_b8_non_json_data_is_rejected_and_log_stays_empty(extra: Any) -> None:
    s = new()
    with pytest.raises(JsonValueError) as caught:
        s.append("user/message", {**U(), "extra": extra}, surface_op="append")
    assert caught.value.path is not None
    assert caught.value.path.startswith("data.extra")
    assert s.events == ()
    assert s.seq == 0


def test_b8_cycle_is_rejected() -> None:
    s = new()
    data: dict[str, Any] = U()
    data["self"] = data
    with pytest.raises(JsonValueError):
        s.append("user/message", data, surface_op="append")
    assert s.events == ()


def test_b9_surface_type_without_op_is_rejected() -> None:
    s = new()
    TS(s)
    with pytest.raises(SurfaceError) as caught:
        s.append("user/message", U())
    assert caught.value.code == "MISSING_SURFACE_OP"
    assert s.seq == 1


def test_b10_message_shape_is_checked_on_append() -> None:
    # Message shapes are checked on append too, not only on load (docs/events.md).
    s = new()
    with pytest.raises(MessageShapeError) as caught:
        s.append(
            "user/message",
            {"content": [{"type": "text", "text": "x"}], "source": {"kind": "user"}},
            surface_op="append",
        )
    assert caught.value.code == "BAD_MESSAGE"
    assert s.events == ()
    ok = s.append(
        "user/message",
        {**U("x"), "extra": [1, 2, [3, {"a": None, "b": True}]]},
        surface_op="append",
    )
    assert ok.data["extra"] == (1, 2, (3, {"a": None, "b": True}))
    assert s.seq == 1


MESSAGE_SHAPE_REJECTIONS: dict[str, tuple[str, Any]] = {
    "user data null": ("user/message", None),
    "user data list": ("user/message", [U()]),
    "user without id": ("user/message", {k: v for k, v in U().items() if k != "id"}),
    "user empty id": ("user/message", {**U(), "id": ""}),
    "user id int": ("user/message", {**U(), "id": 1}),
    "user role assistant": ("user/message", {**U(), "role": "assistant"}),
    "user role system": ("user/message", {**U(), "role": "system"}),
    "user source null": ("user/message", {**U(), "source": None}),
    "user source without kind": ("user/message", {**U(), "source": {}}),
    "user content str": ("user/message", {**U(), "content": "not-a-list"}),
    "user content missing": ("user/message", {k: v for k, v in U().items() if k != "content"}),
    "assistant data without message": ("assistant/message", {"turn": 1, "step": 1, "content": []}),
    "assistant data null": ("assistant/message", None),
    "assistant role user": (
        "assistant/message",
        {**A(), "message": {**A()["message"], "role": "user"}},
    ),
    "assistant user source": (
        "assistant/message",
        {**A(), "message": {**A()["message"], "source": {"kind": "user"}}},
    ),
    "assistant model source without provider": (
        "assistant/message",
        {**A(), "message": {**A()["message"], "source": {"kind": "model", "model": "m"}}},
    ),
    "assistant model source empty model": (
        "assistant/message",
        {
            **A(),
            "message": {
                **A()["message"],
                "source": {"kind": "model", "provider": "p", "model": ""},
            },
        },
    ),
    "tool result user source": (
        "tool/result",
        {**TR(), "message": {**TR()["message"], "source": {"kind": "user"}}},
    ),
    "tool result source without call id": (
        "tool/result",
        {**TR(), "message": {**TR()["message"], "source": {"kind": "tool"}}},
    ),
    "tool result text content": (
        "tool/result",
        {**TR(), "message": {**TR()["message"], "content": [{"type": "text", "text": "x"}]}},
    ),
    "tool result two blocks": (
        "tool/result",
        {
            **TR(),
            "message": {
                **TR()["message"],
                "content": TR()["message"]["content"] * 2,
            },
        },
    ),
    "tool result no blocks": (
        "tool/result",
        {**TR(), "message": {**TR()["message"], "content": []}},
    ),
    "tool result mismatched call ids": (
        "tool/result",
        {
            **TR("call"),
            "message": {**TR("call")["message"], "source": {"kind": "tool", "callId": "other"}},
        },
    ),
    "tool result block content not list": (
        "tool/result",
        {
            **TR(),
            "message": {
                **TR()["message"],
                "content": [{"type": "tool-result", "toolCallId": "c1", "content": "x"}],
            },
        },
    ),
    "tool result role assistant": (
        "tool/result",
        {**TR(), "message": {**TR()["message"], "role": "assistant"}},
    ),
}


@pytest.mark.parametrize(
    ("type_", "data"), MESSAGE_SHAPE_REJECTIONS.values(), ids=MESSAGE_SHAPE_REJECTIONS.keys()
)
def test_message_shape_rejected_on_append(type_: str, data: Any) -> None:
    s = new()
    with pytest.raises(MessageShapeError) as caught:
        s.append(type_, data, surface_op="append")
    assert caught.value.code == "BAD_MESSAGE"
    assert caught.value.session_id == "s"
    assert s.events == ()


@pytest.mark.parametrize(
    ("type_", "data"), MESSAGE_SHAPE_REJECTIONS.values(), ids=MESSAGE_SHAPE_REJECTIONS.keys()
)
def test_message_shape_rejected_in_seed_with_seed_error(type_: str, data: Any) -> None:
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=[raw(type_, 0, data, surfaceOp="append")])
    assert caught.value.code == "BAD_MESSAGE"
    assert caught.value.index == 0
    assert isinstance(caught.value.__cause__, MessageShapeError)


def test_message_shape_lets_plugin_blocks_and_sources_pass() -> None:
    s = new()
    data = {
        **U(),
        "content": [{"type": "plugin-block", "value": 1}],
        "source": {"kind": "plugin-source", "value": 1},
    }
    s.append("user/message", data, surface_op="append")
    s.append("user/message", {**U(), "content": []}, surface_op="append")
    assert s.derive_messages()[0]["content"] == ({"type": "plugin-block", "value": 1},)
    assert len(s.derive_messages()) == 2


def test_b11_caller_mutation_after_append_changes_nothing() -> None:
    s = new()
    data = U("original")
    returned = s.append("user/message", data, surface_op="append")
    data["content"][0]["text"] = "changed"
    data["content"].append({"type": "text", "text": "more"})
    data["extra"] = 10**20
    assert returned is s.events[0]
    assert returned.data["content"] == ({"type": "text", "text": "original"},)
    assert "extra" not in returned.data
    assert texts(s.derive_messages()) == ["original"]


class OpLike:
    op = "replace"
    start = 0
    end = 0


@pytest.mark.parametrize(
    "op",
    [
        {"op": "replace", "start": 2**60, "end": 2},
        {"op": "replace", "start": 0.0, "end": 0},
        OpLike(),
        "invalid",
        {"op": "replace", "start": -1, "end": 0},
        ["replace", 0, 0],
    ],
    ids=["huge start", "float start", "object", "invalid string", "negative start", "list"],
)
def test_b13_b14_b16_bad_surface_op_is_rejected(op: Any) -> None:
    s = new()
    with pytest.raises(SurfaceError) as caught:
        s.append("user/message", U(), surface_op=op, source_event_seqs=[0])
    assert caught.value.code == "BAD_SURFACE_OP"
    assert s.events == ()


@pytest.mark.parametrize(
    "sources",
    [[0, -1], ["0"], [0.5], [True], [2**60], "0", {0}, (x for x in [0]), [None]],
    ids=["negative", "str", "float", "bool", "huge", "string", "set", "generator", "none"],
)
def test_b16_bad_sources_are_rejected(sources: Any) -> None:
    s = new()
    s.append("user/message", U(), surface_op="append")
    with pytest.raises(SurfaceError) as caught:
        s.append("user/message", U(), surface_op="append", source_event_seqs=sources)
    assert caught.value.code == "BAD_SOURCES"
    assert s.seq == 1


def test_b17_non_surface_type_with_op_is_rejected_on_append_and_seed() -> None:
    s = new()
    with pytest.raises(SurfaceError) as caught:
        s.append("turn/start", {"turn": 1}, surface_op="append")
    assert caught.value.code == "NOT_SURFACE_TYPE"
    with pytest.raises(SurfaceError) as caught:
        s.append("turn/start", {"turn": 1}, source_event_seqs=[0])
    assert caught.value.code == "NOT_SURFACE_TYPE"
    assert s.events == ()
    with pytest.raises(SeedError) as seeded:
        Session.create("x", seed=[raw("turn/start", 0, {"turn": 1}, surfaceOp="append")])
    assert seeded.value.code == "NOT_SURFACE_TYPE"
    assert isinstance(seeded.value.__cause__, SurfaceError)


def test_b18_seeded_and_appended_events_are_frozen() -> None:
    s = Session.create("x", seed=[raw("turn/start", 0, {"turn": 1})])
    seeded = s.events[0]
    with pytest.raises(AttributeError):
        seeded.seq = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        seeded.data["turn"] = 2
    todo = s.append("todo/write", {"todos": [{"content": "first", "status": "pending"}]})
    assert all_frozen(todo.data)
    with pytest.raises(TypeError):
        todo.data["todos"][0]["status"] = "done"
    with pytest.raises(AttributeError):
        todo.data["todos"].append({})  # type: ignore[attr-defined]


def test_b20_events_is_a_cached_snapshot_that_never_grows() -> None:
    s = new()
    TS(s)
    before = s.events
    assert s.events is before
    assert type(before) is tuple
    with pytest.raises(AttributeError):
        before.append(None)  # type: ignore[attr-defined]
    TE(s)
    assert len(before) == 1
    after = s.events
    assert len(after) == 2
    assert after is not before
    assert s.events is after
    assert after[0] is before[0]


def test_b21_todo_write_is_log_only_and_replays() -> None:
    s = new()
    todos = [
        {"content": "plan the work", "status": "in_progress"},
        {"content": "write the code", "status": "pending"},
    ]
    first = s.append("todo/write", {"todos": todos})
    todos.append({"content": "more", "status": "pending"})
    todos[0]["status"] = "done"
    assert thaw(first.data["todos"]) == [
        {"content": "plan the work", "status": "in_progress"},
        {"content": "write the code", "status": "pending"},
    ]
    s.append("user/message", U("q"), surface_op="append")
    todo = s.append("todo/write", {"todos": []})
    assert len(s.derive_messages()) == 1
    assert todo.seq not in s.surface.nodes
    plain = new("p")
    TS(plain)
    plain.append("todo/write", {"todos": todos})
    TE(plain)
    replayed = Session.create("r", seed=plain.events)
    assert replayed.events[:3] == plain.events
    assert replayed.first_live_seq == 3


def test_b22_derived_messages_are_frozen_but_the_list_is_yours() -> None:
    s = new()
    s.append("user/message", U("original"), surface_op="append")
    s.append("tool/result", TR("c1", "tool out"), surface_op="append")
    before = [e.to_json() for e in s.events]
    messages = s.derive_messages()
    with pytest.raises(TypeError):
        messages[0]["content"][0]["text"] = "changed"
    with pytest.raises(AttributeError):
        messages[1]["content"][0]["content"].append({})
    with pytest.raises(AttributeError):
        messages[0]["content"].append({})
    messages.reverse()
    messages.append("junk")
    assert [e.to_json() for e in s.events] == before
    assert s.derive_messages()[0]["content"] == ({"type": "text", "text": "original"},)


@settings(max_examples=50)
@given(session_logs())
def test_b23_seq_equals_index_and_length(log: list[dict[str, Any]]) -> None:
    s = Session.restore(SessionHeader(id="h", created_at=0), log)
    assert [e.seq for e in s.events] == list(range(len(s.events)))
    assert s.seq == len(s.events) == len(log) + 1


def test_append_returns_the_stored_event() -> None:
    s = new()
    e = s.append("turn/start", {"turn": 1})
    assert e is s.events[0]
    assert e is s.event_at(0)
    assert (e.type, e.seq, e.data) == ("turn/start", 0, {"turn": 1})
    assert e.surface_op is None
    assert e.source_event_seqs is None
    assert e.ignorable is False


def test_append_accepts_any_type_string_and_none_data() -> None:
    s = new()
    e = s.append("plugin/unknown-thing", None)
    assert e.data is None
    assert s.append("x", [1, {"a": 2}]).data == (1, {"a": 2})


@pytest.mark.parametrize("type_", ["", None, 1, b"t", ["t"]], ids=repr)
def test_append_rejects_bad_type(type_: Any) -> None:
    s = new()
    with pytest.raises(EventEnvelopeError) as caught:
        s.append(type_, {})
    assert caught.value.code == "BAD_ENVELOPE"
    assert s.events == ()


def test_append_ignorable_marker() -> None:
    s = new()
    assert s.append("plugin/note", {}, ignorable=True).ignorable is True
    assert s.append("plugin/note", {}).ignorable is False
    assert s.events[0].to_json()["ignorable"] is True


def test_append_surface_metadata_forms() -> None:
    s = new()
    TS(s)
    s.append("step/start", {"turn": 1, "step": 1})
    a = s.append("assistant/message", A("h"), surface_op="append", source_event_seqs=[0, 1])
    assert a.surface_op == "append"
    assert a.source_event_seqs == (0, 1)
    assert s.events[-1].source_event_seqs == (0, 1)
    assert s.events[0].surface_op is None
    assert s.events[0].source_event_seqs is None
    r1 = s.append("user/message", U("r"), surface_op=Replace(2, 2), source_event_seqs=(2,))
    r2 = s.append(
        "user/message",
        U("r2"),
        surface_op={"op": "replace", "start": 3, "end": 3},
        source_event_seqs=[3],
    )
    r3 = s.append(
        "user/message",
        U("r3"),
        surface_op=FrozenDict({"op": "replace", "start": 4, "end": 4}),
        source_event_seqs=[4],
    )
    assert [r1.surface_op, r2.surface_op, r3.surface_op] == [
        Replace(2, 2),
        Replace(3, 3),
        Replace(4, 4),
    ]
    assert s.surface.nodes == (5,)


def test_f25_f27_caller_mutation_of_surface_metadata_changes_nothing() -> None:
    s = new()
    s.append("user/message", U("a"), surface_op="append")
    sources = [0]
    e = s.append("assistant/message", A(), surface_op="append", source_event_seqs=sources)
    sources.append(1)
    sources[0] = 99
    assert e.source_event_seqs == (0,)
    op = {"op": "replace", "start": 1, "end": 1}
    r = s.append("assistant/message", A("x"), surface_op=op, source_event_seqs=[1])
    op["start"] = 99
    assert r.surface_op == Replace(1, 1)
    assert s.events[-1].to_json()["surfaceOp"] == {"op": "replace", "start": 1, "end": 1}


# --- clock ----------------------------------------------------------------------------------


def test_injectable_clock_sets_time_and_created_at() -> None:
    ticks = iter([500, 600, 700, 650])
    s = Session.create("c", clock=lambda: next(ticks))
    assert s.header.created_at == 500
    assert [s.append("x", i).time for i in range(3)] == [600, 700, 650]


def test_seed_keeps_stored_times_and_marker_takes_clock_time() -> None:
    seed = [raw("x", 0, None) | {"time": -5}, raw("x", 1, None) | {"time": 2**53 - 1}]
    s = Session.create("c", seed=seed, clock=lambda: 42)
    assert [e.time for e in s.events] == [-5, 2**53 - 1, 42]


def test_default_clock_is_wall_clock_milliseconds() -> None:
    s = Session.create("c")
    e = s.append("x", None)
    assert type(e.time) is int
    assert e.time > 1_600_000_000_000
    assert s.header.created_at <= e.time


# --- 11.C header ----------------------------------------------------------------------------


def test_c1_header_is_copied_validated_and_frozen() -> None:
    given_header = {
        "version": 1,
        "id": "header-owned",
        "createdAt": 123,
        "cwd": "/accepted",
        "parentSession": "parent",
        "seedLength": 2,
    }
    s = Session.create("header-owned", header=given_header)
    given_header["cwd"] = "/changed"
    assert s.header.cwd == "/accepted"
    assert s.header.created_at == 123
    assert s.header.parent_session == "parent"
    assert s.header.seed_length == 2
    assert s.id == "header-owned"
    with pytest.raises(AttributeError):
        s.header.cwd = "/x"  # type: ignore[misc]


def test_c1_header_object_is_used_as_is() -> None:
    header = SessionHeader(id="h", created_at=1, cwd="/a")
    s = Session.create(header=header)
    assert s.header is header
    assert s.id == "h"


def test_c3_header_id_must_match_session_id() -> None:
    with pytest.raises(HeaderError) as caught:
        Session.create("header-invalid", header={"version": 1, "id": "other", "createdAt": 1})
    assert caught.value.code == "BAD_HEADER"
    with pytest.raises(HeaderError):
        Session.create("header-invalid", header=SessionHeader(id="other", created_at=1))


@pytest.mark.parametrize(
    "header",
    [
        {"version": 0, "id": "h", "createdAt": 1},
        {"version": 1, "id": "h", "createdAt": "123"},
        {"version": 1, "id": "h", "createdAt": 1, "cwd": 1},
        {"version": 1, "id": "h", "createdAt": 1, "cwd": "relative"},
        {"version": 1, "id": "h", "createdAt": 1, "parentSession": 1},
        {"version": 1, "id": "h", "createdAt": 1, "seedLength": "1"},
        {"version": 1, "id": "h", "createdAt": 1, "seedLength": 0.5},
        {"version": 1, "id": "h", "createdAt": 1, "seedLength": -1},
        {"version": 1, "id": "h", "createdAt": 1, "delegationDepth": -1},
        {"version": 1, "id": "h", "createdAt": 1, "unknown": 1},
        {"version": 1, "id": "h", "createdAt": 1, "meta": {"x": float("nan")}},
        [],
        1,
    ],
    ids=repr,
)
def test_c4_invalid_header_is_rejected(header: Any) -> None:
    with pytest.raises(HeaderError) as caught:
        Session.create(header=header)
    assert caught.value.code == "BAD_HEADER"


@pytest.mark.parametrize("id", ["", 1, b"x"], ids=repr)
def test_c4_invalid_id_is_rejected(id: Any) -> None:
    with pytest.raises(HeaderError):
        Session.create(id)


def test_c7_bare_session_header() -> None:
    s = Session.create("bare", clock=lambda: 77)
    assert s.header == SessionHeader(id="bare", created_at=77)
    assert s.header.version == 1
    assert s.header.cwd is None
    assert s.header.parent_session is None


def test_create_without_id_mints_uuid4() -> None:
    a, b = Session.create(), Session.create()
    assert uuid.UUID(a.id).version == 4
    assert a.id != b.id


# --- 11.D seeds -----------------------------------------------------------------------------


def test_d1_seed_request_header_without_provider_model_is_rejected() -> None:
    for data in (
        {"header": {"config": {"model": "old-model"}}, "reason": "initial"},
        {"header": "old-header"},
        {"header": {"config": {"provider": "", "model": "m"}}},
        None,
    ):
        with pytest.raises(SeedError) as caught:
            Session.create("s", seed=[raw("request/header", 0, data)])
        assert caught.value.index == 0
        assert caught.value.code == caught.value.__cause__.code  # type: ignore[union-attr]
        assert isinstance(caught.value.__cause__, LedgerError)


def test_d1_seed_assistant_message_without_message_is_rejected() -> None:
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=[raw("assistant/message", 0, {"content": []}, surfaceOp="append")])
    assert caught.value.code == "BAD_MESSAGE"


def test_d1_seed_unknown_type_with_null_data_is_accepted() -> None:
    s = Session.create("s", seed=[raw("plugin/event", 0, None)])
    assert s.events[0] == SessionEvent.from_json(raw("plugin/event", 0, None))


def test_d3_d4_seed_request_header_with_provider_model_round_trips() -> None:
    data = {
        "reason": "initial",
        "header": {
            "config": {"provider": "mock", "model": "model", "maxTokens": 256000},
            "adapterDefaults": {"maxTokens": True},
        },
    }
    s = Session.create("s", seed=[raw("request/header", 0, data)])
    assert thaw(s.events[0].data) == data


def test_d5_seed_with_non_json_data_is_rejected() -> None:
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=[raw("user/message", 0, {**U(), "n": 10**20}, surfaceOp="append")])
    assert caught.value.code == "NOT_JSON"
    assert isinstance(caught.value.__cause__, JsonValueError)


def test_d6_seed_with_seq_gap_is_rejected() -> None:
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=[raw("turn/start", 0, {"turn": 1}), raw("turn/end", 5, {})])
    assert caught.value.code == "SEQ_GAP"
    assert caught.value.index == 1
    assert caught.value.session_id == "s"


@pytest.mark.parametrize("first_seq", [1, 5])
def test_d6_seed_must_start_at_zero(first_seq: int) -> None:
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=[raw("x", first_seq, None)])
    assert caught.value.code == "SEQ_GAP"
    assert caught.value.index == 0


def test_d6_seed_with_repeated_seq_is_rejected() -> None:
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=[raw("x", 0, None), raw("x", 0, None)])
    assert caught.value.code == "SEQ_GAP"
    assert caught.value.index == 1


def test_d7_seed_surface_type_without_op_is_rejected() -> None:
    seed = [
        raw("turn/start", 0, {"turn": 1}),
        raw("user/message", 1, U()),
        raw("turn/end", 2, {"turn": 1}),
    ]
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=seed)
    assert caught.value.code == "MISSING_SURFACE_OP"
    assert caught.value.index == 1
    assert isinstance(caught.value.__cause__, SurfaceError)


def test_d8_seed_with_ops_is_accepted() -> None:
    seed = [
        raw("turn/start", 0, {"turn": 1}),
        raw("user/message", 1, U(), surfaceOp="append"),
        raw("turn/end", 2, {"turn": 1, "reason": {"kind": "completed"}}),
    ]
    s = Session.create("s", seed=seed)
    assert s.events[:3] == tuple(SessionEvent.from_json(e) for e in seed)
    assert s.first_live_seq == 3
    assert s.surface.nodes == (1,)


class EnvelopeLike:
    type = "turn/start"
    seq = 0
    time = 1
    data: Any = {"turn": 1}


@pytest.mark.parametrize(
    "item",
    [
        None,
        1,
        "event",
        [raw("x", 0, None)],
        EnvelopeLike(),
        OrderedDict(raw("x", 0, None)),
        {**raw("turn/start", 0, {"turn": 1}), "extra": True},
        {**raw("turn/start", 0, {"turn": 1}), "type": 1},
        {**raw("turn/start", 0, {"turn": 1}), "seq": "0"},
        {**raw("turn/start", 0, {"turn": 1}), "seq": 0.5},
        {**raw("turn/start", 0, {"turn": 1}), "seq": -1},
        {**raw("turn/start", 0, {"turn": 1}), "seq": False},
        {**raw("turn/start", 0, {"turn": 1}), "time": "1"},
        {**raw("turn/start", 0, {"turn": 1}), "time": 0.5},
        {k: v for k, v in raw("turn/start", 0, {"turn": 1}).items() if k != "data"},
        {**raw("turn/start", 0, {"turn": 1}), "ignorable": False},
        {**raw("turn/start", 0, {"turn": 1}), "ignorable": "yes"},
    ],
    ids=[
        "none",
        "int",
        "str",
        "list",
        "object",
        "OrderedDict",
        "extra key",
        "type int",
        "seq str",
        "seq fraction",
        "seq negative",
        "seq bool",
        "time str",
        "time fraction",
        "missing data",
        "ignorable false",
        "ignorable str",
    ],
)
def test_d13_d17_bad_seed_envelope_is_rejected(item: Any) -> None:
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=[item])
    assert caught.value.code == "BAD_ENVELOPE"
    assert caught.value.index == 0
    assert isinstance(caught.value.__cause__, EventEnvelopeError)


def test_d17_seed_error_index_names_the_failing_event() -> None:
    seed = [raw("x", 0, None), raw("x", 1, None), {**raw("x", 2, None), "extra": 1}]
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=seed)
    assert caught.value.index == 2
    assert "2" in str(caught.value)


def test_d17_seed_ignorable_true_is_kept() -> None:
    s = Session.create("s", seed=[{**raw("turn/start", 0, {"turn": 1}), "ignorable": True}])
    assert s.events[0].ignorable is True


def test_d16_seed_values_are_copied() -> None:
    message = U("seeded")
    seed = [raw("user/message", 0, message, surfaceOp="append", sourceEventSeqs=None)]
    del seed[0]["sourceEventSeqs"]
    s = Session.create("s", seed=seed)
    message["content"][0]["text"] = "changed"
    message["n"] = 10**20
    assert texts(s.derive_messages()) == ["seeded"]
    assert "n" not in s.events[0].data


def test_d18_legacy_request_header_forms_are_rejected_on_seed_and_append() -> None:
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=[raw("request/header-delta", 0, {})])
    assert caught.value.index == 0
    fallback = {"reason": "fallback", "header": {"config": {"provider": "p", "model": "m"}}}
    with pytest.raises(SeedError):
        Session.create("s", seed=[raw("request/header", 0, fallback)])
    s = new()
    with pytest.raises(EventDataError):
        s.append("request/header-delta", {})
    with pytest.raises(EventDataError):
        s.append("request/header", fallback)
    assert s.events == ()


def test_d19_seed_error_from_surface_rules_wraps_the_cause() -> None:
    seed = [
        raw("user/message", 0, U(), surfaceOp="append"),
        raw(
            "user/message",
            1,
            U(),
            surfaceOp={"op": "replace", "start": 42, "end": 0},
            sourceEventSeqs=[0],
        ),
    ]
    with pytest.raises(SeedError) as caught:
        Session.create("s", seed=seed)
    assert caught.value.code == "REPLACE_START_NOT_FOUND"
    assert caught.value.index == 1
    cause = caught.value.__cause__
    assert isinstance(cause, SurfaceError)
    assert cause.code == "REPLACE_START_NOT_FOUND"


def test_seed_of_session_events_is_copied() -> None:
    source = new()
    source.append("user/message", U("a"), surface_op="append")
    child = Session.create("child", seed=source.events)
    assert child.events[0] == source.events[0]
    assert child.events[0] is not source.events[0]
    assert child.events[0].data is not source.events[0].data


def test_seed_ending_with_marker_gets_no_second_marker() -> None:
    seed = [raw("x", 0, None), raw("session/end-seed", 1, {})]
    s = Session.create("s", seed=seed)
    assert len(s.events) == 2
    assert s.first_live_seq == 2


def test_seed_with_marker_in_the_middle_gets_a_new_one() -> None:
    seed = [raw("session/end-seed", 0, {}), raw("x", 1, None)]
    s = Session.create("s", seed=seed)
    assert [e.type for e in s.events] == ["session/end-seed", "x", "session/end-seed"]
    assert s.first_live_seq == 2


def test_seed_is_not_published_to_hooks() -> None:
    seen: list[Any] = []
    hooks = SessionHooks(
        validators=(lambda session, event: seen.append(("validate", event.seq)),),
        observers=(("recorder", lambda session, event: seen.append(("observe", event.seq))),),
    )
    s = Session.create("s", seed=[raw("x", 0, None)], hooks=hooks)
    assert seen == []
    s.append("y", None)
    assert seen == [("validate", 2), ("observe", 2)]


def test_seed_accepts_a_generator() -> None:
    s = Session.create("s", seed=(raw("x", i, i) for i in range(3)))
    assert [e.data for e in s.events[:3]] == [0, 1, 2]


@settings(max_examples=50)
@given(session_logs())
def test_d19_seeding_a_generated_log_then_reseeding_adds_nothing(log: list[dict[str, Any]]) -> None:
    original = Session.restore(SessionHeader(id="o", created_at=0), log, clock=clock())
    seeded = Session.create("x", seed=original.events, clock=clock())
    assert seeded.events == original.events
    assert seeded.derive_messages() == original.derive_messages()
    from_dicts = Session.create("y", seed=log, clock=clock())
    assert from_dicts.events[: len(log)] == original.events[: len(log)]
    assert from_dicts.seq == len(log) + 1
    again = Session.create("z", seed=from_dicts.events, clock=clock())
    assert again.events == from_dicts.events
    assert again.first_live_seq == from_dicts.seq


# --- restore --------------------------------------------------------------------------------


def build_sample() -> Session:
    s = new("sample")
    TS(s)
    s.append("user/message", U("one"), surface_op="append")
    s.append("assistant/message", A("two"), surface_op="append")
    s.append("tool/result", TR("c1", "out"), surface_op="append")
    s.append(
        "user/message",
        U("summary", source={"kind": "plugin", "plugin": "compact"}),
        surface_op=Replace(1, 2),
        source_event_seqs=[1, 2],
    )
    TE(s)
    return s


def test_restore_with_session_events() -> None:
    s = build_sample()
    r = Session.restore(s.header, s.events, clock=clock())
    assert r.events[: s.seq] == s.events
    assert r.events[-1].type == "session/end-seed"
    assert r.first_live_seq == s.seq
    assert r.surface.nodes == s.surface.nodes
    assert r.surface.replace_generation == 1
    assert r.derive_messages() == s.derive_messages()
    assert r.header is s.header


def test_restore_with_envelope_dicts_validates_and_freezes() -> None:
    s = build_sample()
    dicts = [thaw(e.to_json()) for e in s.events]
    r = Session.restore(s.header, dicts, clock=clock())
    assert r.events[: s.seq] == s.events
    assert all(all_frozen(e.data) for e in r.events)
    dicts[1]["data"]["content"][0]["text"] = "changed"
    assert r.events[1].data["content"][0]["text"] == "one"


def test_restore_of_log_ending_with_marker_adds_nothing() -> None:
    s = build_sample()
    once = Session.restore(s.header, s.events, clock=clock())
    twice = Session.restore(s.header, once.events, clock=clock())
    assert twice.events == once.events
    assert twice.first_live_seq == once.seq


def test_restore_rejects_bad_events_with_seed_error() -> None:
    header = SessionHeader(id="r", created_at=0)
    with pytest.raises(SeedError) as caught:
        Session.restore(header, [raw("x", 0, None), raw("x", 2, None)])
    assert caught.value.code == "SEQ_GAP"
    with pytest.raises(SeedError) as caught:
        Session.restore(header, [raw("user/message", 0, {"id": "x"}, surfaceOp="append")])
    assert caught.value.code == "BAD_MESSAGE"


@pytest.mark.parametrize("header", [None, {"version": 1, "id": "r", "createdAt": 0}, "r"], ids=repr)
def test_restore_needs_a_header_object(header: Any) -> None:
    with pytest.raises(HeaderError):
        Session.restore(header, [])


def test_restore_of_empty_log_adds_marker() -> None:
    r = Session.restore(SessionHeader(id="r", created_at=0), [], clock=clock())
    assert [e.type for e in r.events] == ["session/end-seed"]
    assert r.first_live_seq == 0


# --- deep data ------------------------------------------------------------------------------


def deep(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = {"child": value} if level % 2 else [value]
    return value


def check_deep_frozen(value: Any, depth: int) -> None:
    for _ in range(depth):
        if type(value) is tuple:
            assert len(value) == 1
            value = value[0]
        else:
            assert type(value) is FrozenDict
            with pytest.raises(TypeError):
                value["x"] = 1
            value = value["child"]
    assert value == "leaf"


def test_ten_thousand_deep_data_appended_and_restored() -> None:
    s = new()
    e = s.append("test/deep", deep(10_000))
    check_deep_frozen(e.data, 10_000)
    from_events = Session.restore(s.header, s.events)
    check_deep_frozen(from_events.events[0].data, 10_000)
    envelope = {"type": "test/deep", "seq": 0, "time": 1, "data": deep(10_000)}
    from_dicts = Session.restore(s.header, [envelope])
    check_deep_frozen(from_dicts.events[0].data, 10_000)
    seeded = Session.create("d", seed=s.events)
    check_deep_frozen(seeded.events[0].data, 10_000)


# --- failure atomicity ----------------------------------------------------------------------


def busy_session(hooks: SessionHooks | None = None) -> Session:
    """A session with every kind of state: nodes, a replace, a request header and context."""
    s = Session.create("atomic", clock=clock(), hooks=hooks)
    TS(s)
    s.append(
        "request/header",
        {"reason": "initial", "header": {"config": {"provider": "p", "model": "m"}}},
    )
    s.append("request/context", {"provider": "p", "model": "m", "contextWindow": 1000})
    s.append("user/message", U("a"), surface_op="append")  # 3
    s.append("assistant/message", A("b"), surface_op="append")  # 4
    s.append("tool/result", TR("c1", "out"), surface_op="append")  # 5
    s.append("user/message", U("c"), surface_op="append")  # 6
    s.append(
        "assistant/message", A("summary"), surface_op=Replace(3, 4), source_event_seqs=[3, 4]
    )  # 7
    return s


def tool_result_copy(session: Session, seq: int, **changes: Any) -> dict[str, Any]:
    data = thaw(session.events[seq].data)
    block = data["message"]["content"][0]
    for key, value in changes.items():
        if key in ("turn", "step", "meta", "error"):
            data[key] = value
        elif key in ("id", "role", "source"):
            data["message"][key] = value
        else:
            block[key] = value
    return data


REJECTED_APPENDS: dict[str, tuple[Any, ...]] = {
    # (type, data, kwargs, expected error class, expected code)
    "non-JSON data": ("x", {"a": {1}}, {}, JsonValueError, "NOT_JSON"),
    "bad type": ("", {}, {}, EventEnvelopeError, "BAD_ENVELOPE"),
    "message shape": (
        "user/message",
        {"id": "x"},
        {"surface_op": "append"},
        MessageShapeError,
        "BAD_MESSAGE",
    ),
    "request header without model": (
        "request/header",
        {"reason": "change", "header": {"config": {"provider": "p"}}},
        {},
        EventDataError,
        "BAD_DATA",
    ),
    "legacy header delta": ("request/header-delta", {}, {}, EventDataError, "BAD_DATA"),
    "missing surface op": ("user/message", U(), {}, SurfaceError, "MISSING_SURFACE_OP"),
    "op on non-surface type": (
        "turn/end",
        {"turn": 1, "reason": {"kind": "completed"}},
        {"surface_op": "append"},
        SurfaceError,
        "NOT_SURFACE_TYPE",
    ),
    "sources on non-surface type": (
        "turn/end",
        {"turn": 1, "reason": {"kind": "completed"}},
        {"source_event_seqs": [0]},
        SurfaceError,
        "NOT_SURFACE_TYPE",
    ),
    "bad surface op": ("user/message", U(), {"surface_op": "nope"}, SurfaceError, "BAD_SURFACE_OP"),
    "bad sources": (
        "user/message",
        U(),
        {"surface_op": "append", "source_event_seqs": ["0"]},
        SurfaceError,
        "BAD_SOURCES",
    ),
    "empty sources": (
        "user/message",
        U(),
        {"surface_op": "append", "source_event_seqs": []},
        SurfaceError,
        "SOURCES_EMPTY",
    ),
    "duplicate sources": (
        "user/message",
        U(),
        {"surface_op": "append", "source_event_seqs": [1, 1]},
        SurfaceError,
        "SOURCES_DUPLICATE",
    ),
    "self-citing sources": (
        "user/message",
        U(),
        {"surface_op": "append", "source_event_seqs": [8]},
        SurfaceError,
        "SOURCES_NOT_EARLIER",
    ),
    "later sources": (
        "user/message",
        U(),
        {"surface_op": "append", "source_event_seqs": [0, 99]},
        SurfaceError,
        "SOURCES_NOT_EARLIER",
    ),
    "replace start not on surface (shadowed)": (
        "user/message",
        U(),
        {"surface_op": Replace(3, 3), "source_event_seqs": [3]},
        SurfaceError,
        "REPLACE_START_NOT_FOUND",
    ),
    "replace start not a surface event": (
        "user/message",
        U(),
        {"surface_op": Replace(0, 5), "source_event_seqs": [0, 5]},
        SurfaceError,
        "REPLACE_START_NOT_FOUND",
    ),
    "replace end not on surface": (
        "user/message",
        U(),
        {"surface_op": Replace(5, 99), "source_event_seqs": [5]},
        SurfaceError,
        "REPLACE_END_NOT_FOUND",
    ),
    "replace reversed": (
        "user/message",
        U(),
        {"surface_op": Replace(6, 5), "source_event_seqs": [5, 6]},
        SurfaceError,
        "REPLACE_REVERSED",
    ),
    "replace without sources": (
        "user/message",
        U(),
        {"surface_op": Replace(5, 6)},
        SurfaceError,
        "REPLACE_NOT_COVERED",
    ),
    "replace missing one source": (
        "user/message",
        U(),
        {"surface_op": Replace(7, 6), "source_event_seqs": [7]},
        SurfaceError,
        "REPLACE_NOT_COVERED",
    ),
    "tool result replace of two nodes": (
        "tool/result",
        TR("c1", "x"),
        {"surface_op": Replace(5, 6), "source_event_seqs": [5, 6]},
        SurfaceError,
        "TOOL_RESULT_REWRITE",
    ),
    "tool result replace of a user message": (
        "tool/result",
        TR("c1", "x"),
        {"surface_op": Replace(6, 6), "source_event_seqs": [6]},
        SurfaceError,
        "TOOL_RESULT_REWRITE",
    ),
    "tool result replace that changes more than content": (
        "tool/result",
        TR("c1", "out"),
        {"surface_op": Replace(5, 5), "source_event_seqs": [5]},
        SurfaceError,
        "TOOL_RESULT_REWRITE",
    ),
}


@pytest.mark.parametrize(
    ("type_", "data", "kwargs", "error", "code"),
    REJECTED_APPENDS.values(),
    ids=REJECTED_APPENDS.keys(),
)
def test_rejected_append_changes_nothing(
    type_: str, data: Any, kwargs: dict[str, Any], error: type[Exception], code: str
) -> None:
    s = busy_session()
    assert s.surface.nodes == (7, 5, 6)
    events_before = s.events
    log_before = [e.to_json() for e in s.events]
    state_before = state(s)
    with pytest.raises(error) as caught:
        s.append(type_, data, **kwargs)
    assert getattr(caught.value, "code", None) == code
    assert caught.value.session_id == "atomic"  # type: ignore[attr-defined]
    assert s.events is events_before
    assert [e.to_json() for e in s.events] == log_before
    assert state(s) == state_before
    # The next append takes the seq the rejected one would have had.
    assert s.append("user/message", U("next"), surface_op="append").seq == 8
    assert s.surface.nodes == (7, 5, 6, 8)
    assert s.surface.replace_generation == 1


def test_rejected_tool_result_rewrites_change_nothing() -> None:
    for changes in (
        {"toolCallId": "changed"},
        {"isError": True},
        {"turn": 2},
        {"meta": {"m": 1}},
        {"error": {"name": "E", "code": "X"}},
        {"id": "other-id"},
    ):
        s = busy_session()
        before = (s.events, state(s))
        data = tool_result_copy(s, 5, **changes)
        data["message"]["content"][0]["content"] = [{"type": "text", "text": "pruned"}]
        with pytest.raises((SurfaceError, MessageShapeError)):
            s.append("tool/result", data, surface_op=Replace(5, 5), source_event_seqs=[5])
        assert (s.events, state(s)) == before
        assert s.events is before[0]


def test_validator_veto_changes_nothing_and_next_append_reuses_seq() -> None:
    candidates: list[SessionEvent] = []

    class Veto(Exception):
        pass

    def validate(session: Session, event: SessionEvent) -> None:
        candidates.append(event)
        if event.type == "user/message" and event.surface_op != "append":
            raise Veto("no replaces")

    s = busy_session(SessionHooks(validators=(validate,)))
    events_before = s.events
    state_before = state(s)
    with pytest.raises(Veto):
        s.append("user/message", U("x"), surface_op=Replace(6, 6), source_event_seqs=[6])
    assert s.events is events_before
    assert state(s) == state_before
    assert candidates[-1].seq == 8
    assert s.append("user/message", U("x"), surface_op="append").seq == 8


def test_reentrant_append_from_validator_is_rejected_and_changes_nothing() -> None:
    inner: list[BaseException] = []

    def validate(session: Session, event: SessionEvent) -> None:
        if event.type == "outer":
            try:
                session.append("inner", None)
            except ReentrantAppendError as error:
                inner.append(error)
                raise

    s = busy_session(SessionHooks(validators=(validate,)))
    before = (s.events, state(s))
    with pytest.raises(ReentrantAppendError) as caught:
        s.append("outer", None)
    assert caught.value.code == "REENTRANT"
    assert len(inner) == 1
    assert inner[0] is caught.value
    assert (s.events, state(s)) == before
    assert s.events is before[0]
    assert s.append("after", None).seq == 8


def test_observer_failure_does_not_undo_the_commit() -> None:
    def observe(session: Session, event: SessionEvent) -> None:
        raise RuntimeError("observer broke")

    s = Session.create("o", clock=clock(), hooks=SessionHooks(observers=(("bad", observe),)))
    e = s.append("x", None)
    assert s.events == (e,)
    assert s.append("y", None).seq == 1


def test_events_identity_survives_reads_of_every_view() -> None:
    s = busy_session()
    before = s.events
    state(s)
    s.event_at(3)
    s.events_from(2)
    assert s.events is before


# --- reading helpers ------------------------------------------------------------------------


def test_event_at_and_events_from() -> None:
    s = busy_session()
    assert s.event_at(3) is s.events[3]
    assert s.events_from(6) == s.events[6:]
    assert s.events_from(100) == ()
    with pytest.raises(IndexError):
        s.event_at(100)
    with pytest.raises(IndexError):
        s.event_at(-1)


def test_surface_view_is_the_same_object_and_read_only() -> None:
    s = busy_session()
    surface = s.surface
    assert s.surface is surface
    assert type(surface.nodes) is tuple
    with pytest.raises(AttributeError):
        surface.nodes = ()  # type: ignore[misc]


def test_event_json_round_trip_through_orjson_matches_the_log() -> None:
    s = busy_session()
    text = b"\n".join(orjson.dumps(e.to_json()) for e in s.events)
    back = [SessionEvent.from_json(orjson.loads(line)) for line in text.split(b"\n")]
    assert tuple(back) == s.events


@given(st.lists(st.sampled_from(["x", "user", "assistant"]), max_size=30))
def test_seq_is_always_log_length(kinds: list[str]) -> None:
    s = Session.create("p", clock=clock())
    for kind in kinds:
        if kind == "user":
            s.append("user/message", U(), surface_op="append")
        elif kind == "assistant":
            s.append("assistant/message", A(None), surface_op="append")
        else:
            s.append("x", None)
        assert s.seq == len(s.events) == s.events[-1].seq + 1


@pytest.mark.parametrize("tag", ["text-chunks", "reasoning-chunks", "tool-call-chunks", "session"])
def test_append_and_from_json_refuse_storage_tags_as_event_types(tag: str) -> None:
    session = Session.create("tags")
    with pytest.raises(EventEnvelopeError):
        session.append(tag, {})
    assert session.seq == 0
    with pytest.raises(EventEnvelopeError):
        SessionEvent.from_json({"type": tag, "seq": 0, "time": 1, "data": {}})
