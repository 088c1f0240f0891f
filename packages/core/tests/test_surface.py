"""The surface: appends, replaces, provenance, ``fold_surface`` (docs/surface.md)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings

from sessionledger import (
    Replace,
    Replacement,
    SeedError,
    Session,
    SessionEvent,
    SurfaceError,
    SurfaceFold,
    assistant_message,
    fold_surface,
    thaw,
    tool_result,
    user_message,
)
from sessionledger.testing.strategies import surface_logs

# --- builders -------------------------------------------------------------------------------


def new(id: str = "s") -> Session:
    return Session.create(id, clock=itertools.count(1).__next__)


def U(text: str = "u", **kwargs: Any) -> dict[str, Any]:
    return dict(user_message(text, **kwargs))


def A(text: str | None = "a", turn: int = 1) -> dict[str, Any]:
    message = assistant_message([] if text is None else text, provider="mock", model="mock")
    return {"turn": turn, "step": 1, "message": message}


def TR(
    call_id: str = "c1", text: str = "ok", *, id: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {"turn": 1, "step": 1, "message": tool_result(call_id, text, id=id), **extra}


def ev(type_: str, seq: int, data: Any = None, **extra: Any) -> dict[str, Any]:
    """A raw envelope; ``op`` and ``src`` are short for surfaceOp and sourceEventSeqs."""
    envelope: dict[str, Any] = {"type": type_, "seq": seq, "time": 1, "data": data}
    if "op" in extra:
        envelope["surfaceOp"] = extra.pop("op")
    if "src" in extra:
        envelope["sourceEventSeqs"] = extra.pop("src")
    envelope.update(extra)
    return envelope


def rep(start: int, end: int) -> dict[str, Any]:
    return {"op": "replace", "start": start, "end": end}


def fold_error(events: list[dict[str, Any]]) -> SurfaceError:
    with pytest.raises(SurfaceError) as caught:
        fold_surface(events)
    return caught.value


def assert_same_failure_in_seed(events: list[dict[str, Any]], code: str) -> None:
    with pytest.raises(SeedError) as caught:
        Session.create("seeded", seed=events)
    assert caught.value.code == code
    assert caught.value.index == len(events) - 1
    assert isinstance(caught.value.__cause__, SurfaceError)


def text_of(message: Any) -> Any:
    block = message["content"][0]
    if block["type"] == "tool-result":
        return block["content"][0]["text"]
    return block["text"]


# --- F1-F4 provenance and fold --------------------------------------------------------------


def test_f1_fold_replace_of_two_nodes() -> None:
    fold = fold_surface(
        [
            ev("user/message", 0, U(), op="append"),
            ev("user/message", 1, U(), op="append"),
            ev("user/message", 2, U(), op=rep(0, 1), src=[0, 1]),
        ]
    )
    assert fold.nodes == (2,)
    assert fold.replacements == (Replacement(2, 0, 1, (0, 1)),)


def test_f2_non_surface_type_with_sources_alone_is_not_surface_type() -> None:
    error = fold_error([ev("turn/start", 0, {"turn": 1}, src=[0])])
    assert error.code == "NOT_SURFACE_TYPE"


def test_f3_empty_sources_allowed_on_assistant_message() -> None:
    fold = fold_surface([ev("assistant/message", 0, A(None), op="append", src=[])])
    assert fold.nodes == (0,)


@pytest.mark.parametrize(
    ("events", "code"),
    [
        ([ev("user/message", 0, U(), op="append", src=[])], "SOURCES_EMPTY"),
        ([ev("tool/result", 0, TR(), op="append", src=[])], "SOURCES_EMPTY"),
        (
            [
                ev("user/message", 0, U(), op="append"),
                ev("user/message", 1, U(), op="append", src=[0, 0]),
            ],
            "SOURCES_DUPLICATE",
        ),
        ([ev("user/message", 0, U(), op="append", src=[0])], "SOURCES_NOT_EARLIER"),
        ([ev("user/message", 0, U(), op="append", src=[7])], "SOURCES_NOT_EARLIER"),
        (
            [
                ev("user/message", 0, U(), op="append"),
                ev("user/message", 1, U(), op="append"),
                ev("user/message", 2, U(), op=rep(0, 1), src=[0]),
            ],
            "REPLACE_NOT_COVERED",
        ),
        (
            [
                ev("user/message", 0, U(), op="append"),
                ev("user/message", 1, U(), op=rep(0, 0)),
            ],
            "REPLACE_NOT_COVERED",
        ),
    ],
    ids=[
        "empty on user",
        "empty on tool result",
        "duplicates",
        "self reference",
        "later seq",
        "replace missing 1",
        "replace without sources",
    ],
)
def test_f4_provenance_rules(events: list[dict[str, Any]], code: str) -> None:
    assert fold_error(events).code == code
    assert_same_failure_in_seed(events, code)


@pytest.mark.parametrize("sources", ["invalid", [None], ["0"], [0.5], [-1], [True], {"0": 0}])
def test_f4_malformed_sources_are_bad_sources(sources: Any) -> None:
    error = fold_error([ev("user/message", 0, U(), op="append", src=sources)])
    assert error.code == "BAD_SOURCES"


def test_f4_gap_in_seqs_is_seq_gap() -> None:
    with pytest.raises(SeedError) as caught:
        fold_surface(
            [ev("user/message", 0, U(), op="append"), ev("user/message", 2, U(), op="append")]
        )
    assert caught.value.code == "SEQ_GAP"
    assert caught.value.index == 1


def test_sources_may_cite_any_earlier_event() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    chunk = {"type": "text-delta", "index": 0, "text": "x"}
    s.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk})
    s.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "x", "arguments": "{}"})
    s.append("tool/result", TR(), surface_op="append", source_event_seqs=[2])
    s.append("assistant/message", A(), surface_op="append", source_event_seqs=[1, 0])
    assert s.surface.nodes == (3, 4)


def test_replace_may_cite_more_than_it_shadows() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("user/message", U(), surface_op="append")
    s.append("user/message", U(), surface_op=Replace(1, 1), source_event_seqs=[0, 1])
    assert s.surface.nodes == (2,)


# --- F5-F8 tool/result rewrites -------------------------------------------------------------


def test_f5_tool_result_replace_must_shadow_one_node() -> None:
    events = [
        ev("user/message", 0, U(), op="append"),
        ev("user/message", 1, U(), op="append"),
        ev("tool/result", 2, TR(), op=rep(0, 1), src=[0, 1]),
    ]
    assert fold_error(events).code == "TOOL_RESULT_REWRITE"
    assert_same_failure_in_seed(events, "TOOL_RESULT_REWRITE")


def test_f5_tool_result_replace_must_target_a_tool_result() -> None:
    events = [
        ev("user/message", 0, U(), op="append"),
        ev("tool/result", 1, TR(), op=rep(0, 0), src=[0]),
    ]
    assert fold_error(events).code == "TOOL_RESULT_REWRITE"
    assert_same_failure_in_seed(events, "TOOL_RESULT_REWRITE")


def test_f5_tool_result_replace_with_other_call_is_rejected() -> None:
    events = [
        ev("tool/result", 0, TR("c1", "original"), op="append"),
        ev("tool/result", 1, TR("c2", "changed"), op=rep(0, 0), src=[0]),
    ]
    assert fold_error(events).code == "TOOL_RESULT_REWRITE"
    assert_same_failure_in_seed(events, "TOOL_RESULT_REWRITE")


def rewrite(original: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """Copy a tool/result's data with new inner content and *changes* applied."""
    data = thaw(original)
    block = data["message"]["content"][0]
    block["content"] = [{"type": "text", "text": "pruned"}]
    for key, value in changes.items():
        if key in ("turn", "step", "meta", "error", "extra"):
            data[key] = value
        elif key in ("id", "role", "source"):
            data["message"][key] = value
        else:
            block[key] = value
    return data


