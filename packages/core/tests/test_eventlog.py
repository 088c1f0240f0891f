"""The compact in-memory log: packed delta runs read back as the events appended."""

from __future__ import annotations

import gc
import importlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from sessionledger import Session, assistant_message, user_message
from sessionledger._errors import LedgerError, SeedError, StorageRowError
from sessionledger.model._eventlog import ChunkRun, EventLog
from sessionledger.model._events import Replace, SessionEvent, SessionHeader
from sessionledger.storage._chunks import pack_chunk_runs, unpack_events, unpack_to_log
from sessionledger.testing.strategies import session_logs

eventlog_module = importlib.import_module("sessionledger.model._eventlog")


def text_delta(text: str, *, turn: int = 1, step: int = 1, index: int = 0) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "chunk": {"type": "text-delta", "index": index, "text": text},
    }


def tool_delta(args: str, *, name: str | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"type": "tool-call-delta", "index": 1, "id": "call-1"}
    if name is not None:
        chunk["name"] = name
    chunk["argumentsDelta"] = args
    return {"turn": 1, "step": 1, "chunk": chunk}


def streamed(session: Session, datas: list[dict[str, Any]]) -> list[SessionEvent]:
    return [session.append("assistant/chunk", data) for data in datas]


def as_json(events: Any) -> list[bytes]:
    return [orjson.dumps(event.to_json()) for event in events]


def test_packed_members_read_back_as_appended() -> None:
    session = Session.create("s")
    appended = streamed(session, [text_delta(f"t{i}") for i in range(5)])
    appended += streamed(session, [tool_delta("{", name="read"), tool_delta('"a"', name="read")])
    appended += streamed(session, [tool_delta("}")])
    appended.append(session.append("step/start", {"turn": 1, "step": 2}))
    for event in appended:
        again = session.event_at(event.seq)
        assert again == event
        assert orjson.dumps(again.to_json()) == orjson.dumps(event.to_json())
    assert as_json(session.events) == as_json(appended)
    assert as_json(session.events_from(3)) == as_json(appended[3:])


def test_a_member_is_frozen_like_an_appended_event() -> None:
    session = Session.create("s")
    event = streamed(session, [text_delta("a"), text_delta("b")])[1]
    member = session.event_at(event.seq)
    with pytest.raises(TypeError):
        member.data["turn"] = 2
    with pytest.raises(TypeError):
        member.data["chunk"]["text"] = "changed"
    with pytest.raises(AttributeError):
        member.time = 0  # type: ignore[misc]


def test_a_delta_in_another_key_order_is_frozen_in_the_canonical_order() -> None:
    session = Session.create("s")
    data = {"chunk": {"text": "x", "index": 0, "type": "text-delta"}, "step": 1, "turn": 1}
    event = session.append("assistant/chunk", data)
    assert event.data == data
    assert list(event.data) == ["turn", "step", "chunk"]
    assert list(event.data["chunk"]) == ["type", "index", "text"]
    assert orjson.dumps(session.event_at(event.seq).to_json()) == orjson.dumps(event.to_json())


@pytest.mark.parametrize(
    "data",
    [
        {"turn": True, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}},
        {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 1.0, "text": "x"}},
        {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "\ud800"}},
        {"turn": 0, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}},
        {"turn": 1, "step": 1, "chunk": {"type": "tool-call-delta", "index": 0, "id": ""}},
        {"turn": 1, "step": 1, "chunk": {"type": ["text-delta"], "index": 0, "text": "x"}},
    ],
)
def test_the_short_path_refuses_what_the_general_path_refuses(data: dict[str, Any]) -> None:
    session = Session.create("s")
    with pytest.raises(LedgerError):
        session.append("assistant/chunk", data)
    assert session.seq == 0


