"""The contract's listing, search and retention clauses (docs/listing.md).

The oracle of each clause is the log itself: a summary must equal ``summarize`` of the
events ``read_from`` returns, a page what ``listing.select`` makes of those summaries, a
search hit what the core's word rule finds in those events. A backend that answers from
an index must agree with that, exactly.
"""

from __future__ import annotations

from typing import Any

import pytest

from sessionledger._errors import ConfigError, QueryError, SessionLockedError
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._session import Session
from sessionledger.model._vocabulary import user_message
from sessionledger.storage._listing import SessionInfo, make_query, parse_duration, select
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn, open_turn_with_pending_call
from sessionledger.testing.contract.base import (
    BackendFactory,
    ContractBase,
    Tamper,
    counting_clock,
    revision_of,
    second_writer,
)
from sessionledger.views._searching import indexed_texts, matches, words
from sessionledger.views._summaries import summarize

__all__ = ["ListingClauses"]

#: Titles and meta values the filters must tell apart: case, non-ASCII letters, and
#: JSON types that compare equal in Python (1, True) or print alike ("1").
_TITLES = ("Alpha report", "ALPHA", "älpha Beta", "beta", None)
_META: tuple[dict[str, Any] | None, ...] = (
    {"n": 1, "team": "core"},
    {"n": True},
    {"n": "1", "team": "core"},
    {"n": None},
    None,
    {"team": "ops"},
)


def _log(
    start: int, turns: int, *, prompt: str = "hello", open_call: bool = False
) -> list[SessionEvent]:
    session = Session.create("kit", clock=counting_clock(start))
    for turn in range(1, turns + 1):
        closed_turn(session, turn, prompt=f"{prompt} {turn}")
    if open_call:
        open_turn_with_pending_call(session, turns + 1)
    return list(session.events)