TOOL_REWRITE_CHANGES: dict[str, dict[str, Any]] = {
    "toolCallId": {"toolCallId": "changed", "source": {"kind": "tool", "callId": "changed"}},
    "isError": {"isError": True},
    "isError dropped": {"isError": None},
    "block extra key": {"extra_block_key": 1},
    "turn": {"turn": 2},
    "step": {"step": 2},
    "message id": {"id": "other"},
    "source": {"source": {"kind": "tool", "callId": "c1", "extra": 1}},
    "meta added": {"meta": {"m": 1}},
    "error added": {"error": {"name": "E", "code": "X"}},
    "extra data key": {"extra": 1},
}


@pytest.mark.parametrize("changes", TOOL_REWRITE_CHANGES.values(), ids=TOOL_REWRITE_CHANGES.keys())
def test_f6_tool_result_rewrite_may_change_only_content(changes: dict[str, Any]) -> None:
    s = new()
    original = s.append("tool/result", TR("c1", "original", id="m1"), surface_op="append")
    data = rewrite(original.data, **changes)
    if changes.get("isError", False) is None:
        del data["message"]["content"][0]["isError"]
    with pytest.raises(SurfaceError) as caught:
        s.append("tool/result", data, surface_op=Replace(0, 0), source_event_seqs=[0])
    assert caught.value.code == "TOOL_RESULT_REWRITE"
    assert s.surface.nodes == (0,)


