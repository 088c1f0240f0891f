"""A live feed's reads of a JSONL log (docs/feed.md, "costs and limits"): after the first,
each reads only the bytes appended since, while the file still holds what the last read
saw; anything else (a log deleted and created anew, cut back, rewritten before the
offset, a torn tail) is read whole again, and what the feed yields is the stored log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sessionledger import EventTypeRegistry, SessionEvent, SessionHeader
from sessionledger.model._session import Session
from sessionledger.storage._committed import scan_log
from sessionledger.testing.builders import closed_turn
from sessionledger_jsonl import JsonlPersistence

CORE = EventTypeRegistry.with_core()


def turns(count: int) -> list[SessionEvent]:
    session = Session.create("s")
    for turn in range(1, count + 1):
        closed_turn(session, turn)
    return list(session.events)


def log_path(root: Path) -> Path:
    return next(root.rglob("s/session.jsonl"))


async def reads(root: Path) -> None:
    writer = JsonlPersistence(root, event_types=CORE)
    follower = JsonlPersistence(root, event_types=CORE).log_store
    events = turns(4)
    quarter = len(events) // 4
    await writer.create(SessionHeader(id="s", created_at=1))
    await writer.append("s", events[:quarter])

    first = await follower.read_durable("s", 0)
    assert first is not None
    assert len(first.records) >= quarter // 2  # the whole log
    await writer.append("s", events[quarter : 2 * quarter])
    second = await follower.read_durable("s", quarter)
    assert second is not None
    scanned = scan_log("s", second, contiguous_from=None)
    assert [event.to_json() for event in scanned.events] == [
        event.to_json() for event in events[quarter : 2 * quarter]
    ]  # only what was appended: no record of the first batch was read
    assert second.revision == await follower.read_revision("s")

    # A torn tail after the offset: nothing intact after it, so the read is whole (a read
    # from a seq holds the log's last record), and nothing new is committed.
    with log_path(root).open("ab") as file:
        file.write(b'{"type":"turn/start","seq":')
    torn = await follower.read_durable("s", 2 * quarter)
    assert torn is not None
    scanned = scan_log("s", torn, contiguous_from=0)
    assert scanned.end_seq == 2 * quarter
    log = log_path(root)
    log.write_bytes(log.read_bytes()[: -len(b'{"type":"turn/start","seq":')])

    # A feed behind the position reads the whole log.
    behind = await follower.read_durable("s", 0)
    assert behind is not None
    assert len(scan_log("s", behind, contiguous_from=0).events) == 2 * quarter

    # Rewritten before the offset (the same length, other bytes): read whole, and the
    # damage is seen, not skipped.
    await follower.read_durable("s", 2 * quarter)
    original = log.read_bytes()
    last_commit = original.rstrip(b"\n").rsplit(b"\n", 1)[1]
    log.write_bytes(original.replace(last_commit, last_commit.replace(b'"crc32":', b'"crc32": ')))
    rewritten = await follower.read_durable("s", 2 * quarter)
    assert rewritten is not None
    assert len(rewritten.records) > quarter
    log.write_bytes(original)

    # Deleted and created anew, longer: read whole (another incarnation).
    await follower.read_durable("s", 2 * quarter)
    await writer.delete("s")
    await writer.create(SessionHeader(id="s", created_at=2))
    await writer.append("s", events)
    anew = await follower.read_durable("s", 2 * quarter)
    assert anew is not None
    assert len(scan_log("s", anew, contiguous_from=0).events) == len(events)
    await writer.close()


def test_a_feed_reads_only_what_was_appended_while_the_file_holds_what_it_saw(
    tmp_path: Path,
) -> None:
    asyncio.run(reads(tmp_path))


def test_following_a_growing_log_yields_it_exactly(tmp_path: Path) -> None:
    async def run() -> None:
        writer = JsonlPersistence(tmp_path, event_types=CORE)
        reader = JsonlPersistence(tmp_path, event_types=CORE)
        events = turns(6)
        await writer.create(SessionHeader(id="s", created_at=1))
        feed = reader.follow("s")
        seen: list[SessionEvent] = []
        for start in range(0, len(events), 7):
            await writer.append("s", events[start : start + 7])
            while len(seen) < min(start + 7, len(events)):
                seen.append(await asyncio.wait_for(anext(feed), 10))
        assert [event.to_json() for event in seen] == [event.to_json() for event in events]
        await feed.aclose()
        await writer.close()
        await reader.close()

    asyncio.run(run())


def test_a_torn_tail_after_the_last_read_is_no_shorter_log(tmp_path: Path) -> None:
    """A writer that dies mid-write leaves half a batch after where a feed's last read
    ended: the feed goes on waiting, it does not take the log for a shorter one."""

    async def run() -> None:
        writer = JsonlPersistence(tmp_path, event_types=CORE)
        reader = JsonlPersistence(tmp_path, event_types=CORE)
        events = turns(2)
        await writer.create(SessionHeader(id="s", created_at=1))
        await writer.append("s", events)
        feed = reader.follow("s")
        seen = [await asyncio.wait_for(anext(feed), 10) for _ in events]
        with log_path(tmp_path).open("ab") as file:
            file.write(b'{"type":"turn/start","seq":' + str(len(events)).encode())
        pending = asyncio.ensure_future(anext(feed))
        done, _ = await asyncio.wait({pending}, timeout=0.5)
        assert not done, pending.result()  # no event, and no SessionDeletedError
        pending.cancel()
        assert [event.to_json() for event in seen] == [event.to_json() for event in events]
        await writer.close()
        await reader.close()

    asyncio.run(run())