def test_runs_break_where_the_block_changes() -> None:
    log = EventLog()
    datas = [text_delta("a"), text_delta("b", index=1), text_delta("c", index=1), text_delta("d")]
    session = Session.create("s")
    events = streamed(session, datas)
    log.extend(SessionEvent(e.type, i, e.time, e.data) for i, e in enumerate(events))
    runs = [segment for segment in log.segments() if type(segment) is ChunkRun]
    assert [len(run) for run in runs] == [1, 2, 1]
    assert [e.data for e in log] == [e.data for e in events]


def test_negative_indexes_slices_and_reversed() -> None:
    session = Session.create("s")
    streamed(session, [text_delta(str(i)) for i in range(6)])
    events = session.events
    log = session.event_log()
    assert log[-1] == events[-1]
    assert log[-3] == events[-3]
    assert log[2:5] == events[2:5]
    assert log[::2] == events[::2]
    assert list(reversed(log)) == list(reversed(events))
    assert log == events
    assert log == list(events)
    with pytest.raises(IndexError):
        log[len(events)]


def test_a_copy_never_extends_a_run_the_original_extends() -> None:
    session = Session.create("s")
    streamed(session, [text_delta("a"), text_delta("b")])
    copy = session.event_log()
    copied = list(copy)
    streamed(session, [text_delta("c")])
    copy.append(SessionEvent("assistant/chunk", len(copy), 5, session.event_at(1).data))
    assert list(copy)[: len(copied)] == copied
    assert copy[-1].time == 5
    assert session.events[-1].data["chunk"]["text"] == "c"
    assert session.seq == len(copied) + 1


def test_unpacked_skips_runs_only() -> None:
    session = Session.create("s")
    streamed(session, [text_delta("a"), text_delta("b")])
    session.append("step/start", {"turn": 1, "step": 2})
    start = {"type": "block-start", "index": 0, "blockType": "text"}
    streamed(session, [{"turn": 1, "step": 1, "chunk": start}])
    log = session.event_log()
    assert [(e.seq, e.type) for e in log.unpacked()] == [(2, "step/start"), (3, "assistant/chunk")]
    assert [e.seq for e in log.unpacked(1)] == [2, 3]


def test_streamed_deltas_leave_no_object_for_the_collector() -> None:
    session = Session.create("s")
    streamed(session, [text_delta("warm")])
    gc.collect()
    before = len(gc.get_objects())
    for index in range(5_000):
        session.append("assistant/chunk", text_delta(f"t{index}"))
    gc.collect()
    assert len(gc.get_objects()) - before < 50


def held(holder: object) -> list[Any]:
    """What an object holds (its class aside)."""
    return [part for part in gc.get_referents(holder) if not isinstance(part, type)]


def tracked_parts(slot: Any) -> list[Any]:
    """What of a log's slot (an event or a run) the cyclic collector still watches."""
    parts = [slot]
    if type(slot) is SessionEvent:
        parts.append(slot.surface_op)
        stack = [slot.data, slot.source_event_seqs]
        while stack:
            item = stack.pop()
            if isinstance(item, dict | tuple):
                parts.append(item)
                stack.extend(item.values() if isinstance(item, dict) else item)
    else:
        parts += held(slot)
    return [part for part in parts if gc.is_tracked(part)]


