"""Derived views: model messages, transcript, time travel, request folds (docs/reading.md)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from sessionledger import (
    FrozenDict,
    Replace,
    Session,
    SessionEvent,
    assistant_message,
    messages_at,
    thaw,
    tool_result,
    transcript,
    user_message,
)
from sessionledger.model._derive import canonical_request_header, project_message
from sessionledger.model._surface import fold_surface
from sessionledger.testing.strategies import session_logs, surface_logs

# --- builders -------------------------------------------------------------------------------


def new(id: str = "s") -> Session:
    return Session.create(id, clock=itertools.count(1).__next__)


def U(text: str = "u", **kwargs: Any) -> dict[str, Any]:
    return dict(user_message(text, **kwargs))


def A(text: str | None = "a", usage: Any = None) -> dict[str, Any]:
    message = assistant_message([] if text is None else text, provider="mock", model="mock")
    data: dict[str, Any] = {"turn": 1, "step": 1, "message": message}
    if usage is not None:
        data["usage"] = usage
    return data


def TR(call_id: str = "c1", text: str = "ok") -> dict[str, Any]:
    return {"turn": 1, "step": 1, "message": tool_result(call_id, text)}


def text_of(message: Any) -> Any:
    block = message["content"][0]
    if block["type"] == "tool-result":
        return block["content"][0]["text"]
    return block["text"]


def scratch(session: Session) -> list[Any]:
    """The scratch oracle: a fresh session seeded with the same events."""
    return Session.create("scratch", seed=session.events).derive_messages()


def append_envelope(session: Session, envelope: dict[str, Any]) -> SessionEvent:
    return session.append(
        envelope["type"],
        envelope["data"],
        surface_op=envelope.get("surfaceOp"),
        source_event_seqs=envelope.get("sourceEventSeqs"),
        ignorable=envelope.get("ignorable", False),
    )


def chunk(text: str) -> dict[str, Any]:
    return {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}}


# --- 11.G derived messages ------------------------------------------------------------------


def test_g1_user_and_assistant_messages() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("user/message", U("hello"), surface_op="append")
    s.append("assistant/message", A("hi"), surface_op="append")
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    messages = s.derive_messages()
    assert [(m["role"], text_of(m)) for m in messages] == [("user", "hello"), ("assistant", "hi")]


def test_g2_chunks_do_not_become_messages() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("assistant/chunk", chunk("h"))
    s.append("assistant/chunk", chunk("i"))
    s.append("user/message", U("hello"), surface_op="append")
    s.append("assistant/message", A("hi"), surface_op="append", source_event_seqs=[1, 2])
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert len(s.derive_messages()) == 2


def test_g3_replacement_shows_only_the_summary() -> None:
    s = new()
    s.append("user/message", U("original"), surface_op="append")
    s.append("assistant/message", A("compacted"), surface_op=Replace(0, 0), source_event_seqs=[0])
    assert [text_of(m) for m in s.derive_messages()] == ["compacted"]


def test_g4_empty_assistant_message_derives_nothing() -> None:
    seed = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {"type": "step/start", "seq": 1, "time": 1, "data": {"turn": 1, "step": 1}},
        {"type": "assistant/message", "seq": 2, "time": 1, "data": A(None), "surfaceOp": "append"},
        {"type": "step/end", "seq": 3, "time": 1, "data": {"turn": 1, "step": 1}},
        {"type": "turn/end", "seq": 4, "time": 1, "data": {"turn": 1}},
    ]
    s = Session.create("g4", seed=seed)
    assert s.surface.nodes == (2,)
    assert s.derive_messages() == []


def test_g5_cache_grows_and_matches_scratch() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("user/message", U("one"), surface_op="append")
    assert s.derive_messages() == scratch(s)
    s.append("user/message", U("two"), surface_op="append")
    s.append("assistant/message", A("reply"), surface_op="append")
    assert s.derive_messages() == scratch(s)
    s.append(
        "assistant/message",
        A(None, usage={"inputTokens": 1, "outputTokens": 0}),
        surface_op="append",
    )
    assert s.derive_messages() == scratch(s)
    assert len(s.derive_messages()) == 3


def test_g6_replace_rebuilds_and_old_lists_are_untouched() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("user/message", U("one"), surface_op="append")
    s.append("user/message", U("two"), surface_op="append")
    before = s.derive_messages()
    assert len(before) == 2
    s.append(
        "user/message",
        U("summary", source={"kind": "plugin", "plugin": "compact"}),
        surface_op=Replace(1, 2),
        source_event_seqs=[1, 2],
    )
    after = s.derive_messages()
    assert [text_of(m) for m in after] == ["summary"]
    assert after == scratch(s)
    assert len(before) == 2


def test_g7_messages_are_shared_and_lists_are_fresh() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("user/message", U("one"), surface_op="append")
    first = s.derive_messages()
    s.append("user/message", U("two"), surface_op="append")
    second = s.derive_messages()
    assert len(first) == 1
    assert len(second) == 2
    assert second[0] is first[0]
    assert type(second[0]) is FrozenDict
    with pytest.raises(TypeError):
        second[0]["role"] = "assistant"


def test_derive_messages_returns_a_new_list_each_call() -> None:
    s = new()
    s.append("user/message", U(), surface_op="append")
    a, b = s.derive_messages(), s.derive_messages()
    assert a == b
    assert a is not b
    assert type(a) is list
    a.clear()
    assert len(s.derive_messages()) == 1


def test_derived_messages_are_the_frozen_objects_inside_the_log() -> None:
    s = new()
    user = s.append("user/message", U(), surface_op="append")
    assistant = s.append("assistant/message", A(), surface_op="append")
    result = s.append("tool/result", TR(), surface_op="append")
    messages = s.derive_messages()
    assert messages[0] is user.data
    assert messages[1] is assistant.data["message"]
    assert messages[2] is result.data["message"]


def test_g8_project_message_of_a_user_event() -> None:
    s = new()
    e = s.append("user/message", U("x"), surface_op="append")
    message = project_message(e)
    assert message == s.derive_messages()[-1]
    assert message["content"] is e.data["content"]
    with pytest.raises(TypeError):
        message["content"][0]["text"] = "changed"
    assert e.data["content"][0]["text"] == "x"


def test_g9_project_message_of_non_messages_is_none() -> None:
    s = new()
    assert project_message(s.append("step/start", {"turn": 1, "step": 1})) is None
    assert project_message(s.append("assistant/message", A(None), surface_op="append")) is None
    assert project_message(s.append("request/context", {"provider": "p", "model": "m"})) is None


def test_user_message_with_empty_content_is_still_projected() -> None:
    s = new()
    s.append("user/message", {**U(), "content": []}, surface_op="append")
    assert len(s.derive_messages()) == 1


def message_event(kind: str, text: str) -> tuple[str, Any]:
    """A surface event of *kind* whose message id is derived from *text* (reproducible)."""
    if kind == "user":
        return "user/message", U(text, id=f"id-{text}")
    if kind == "assistant":
        message = assistant_message(text, provider="p", model="m", id=f"id-{text}")
        return "assistant/message", {**A(), "message": message}
    if kind == "empty":
        return "assistant/message", A(None)
    return "tool/result", {**TR(), "message": tool_result("c", text, id=f"id-{text}")}


NOISE = st.sampled_from(["turn/start", "step/start", "step/end", "turn/end", "assistant/chunk"])
#: One payload that has the data shape of every noise type (extra fields pass).
NOISE_DATA = {
    "turn": 1,
    "step": 1,
    "reason": {"kind": "completed"},
    "chunk": {"type": "text-delta", "index": 0, "text": "noise"},
}


@given(
    st.lists(st.sampled_from(["user", "assistant", "empty", "tool"]), max_size=12),
    st.lists(st.lists(NOISE, max_size=3), min_size=13, max_size=13),
)
def test_g10_interleaved_noise_does_not_change_derived_history(
    kinds: list[str], noise: list[list[str]]
) -> None:
    def build(with_noise: bool) -> list[Any]:
        s = new()
        for position, kind in enumerate(kinds):
            if with_noise:
                for type_ in noise[position]:
                    s.append(type_, NOISE_DATA)
            s.append(*message_event(kind, f"m{position}"), surface_op="append")
        return s.derive_messages()

    assert build(True) == build(False)


# --- the scratch oracle ---------------------------------------------------------------------


@settings(max_examples=150)
@given(surface_logs(), st.lists(st.booleans(), min_size=40, max_size=40))
def test_derive_messages_equals_scratch_oracle(
    log: list[dict[str, Any]], reads: list[bool]
) -> None:
    s = new()
    for position, envelope in enumerate(log):
        append_envelope(s, envelope)
        # Reading at irregular points exercises both tail growth and rebuilds.
        if reads[position % len(reads)]:
            assert s.derive_messages() == scratch(s)
    final = s.derive_messages()
    assert final == scratch(s)
    assert final == Session.create("from-dicts", seed=log).derive_messages()


@settings(max_examples=100)
@given(surface_logs())
def test_derive_messages_follows_the_surface(log: list[dict[str, Any]]) -> None:
    s = Session.create("x", seed=log)
    expected = [m for node in s.surface.nodes if (m := project_message(s.events[node])) is not None]
    messages = s.derive_messages()
    assert messages == expected
    assert all(a is b for a, b in zip(messages, expected, strict=True))
    assert all(m["role"] in ("user", "assistant", "system") for m in messages)


@settings(max_examples=50)
@given(session_logs())
def test_derive_messages_of_agent_logs_equals_scratch(log: list[dict[str, Any]]) -> None:
    s = new()
    for envelope in log:
        append_envelope(s, envelope)
    assert s.derive_messages() == scratch(s)
    assert s.derive_messages() == s.derive_messages()


# --- transcript -----------------------------------------------------------------------------


def test_transcript_keeps_shadowed_messages_and_skips_replacements() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("user/message", U("hello"), surface_op="append")
    s.append("assistant/message", A("hi"), surface_op="append")
    s.append("tool/result", TR("c1", "out"), surface_op="append")
    s.append("assistant/message", A(None), surface_op="append")
    s.append(
        "user/message",
        U("summary", source={"kind": "plugin", "plugin": "compact"}),
        surface_op=Replace(1, 2),
        source_event_seqs=[1, 2],
    )
    pruned = thaw(s.events[3].data)
    pruned["message"]["content"][0]["content"] = [{"type": "text", "text": "pruned"}]
    s.append("tool/result", pruned, surface_op=Replace(3, 3), source_event_seqs=[3])
    s.append("user/message", U("next"), surface_op="append")
    assert [text_of(m) for m in s.transcript()] == ["hello", "hi", "out", "next"]
    assert [text_of(m) for m in s.derive_messages()] == ["summary", "pruned", "next"]
    assert transcript(s.events) == s.transcript()
    assert s.transcript()[0] is s.events[1].data


def test_transcript_is_a_fresh_list() -> None:
    s = new()
    s.append("user/message", U(), surface_op="append")
    a = s.transcript()
    a.clear()
    assert len(s.transcript()) == 1


@settings(max_examples=100)
@given(surface_logs())
def test_transcript_is_every_append_origin_message_in_log_order(log: list[dict[str, Any]]) -> None:
    s = Session.create("t", seed=log)
    expected = [
        project_message(e)
        for e in s.events
        if e.surface_op == "append" and project_message(e) is not None
    ]
    assert s.transcript() == expected


# --- messages_at ----------------------------------------------------------------------------


def test_messages_at_is_the_view_after_that_seq() -> None:
    s = new()
    s.append("user/message", U("a"), surface_op="append")  # 0
    s.append("turn/start", {"turn": 1})  # 1
    s.append("assistant/message", A("b"), surface_op="append")  # 2
    s.append("user/message", U("c"), surface_op=Replace(0, 2), source_event_seqs=[0, 2])  # 3
    events = s.events
    assert [text_of(m) for m in messages_at(events, 0)] == ["a"]
    assert [text_of(m) for m in messages_at(events, 1)] == ["a"]
    assert [text_of(m) for m in messages_at(events, 2)] == ["a", "b"]
    assert [text_of(m) for m in messages_at(events, 3)] == ["c"]
    assert messages_at(events, 2)[0] is events[0].data


@pytest.mark.parametrize("seq", [-1, 4, 100, True, 1.0, "0"], ids=repr)
def test_messages_at_rejects_seqs_outside_the_log(seq: Any) -> None:
    s = new()
    for _ in range(4):
        s.append("user/message", U(), surface_op="append")
    with pytest.raises(IndexError):
        messages_at(s.events, seq)


@settings(max_examples=100)
@given(surface_logs(max_events=20))
def test_messages_at_equals_the_live_view_at_every_seq(log: list[dict[str, Any]]) -> None:
    s = new()
    views = []
    for envelope in log:
        append_envelope(s, envelope)
        views.append(s.derive_messages())
    for seq, view in enumerate(views):
        assert messages_at(s.events, seq) == view


@settings(max_examples=100)
@given(st.one_of(surface_logs(max_events=20), session_logs(max_turns=2)))
def test_messages_at_on_a_compact_log_equals_it_on_the_events(log: list[dict[str, Any]]) -> None:
    """A compact log (its deltas in runs) gives the view the plain events give, at every
    seq, and the same surface fold, without building its deltas."""
    s = new()
    for envelope in log:
        append_envelope(s, envelope)
    compact, plain = s.event_log(), s.events
    for seq in range(len(plain)):
        assert messages_at(compact, seq) == messages_at(plain, seq)
    assert fold_surface(compact) == fold_surface(plain)


# --- request header and context -------------------------------------------------------------

CONFIG = {"provider": "mock", "model": "m"}


def header_event(header: Any, reason: str = "change") -> dict[str, Any]:
    return {"reason": reason, "header": header}


def test_h1_canonical_header_drops_empty_parts() -> None:
    assert canonical_request_header(
        FrozenDict({"config": CONFIG, "adapterDefaults": {}, "system": "", "tools": ()})
    ) == {"config": CONFIG}
    populated = {
        "config": {**CONFIG, "maxTokens": 256000},
        "adapterDefaults": {"maxTokens": True},
        "system": "s",
        "tools": ({"name": "a"},),
    }
    assert canonical_request_header(FrozenDict(populated)) == populated


def test_canonical_header_drops_adapter_defaults_without_a_true_marker() -> None:
    header = FrozenDict({"config": CONFIG, "adapterDefaults": {"maxTokens": False}})
    assert canonical_request_header(header) == {"config": CONFIG}


def test_canonical_header_key_order() -> None:
    header = FrozenDict(
        {
            "tools": ({"name": "a"},),
            "system": "s",
            "adapterDefaults": {"maxTokens": True},
            "config": {**CONFIG, "maxTokens": 1},
        }
    )
    assert list(canonical_request_header(header)) == [
        "config",
        "adapterDefaults",
        "system",
        "tools",
    ]


def test_request_header_is_none_before_the_first_one() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    assert s.request_header() is None


def test_h5_last_header_wins_and_is_canonical() -> None:
    s = new()
    s.append("turn/start", {"turn": 1})
    s.append("request/header", header_event({"config": CONFIG, "system": "first"}, "initial"))
    assert s.request_header() == {"config": CONFIG, "system": "first"}
    s.append("user/message", U("hi"), surface_op="append")
    s.append(
        "request/header",
        header_event({"config": {"provider": "mock", "model": "other"}, "tools": []}),
    )
    assert s.request_header() == {"config": {"provider": "mock", "model": "other"}}


def test_request_header_is_frozen_and_stable_without_new_headers() -> None:
    s = new()
    s.append("request/header", header_event({"config": CONFIG, "tools": [{"name": "a"}]}))
    first = s.request_header()
    assert type(first) is FrozenDict
    with pytest.raises(TypeError):
        first["system"] = "x"
    with pytest.raises(TypeError):
        first["config"]["model"] = "x"
    s.append("turn/start", {"turn": 1})
    assert s.request_header() == first


def test_request_header_folds_seeded_headers() -> None:
    seed = [
        {"type": "request/header", "seq": 0, "time": 1, "data": header_event({"config": CONFIG})},
        {
            "type": "request/header",
            "seq": 1,
            "time": 1,
            "data": header_event({"config": {**CONFIG, "model": "later"}, "system": "s"}),
        },
    ]
    s = Session.create("seeded", seed=seed)
    assert s.request_header() == {"config": {**CONFIG, "model": "later"}, "system": "s"}


def test_h6_request_context_is_none_on_a_fresh_session() -> None:
    assert new().request_context() is None


def test_h7_seeded_contexts_fold_to_the_last() -> None:
    seed = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {
            "type": "request/context",
            "seq": 1,
            "time": 1,
            "data": {**CONFIG, "contextWindow": 128000},
        },
        {
            "type": "request/context",
            "seq": 2,
            "time": 1,
            "data": {"provider": "mock", "model": "later", "contextWindow": 256000},
        },
    ]
    s = Session.create("ctx", seed=seed)
    assert s.request_context() == {"provider": "mock", "model": "later", "contextWindow": 256000}


def test_h8_context_is_replaced_as_a_whole_record() -> None:
    s = Session.create(
        "ctx",
        seed=[
            {"type": "request/context", "seq": 0, "time": 1, "data": {**CONFIG, "contextWindow": 5}}
        ],
    )
    s.append("todo/write", {"todos": []})
    assert s.request_context() == {**CONFIG, "contextWindow": 5}
    s.append("request/context", {"provider": "mock", "model": "next", "contextWindow": 64000})
    assert s.request_context() == {"provider": "mock", "model": "next", "contextWindow": 64000}
    s.append("request/context", {"provider": "mock", "model": "unknown"})
    assert s.request_context() == {"provider": "mock", "model": "unknown"}


def test_h9_several_contexts_between_reads() -> None:
    s = new()
    assert s.request_context() is None
    s.append("request/context", {**CONFIG, "contextWindow": 200000})
    s.append("todo/write", {"todos": []})
    s.append("request/context", {**CONFIG, "contextWindow": 300000})
    assert s.request_context()["contextWindow"] == 300000


def test_h10_context_is_frozen() -> None:
    s = new()
    s.append("request/context", {**CONFIG, "contextWindow": 1})
    context = s.request_context()
    with pytest.raises(TypeError):
        context["contextWindow"] = 2


def scratch_header(events: tuple[SessionEvent, ...]) -> Any:
    """The header fold written from its definition: last header wins, empty parts dropped."""
    last = None
    for event in events:
        if event.type == "request/header":
            last = thaw(event.data["header"])
    if last is None:
        return None
    out = {"config": last["config"]}
    defaults = last.get("adapterDefaults")
    if defaults and any(v is True for v in defaults.values()):
        out["adapterDefaults"] = defaults
    if last.get("system"):
        out["system"] = last["system"]
    if last.get("tools"):
        out["tools"] = last["tools"]
    return out


@settings(max_examples=100)
@given(surface_logs(), st.lists(st.booleans(), min_size=40, max_size=40))
def test_request_folds_are_incremental_and_match_a_scratch_fold(
    log: list[dict[str, Any]], reads: list[bool]
) -> None:
    s = new()
    for position, envelope in enumerate(log):
        append_envelope(s, envelope)
        if reads[position % len(reads)]:
            assert thaw(s.request_header()) == scratch_header(s.events)
    contexts = [e.data for e in s.events if e.type == "request/context"]
    assert s.request_context() == (contexts[-1] if contexts else None)
    assert thaw(s.request_header()) == scratch_header(s.events)
    seeded = Session.create("seeded", seed=log)
    assert seeded.request_header() == s.request_header()
    assert seeded.request_context() == s.request_context()
