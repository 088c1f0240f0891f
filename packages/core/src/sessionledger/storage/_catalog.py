"""``SessionCatalog``: listing, search, retention and reindex over a store (docs/listing.md).

The half of the policy that works across sessions: it pages through the summaries a store
keeps (computing, in memory, one the store could not trust: reading never writes),
searches message text (from the store's index, or by reading every log), plans and
carries out prunes with their audit records, and rebuilds summaries and indexes.
``SessionPersistence`` holds one and hands it the few things it needs from the
per-session half: the lock of each session, and what that half holds of a session.
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import heapq
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

from sessionledger._errors import (
    ConfigError,
    CorruptLogError,
    FormatUnsupportedError,
    HeaderError,
    LedgerError,
    QueryError,
    SessionLockedError,
    SessionNotFoundError,
)
from sessionledger.model._events import SessionHeader
from sessionledger.storage._cancellation import uninterrupted
from sessionledger.storage._committed import check_version, scan_log, stored_header
from sessionledger.storage._listing import (
    SessionInfo,
    SessionPage,
    SessionQuery,
    StoredSummary,
    encode_cursor,
    make_query,
    parse_duration,
    select,
)
from sessionledger.storage._logstore import LogStore, SearchRow
from sessionledger.storage._retention import PruneCandidate, PrunePlan, who_and_where
from sessionledger.views._searching import (
    SEARCHED_TYPES,
    SearchHit,
    TextQuery,
    indexed_texts,
    snippet,
    words,
)
from sessionledger.views._summaries import SessionSummary, summarize

logger = logging.getLogger("sessionledger")


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ReindexReport:
    """What ``reindex`` did: how many sessions' summaries and search texts it rebuilt, and
    the sessions it could not read (id and why), which keep what they had."""

    reindexed: int
    unreadable: tuple[tuple[str, str], ...] = ()


@final
class SessionCatalog:
    """Listing, search, prune and reindex over *store* (docs/listing.md), for the policy
    that holds it: *lock* is the lock that serializes operations on one session id,
    *in_use* says whether the policy writes a session (a prune leaves it alone), *forget*
    drops what it holds of a session just deleted, and *summary_rebuilt* takes up a
    rebuilt summary as the session's, if the policy writes it."""

    def __init__(
        self,
        store: LogStore,
        *,
        lock: Callable[[str], asyncio.Lock],
        in_use: Callable[[str], bool],
        forget: Callable[[str], None],
        summary_rebuilt: Callable[[str, SessionSummary], None],
    ) -> None:
        self._store = store
        self._lock = lock
        self._in_use = in_use
        self._forget = forget
        self._summary_rebuilt = summary_rebuilt

    async def list(self) -> builtins.list[SessionHeader]:
        """``SessionPersistence.list``."""
        return [info.header for info in await self.list_snapshots()]

    async def list_snapshots(self) -> builtins.list[SessionInfo]:
        """``SessionPersistence.list_snapshots``."""
        infos: builtins.list[SessionInfo] = []
        for header_json, revision in await self._store.list_headers():
            header = _listable_header(header_json)
            if header is not None:
                infos.append(SessionInfo(header, revision))
        infos.sort(key=lambda info: (info.header.created_at, info.header.id))
        return infos

    # -- listing, search, retention (docs/listing.md) ---------------------------------

    async def list_sessions(self, query: SessionQuery | None = None) -> SessionPage:
        """``SessionPersistence.list_sessions``: the store's own query where it has one,
        else a selection in memory over every summary."""
        query = query or SessionQuery()
        rows = await self._store.query_sessions(query)
        if rows is None:
            chosen = select(await self._all_summaries(), query)
        else:
            chosen = [info for row in rows if (info := await self._listed(row)) is not None]
        limit = query.limit
        if limit is None or len(chosen) <= limit:
            return SessionPage(tuple(chosen), None)
        page = tuple(chosen[:limit])
        return SessionPage(page, encode_cursor(query, page[-1]))

    async def _all_summaries(self) -> builtins.list[SessionInfo]:
        infos: builtins.list[SessionInfo] = []
        for row in await self._store.list_summaries():
            info = await self._listed(row)
            if info is not None:
                infos.append(info)
        return infos

    async def _listed(self, row: StoredSummary) -> SessionInfo | None:
        """The listing row of a store's *row*. A summary the store lacks (or cannot
        trust) is computed from the log for this listing only, and marked ``stale``
        (docs/listing.md, "reading never writes"); ``reindex`` and the next write store
        it. None for a header this build cannot read (logged, as
        ``list_snapshots`` does)."""
        header = _listable_header(row.header)
        if header is None:
            return None
        if row.summary is not None:
            return SessionInfo(header, row.revision, row.summary)
        async with self._lock(header.id):
            raw = await self._store.read_log(header.id)
        if raw is None:
            return None  # deleted meanwhile
        try:
            scan = scan_log(header.id, raw, contiguous_from=0)
        except LedgerError as error:
            logger.warning("session %r: cannot summarize its log: %s", header.id, error)
            problem = f"{error.code}: {error}"
            return SessionInfo(header, raw.revision, problem=problem, stale=True)
        return SessionInfo(header, raw.revision, summarize(scan.events), stale=True)

    async def search(
        self,
        text: str,
        *,
        limit: int = 20,
        session: str | None = None,
        types: Iterable[str] | None = None,
    ) -> builtins.list[SearchHit]:
        """``SessionPersistence.search``."""
        if type(text) is not str:
            raise QueryError(f"search text must be a string, got {type(text).__name__}")
        query_words = words(text)
        if not query_words:
            raise QueryError(f"search text {text!r} has no word to look for")
        if type(limit) is not int or limit < 1:
            raise QueryError(f"limit must be a positive integer, got {limit!r}")
        if session is not None and (type(session) is not str or not session):
            raise QueryError(f"session must be a non-empty string, got {session!r}")
        chosen: frozenset[str] | None = None
        if types is not None:
            chosen = frozenset(types) if not isinstance(types, str) else frozenset((types,))
            unknown = sorted(chosen - SEARCHED_TYPES)
            if unknown or not chosen:
                raise QueryError(
                    f"search covers the types {', '.join(sorted(SEARCHED_TYPES))}; "
                    f"got {', '.join(unknown) or 'none'}"
                )
        query = TextQuery(query_words, limit, session, chosen)
        if session is not None and await self._revision(session) is None:
            raise SessionNotFoundError("session not found", session_id=session)
        rows = await self._store.search_text(query)
        if rows is None:
            rows = await self._scan_texts(query)
        rows = heapq.nsmallest(query.limit, rows, key=_newest_first)
        return [
            SearchHit(
                row.session_id,
                row.text.seq,
                row.text.type,
                snippet(row.text.text, query_words),
                row.text.time,
            )
            for row in rows
        ]

    async def _revision(self, session_id: str) -> str | None:
        async with self._lock(session_id):
            return await self._store.read_revision(session_id)

    async def _scan_texts(self, query: TextQuery) -> builtins.list[SearchRow]:
        """Search by reading every log (a store without a text index)."""
        if query.session is not None:
            ids = [query.session]
        else:
            ids = [info.header.id for info in await self.list_snapshots()]
        found: builtins.list[SearchRow] = []
        for session_id in ids:
            async with self._lock(session_id):
                raw = await self._store.read_log(session_id)
            if raw is None:
                continue
            try:
                scan = scan_log(session_id, raw, contiguous_from=0)
            except LedgerError as error:
                logger.warning("search skips session %r: %s", session_id, error)
                continue
            for item in indexed_texts(scan.events):
                if query.types is not None and item.type not in query.types:
                    continue
                if query.matches(item.text):
                    found.append(SearchRow(session_id, item))
        return found

    async def prune(
        self,
        *,
        older_than: object = None,
        keep_last: int | None = None,
        title: str | None = None,
        meta: Mapping[str, Any] | None = None,
        dry_run: bool = True,
        now: int | None = None,
    ) -> PrunePlan:
        """``SessionPersistence.prune``."""
        if older_than is None and keep_last is None:
            raise QueryError(
                "prune needs older_than or keep_last: it never deletes every session by default"
            )
        age = None if older_than is None else parse_duration(older_than, "older_than")
        if keep_last is not None and (type(keep_last) is not int or keep_last < 0):
            raise QueryError(f"keep_last must be a non-negative integer, got {keep_last!r}")
        if type(dry_run) is not bool:
            raise QueryError(f"dry_run must be a bool, got {dry_run!r}")
        query = make_query(title=title, meta=meta)
        moment = int(time.time() * 1000) if now is None else now
        criteria: dict[str, Any] = {
            "olderThan": age,
            "keepLast": keep_last,
            "title": query.title,
            "meta": dict(query.meta) or None,
        }
        infos = list((await self.list_sessions(query)).sessions)
        if keep_last:
            infos = infos[keep_last:]
        if age is not None:
            infos = [info for info in infos if info.last_activity < moment - age]
        busy = tuple((info.id, "this process writes it") for info in infos if self._in_use(info.id))
        held = {item[0] for item in busy}
        chosen = [info for info in infos if info.id not in held]
        sizes = await self._store.stored_bytes_many([info.id for info in chosen])
        candidates = tuple(map(PruneCandidate, chosen, sizes))
        plan = PrunePlan(criteria, moment, candidates, skipped=busy)
        if dry_run:
            return plan
        if not self._store.keeps_audit:
            raise ConfigError(
                f"the {self._store.scheme} store keeps no audit log, so prune deletes nothing "
                "(every deletion it makes must be on record)"
            )
        # Begun, an executed prune ends whole: every deletion it starts and the record
        # after the last (docs/durability.md, "cancellation").
        return await uninterrupted(self._carry_out(plan, criteria))

    async def _carry_out(self, plan: PrunePlan, criteria: dict[str, Any]) -> PrunePlan:
        """Delete *plan*'s sessions, recorded in the audit log before the first deletion
        and after the last."""
        audit_id = uuid.uuid4().hex
        base = {"action": "prune", "id": audit_id, **who_and_where(), "criteria": criteria}
        await self._store.append_audit(
            {
                **base,
                "phase": "begin",
                "time": int(time.time() * 1000),
                "sessions": [item.info.id for item in plan.sessions],
                "bytes": plan.bytes,
            }
        )
        deleted: builtins.list[str] = []
        skipped = list(plan.skipped)
        for item in plan.sessions:
            try:
                gone = await self._delete_unchanged(item.info.id, item.info.revision)
            except SessionLockedError:
                skipped.append((item.info.id, "another writer holds it"))
                continue
            if gone:
                deleted.append(item.info.id)
            else:
                skipped.append((item.info.id, "it changed since the plan"))
        if deleted:
            await uninterrupted(self._store.scrub())
        done = dataclasses.replace(
            plan, executed=True, deleted=tuple(deleted), skipped=tuple(skipped), audit_id=audit_id
        )
        await self._store.append_audit(
            {
                **base,
                "phase": "end",
                "time": int(time.time() * 1000),
                "deleted": deleted,
                "skipped": [{"id": id, "reason": reason} for id, reason in skipped],
                "bytesFreed": done.bytes_freed,
            }
        )
        return done

    async def _delete_unchanged(self, session_id: str, revision: str) -> bool:
        """Delete *session_id* if its log is still at *revision*, as its one writer."""
        async with self._lock(session_id):
            if self._in_use(session_id):
                return False
            if await self._store.read_revision(session_id) != revision:
                return False
            try:
                await self._store.claim(session_id)  # let go below, even if cancelled
                if await self._store.read_revision(session_id) != revision:
                    return False
                return await self._store.delete_log(session_id)
            finally:
                self._forget(session_id)
                await self._store.release(session_id)

    async def audit(self) -> builtins.list[Mapping[str, Any]]:
        """``SessionPersistence.audit``."""
        return await self._store.read_audit()

    async def reindex(self, session_id: str | None = None) -> ReindexReport:
        """``SessionPersistence.reindex``: each session whole, under its lock."""
        if session_id is None:
            ids = [info.header.id for info in await self.list_snapshots()]
        else:
            ids = [session_id]
        done = 0
        unreadable: builtins.list[tuple[str, str]] = []
        for one in ids:
            problem = await self._reindex_one(one)
            if problem is None:
                done += 1
            else:
                unreadable.append((one, problem))
        return ReindexReport(done, tuple(unreadable))

    async def _reindex_one(self, session_id: str) -> str | None:
        async with self._lock(session_id):
            return await uninterrupted(self.reindex_locked(session_id))  # each one whole

    async def reindex_locked(self, session_id: str) -> str | None:
        """Rebuild one session's summary and texts, under its lock (the caller's); return
        why it could not, or None."""
        for _ in range(3):
            raw = await self._store.read_log(session_id)
            if raw is None:
                raise SessionNotFoundError("session not found", session_id=session_id)
            try:
                scan = scan_log(session_id, raw, contiguous_from=0)
            except LedgerError as error:
                return f"{error.code}: {error}"
            texts = indexed_texts(scan.events) if self._store.indexes_text else []
            summary = summarize(scan.events)
            if await self._store.rewrite_index(scan.header, raw.revision, summary, texts):
                self._summary_rebuilt(session_id, summary)
                return None
        return "SEQ_MISMATCH: the log kept changing while it was reindexed"


def _listable_header(header_json: Mapping[str, Any]) -> SessionHeader | None:
    """The header of a listed log, or None (logged) for one this build cannot read."""
    try:
        check_version(header_json, None)
        return stored_header(header_json, None, None)
    except (FormatUnsupportedError, HeaderError, CorruptLogError) as error:
        logger.warning("skipping a stored session this build cannot read: %s", error)
        return None


def _newest_first(row: SearchRow) -> tuple[int, str, int]:
    """The order of search hits: newest first (time, then seq, descending), then by
    session id."""
    return (-row.text.time, row.session_id, -row.text.seq)