@pytest.mark.parametrize(
    ("before", "after", "accepted"),
    [
        ({"tags": ["a", {"n": 1}]}, {"tags": ["a", {"n": 1}]}, True),
        ({"b": 1, "a": 2}, {"a": 2, "b": 1}, True),
        ({"tags": ["a"]}, {"tags": ["b"]}, False),
        ({"tags": ["a"]}, {"tags": "a"}, False),
        ({"left": 1}, {"right": 1}, False),
        ({"one": 1}, {"one": 1, "two": 2}, False),
        ({"tags": ["a", "b"]}, {"tags": ["b", "a"]}, False),
        ({"n": None}, {}, False),
    ],
    ids=[
        "equal",
        "key order",
        "value",
        "list vs str",
        "key",
        "extra key",
        "order",
        "null vs absent",
    ],
)
def test_f7_meta_is_compared_structurally(before: Any, after: Any, accepted: bool) -> None:
    s = new()
    s.append("tool/result", TR("c-meta", id="meta-message", meta=before), surface_op="append")
    data = TR("c-meta", "pruned", id="meta-message", meta=after)
    if accepted:
        s.append("tool/result", data, surface_op=Replace(0, 0), source_event_seqs=[0])
        assert s.surface.nodes == (1,)
    else:
        with pytest.raises(SurfaceError) as caught:
            s.append("tool/result", data, surface_op=Replace(0, 0), source_event_seqs=[0])
        assert caught.value.code == "TOOL_RESULT_REWRITE"


@pytest.mark.parametrize(
    ("before", "after"),
    [(1, True), (0, False), (1, 1.0), (True, 1.0), (False, 0.0)],
    ids=["1 vs true", "0 vs false", "1 vs 1.0", "true vs 1.0", "false vs 0.0"],
)
def test_tool_result_rewrite_compares_with_json_types(before: Any, after: Any) -> None:
    # 1, 1.0 and true are different JSON values: a prune must not change them.
    s = new()
    s.append("tool/result", TR("c1", id="m", meta={"flag": before}), surface_op="append")
    with pytest.raises(SurfaceError) as caught:
        s.append(
            "tool/result",
            TR("c1", "pruned", id="m", meta={"flag": after}),
            surface_op=Replace(0, 0),
            source_event_seqs=[0],
        )
    assert caught.value.code == "TOOL_RESULT_REWRITE"