def test_the_log_leaves_its_events_and_runs_to_reference_counting() -> None:
    # Neither can be part of a cycle, so a large log costs a full collection nothing
    # (compiled only: Python itself cannot untrack an object).
    if not importlib.import_module("sessionledger._accelerator").ACCELERATED:
        pytest.skip("the compiled accelerator is not built or not chosen")
    session = Session.create("s")
    session.append("turn/start", {"turn": 1})
    user = session.append("user/message", dict(user_message("hi")), surface_op="append")
    deltas = streamed(session, [text_delta(str(i)) for i in range(4)])
    streamed(session, [tool_delta('{"a"', name="grep")])
    session.append(
        "assistant/message",
        {"turn": 1, "step": 1, "message": assistant_message("0123", provider="p", model="m")},
        surface_op="append",
        source_event_seqs=[delta.seq for delta in deltas],
    )
    session.append("user/message", dict(user_message("bye")), surface_op="append")
    assert user.seq == 1
    row = orjson.loads(orjson.dumps(row_of(deltas)))
    stored = EventLog(session.events[:2])
    stored.add_run(unpack_to_log(row))
    for log in (session.event_log(), stored, stored.copy()):
        assert [part for part in held(log) if gc.is_tracked(part)] == []
        slots = list(log.segments())
        assert {type(slot) for slot in slots} == {SessionEvent, ChunkRun}
        assert [tracked_parts(slot) for slot in slots] == [[] for _ in slots]
    # A decoded log is extended segment by segment: fresh events, whose provenance and
    # op the collector watches when made, are left to reference counting there too.
    fresh = [
        SessionEvent(e.type, e.seq, e.time, e.data, e.surface_op,
                     None if e.source_event_seqs is None else (*e.source_event_seqs,),
                     e.ignorable)
        for e in session.events
    ]  # fmt: skip
    fresh[1] = SessionEvent(user.type, 1, user.time, user.data, Replace(0, 0), None, False)
    assert gc.is_tracked(fresh[1].surface_op)
    assert gc.is_tracked(fresh[-2].source_event_seqs)
    extended = EventLog()
    extended.extend_segments(fresh)
    assert [tracked_parts(slot) for slot in extended.segments()] == [[] for _ in fresh]
    # So are the events read back, members rebuilt from a run included, and the tuple
    # ``events`` keeps: a caller holding a whole large log adds nothing to collect.
    read = [*session.events, *stored]
    assert [tracked_parts(event) for event in read] == [[] for _ in read]
    assert not gc.is_tracked(session.events)


def test_restore_adopts_runs_and_rejects_a_gap() -> None:
    session = Session.create("s")
    streamed(session, [text_delta(str(i)) for i in range(4)])
    restored = Session.restore(session.header, session.event_log())
    assert as_json(restored.events[: session.seq]) == as_json(session.events)


def row_of(events: list[SessionEvent]) -> dict[str, Any]:
    (row,) = pack_chunk_runs(events)
    return row


def test_a_stored_row_becomes_one_run_equal_to_its_members() -> None:
    events = [
        SessionEvent("assistant/chunk", 7 + k, 1_000 + 40 * k, text_delta(f"w{k}"))
        for k in range(5)
    ]
    row = orjson.loads(orjson.dumps(row_of(events)))
    run = unpack_to_log(row)
    assert type(run) is ChunkRun
    assert list(run.members(7, 12)) == unpack_events(row)
    assert as_json(run.members(7, 12)) == as_json(events)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("data", "texts", 1), 5),
        (("data", "dt", 0), True),
        (("data", "dt", 0), 1.5),
        (("data", "dt", 1), 2**53),
        (("time0",), 2**53 - 2),
        (("data", "dt"), [1]),
    ],
)
def test_a_malformed_row_fails_as_the_member_check_says(path: tuple[Any, ...], value: Any) -> None:
    events = [SessionEvent("assistant/chunk", k, 100 + k, text_delta(str(k))) for k in range(4)]
    row = orjson.loads(orjson.dumps(row_of(events)))
    target = row
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(StorageRowError) as expected:
        unpack_events(row)
    with pytest.raises(StorageRowError) as found:
        unpack_to_log(row)
    assert str(found.value) == str(expected.value)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.integers(0, 2),
            st.integers(-(2**40), 2**40),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_any_stream_reads_back_exactly(parts: list[tuple[str, int, int, bool]]) -> None:
    log = EventLog()
    expected = []
    for seq, (text, index, time, plain) in enumerate(parts):
        data = text_delta(text, index=index) if plain else tool_delta(text, name=text)
        event = Session.create("x").append("assistant/chunk", data)
        event = SessionEvent(event.type, seq, time, event.data)
        log.append(event)
        expected.append(event)
    assert as_json(log) == as_json(expected)
    assert as_json(log.copy().plus([])) == as_json(expected)
    assert [log[seq] for seq in range(len(expected))] == expected