async def _store(
    backend: SessionPersistence,
    session_id: str,
    events: list[SessionEvent],
    *,
    created_at: int = 1_000,
    title: str | None = None,
    meta: dict[str, Any] | None = None,
    batches: int = 1,
) -> None:
    header = SessionHeader(
        id=session_id,
        created_at=created_at,
        cwd="/srv/project",
        title=title,
        meta=meta,  # type: ignore[arg-type]
    )
    await backend.create(header)
    size = max(1, -(-len(events) // batches))
    for start in range(0, len(events), size):
        await backend.append(session_id, events[start : start + size])


async def _fleet(backend: SessionPersistence, count: int = 18) -> None:
    """Sessions with every title and meta kind, some sharing their last activity time."""
    for index in range(count):
        # Every third pair shares a clock start: equal times, told apart by id.
        start = 1_700_000_000_000 + (index // 2) * 10_000
        await _store(
            backend,
            f"s{index:02d}",
            _log(start, 1 + index % 3, prompt=f"topic{index % 4} words"),
            created_at=1_000 + (count - index) * 3,
            title=_TITLES[index % len(_TITLES)],
            meta=_META[index % len(_META)],
            batches=1 + index % 3,
        )


async def _expected(backend: SessionPersistence) -> list[SessionInfo]:
    """The oracle: every stored session with the summary of the events it holds."""
    infos = []
    for info in await backend.list_snapshots():
        events = await backend.read_from(info.header.id, 0)
        infos.append(SessionInfo(info.header, info.revision, summarize(events)))
    return infos


def _rows(infos: Any) -> list[tuple[str, Any]]:
    return [(info.header.id, info.summary) for info in infos]


async def _all_pages(backend: SessionPersistence, limit: int, **filters: Any) -> list[SessionInfo]:
    seen: list[SessionInfo] = []
    cursor = None
    for _ in range(1_000):
        page = await backend.list_sessions(make_query(limit=limit, after=cursor, **filters))
        assert len(page.sessions) <= limit
        seen.extend(page.sessions)
        if page.next is None:
            return seen
        assert len(page.sessions) == limit
        cursor = page.next
    raise AssertionError("the listing never ended")


class ListingClauses(ContractBase):
    """Listing from summaries, paging, search and prune, checked against the log."""

    @pytest.mark.asyncio
    async def test_each_summary_is_the_summary_of_the_stored_log(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await _fleet(backend)
        await _store(backend, "open", _log(1_800_000_000_000, 1, open_call=True))
        expected = await _expected(backend)
        page = await backend.list_sessions()
        assert page.next is None
        assert sorted(_rows(page.sessions)) == sorted(_rows(expected))
        open_row = next(info for info in page.sessions if info.id == "open")
        assert open_row.open_turn == 2
        # A new backend object reads the same summaries back.
        again = backend_factory()
        assert sorted(_rows((await again.list_sessions()).sessions)) == sorted(_rows(expected))

    @pytest.mark.asyncio
    async def test_pages_follow_the_order_and_visit_every_session_once(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await _fleet(backend)
        expected = await _expected(backend)
        for order in ("last_activity", "created"):
            whole = select(expected, make_query(order=order))
            for limit in (1, 4, 7, 50):
                pages = await _all_pages(backend, limit, order=order)
                assert _rows(pages) == _rows(whole), (order, limit)

    @pytest.mark.asyncio
    async def test_filters_agree_with_the_reference_rules(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await _fleet(backend)
        expected = await _expected(backend)
        middle = sorted(info.last_activity for info in expected)[len(expected) // 2]
        cases: list[dict[str, Any]] = [
            {"title": "alpha"},
            {"title": "ALPHA"},
            {"title": "Älpha"},  # non-ASCII letters compare exactly
            {"title": "a b"},
            {"meta": {"n": 1}},
            {"meta": {"n": True}},
            {"meta": {"n": "1"}},
            {"meta": {"n": None}},
            {"meta": {"team": "core"}},
            {"meta": {"team": "core", "n": 1}},
            {"meta": {"missing": "x"}},
            {"since": middle},
            {"until": middle},
            {"since": middle, "until": middle + 20_000, "title": "beta"},
        ]
        for filters in cases:
            want = select(expected, make_query(**filters))
            assert _rows((await backend.list_sessions(make_query(**filters))).sessions) == _rows(
                want
            ), filters
            assert _rows(await _all_pages(backend, 3, **filters)) == _rows(want), filters

    @pytest.mark.asyncio
    async def test_a_cursor_is_only_good_for_its_own_query(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await _fleet(backend, 6)
        page = await backend.list_sessions(make_query(limit=2, title="alpha"))
        assert page.next is not None
        with pytest.raises(QueryError):
            make_query(limit=2, after=page.next)  # the same cursor, other filters
        for bad in ("", "not a cursor", "x" * 5000, page.next[:-3], 7):
            with pytest.raises(QueryError):
                make_query(limit=2, title="alpha", after=bad)

    @pytest.mark.asyncio
    async def test_summaries_follow_repair_and_delete(
        self, backend_factory: BackendFactory, ledger_backend_tamper: Tamper | None
    ) -> None:
        backend = backend_factory()
        await _store(backend, "crashed", _log(1_700_000_000_000, 1, open_call=True))
        await _store(backend, "gone", _log(1_700_000_100_000, 1))
        await _store(backend, "torn", _log(1_700_000_200_000, 2), batches=2)
        await _store(backend, "broken", _log(1_700_000_300_000, 3, prompt="salvaged"))
        await backend.close()
        expect = {"crashed", "torn", "broken"}
        if ledger_backend_tamper is not None and backend.log_store.can_tear:
            await ledger_backend_tamper.tear_tail(backend_factory(), "torn")
        fresh = backend_factory()
        if ledger_backend_tamper is not None and backend.log_store.quarantines:
            # A store without a quarantine refuses a salvage that deletes rows (repair.py).
            await ledger_backend_tamper.break_record(backend_factory(), "broken", 30)
            await fresh.salvage("broken")  # cuts inside what the summary described
        kept = await fresh.read_from("broken", 0)
        assert [hit.seq for hit in await fresh.search("salvaged", session="broken")] == sorted(
            (item.seq for item in indexed_texts(kept) if "salvaged" in item.text), reverse=True
        )
        await fresh.load("crashed")  # closes the interrupted turn
        await fresh.load("torn")  # cuts the torn tail (when there is one)
        await fresh.delete("gone")
        rows = {info.id: info for info in (await fresh.list_sessions()).sessions}
        assert set(rows) == expect
        for session_id in expect:
            events = await fresh.read_from(session_id, 0)
            assert rows[session_id].summary == summarize(events), session_id
        assert rows["crashed"].open_turn is None

    @pytest.mark.asyncio
    async def test_search_finds_message_words_newest_first(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await _fleet(backend, 8)
        alone = Session.create("kit", clock=counting_clock(1_900_000_000_000))
        alone.append(
            "user/message", user_message("Zebra_stripes, and Quokka!"), surface_op="append"
        )
        await _store(backend, "alone", list(alone.events))
        logs = {
            info.header.id: await backend.read_from(info.header.id, 0)
            for info in await backend.list_snapshots()
        }

        def oracle(
            text: str, limit: int = 20, session: str | None = None, types: Any = None
        ) -> list[tuple[str, int]]:
            query = words(text)
            found = [
                (item.time, session_id, item.seq, item.type)
                for session_id, events in logs.items()
                if session is None or session_id == session
                for item in indexed_texts(events)
                if (types is None or item.type in types) and matches(item.text, query)
            ]
            found.sort(key=lambda row: (-row[0], row[1], -row[2]))
            return [(row[1], row[2]) for row in found[:limit]]

        cases: list[tuple[str, dict[str, Any]]] = [
            ("topic1", {}),
            ("TOPIC2 words", {}),
            ("words", {"limit": 5}),
            ("words", {"session": "s03"}),
            ("hi there", {"types": ["assistant/message"]}),
            ("zebra", {}),  # "_" separates words
            ("stripes quokka", {}),
            ("nothing-like-this", {}),
            ("let", {}),  # chunk text is never searched: only the assistant message
        ]
        for text, options in cases:
            hits = await backend.search(text, **options)
            assert [(hit.session_id, hit.seq) for hit in hits] == oracle(text, **options), (
                text,
                options,
            )
            for hit in hits:
                assert any(word in hit.snippet.lower() for word in words(text)), hit
        await backend.delete("alone")
        assert await backend.search("quokka") == []
        for bad in ("", "  ...  "):
            with pytest.raises(QueryError):
                await backend.search(bad)
        with pytest.raises(QueryError):
            await backend.search("words", types=["assistant/chunk"])

    @pytest.mark.asyncio
    async def test_prune_shows_its_plan_and_deletes_only_when_told(
        self, backend_factory: BackendFactory
    ) -> None:
        writer = backend_factory()
        await _fleet(writer, 8)
        await writer.close()  # a backend never prunes the sessions it writes itself
        backend = backend_factory()
        before = {info.id: info.revision for info in await backend.list_snapshots()}
        expected = select(await _expected(backend), make_query())
        with pytest.raises(QueryError):
            await backend.prune()  # no criteria: never "delete everything"
        plan = await backend.prune(keep_last=3)
        assert [item.info.id for item in plan.sessions] == [info.id for info in expected[3:]]
        assert not plan.executed
        assert plan.deleted == ()
        assert {info.id: info.revision for info in await backend.list_snapshots()} == before
        newest = expected[0].last_activity
        cases: list[tuple[int, str, dict[str, Any]]] = [
            (newest + 500, "1s", {}),
            (newest + 25_000, "20s", {}),
            (newest + 60_000, "1s", {"meta": {"team": "core"}}),
            (newest + 15_000, "2s", {"keep_last": 6}),
        ]
        for now, age, filters in cases:
            aged = await backend.prune(older_than=age, now=now, **filters)
            cutoff = now - parse_duration(age, "age")
            kept = select(expected, make_query(meta=filters.get("meta")))[
                filters.get("keep_last", 0) :
            ]
            assert [item.info.id for item in aged.sessions] == [
                info.id for info in kept if info.last_activity < cutoff
            ], (now, age, filters)
        if not backend.log_store.keeps_audit:
            with pytest.raises(ConfigError):
                await backend.prune(keep_last=3, dry_run=False)
            return
        done = await backend.prune(keep_last=3, dry_run=False)
        assert done.executed
        assert set(done.deleted) == {info.id for info in expected[3:]}
        assert [info.id for info in (await backend.list_sessions()).sessions] == [
            info.id for info in expected[:3]
        ]
        records = await backend.audit()
        assert [record["phase"] for record in records[-2:]] == ["begin", "end"]
        assert records[-2]["sessions"] == [info.id for info in expected[3:]]
        assert sorted(records[-1]["deleted"]) == sorted(done.deleted)
        assert records[-1]["bytesFreed"] == done.bytes_freed
        # The audit log outlives the backend object.
        assert (await backend_factory().audit())[-2:] == records[-2:]

    @pytest.mark.asyncio
    async def test_stored_bytes_many_agrees_with_stored_bytes(
        self, backend_factory: BackendFactory
    ) -> None:
        writer = backend_factory()
        await _fleet(writer, 8)
        await writer.close()
        backend = backend_factory()
        store = backend.log_store
        ids = [info.id for info in await backend.list_snapshots()]
        # In any order, with an unknown id and a repeated one among them.
        asked = [ids[3], "nobody", *reversed(ids), ids[3]]
        assert await store.stored_bytes_many(asked) == [
            await store.stored_bytes(session_id) for session_id in asked
        ]
        assert await store.stored_bytes_many([]) == []
        # A prune's plan sizes its candidates so.
        plan = await backend.prune(keep_last=0)
        assert [item.bytes for item in plan.sessions] == [
            await store.stored_bytes(item.info.id) for item in plan.sessions
        ]
        assert len(plan.sessions) == len(ids)

    @pytest.mark.asyncio
    async def test_prune_skips_a_session_another_writer_holds(
        self, backend_factory: BackendFactory
    ) -> None:
        writer = backend_factory()
        await _fleet(writer, 4)
        await writer.close()
        backend = backend_factory()
        if not backend.log_store.keeps_audit:
            pytest.skip("the store keeps no audit log: prune never deletes")
        other = second_writer(backend_factory, backend)
        oldest = select(await _expected(backend), make_query())[-1].id
        await other.load(oldest)  # the other writer holds it now
        done = await backend.prune(keep_last=1, dry_run=False)
        assert oldest not in done.deleted
        assert any(id == oldest for id, _ in done.skipped)
        assert await revision_of(backend, oldest) is not None
        with pytest.raises(SessionLockedError):
            await backend.delete(oldest)

    @pytest.mark.asyncio
    async def test_reindex_rebuilds_what_the_log_says(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        await _fleet(backend, 6)
        report = await backend.reindex()
        assert report.reindexed == 6
        assert report.unreadable == ()
        assert sorted(_rows((await backend.list_sessions()).sessions)) == sorted(
            _rows(await _expected(backend))
        )
        assert (await backend.reindex("s01")).reindexed == 1
        assert [hit.session_id for hit in await backend.search("topic1")] == [
            hit.session_id for hit in await backend_factory().search("topic1")
        ]