def test_tool_result_rewrite_may_not_turn_is_error_false_into_zero() -> None:
    s = new()
    original = s.append("tool/result", TR("c1", id="m"), surface_op="append")
    data = rewrite(original.data, isError=0)
    with pytest.raises(SurfaceError):
        s.append("tool/result", data, surface_op=Replace(0, 0), source_event_seqs=[0])


def test_f8_content_only_rewrite_is_accepted() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    original = s.append(
        "tool/result",
        TR("rewrite", "original", id="m1", meta={"k": [1]}, error={"name": "E", "code": "C"}),
        surface_op="append",
    )
    s.append("user/message", U("after"), surface_op="append")
    pruned = s.append(
        "tool/result", rewrite(original.data), surface_op=Replace(1, 1), source_event_seqs=[1]
    )
    assert s.surface.nodes == (3, 2)
    assert s.surface.replace_generation == 1
    assert text_of(s.derive_messages()[0]) == "pruned"
    assert pruned.data["message"]["id"] == "m1"


def test_tool_result_rewrite_of_a_rewrite_is_accepted() -> None:
    s = new()
    first = s.append("tool/result", TR("c1", "one", id="m"), surface_op="append")
    second = s.append(
        "tool/result", rewrite(first.data), surface_op=Replace(0, 0), source_event_seqs=[0]
    )
    s.append("tool/result", rewrite(second.data), surface_op=Replace(1, 1), source_event_seqs=[1])
    assert s.surface.nodes == (2,)
    assert s.surface.replace_generation == 2


def test_any_surface_type_may_replace_a_tool_result() -> None:
    s = new()
    s.append("tool/result", TR(), surface_op="append")
    s.append("assistant/message", A("summary"), surface_op=Replace(0, 0), source_event_seqs=[0])
    assert s.surface.nodes == (1,)


# --- F12-F15 replacement history and atomicity ----------------------------------------------


def test_f12_fold_reports_replacement_history_and_equals_live_surface() -> None:
    s = new()
    s.append("user/message", U("a"), surface_op="append")
    s.append("user/message", U("b"), surface_op="append")
    s.append("assistant/message", A("summary"), surface_op=Replace(0, 0), source_event_seqs=[0])
    s.append(
        "assistant/message", A("summary 2"), surface_op=Replace(2, 1), source_event_seqs=[2, 1]
    )
    fold = fold_surface(s.events)
    assert fold.nodes == s.surface.nodes == (3,)
    assert fold.replacements == (
        Replacement(seq=2, start=0, end=0, shadowed=(0,)),
        Replacement(seq=3, start=2, end=1, shadowed=(2, 1)),
    )
    assert type(fold) is SurfaceFold
    with pytest.raises(AttributeError):
        fold.nodes = ()  # type: ignore[misc]
    assert fold_surface(s.events) == fold


def test_f13_live_surface_keeps_no_history_but_fold_does() -> None:
    s = new()
    s.append("user/message", U("a"), surface_op="append")
    s.append("assistant/message", A("b"), surface_op=Replace(0, 0), source_event_seqs=[0])
    assert s.surface.nodes == (1,)
    assert not hasattr(s.surface, "replacements")
    assert fold_surface(s.events).replacements == (Replacement(1, 0, 0, (0,)),)


def test_f14_unknown_start_fails_alike_in_fold_and_seed() -> None:
    events = [
        ev("user/message", 0, U(), op="append"),
        ev("user/message", 1, U(), op=rep(42, 0), src=[0]),
    ]
    error = fold_error(events)
    assert error.code == "REPLACE_START_NOT_FOUND"
    assert "42" in str(error)
    assert_same_failure_in_seed(events, "REPLACE_START_NOT_FOUND")


