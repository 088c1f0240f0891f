"""``FaultyStore``: any ``LogStore`` with write faults injected, for tests.

It passes every primitive through to the store it wraps and, on request, fails a write
before it reaches the medium (a full disk, an I/O error) or after it landed (a reply lost
to a cancelled caller). Wrap a backend's store in a fresh policy to use it::

    faulty = FaultyStore(backend.log_store)
    persistence = SessionPersistence(faulty, event_types=backend.event_types)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, final

from sessionledger.model._events import SessionHeader
from sessionledger.storage._logstore import Batch, LogStore, RawLog, Repair, RepairReceipt

__all__ = ["FaultyStore", "Write"]

_T = TypeVar("_T")

#: What a write hook receives: the batch, or the repair, about to be (or just) written.
Write = Batch | Repair


@final
class FaultyStore(LogStore):
    """Pass every call to *inner*; ``before_write`` and ``after_write`` hooks, called
    with each write (``write_batch``'s batch, ``commit_repair``'s repair), may raise to
    inject a fault. ``writes`` counts the writes attempted; ``closed`` tells whether
    ``close`` was called (it closes *inner* too)."""

    def __init__(self, inner: LogStore) -> None:
        self.inner = inner
        self.scheme = inner.scheme
        self.can_tear = inner.can_tear
        self.quarantines = inner.quarantines
        self.max_row_members = inner.max_row_members
        self.max_row_bytes = inner.max_row_bytes
        #: Called before a write reaches *inner*; raising fails it with nothing written.
        self.before_write: Callable[[Write], None] | None = None
        #: Called after *inner* wrote it; raising loses the reply of a write that landed.
        self.after_write: Callable[[Write], None] | None = None
        self.writes = 0
        self.closed = False

    def fail_next_writes(self, *errors: BaseException) -> None:
        """Make the next ``len(errors)`` writes raise these errors, writing nothing."""
        pending = list(errors)

        def fail(write: Write) -> None:
            if pending:
                raise pending.pop(0)

        self.before_write = fail

    async def _written(self, write: Write, attempt: Callable[[], Awaitable[_T]]) -> _T:
        self.writes += 1
        if self.before_write is not None:
            self.before_write(write)
        done = await attempt()
        if self.after_write is not None:
            self.after_write(write)
        return done

    async def read_log(self, session_id: str, from_seq: int = 0) -> RawLog | None:
        return await self.inner.read_log(session_id, from_seq)

    async def read_revision(self, session_id: str) -> str | None:
        return await self.inner.read_revision(session_id)

    async def write_batch(self, batch: Batch) -> bool:
        return await self._written(batch, lambda: self.inner.write_batch(batch))

    async def commit_repair(self, repair: Repair) -> RepairReceipt | None:
        return await self._written(repair, lambda: self.inner.commit_repair(repair))

    async def list_headers(self) -> list[tuple[Mapping[str, Any], str]]:
        return await self.inner.list_headers()

    async def delete_log(self, session_id: str) -> bool:
        return await self.inner.delete_log(session_id)

    async def claim(self, session_id: str) -> None:
        await self.inner.claim(session_id)

    async def release(self, session_id: str) -> None:
        await self.inner.release(session_id)

    async def close(self) -> None:
        self.closed = True
        await self.inner.close()

    def abandon(self) -> None:
        self.closed = True
        self.inner.abandon()

    def locate(self, header: SessionHeader) -> str | None:
        return self.inner.locate(header)
