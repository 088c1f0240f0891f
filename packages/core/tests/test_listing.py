"""Listing, search and prune at the core: the reference rules, cursors, time and filter
parsing, and the ``Ledger`` API over them (the contract kit checks every backend)."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger import Ledger, QueryError
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._session import Session
from sessionledger.model._vocabulary import tool_result, user_message
from sessionledger.storage._listing import (
    SessionInfo,
    encode_cursor,
    make_query,
    parse_duration,
    parse_meta_filter,
    parse_when,
    select,
)
from sessionledger.storage._memory import MemoryPersistence
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger.views._searching import indexed_texts, matches, message_text, snippet, words
from sessionledger.views._summaries import SessionSummary, summarize


def _info(session_id: str, created: int, last: int | None, **header: Any) -> SessionInfo:
    summary = SessionSummary() if last is None else SessionSummary(1, last, last, None)
    return SessionInfo(SessionHeader(id=session_id, created_at=created, **header), "r", summary)


# -- summaries ------------------------------------------------------------------------


def test_a_summary_folded_batch_by_batch_equals_the_summary_of_the_whole_log() -> None:
    session = Session.create("s", clock=itertools.count(1_000, 3).__next__)
    closed_turn(session, 1)
    open_turn_with_pending_call(session, 2)
    events = list(session.events)
    whole = summarize(events)
    assert whole == SessionSummary(len(events), events[0].time, events[-1].time, 2)
    for size in (1, 2, 5, len(events)):
        folded = SessionSummary()
        for start in range(0, len(events), size):
            folded = folded.after(events[start : start + size])
        assert folded == whole, size
    assert (
        summarize(
            events[: events.index(next(e for e in events if e.type == "turn/end")) + 1]
        ).open_turn
        is None
    )
    assert SessionSummary.from_json(whole.to_json()) == whole
    for bad in (None, [], {"events": -1}, {"events": 1, "lastActivity": "x"}, {"events": True}):
        assert SessionSummary.from_json(bad) is None, bad


def test_a_turn_start_without_a_number_leaves_turn_minus_one_open() -> None:
    event = SessionEvent.from_json({"type": "turn/start", "seq": 0, "time": 5, "data": {}})
    assert summarize([event]).open_turn == -1
    assert SessionSummary().after([event]).open_turn == -1


# -- the reference listing rules ------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5) | st.none()), min_size=0, max_size=25),
    st.integers(1, 7),
    st.sampled_from(["last_activity", "created"]),
)
def test_paging_with_cursors_visits_each_session_once_in_order(
    times: list[tuple[int, int | None]], limit: int, order: str
) -> None:
    infos = [_info(f"id{index:02d}", created, last) for index, (created, last) in enumerate(times)]
    whole = select(infos, make_query(order=order))
    seen: list[SessionInfo] = []
    cursor = None
    while True:
        query = make_query(order=order, limit=limit, after=cursor)
        rows = select(infos, query)
        page = rows[:limit]
        seen.extend(page)
        if len(rows) <= limit:
            break
        cursor = encode_cursor(query, page[-1])
    assert [info.id for info in seen] == [info.id for info in whole]
    keys = [
        (-(info.last_activity if order == "last_activity" else info.header.created_at), info.id)
        for info in whole
    ]
    assert keys == sorted(keys)


@pytest.mark.parametrize("bound", [2**64, 2**70, -(2**70)])
def test_a_time_bound_beyond_64_bits_pages_with_cursors(bound: int) -> None:
    # Such a bound keeps every row or none; it once made the cursor's fingerprint fail
    # with orjson's TypeError as soon as a page had a next one.
    infos = [_info(f"id{index}", 1, 10 + index) for index in range(3)]
    keep = "until" if bound > 0 else "since"
    whole = select(infos, make_query(**{keep: bound}))
    assert [info.id for info in whole] == ["id2", "id1", "id0"]
    query = make_query(limit=1, **{keep: bound})
    cursor = encode_cursor(query, select(infos, query)[0])
    after = make_query(limit=1, after=cursor, **{keep: bound})
    assert [info.id for info in select(infos, after)][:1] == ["id1"]
    with pytest.raises(QueryError, match="other filters"):
        make_query(limit=1, after=cursor, **{keep: bound + 1})  # another query's cursor


def test_filters_compare_titles_without_ascii_case_and_meta_by_json_type() -> None:
    infos = [
        _info("a", 1, 10, title="Weekly REPORT", meta={"n": 1}),
        _info("b", 1, 20, title="Élan report", meta={"n": True}),
        _info("c", 1, 30, title="élan", meta={"n": "1"}),
        _info("d", 1, 40, meta={"n": None}),
        _info("e", 1, None),
    ]

    def ids(**filters: Any) -> list[str]:
        return [info.id for info in select(infos, make_query(**filters))]

    assert ids(title="report") == ["b", "a"]
    assert ids(title="ÉLAN") == ["b"]  # only ASCII letters fold
    assert ids(meta={"n": 1}) == ["a"]
    assert ids(meta={"n": True}) == ["b"]
    assert ids(meta={"n": "1"}) == ["c"]
    assert ids(meta={"n": None}) == ["d"]
    assert ids(since=20, until=40) == ["c", "b"]
    assert ids(until=2) == ["e"]  # no event: its creation time stands in


def test_bad_listing_arguments_are_query_errors() -> None:
    page_cursor = encode_cursor(make_query(limit=1), _info("a", 1, 1))
    bad: list[dict[str, Any]] = [
        {"order": "size"},
        {"limit": 0},
        {"limit": True},
        {"title": ""},
        {"meta": {"n": 1.5}},
        {"meta": {"": 1}},
        {"meta": ["n"]},
        {"since": "yesterday"},
        {"after": "@@@"},
        {"after": page_cursor, "title": "x"},  # another query's cursor
    ]
    for arguments in bad:
        with pytest.raises(QueryError) as raised:
            make_query(**arguments)
        assert raised.value.code == "BAD_QUERY"
    assert make_query(limit=1, after=page_cursor).after == (1, "a")


def test_times_durations_and_meta_filters_parse_as_the_command_line_gives_them() -> None:
    now = 1_800_000_000_000
    assert parse_duration("30d", "x") == 30 * 86_400_000
    assert parse_duration("90m", "x") == 90 * 60_000
    assert parse_duration(datetime.timedelta(hours=2), "x") == 7_200_000
    assert parse_when("2h", "x", now=now) == now - 7_200_000
    midnight = int(datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC).timestamp() * 1000)
    assert parse_when("2026-11-30", "x", now=now) == midnight
    assert parse_when("2026-11-30T01:00+01:00", "x", now=now) == midnight
    for bad in ("", "30", "3 days", "-1d", "1y"):
        with pytest.raises(QueryError):
            parse_duration(bad, "x")
    with pytest.raises(QueryError):
        parse_when("soon", "x", now=now)
    assert parse_meta_filter(["user=ana", "n=3", "ok=true", 'id="7"', "x=null", "a=[1]"]) == {
        "user": "ana",
        "n": 3,
        "ok": True,
        "id": "7",
        "x": None,
        "a": "[1]",
    }
    for bad in (["novalue"], ["=v"], ["k=1", "k=2"]):
        with pytest.raises(QueryError):
            parse_meta_filter(bad)


# -- search words -----------------------------------------------------------------------


def test_words_matching_and_snippets() -> None:
    assert words("Zebra_stripes, and ZEBRA!") == ("zebra", "stripes", "and")
    assert matches("The quick brown fox", ("quick", "fox"))
    assert not matches("The quick brown fox", ("quick", "cat"))
    assert not matches("foxes", ("fox",))  # whole words only
    text = "word " * 30 + "needle in the middle " + "tail " * 60
    piece = snippet(text, ("needle",))
    assert "needle" in piece
    assert piece.startswith("…")
    assert piece.endswith("…")
    assert len(piece) <= 170


def test_only_message_text_is_indexed() -> None:
    session = Session.create("s", clock=itertools.count(1).__next__)
    closed_turn(session, 1, prompt="find me", answer="streamed answer")
    events = list(session.events)
    found = {item.type for item in indexed_texts(events)}
    assert found == {"user/message", "assistant/message", "tool/result"}
    assert all(
        "streamed" not in (message_text(e) or "") for e in events if e.type == "assistant/chunk"
    )
    result = SessionEvent.from_json(
        {
            "type": "tool/result",
            "seq": 0,
            "time": 1,
            "data": {"turn": 1, "step": 1, "message": tool_result("c1", "tool said hello")},
        }
    )
    assert message_text(result) == "tool said hello"
    assert (
        message_text(
            SessionEvent.from_json({"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}})
        )
        is None
    )


# -- the Ledger API -----------------------------------------------------------------------


async def test_the_ledger_lists_searches_prunes_and_audits() -> None:
    clock = itertools.count(1_700_000_000_000, 1_000).__next__
    store: dict[str, Any] = {}
    async with Ledger(
        MemoryPersistence(store=store), load_entrypoints=False, clock=clock
    ) as ledger:
        for number in range(6):
            session = ledger.create(f"s{number}", title=f"task {number}")
            session.append(
                "user/message", user_message(f"note {number} apple"), surface_op="append"
            )
            await ledger.flush(session)
        with pytest.raises(QueryError):
            ledger.list_sessions(limit=-1)  # refused where it is called, not when awaited
        page = await ledger.list_sessions(limit=4)
        assert [info.id for info in page.sessions] == ["s5", "s4", "s3", "s2"]
        assert [info.id async for info in ledger.list_sessions(limit=4)] == [
            f"s{n}" for n in range(5, -1, -1)
        ]
        assert [hit.session_id for hit in await ledger.search("apple", limit=2)] == ["s5", "s4"]
        plan = await ledger.prune(keep_last=2, dry_run=False)
        assert plan.deleted == ()  # every session is live in this ledger
        assert {reason for _, reason in plan.skipped} == {"this process writes it"}
    async with Ledger(MemoryPersistence(store=store), load_entrypoints=False) as ledger:
        plan = await ledger.prune(keep_last=2, dry_run=False)
        assert plan.deleted == ("s3", "s2", "s1", "s0")
        assert [info.id async for info in ledger.list_sessions()] == ["s5", "s4"]
        *earlier, begin, end = await ledger.audit()
        assert [record["phase"] for record in earlier] == ["begin", "end"]  # deleted nothing
        assert (begin["phase"], end["phase"], begin["id"]) == ("begin", "end", end["id"])
        assert end["deleted"] == list(plan.deleted)
        assert end["bytesFreed"] == plan.bytes_freed > 0
        assert (await ledger.reindex()).reindexed == 2
    bare = Ledger(load_entrypoints=False)
    assert (await bare.list_sessions()).sessions == ()
    assert await bare.search("x") == []
    assert await bare.audit() == []
    await bare.close()
