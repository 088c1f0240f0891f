"""The behaviours the SDK tests its own session stores for, on a ``LedgerSession``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents.memory import Session, SessionSettings

from sessionledger import JsonValueError, Ledger, open_store
from sessionledger_openai_agents import REMOVED_KEY, LedgerSession


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def answer(text: str, id: str) -> dict[str, Any]:
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def texts(messages: Any) -> list[str]:
    return [block["text"] for message in messages for block in message["content"]]


async def test_it_is_a_session_of_the_sdk(store_url: str) -> None:
    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("proto", ledger, session_settings={"limit": 2})
        assert isinstance(session, Session)
        assert session.session_id == "proto"
        assert session.session_settings == SessionSettings(limit=2)
        await session.add_items([user("a"), user("b"), user("c")])
        assert await session.get_items() == [user("b"), user("c")]  # the settings' limit
        assert await session.get_items(limit=3) == [user("a"), user("b"), user("c")]


async def test_get_items_limit_returns_the_latest_in_order(store_url: str) -> None:
    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("limit", ledger)
        items = [user("q1"), answer("a1", "m1"), user("q2"), answer("a2", "m2")]
        await session.add_items(items[:2])
        await session.add_items(items[2:])
        assert await session.get_items() == items
        assert await session.get_items(limit=1) == items[-1:]
        assert await session.get_items(limit=3) == items[1:]
        assert await session.get_items(limit=10) == items
        assert await session.get_items(limit=0) == []
        returned = await session.get_items()
        returned[0]["content"] = "changed"  # a copy: the log is not touched
        assert await session.get_items() == items


async def test_pop_item_on_an_empty_session_is_none(store_url: str) -> None:
    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("empty", ledger)
        assert await session.pop_item() is None
        assert await session.get_items() == []
        await session.add_items([user("only")])
        assert await session.pop_item() == user("only")
        assert await session.pop_item() is None


async def test_pop_item_hides_the_latest_and_the_transcript_keeps_it(store_url: str) -> None:
    items = [user("q1"), answer("a1", "m1"), user("q2"), answer("a2", "m2")]
    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("pop", ledger)
        await session.add_items(items[:2])
        await session.add_items(items[2:])
        assert await session.pop_item() == items[3]
        assert await session.pop_item() == items[2]
        assert await session.get_items() == items[:2]
        live = await session.session()
        assert texts(live.transcript()) == ["q1", "a1", "q2", "a2"]
        assert texts(live.derive_messages()) == ["q1", "a1"]
        tombstones = [e for e in live.events if REMOVED_KEY in e.data]
        assert [e.data[REMOVED_KEY] for e in tombstones] == ["pop_item", "pop_item"]
        assert all(e.source_event_seqs for e in tombstones)
        # A popped item can be added again, and the session carries on.
        await session.add_items([user("q2 again")])
        assert await session.get_items() == [*items[:2], user("q2 again")]
    async with Ledger.open(store_url) as ledger:  # durable, as the session left it
        assert await LedgerSession("pop", ledger).get_items() == [*items[:2], user("q2 again")]


async def test_clear_session_hides_everything_and_destroys_nothing(store_url: str) -> None:
    items = [user("q1"), answer("a1", "m1")]
    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("clear", ledger)
        await session.clear_session()  # nothing to clear: nothing written
        assert (await session.session()).seq == 0
        await session.add_items(items)
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        live = await session.session()
        assert texts(live.transcript()) == ["q1", "a1"]
        assert live.events[-1].data[REMOVED_KEY] == "clear_session"
        await session.add_items([user("fresh start")])
        assert await session.get_items() == [user("fresh start")]
    async with Ledger.open(store_url) as ledger:
        assert await LedgerSession("clear", ledger).get_items() == [user("fresh start")]
        inspected = await ledger.inspect("clear")
        assert texts(inspected.transcript()) == ["q1", "a1", "fresh start"]


async def test_add_items_is_durable_when_it_returns(store_url: str) -> None:
    # A write window far longer than the test: only the flush in add_items writes.
    async with Ledger.open(store_url, write_delay_ms=600_000) as ledger:
        session = LedgerSession("durable", ledger)
        await session.add_items([user("q1"), answer("a1", "m1")])
        store = open_store(store_url)
        try:
            stored = await store.read_from("durable", 0)
            assert len(stored) == (await session.session()).seq
        finally:
            await store.close()


async def test_concurrent_add_items_lose_nothing(store_url: str) -> None:
    tasks, batches, size = 8, 6, 3

    def batch(task: int, number: int) -> list[dict[str, Any]]:
        return [user(f"t{task}-b{number}-i{i}") for i in range(size)]

    async def writer(session: LedgerSession, task: int) -> None:
        for number in range(batches):
            await session.add_items(batch(task, number))
            await asyncio.sleep(0)

    async with Ledger.open(store_url) as ledger:
        sessions = [LedgerSession("busy", ledger) for _ in range(2)]  # two handles, one log
        await asyncio.gather(*(writer(sessions[task % 2], task) for task in range(tasks)))
        items = await sessions[0].get_items()
    async with Ledger.open(store_url) as ledger:
        assert await LedgerSession("busy", ledger).get_items() == items
    # Exact oracle: every batch once, contiguous, and each task's batches in order.
    assert len(items) == tasks * batches * size
    chunks = [items[i : i + size] for i in range(0, len(items), size)]
    expected = {
        (task, number): batch(task, number) for task in range(tasks) for number in range(batches)
    }
    seen: dict[int, list[int]] = {}
    for chunk in chunks:
        key = next(k for k, v in expected.items() if v == chunk)
        seen.setdefault(key[0], []).append(key[1])
        del expected[key]
    assert not expected
    assert seen == {task: list(range(batches)) for task in range(tasks)}


async def test_a_bad_item_refuses_the_whole_batch(store_url: str) -> None:
    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("bad", ledger)
        await session.add_items([user("kept")])
        before = (await session.session()).seq
        with pytest.raises(JsonValueError) as caught:
            await session.add_items([user("fine"), {"role": "user", "content": {1, 2}}])
        assert caught.value.path == "items[1].content"
        assert (await session.session()).seq == before
        assert await session.get_items() == [user("kept")]