def loose_by_segments(log: EventLog, start: int) -> list[tuple[int, SessionEvent]]:
    """The loose events from *start* on, told apart from the runs by ``segments``."""
    found, seq = [], 0
    for segment in log.segments():
        if type(segment) is SessionEvent:
            if seq >= start:
                found.append((seq, segment))
            seq += 1
        else:
            seq += len(segment)
    return found


@settings(max_examples=40, deadline=None)
@given(session_logs(), st.integers(-2, 400), st.integers(0, 6))
def test_loose_yields_each_event_no_run_holds(
    log: list[dict[str, Any]], start: int, more: int
) -> None:
    stored = EventLog([SessionEvent.from_json(envelope) for envelope in log])
    expected = loose_by_segments(stored, start)
    assert list(stored.loose(start)) == expected
    assert list(stored.unpacked(start)) == [event for _, event in expected]
    # A copy whose last run the original goes on extending: its walk stops at its end.
    shorter = stored.copy()
    last = stored[-1] if len(stored) else None
    if last is not None and last.type == "assistant/chunk":
        for offset in range(more):
            stored.append(SessionEvent(last.type, len(stored), last.time + offset, last.data))
    assert list(shorter.loose(start)) == expected


WALK_TYPES = ["user/message", "assistant/message", "assistant/chunk", "tool/result", "x/other"]
CHANGES = ["misplaced", "cites", "ignorable", "unknown"]


def walks(log: EventLog, start: int, types: set[str]) -> tuple[Any, Any]:
    """What the loose walks give for *log*: the events a restore must look at, and the
    first of a type outside *types*."""
    return log.loose_needing(types, start), log.first_loose_outside(types, start)


@settings(max_examples=60, deadline=None)
@given(
    session_logs(),
    st.integers(-2, 400),
    st.sets(st.sampled_from(WALK_TYPES)),
    st.integers(0, 6),
    st.lists(st.tuples(st.integers(0, 400), st.sampled_from(CHANGES)), max_size=4),
)
def test_the_loose_walks_take_each_event_no_run_holds(
    log: list[dict[str, Any]],
    start: int,
    types: set[str],
    more: int,
    changes: list[tuple[int, str]],
) -> None:
    stored = EventLog([SessionEvent.from_json(envelope) for envelope in log])
    slots = stored._slots
    for at, how in changes:  # EventLog itself checks none of these
        if len(stored) and type(event := slots[at % len(stored)]) is SessionEvent:
            fields = [event.type, event.seq, event.time, event.data, event.surface_op,
                      event.source_event_seqs, event.ignorable]  # fmt: skip
            if how == "misplaced":  # a seq that is not its place
                fields[1] += 1
            elif how == "cites":  # provenance without an op
                fields[4], fields[5] = None, (0,)
            elif how == "ignorable":
                fields[6] = True
            elif how == "unknown":
                fields[0] = "x/unknown"
            slots[at % len(stored)] = SessionEvent(*fields)
    loose = list(stored.loose(start))
    needing = [
        (seq, event)
        for seq, event in loose
        if event.surface_op is not None
        or event.source_event_seqs is not None
        or event.seq != seq
        or event.type in types
    ]
    outside = next(((s, e) for s, e in loose if e.type not in types and not e.ignorable), None)
    assert walks(stored, start, types) == (needing, outside)
    saved = eventlog_module._loose_needing, eventlog_module._loose_outside
    eventlog_module._loose_needing = eventlog_module._loose_outside = None
    try:
        assert walks(stored, start, types) == (needing, outside)
    finally:
        eventlog_module._loose_needing, eventlog_module._loose_outside = saved
    # A copy whose last run the original goes on extending: its walks stop at its end.
    shorter = stored.copy()
    last = stored[-1] if len(stored) else None
    if last is not None and last.type == "assistant/chunk":
        for offset in range(more):
            stored.append(SessionEvent(last.type, len(stored), last.time + offset, last.data))
    assert walks(shorter, start, types) == (needing, outside)


