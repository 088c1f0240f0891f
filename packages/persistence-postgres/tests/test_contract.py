"""The shared persistence contract, run unchanged against ``PostgresPersistence``."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg
import pytest

from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.contract import PersistenceContract
from sessionledger_postgres import PostgresPersistence
from sessionledger_postgres.plugin import parse_postgres_url


class PostgresTamper:
    """Damage stored rows behind the backend's back, through a connection of its own.

    A PostgreSQL transaction cannot be torn by a crash, so a "torn tail" here is a
    committed trailing row whose JSON does not parse: what a foreign writer or a bad
    restore can leave, and what the read path must treat the same way.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def _run(
        self, backend: SessionPersistence, *statements: tuple[str, tuple[object, ...]]
    ) -> None:
        assert isinstance(backend, PostgresPersistence)
        conn = await asyncpg.connect(self.dsn)
        try:
            async with conn.transaction():
                for sql, args in statements:
                    await conn.execute(sql.replace("S.", f'"{backend.schema}".'), *args)
        finally:
            await conn.close()

    async def tear_tail(self, backend: SessionPersistence, session_id: str) -> None:
        await self._run(
            backend,
            (
                "INSERT INTO S.events (session_id, seq, type, time, data) "
                "SELECT id, next_seq, 'assistant/chunk', 0, '{\"turn\":1,\"step\":' "
                "FROM S.sessions WHERE id = $1",
                (session_id,),
            ),
            (
                "UPDATE S.sessions SET next_seq = next_seq + 1, revision = revision + 1 "
                "WHERE id = $1",
                (session_id,),
            ),
        )

    async def break_record(self, backend: SessionPersistence, session_id: str, index: int) -> None:
        await self._run(
            backend,
            (
                "UPDATE S.events SET data = substr(data, 1, length(data) - 3) || '?!' "
                "WHERE session_id = $1 AND seq = "
                "(SELECT seq FROM S.events WHERE session_id = $1 ORDER BY seq OFFSET $2 LIMIT 1)",
                (session_id, index),
            ),
        )

    async def set_version(self, backend: SessionPersistence, session_id: str, version: int) -> None:
        await self._run(
            backend, ("UPDATE S.sessions SET version = $2 WHERE id = $1", (session_id, version))
        )


class TestPostgresContract(PersistenceContract):
    @pytest.fixture
    def ledger_backend_factory(
        self, contract_factory: Callable[..., SessionPersistence]
    ) -> Callable[..., SessionPersistence]:
        return contract_factory

    @pytest.fixture
    def ledger_may_block_in(self) -> list[tuple[str, str]]:
        # asyncpg looks for ~/.pgpass (a stat, then a read) on the loop each time it
        # opens a connection without a password: pool growth and the claim connection.
        # Its parameter parsing is private, so the store cannot do it in a thread.
        return [("asyncpg/connect_utils.py", "_read_password_from_pgpass")]

    @pytest.fixture
    def ledger_backend_tamper(self, pg_url: str) -> PostgresTamper:
        return PostgresTamper(parse_postgres_url(pg_url)[0])
