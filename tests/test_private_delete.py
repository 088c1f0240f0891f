"""Deleting leaves nothing (docs/durability.md, "deleting leaves nothing"): after
``delete`` or an executed ``prune``, no byte of any file of the store holds the deleted
sessions' text, while the sessions kept read back whole.

Every file under the store's directory is read whole and searched, with another user of
the store holding it open meanwhile (a WAL is not emptied by the last connection closing).
The secret goes everywhere a session's text is kept: messages, a tool's output, the title,
the meta, the search index, and on JSONL a torn tail that a repair moved into quarantine.
PostgreSQL keeps deleted rows in its table files until ``VACUUM FULL`` rewrites them (the
maintenance docs/durability.md documents), and in its write-ahead log until the server
recycles it: that test searches the table files after the maintenance. The self-check runs
the same oracle with the scrub taken out and shows it finds the text.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from sessionledger import Ledger, open_store
from sessionledger.testing.builders import closed_turn
from sessionledger_postgres.testing import ThrowawayServer

#: A word the tokenizer keeps whole and nothing else writes.
SECRET = "quokkasecret"
KEPT = "wombatkept"


def store_url(kind: str, root: Path) -> str:
    return f"sqlite:{root / 'ledger.db'}" if kind == "sqlite" else f"jsonl:{root / 'logs'}"


def traces(root: Path, word: str) -> dict[str, int]:
    """Each file under *root* that holds *word*, and how often."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            count = path.read_bytes().count(word.encode())
            if count:
                found[str(path.relative_to(root))] = count
    return found


async def fill(url: str, root: Path, kind: str) -> None:
    async with Ledger.open(url) as ledger:
        for name, word in (("kept", KEPT), ("secret", SECRET), ("old", SECRET)):
            session = ledger.create(name, title=f"{word} title", meta={"note": f"{word} meta"})
            for turn in range(1, 6):
                closed_turn(session, turn, prompt=f"{word} q {turn}", answer=f"{word} answer")
                await ledger.flush(session)
    if kind == "jsonl":  # a torn tail, moved into quarantine beside the log by a repair
        log = next((root / "logs").rglob("secret/session.jsonl"))
        with log.open("ab") as file:
            file.write(b'{"type":"user/message","seq":999,"data":"' + SECRET.encode())
        async with Ledger.open(url) as ledger:
            await ledger.release(await ledger.resume("secret"))
        assert any("quarantine" in name for name in traces(root, SECRET))


async def delete_and_prune(url: str) -> dict[str, int]:
    """Delete one secret session and prune the other while another store object holds the
    store open; return what the kept session's search finds."""
    other = open_store(url)
    try:
        await other.list_sessions()  # a reader, holding its connection
        async with Ledger.open(url) as ledger:
            await ledger.delete("secret")
            plan = await ledger.prune(older_than="0d", title="quokka", dry_run=False)
            assert plan.deleted == ("old",)
            hits = await ledger.search(KEPT)
        return {"hits": len(hits), "sessions": len((await other.list_sessions()).sessions)}
    finally:
        await other.close()


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_deleted_text_is_in_no_file_of_the_store(kind: str, tmp_path: Path) -> None:
    url = store_url(kind, tmp_path)
    asyncio.run(fill(url, tmp_path, kind))
    assert traces(tmp_path, SECRET), "the oracle must see the text before the deletion"
    kept = asyncio.run(delete_and_prune(url))
    assert traces(tmp_path, SECRET) == {}
    assert kept == {"hits": 10, "sessions": 1}
    assert traces(tmp_path, KEPT)  # the kept session's text is all still there


def test_the_oracle_finds_what_a_store_without_its_scrub_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Self-check: without the scrub (free pages and the WAL as SQLite leaves them), the
    same steps leave the text in the files, and the oracle says so."""
    from sessionledger_sqlite.store import SqliteLogStore

    async def no_scrub(self: SqliteLogStore) -> None:
        return None

    monkeypatch.setattr(SqliteLogStore, "scrub", no_scrub)
    url = store_url("sqlite", tmp_path)
    asyncio.run(fill(url, tmp_path, "sqlite"))
    asyncio.run(delete_and_prune(url))
    assert traces(tmp_path, SECRET) != {}


def test_postgresql_keeps_no_deleted_text_in_its_tables_after_the_maintenance(
    own_pg_server: ThrowawayServer,
) -> None:
    url, data = own_pg_server.url, own_pg_server.data_directory
    assert url is not None
    assert data is not None

    def tables(word: str) -> dict[str, int]:  # the write-ahead log aside (see above)
        return {name: n for name, n in traces(data, word).items() if "pg_wal" not in name}

    async def run() -> tuple[dict[str, int], dict[str, int]]:
        async with Ledger.open(url) as ledger:
            for name, word in (("kept", KEPT), ("secret", SECRET)):
                session = ledger.create(name, title=f"{word} title")
                for turn in range(1, 4):
                    closed_turn(session, turn, prompt=f"{word} q", answer=f"{word} a")
                    await ledger.flush(session)
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("CHECKPOINT")  # the pages on disk, as the oracle reads them
            before = tables(SECRET)
            async with Ledger.open(url) as ledger:
                await ledger.delete("secret")
            for table in ("events", "search_text", "sessions"):  # the maintenance
                await conn.execute(f"VACUUM FULL sessionledger.{table}")
            await conn.execute("CHECKPOINT")
        finally:
            await conn.close()
        return before, tables(SECRET)

    before, after = asyncio.run(run())
    assert before, "the oracle must see the text in the tables before the deletion"
    assert after == {}
    assert tables(KEPT)