def segment_shape(log: EventLog) -> list[tuple[type, int, bool]]:
    """Each segment's kind and length, and for a run whether it was sealed (closed)."""
    return [
        (ChunkRun, len(s), s.texts is None) if type(s) is ChunkRun else (SessionEvent, 1, True)
        for s in log.segments()
    ]


def extend_outcome(log: EventLog, segments: list[SessionEvent | ChunkRun]) -> Any:
    """*log* extended by *segments*: its events and segment shape, or the error."""
    try:
        log.extend_segments(segments)
    except ValueError as error:
        return f"{error}"
    return as_json(log), segment_shape(log)


@settings(max_examples=40, deadline=None)
@given(session_logs(), st.lists(st.booleans(), max_size=60))
def test_extending_by_segments_keeps_each_as_it_is(
    log: list[dict[str, Any]], whole: list[bool]
) -> None:
    stored = EventLog([SessionEvent.from_json(envelope) for envelope in log])
    # Each run of the stored log goes in whole, or as its members (each stays an event).
    segments: list[SessionEvent | ChunkRun] = []
    for number, segment in enumerate(stored.segments()):
        if type(segment) is ChunkRun and not (number < len(whole) and whole[number]):
            segments.extend(segment.members(segment.seq0, segment.end))
        else:
            segments.append(segment)
    at_once = EventLog()
    at_once.extend_segments(segments)
    assert as_json(at_once) == as_json(stored)
    assert segment_shape(at_once) == [
        (ChunkRun, len(item), item.texts is None)
        if type(item) is ChunkRun
        else (SessionEvent, 1, True)
        for item in segments
    ]
    assert extend_outcome(EventLog(), segments) == extend_outcome_pure(segments)
    # It goes on as any log: a delta appended after it starts a run of its own.
    last = stored[-1] if len(stored) else None
    if last is not None:
        appended = SessionEvent(last.type, len(at_once), last.time, last.data)
        at_once.append(appended)
        assert at_once[-1] == appended
    runs = [item for item in segments if type(item) is ChunkRun and item.seq0 > 0]
    if runs:
        assert extend_outcome(EventLog(), runs[:1]) == extend_outcome_pure(runs[:1])
        with pytest.raises(ValueError, match="cannot follow"):
            EventLog().extend_segments(runs[:1])


def extend_outcome_pure(segments: list[SessionEvent | ChunkRun]) -> Any:
    """``extend_outcome`` with the compiled loop switched off."""
    saved = eventlog_module._extend_slots
    eventlog_module._extend_slots = None
    try:
        return extend_outcome(EventLog(), segments)
    finally:
        eventlog_module._extend_slots = saved


def test_extending_by_segments_closes_an_open_run_first() -> None:
    # A run built from streamed deltas, then an event, a delta of the same block, or a
    # whole run: the open run is sealed and never extended by what follows.
    def chunk(seq: int, step: int) -> SessionEvent:
        data = text_delta(str(seq), step=step)
        return SessionEvent.from_json(
            {"type": "assistant/chunk", "seq": seq, "time": seq, "data": data}
        )

    stored = EventLog([chunk(seq, 1 if seq < 5 else 2) for seq in range(8)])
    whole = list(stored.segments())[-1]
    assert type(whole) is ChunkRun
    assert whole.seq0 == 5
    step_end = SessionEvent.from_json({"type": "step/end", "seq": 3, "time": 3, "data": {}})
    for after in ([step_end], [chunk(3, 1)], [chunk(3, 1), chunk(4, 1), whole]):
        for compiled in (True, False):
            log = EventLog([chunk(0, 1), chunk(1, 1), chunk(2, 1)])
            assert segment_shape(log) == [(ChunkRun, 3, False)]
            saved = eventlog_module._extend_slots
            eventlog_module._extend_slots = saved if compiled else None
            try:
                log.extend_segments(after)
            finally:
                eventlog_module._extend_slots = saved
            assert segment_shape(log)[0] == (ChunkRun, 3, True), "the run was left open"
            assert len(segment_shape(log)) == 1 + len(after)


