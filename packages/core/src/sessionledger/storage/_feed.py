"""The live feed: a session's events, or a whole store's, as they become acknowledged,
read by any process that opens the store (docs/feed.md).

A feed only reads. It asks the store for its revision (cheap), reads the log again when
the revision moved, and yields the committed events after its cursor; between reads it
waits on the store's change notification (``LogStore.wait_for_change``: PostgreSQL's
LISTEN, or a short poll). A torn tail is not committed, so a feed never yields it; what
a crash repair appends (closers) comes as events like any other. The reads go through
``LogStore.read_durable``, so nothing is yielded that a power loss could still take.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import NamedTuple, Protocol, final

from sessionledger._errors import (
    QueryError,
    SessionDeletedError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.storage._logstore import LogStore

logger = logging.getLogger("sessionledger")

#: The longest a feed waits without reading the revision again, whatever the store's
#: notification says: a notification lost with a connection costs at most this.
CATCH_UP_SECONDS = 1.0
#: The longest wait between attempts while the store is unavailable.
_RETRY_CAP_SECONDS = 1.0
_CURSOR_PREFIX = "feed1."


class FeedItem(NamedTuple):
    """One item of a store's feed: an event of *session_id*, or ``event`` None when the
    session was deleted (or deleted and created anew: its new events follow from seq 0)."""

    session_id: str
    event: SessionEvent | None


class LogRead(NamedTuple):
    """A feed's read of one log: its header, revision, end (the seq after its last
    committed event) and its committed events from the seq asked for on."""

    header: SessionHeader
    revision: str
    end_seq: int
    events: Sequence[SessionEvent]


class Followed(Protocol):
    """What a feed needs of the policy (``SessionPersistence``)."""

    @property
    def log_store(self) -> LogStore: ...

    @property
    def scheme(self) -> str: ...

    async def revision(self, session_id: str) -> str | None: ...

    async def read_acknowledged(self, session_id: str, from_seq: int) -> LogRead | None: ...


class _Position(NamedTuple):
    next_seq: int
    identity: str  # what tells a session from one created anew under its id


def _identity(header: SessionHeader) -> str:
    """A short digest of what a session's header fixes at creation (the title and meta
    can change; the id, creation time and parent cannot)."""
    fixed = [header.id, header.created_at, header.parent_session]
    return hashlib.sha256(jsoncodec.dumps(fixed)).hexdigest()[:16]


async def _retrying(source: Followed, attempt: int) -> int:
    """Wait before the next attempt on an unavailable store; the next attempt's number."""
    if attempt == 0:
        logger.warning("the %s store is unavailable; the feed retries", source.scheme)
    await asyncio.sleep(min(_RETRY_CAP_SECONDS, 0.05 * 2**attempt))
    return attempt + 1


def _deleted(session_id: str, next_seq: int, how: str = "deleted") -> SessionDeletedError:
    return SessionDeletedError(
        f"the session was {how} after seq {next_seq - 1}; the feed ends",
        session_id=session_id,
        seq=next_seq - 1,
    )


async def follow_session(
    source: Followed, session_id: str, after: int, *, wait: bool = True
) -> AsyncIterator[SessionEvent]:
    """Yield the acknowledged events of *session_id* with seq > *after*, in order, as
    they come (without *wait*, only those acknowledged already); ``SessionDeletedError``
    ends the feed when the session is deleted."""
    if type(after) is not int or after < -1:
        raise QueryError(f"after must be an integer of at least -1, got {after!r}")
    store = source.log_store
    next_seq = after + 1
    revision: str | None = None
    identity: str | None = None
    attempt = 0
    while True:
        mark = store.change_mark()
        try:
            current = await source.revision(session_id)
            read = None
            if current is not None and current != revision:
                read = await source.read_acknowledged(session_id, next_seq)
            attempt = 0
        except StoreUnavailableError:
            attempt = await _retrying(source, attempt)
            continue
        if current == revision and current is not None:
            if not wait:
                return
            try:
                await store.wait_for_change(session_id, CATCH_UP_SECONDS, mark)
            except StoreUnavailableError:
                attempt = await _retrying(source, attempt)
            continue
        if read is None:
            if identity is None:
                raise SessionNotFoundError("session not found", session_id=session_id)
            raise _deleted(session_id, next_seq)
        if identity is None:
            identity = _identity(read.header)
        elif _identity(read.header) != identity:
            raise _deleted(session_id, next_seq, "deleted and created anew")
        if read.end_seq < next_seq:  # shorter than what was yielded: not the same log
            raise _deleted(session_id, next_seq, "replaced by a shorter log")
        revision = read.revision
        for event in read.events:
            yield event
            next_seq = event.seq + 1


