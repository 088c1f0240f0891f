"""The persistence contract kit, run unchanged against every first-party backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessionledger.memory import MemoryPersistence, MemoryStore
from sessionledger.persistence import SessionPersistence
from sessionledger.testing.contract import PersistenceContract


class MemoryTamper:
    """Damage a memory store the way a crash or a bad medium damages a file."""

    async def tear_tail(self, backend: SessionPersistence, session_id: str) -> None:
        assert isinstance(backend, MemoryPersistence)
        records = backend.raw_records(session_id)
        backend.replace_raw_records(session_id, [*records, records[-1][: len(records[-1]) // 2]])

    async def break_record(self, backend: SessionPersistence, session_id: str, index: int) -> None:
        assert isinstance(backend, MemoryPersistence)
        records = backend.raw_records(session_id)
        records[index] = records[index][:-3] + b"?!"
        backend.replace_raw_records(session_id, records)

    async def set_version(self, backend: SessionPersistence, session_id: str, version: int) -> None:
        assert isinstance(backend, MemoryPersistence)
        import orjson

        header = orjson.loads(backend.store[session_id].header)
        header["version"] = version
        backend.replace_raw_header(session_id, orjson.dumps(header))


def memory_factory(tmp_path: Path) -> Callable[..., SessionPersistence]:
    store: MemoryStore = {}
    return lambda **options: MemoryPersistence(store=store, **options)


BACKENDS: dict[str, tuple[Callable[[Path], Callable[..., SessionPersistence]], Any]] = {
    "memory": (memory_factory, MemoryTamper()),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TestContract(PersistenceContract):
    @pytest.fixture
    def ledger_backend_factory(
        self, backend_name: str, tmp_path: Path
    ) -> Callable[..., SessionPersistence]:
        return BACKENDS[backend_name][0](tmp_path)

    @pytest.fixture
    def ledger_backend_tamper(self, backend_name: str) -> Any:
        return BACKENDS[backend_name][1]
