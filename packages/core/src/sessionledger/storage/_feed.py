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
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple, Protocol, Self, final

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


class _Feed:
    """What both feeds share: a buffer of items read but not yet taken, so that a caller
    cancelled while it waits for the next item loses nothing and the feed goes on; a
    round of reads, then (when the round found nothing) a wait for the store's change
    notification; a store that is unavailable is waited for."""

    def __init__(self, source: Followed, wait: bool) -> None:
        self._source = source
        self._wait = wait
        self._attempt = 0
        self._closed = False
        self._found_at: float | None = None  # when the last round that found items began

    def __aiter__(self) -> Self:
        return self

    async def _next_round(self, session_id: str | None) -> None:
        """Run rounds until one fills the buffer; ``StopAsyncIteration`` once there is
        nothing more to read without waiting (*wait* False) or the feed was closed."""
        store = self._source.log_store
        loop = asyncio.get_running_loop()
        while not self._closed:
            if self._wait and self._found_at is not None:
                # Reads at most every poll_seconds while a log keeps changing: a follower
                # takes what a busy writer flushed meanwhile in one read, not one per
                # flush (docs/feed.md, "costs and limits").
                gap = self._found_at + store.poll_seconds - loop.time()
                if gap > 0:
                    await asyncio.sleep(gap)
                self._found_at = None
            mark = store.change_mark()
            began = loop.time()
            try:
                if await self._round():
                    self._attempt = 0
                    self._found_at = began
                    return
                self._attempt = 0
            except StoreUnavailableError:
                self._attempt = await _retrying(self._source, self._attempt)
                continue
            if not self._wait:
                break
            try:
                await store.wait_for_change(session_id, CATCH_UP_SECONDS, mark)
            except StoreUnavailableError:
                self._attempt = await _retrying(self._source, self._attempt)
        raise StopAsyncIteration

    async def _round(self) -> bool:
        raise NotImplementedError

    async def aclose(self) -> None:
        """End the feed: the next ``anext`` raises ``StopAsyncIteration``."""
        self._closed = True


@final
class SessionFeed(_Feed):
    """The acknowledged events of one session after a seq, in seq order, as they come
    (``SessionPersistence.follow``). ``cursor`` is the seq of the last event taken."""

    def __init__(self, source: Followed, session_id: str, after: int, *, wait: bool) -> None:
        if type(after) is not int or after < -1:
            raise QueryError(f"after must be an integer of at least -1, got {after!r}")
        super().__init__(source, wait)
        self._session_id = session_id
        self._next_seq = after + 1  # of the events taken
        self._revision: str | None = None
        self._identity: str | None = None
        self._seen_end = 0  # the longest end read: a log shorter than that is not this one
        self._buffer: deque[SessionEvent] = deque()

    @property
    def cursor(self) -> int:
        """The seq of the last event taken (``after`` at first): resume with it."""
        return self._next_seq - 1

    async def __anext__(self) -> SessionEvent:
        if not self._buffer:
            await self._next_round(self._session_id)
        event = self._buffer.popleft()
        self._next_seq = event.seq + 1
        return event

    async def _round(self) -> bool:
        source, session_id, next_seq = self._source, self._session_id, self._next_seq
        current = await source.revision(session_id)
        if current is not None and current == self._revision:
            return False
        read = None if current is None else await source.read_acknowledged(session_id, next_seq)
        if read is None:
            if self._identity is None:
                raise SessionNotFoundError("session not found", session_id=session_id)
            raise _deleted(session_id, next_seq)
        identity = _identity(read.header)
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:
            raise _deleted(session_id, next_seq, "deleted and created anew")
        if read.end_seq < self._seen_end:  # shorter than it was: not the same log
            raise _deleted(session_id, next_seq, "replaced by a shorter log")
        self._seen_end = read.end_seq
        self._revision = read.revision
        self._buffer.extend(read.events)
        return bool(read.events)


@final
class StoreFeed(_Feed):
    """The acknowledged events of every session of a store, as they come (an async
    iterator of ``FeedItem``; ``SessionPersistence.follow_all``). ``cursor`` says where
    the feed is, after the last item taken: pass it as ``after`` to resume there, in this
    process or another.

    Without *wait*, the feed ends once it has yielded what is acknowledged already.
    Sessions are read in the order the store lists them, each from where the cursor left
    it; a session created meanwhile starts at seq 0. The cursor holds each session's
    next seq (compressed), so it grows with the number of sessions in the store.
    """

    def __init__(self, source: Followed, after: str | None = None, *, wait: bool = True) -> None:
        super().__init__(source, wait)
        self._taken: dict[str, _Position] = decode_cursor(after) if after else {}
        self._read = dict(self._taken)  # the positions read up to (the buffer's end)
        self._revisions: dict[str, str] = {}
        self._buffer: deque[tuple[FeedItem, _Position | None]] = deque()

    @property
    def cursor(self) -> str:
        """Where the feed is: every item taken so far is behind it."""
        entries = sorted(
            [key, position.next_seq, position.identity] for key, position in self._taken.items()
        )
        packed = zlib.compress(jsoncodec.dumps(entries), 6)
        return _CURSOR_PREFIX + base64.urlsafe_b64encode(packed).decode("ascii")

    async def __anext__(self) -> FeedItem:
        if not self._buffer:
            await self._next_round(None)
        item, position = self._buffer.popleft()
        if position is None:
            self._taken.pop(item.session_id, None)
        else:
            self._taken[item.session_id] = position
        return item

    def _ended(self, session_id: str) -> None:
        self._read.pop(session_id, None)
        self._revisions.pop(session_id, None)
        self._buffer.append((FeedItem(session_id, None), None))

    async def _round(self) -> bool:
        listed = await self._source.log_store.list_headers()
        present: set[str] = set()
        for header, revision in listed:
            session_id = header.get("id")
            if type(session_id) is not str:
                continue
            present.add(session_id)
            if self._revisions.get(session_id) != revision:
                await self._catch_up(session_id)
        for session_id in [key for key in self._read if key not in present]:
            self._ended(session_id)
        return bool(self._buffer)

    async def _catch_up(self, session_id: str) -> None:
        """Buffer what *session_id* committed after the position read (from seq 0 again
        when it turns out to be a session created anew under its id)."""
        known = self._read.get(session_id)
        next_seq = 0 if known is None else known.next_seq
        try:
            read = await self._source.read_acknowledged(session_id, next_seq)
        except StoreUnavailableError:
            return  # read at the next round
        if read is None:
            return  # deleted since it was listed: the next round says so
        identity = _identity(read.header)
        if known is not None and (known.identity != identity or read.end_seq < next_seq):
            self._ended(session_id)
            await self._catch_up(session_id)
            return
        for event in read.events:
            position = _Position(event.seq + 1, identity)
            self._buffer.append((FeedItem(session_id, event), position))
        self._read[session_id] = _Position(read.end_seq if read.events else next_seq, identity)
        self._revisions[session_id] = read.revision


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