def restore_summary(session: Session) -> tuple[Any, ...]:
    """What a restored session shows: its events, surface, messages and where it goes live."""
    return (
        as_json(session.events),
        session.surface.nodes,
        orjson.dumps(session.derive_messages()),
        session.first_live_seq,
    )


@settings(max_examples=40, deadline=None)
@given(session_logs())
def test_restoring_a_stored_log_whole_equals_restoring_it_event_by_event(
    log: list[dict[str, Any]],
) -> None:
    # A log of the store's read path is taken whole, its events and runs shared, and only
    # its loose events are checked; a list goes event by event. Both must end the same.
    header = SessionHeader(id="r", created_at=0)
    events = [SessionEvent.from_json(envelope) for envelope in log]
    stored = EventLog(events)
    whole = Session.restore(header, stored, clock=lambda: 7)
    one_by_one = Session.restore(header, events, clock=lambda: 7)
    assert restore_summary(whole) == restore_summary(one_by_one)
    assert as_json(stored) == as_json(events)  # the stored log itself is unchanged
    whole.append("x/note", {}, ignorable=True)  # and it never sees the session's appends
    assert len(stored) == len(events)


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (SessionEvent("x/note", 9, 0, {}), "SEQ_GAP"),
        (SessionEvent("user/message", 4, 0, {"id": "x"}, surface_op="append"), "BAD_MESSAGE"),
        (SessionEvent("x/note", 4, 0, {}, surface_op="append"), "NOT_SURFACE_TYPE"),
    ],
)
def test_a_stored_log_restored_whole_fails_where_event_by_event_fails(
    bad: SessionEvent, code: str
) -> None:
    header = SessionHeader(id="r", created_at=0)
    session = Session.create("s")
    streamed(session, [text_delta(str(i)) for i in range(4)])
    events = [*session.events, bad, SessionEvent("x/note", 5, 0, {})]  # a run, then *bad*
    stored = EventLog(events)
    before = as_json(stored)
    for seed in (stored, events):
        with pytest.raises(SeedError) as caught:
            Session.restore(header, seed)
        assert (caught.value.code, caught.value.index) == (code, 4)
    assert as_json(stored) == before


def test_the_first_loose_event_outside_skips_ignorable_ones_and_runs() -> None:
    note = {"type": "x/note", "time": 0, "data": {}}
    deltas = [
        {"type": "assistant/chunk", "seq": seq, "time": 0, "data": text_delta(str(seq))}
        for seq in range(2, 6)
    ]
    log = EventLog(
        SessionEvent.from_json(envelope)
        for envelope in [
            {**note, "seq": 0, "ignorable": True},
            {**note, "seq": 1, "type": "x/known"},
            *deltas,
            {**note, "seq": 6, "type": "x/later"},
        ]
    )
    assert [type(s) for s in log.segments()][2] is ChunkRun
    for compiled in (True, False):
        saved = eventlog_module._loose_outside
        eventlog_module._loose_outside = saved if compiled else None
        try:
            assert log.first_loose_outside({"x/known"}) == (6, log[6])
            assert log.first_loose_outside({"x/known"}, 7) is None
            assert log.first_loose_outside({"x/known", "x/later"}) is None
            assert log.first_loose_outside(set()) == (1, log[1])
        finally:
            eventlog_module._loose_outside = saved