def test_f15_rejected_replace_leaves_no_phantom_node() -> None:
    s = new()
    s.append("user/message", U("a"), surface_op="append")
    surface = s.surface
    nodes = s.surface.nodes
    with pytest.raises(SurfaceError) as caught:
        s.append("assistant/message", A("invalid"), surface_op=Replace(0, 0))
    assert caught.value.code == "REPLACE_NOT_COVERED"
    assert "0" in str(caught.value)
    assert len(s.events) == 1
    assert s.surface is surface
    assert s.surface.nodes == nodes == (0,)
    assert s.surface.replace_generation == 0
    s.append("user/message", U("b"), surface_op="append")
    assert s.surface.nodes == (0, 1)
    assert s.surface.replace_generation == 0
    assert fold_surface(s.events).nodes == s.surface.nodes


def test_f16_fold_rejects_missing_op_and_op_on_non_surface_type() -> None:
    assert fold_error([ev("user/message", 0, U())]).code == "MISSING_SURFACE_OP"
    assert fold_error([ev("turn/start", 0, {"turn": 1}, op="append")]).code == "NOT_SURFACE_TYPE"


@pytest.mark.parametrize("op", ["invalid", None, rep(-1, 0), {"op": "append"}, [0, 0]], ids=repr)
def test_fold_rejects_bad_surface_op(op: Any) -> None:
    assert fold_error([ev("user/message", 0, U(), op=op)]).code == "BAD_SURFACE_OP"


# --- F17-F31 live surface -------------------------------------------------------------------


def s0() -> Session:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("user/message", U("hello"), surface_op="append")
    s.append("assistant/message", A("hi"), surface_op="append")
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return s


def test_f17_base_session_nodes() -> None:
    assert s0().surface.nodes == (1, 2)


def test_f18_only_brackets_give_empty_surface() -> None:
    s = new()
    for type_ in ("turn/start", "step/start", "step/end", "turn/end"):
        s.append(type_, {"turn": 1, "step": 1, "reason": {"kind": "completed"}})
    assert s.surface.nodes == ()
    assert s.derive_messages() == []


def test_f19_tool_result_appends_at_the_tail() -> None:
    s = s0()
    s.append("tool/result", TR(), surface_op="append")
    assert len(s.surface.nodes) == 3
    assert s.surface.nodes[2] == 4


def test_f20_seeded_session_has_the_same_surface() -> None:
    s = s0()
    s.append("tool/result", TR(), surface_op="append")
    seeded = Session.create("seeded", seed=s.events)
    assert seeded.surface.nodes == (1, 2, 4)
    assert seeded.derive_messages() == s.derive_messages()


def test_f21_replace_of_everything() -> None:
    s = s0()
    s.append(
        "assistant/message",
        A("summary", turn=2),
        surface_op=Replace(1, 2),
        source_event_seqs=[1, 2],
    )
    assert s.surface.nodes == (4,)


def test_f22_replace_of_a_prefix() -> None:
    s = new()
    for text in "abc":
        s.append("user/message", U(text), surface_op="append")
    s.append("assistant/message", A("summary"), surface_op=Replace(0, 1), source_event_seqs=[0, 1])
    assert s.surface.nodes == (3, 2)


def test_f23_replace_of_the_tail() -> None:
    s = new()
    for text in "ab":
        s.append("user/message", U(text), surface_op="append")
    s.append("assistant/message", A("x"), surface_op=Replace(1, 1), source_event_seqs=[1])
    assert s.surface.nodes == (0, 2)


def test_f24_replace_endpoints_must_be_current_and_ordered() -> None:
    s = new()
    s.append("user/message", U("a"), surface_op="append")
    with pytest.raises(SurfaceError) as caught:
        s.append("assistant/message", A(), surface_op=Replace(5, 0), source_event_seqs=[0])
    assert caught.value.code == "REPLACE_START_NOT_FOUND"
    with pytest.raises(SurfaceError) as caught:
        s.append("assistant/message", A(), surface_op=Replace(0, 99), source_event_seqs=[0])
    assert caught.value.code == "REPLACE_END_NOT_FOUND"
    s.append("user/message", U("b"), surface_op="append")
    with pytest.raises(SurfaceError) as caught:
        s.append("assistant/message", A(), surface_op=Replace(1, 0), source_event_seqs=[1, 0])
    assert caught.value.code == "REPLACE_REVERSED"
    assert s.surface.nodes == (0, 1)
    assert s.seq == 2


