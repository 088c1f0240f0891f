"""PostgreSQL for the tests; ``pg_url`` (the server) comes from the repository's conftest.

Each test gets its own PostgreSQL schema (``pg_schema``), dropped afterwards, so tests
never see each other's rows; the contract kit, which builds many stores, reuses one
schema and empties it before each test instead (cheaper than DDL per test).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import asyncpg
import pytest

from sessionledger.storage._persistence import SessionPersistence
from sessionledger_postgres import PostgresPersistence
from sessionledger_postgres.plugin import parse_postgres_url
from sessionledger_postgres.testing import PG_URL_ENV, drop_schema, with_options


def base_dsn(url: str) -> str:
    """Return the DSN asyncpg takes for *url* (sessionledger's options removed)."""
    return parse_postgres_url(url)[0]


@pytest.fixture
async def pg_schema(pg_url: str) -> AsyncIterator[str]:
    """A fresh, not yet existing schema name; dropped after the test."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield schema
    await drop_schema(pg_url, schema)


@pytest.fixture
async def make_store(
    pg_url: str, pg_schema: str
) -> AsyncIterator[Callable[..., PostgresPersistence]]:
    """Build stores on the test's schema; every one built is closed after the test."""
    built: list[PostgresPersistence] = []

    def make(**options: Any) -> PostgresPersistence:
        dsn, parsed = parse_postgres_url(with_options(pg_url, schema=pg_schema))
        store = PostgresPersistence(dsn, **{**parsed, **options})
        built.append(store)
        return store

    yield make
    for store in built:
        await store.close()


@pytest.fixture(scope="session")
def contract_schema(pg_url: str) -> Iterator[str]:
    """The schema the contract kit runs in; dropped at the end (a throwaway server goes
    away whole anyway)."""
    schema = f"contract_{uuid.uuid4().hex[:8]}"
    yield schema
    if os.environ.get(PG_URL_ENV, "").strip():
        asyncio.run(drop_schema(pg_url, schema))


@pytest.fixture
async def contract_factory(
    pg_url: str, contract_schema: str
) -> AsyncIterator[Callable[..., SessionPersistence]]:
    """The contract kit's factory: new stores over one emptied schema."""
    conn = await asyncpg.connect(base_dsn(pg_url))
    try:
        exists = await conn.fetchval(
            "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = 'sessions'",
            contract_schema,
        )
        if exists:
            await conn.execute(f'TRUNCATE "{contract_schema}".sessions CASCADE')
    finally:
        await conn.close()
    built: list[SessionPersistence] = []
    dsn, _ = parse_postgres_url(pg_url)

    def factory(**options: Any) -> SessionPersistence:
        store = PostgresPersistence(dsn, schema=contract_schema, pool_min_size=0, **options)
        built.append(store)
        return store

    yield factory
    for store in built:
        await store.close()