@final
class StoreFeed:
    """The acknowledged events of every session of a store, as they come (an async
    iterator of ``FeedItem``). ``cursor`` says where the feed is, after the last item
    taken: pass it as ``after`` to resume there, in this process or another.

    Without *wait*, the feed ends once it has yielded what is acknowledged already.
    Sessions are read in the order the store lists them, each from where the cursor left
    it; a session created meanwhile starts at seq 0. The cursor holds each session's
    next seq (compressed), so it grows with the number of sessions in the store.
    """

    def __init__(self, source: Followed, after: str | None = None, *, wait: bool = True) -> None:
        self._source = source
        self._wait = wait
        self._positions: dict[str, _Position] = decode_cursor(after) if after else {}
        self._revisions: dict[str, str] = {}
        self._items = self._run()

    @property
    def cursor(self) -> str:
        """Where the feed is: every item taken so far is behind it."""
        entries = sorted(
            [key, position.next_seq, position.identity] for key, position in self._positions.items()
        )
        packed = zlib.compress(jsoncodec.dumps(entries), 6)
        return _CURSOR_PREFIX + base64.urlsafe_b64encode(packed).decode("ascii")

    def __aiter__(self) -> StoreFeed:
        return self

    async def __anext__(self) -> FeedItem:
        return await self._items.__anext__()

    async def aclose(self) -> None:
        """Stop the feed (its iterator is closed; the cursor stays readable)."""
        await self._items.aclose()

    async def _run(self) -> AsyncGenerator[FeedItem, None]:
        source = self._source
        store = source.log_store
        attempt = 0
        while True:
            mark = store.change_mark()
            try:
                listed = await store.list_headers()
                attempt = 0
            except StoreUnavailableError:
                attempt = await _retrying(source, attempt)
                continue
            present: set[str] = set()
            for header, revision in listed:
                session_id = header.get("id")
                if type(session_id) is not str:
                    continue
                present.add(session_id)
                if self._revisions.get(session_id) == revision:
                    continue
                async for item in self._catch_up(session_id):
                    yield item
            for session_id in [key for key in self._positions if key not in present]:
                self._forget(session_id)
                yield FeedItem(session_id, None)
            if not self._wait:
                return
            try:
                await store.wait_for_change(None, CATCH_UP_SECONDS, mark)
            except StoreUnavailableError:
                attempt = await _retrying(source, attempt)

    async def _catch_up(self, session_id: str) -> AsyncIterator[FeedItem]:
        """Yield what *session_id* committed after its position (from seq 0 again when it
        turns out to be a session created anew under its id)."""
        known = self._positions.get(session_id)
        next_seq = 0 if known is None else known.next_seq
        try:
            read = await self._source.read_acknowledged(session_id, next_seq)
        except StoreUnavailableError:
            return  # read at the next round
        if read is None:
            return  # deleted since it was listed: the next round says so
        identity = _identity(read.header)
        if known is not None and (known.identity != identity or read.end_seq < next_seq):
            self._forget(session_id)
            yield FeedItem(session_id, None)
            async for item in self._catch_up(session_id):
                yield item
            return
        self._positions[session_id] = _Position(next_seq, identity)
        for event in read.events:
            self._positions[session_id] = _Position(event.seq + 1, identity)
            yield FeedItem(session_id, event)
        self._revisions[session_id] = read.revision

    def _forget(self, session_id: str) -> None:
        self._positions.pop(session_id, None)
        self._revisions.pop(session_id, None)


def decode_cursor(cursor: str) -> dict[str, _Position]:
    """The positions a ``StoreFeed.cursor`` holds; ``QueryError`` for anything else."""
    if type(cursor) is not str or not cursor.startswith(_CURSOR_PREFIX):
        raise QueryError(f"not a feed cursor: {cursor!r:.80}")
    try:
        packed = base64.urlsafe_b64decode(cursor[len(_CURSOR_PREFIX) :])
        entries = jsoncodec.loads(zlib.decompress(packed))
    except (binascii.Error, ValueError, zlib.error) as error:
        raise QueryError(f"not a feed cursor ({error}): {cursor!r:.80}") from error
    positions: dict[str, _Position] = {}
    if type(entries) is not list:
        raise QueryError(f"not a feed cursor: {cursor!r:.80}")
    for entry in entries:
        if (
            type(entry) is not list
            or len(entry) != 3
            or type(entry[0]) is not str
            or type(entry[1]) is not int
            or entry[1] < 0
            or type(entry[2]) is not str
        ):
            raise QueryError(f"not a feed cursor: {cursor!r:.80}")
        positions[entry[0]] = _Position(entry[1], entry[2])
    return positions