def test_replace_endpoint_that_was_shadowed_is_not_found() -> None:
    s = new()
    s.append("user/message", U("a"), surface_op="append")
    s.append("user/message", U("b"), surface_op=Replace(0, 0), source_event_seqs=[0])
    with pytest.raises(SurfaceError) as caught:
        s.append("user/message", U("c"), surface_op=Replace(0, 0), source_event_seqs=[0])
    assert caught.value.code == "REPLACE_START_NOT_FOUND"
    with pytest.raises(SurfaceError) as caught:
        s.append("user/message", U("c"), surface_op=Replace(1, 0), source_event_seqs=[0, 1])
    assert caught.value.code == "REPLACE_END_NOT_FOUND"


def test_replace_range_follows_surface_position_not_seq_order() -> None:
    s = new()
    s.append("user/message", U("a"), surface_op="append")
    s.append("user/message", U("b"), surface_op="append")
    s.append("user/message", U("c"), surface_op=Replace(0, 0), source_event_seqs=[0])
    assert s.surface.nodes == (2, 1)
    s.append("user/message", U("d"), surface_op=Replace(2, 1), source_event_seqs=[2, 1])
    assert s.surface.nodes == (3,)
    assert s.surface.replace_generation == 2


def test_f26_middle_replace_keeps_surrounding_order() -> None:
    s = new()
    for text in "abc":
        s.append("user/message", U(text), surface_op="append")
    s.append("assistant/message", A("x"), surface_op=Replace(1, 1), source_event_seqs=[1])
    assert s.surface.nodes == (0, 3, 2)


def test_f28_surface_metadata_is_stored_only_on_surface_events() -> None:
    s = new()
    ts = s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    a = s.append("assistant/message", A("h"), surface_op="append", source_event_seqs=[0, 1])
    assert (a.surface_op, a.source_event_seqs) == ("append", (0, 1))
    assert s.events[2].to_json()["sourceEventSeqs"] == (0, 1)
    assert (ts.surface_op, ts.source_event_seqs) == (None, None)
    assert "surfaceOp" not in ts.to_json()


def test_f29_empty_assistant_message_takes_a_node() -> None:
    s = new()
    e = s.append("assistant/message", A(None), surface_op="append")
    assert e.surface_op == "append"
    assert s.surface.nodes == (0,)
    assert s.derive_messages() == []


def test_f30_append_origin_and_replacement_events() -> None:
    s = s0()
    checkpoint = s.append(
        "user/message",
        U("checkpoint", source={"kind": "plugin", "plugin": "compact"}),
        surface_op=Replace(1, 2),
        source_event_seqs=[1, 2],
    )
    appended = [e.seq for e in s.events if e.surface_op == "append"]
    replacing = [e.seq for e in s.events if isinstance(e.surface_op, Replace)]
    assert appended == [1, 2]
    assert replacing == [checkpoint.seq]
    assert [text_of(m) for m in s.transcript()] == ["hello", "hi"]
    assert [text_of(m) for m in s.derive_messages()] == ["checkpoint"]


def test_f31_generation_can_be_read_before_nodes() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("user/message", U("one"), surface_op="append")
    s.append("user/message", U("two"), surface_op="append")
    assert s.surface.replace_generation == 0
    s.append("user/message", U("summary"), surface_op=Replace(1, 2), source_event_seqs=[1, 2])
    assert s.surface.replace_generation == 1
    assert s.surface.nodes == (3,)


def test_surface_last_processed_seq_follows_the_log() -> None:
    s = new()
    assert s.surface.last_processed_seq == -1
    s.append("x", None)
    s.append("user/message", U(), surface_op="append")
    assert s.surface.last_processed_seq == 1


def test_surface_nodes_view_is_cached_until_the_surface_changes() -> None:
    s = new()
    s.append("user/message", U(), surface_op="append")
    first = s.surface.nodes
    assert s.surface.nodes is first
    s.append("x", None)
    assert s.surface.nodes == first
    s.append("user/message", U(), surface_op="append")
    assert s.surface.nodes == (0, 2)
    assert first == (0,)


# --- fold_surface inputs --------------------------------------------------------------------


def test_fold_surface_accepts_events_dicts_and_mixes() -> None:
    s = s0()
    as_dicts = [e.to_json() for e in s.events]
    mixed: list[SessionEvent | dict[str, Any]] = [s.events[0], *as_dicts[1:]]
    assert fold_surface(s.events) == fold_surface(as_dicts) == fold_surface(mixed)
    assert fold_surface(iter(as_dicts)).nodes == (1, 2)


def test_fold_surface_of_empty_log() -> None:
    assert fold_surface([]) == SurfaceFold((), ())


def test_fold_surface_result_is_immutable_and_independent() -> None:
    s = s0()
    fold = fold_surface(s.events)
    assert type(fold.nodes) is tuple
    assert type(fold.replacements) is tuple
    s.append("user/message", U(), surface_op="append")
    assert fold.nodes == (1, 2)


# --- the oracle property --------------------------------------------------------------------


def model_nodes(events: list[dict[str, Any]]) -> list[int]:
    """The surface by its definition, written as plainly as possible."""
    nodes: list[int] = []
    for event in events:
        op = event.get("surfaceOp")
        if op == "append":
            nodes.append(event["seq"])
        elif op is not None:
            i, j = nodes.index(op["start"]), nodes.index(op["end"])
            nodes[i : j + 1] = [event["seq"]]
    return nodes


def append_envelope(session: Session, envelope: dict[str, Any]) -> SessionEvent:
    return session.append(
        envelope["type"],
        envelope["data"],
        surface_op=envelope.get("surfaceOp"),
        source_event_seqs=envelope.get("sourceEventSeqs"),
        ignorable=envelope.get("ignorable", False),
    )


@settings(max_examples=150)
@given(surface_logs())
def test_fold_surface_equals_live_surface_for_every_prefix(log: list[dict[str, Any]]) -> None:
    s = new()
    generation = 0
    for k, envelope in enumerate(log, start=1):
        append_envelope(s, envelope)
        fold = fold_surface(s.events)
        assert fold.nodes == s.surface.nodes == tuple(model_nodes(log[:k]))
        assert len(fold.replacements) == s.surface.replace_generation
        assert s.surface.replace_generation >= generation
        generation = s.surface.replace_generation
    assert fold_surface(log).nodes == s.surface.nodes


@settings(max_examples=100)
@given(surface_logs())
def test_replacements_record_what_each_replace_shadowed(log: list[dict[str, Any]]) -> None:
    fold = fold_surface(log)
    replaces = [e for e in log if isinstance(e.get("surfaceOp"), dict)]
    assert [r.seq for r in fold.replacements] == [e["seq"] for e in replaces]
    for replacement, envelope in zip(fold.replacements, replaces, strict=True):
        assert replacement.start == envelope["surfaceOp"]["start"]
        assert replacement.end == envelope["surfaceOp"]["end"]
        assert set(replacement.shadowed) <= set(envelope["sourceEventSeqs"])
        assert replacement.shadowed[0] == replacement.start
        assert replacement.shadowed[-1] == replacement.end
        before = model_nodes(log[: replacement.seq])
        i = before.index(replacement.start)
        assert replacement.shadowed == tuple(before[i : i + len(replacement.shadowed)])


@settings(max_examples=100)
@given(surface_logs())
def test_seeded_session_has_the_folded_surface(log: list[dict[str, Any]]) -> None:
    seeded = Session.create("seeded", seed=log)
    fold = fold_surface(log)
    assert seeded.surface.nodes == fold.nodes
    assert seeded.surface.replace_generation == len(fold.replacements)
