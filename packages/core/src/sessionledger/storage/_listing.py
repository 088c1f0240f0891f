"""Listing stored sessions from their summaries: ``SessionInfo``, queries, cursors, pages.

``ledger.list_sessions`` pages through the stored summaries (docs/listing.md): newest
activity first by default, filtered by title, ``meta``, and activity time, with an opaque
cursor that names where the next page begins. A store with an index (SQLite, PostgreSQL)
answers a ``SessionQuery`` itself; for the others the policy applies ``select`` to every
summary. Both follow the same rules, which live here.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Mapping
from typing import Any, Final, Literal, NamedTuple, TypeAlias, final

import orjson

from sessionledger._errors import QueryError
from sessionledger.model._events import SessionHeader
from sessionledger.views._summaries import SessionSummary

Order: TypeAlias = Literal["last_activity", "created"]
#: The orders a listing knows: most recent activity first, or newest session first;
#: ties by id.
ORDERS: Final[tuple[Order, ...]] = ("last_activity", "created")
#: What a ``meta`` filter compares a key with (exactly, type included).
MetaValue: TypeAlias = str | int | bool | None

_CURSOR_VERSION: Final = 1
#: The summary of a session with no events.
EMPTY_SUMMARY: Final = SessionSummary()
_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SessionInfo:
    """A stored session as listed: its header, revision and summary, read without its
    events. ``stale`` says that the store holds no up-to-date summary of it (missing, or
    describing an earlier state of the log): the one here was computed from the log as
    it was listed, and nothing was written back (docs/listing.md, "reading never writes";
    ``reindex`` stores it). ``problem`` says why such a summary could not be computed
    (its log is damaged: ``sessionledger verify`` says how); the summary is then empty."""

    header: SessionHeader
    revision: str
    summary: SessionSummary = EMPTY_SUMMARY
    problem: str | None = None
    stale: bool = False

    @property
    def id(self) -> str:
        """The session id."""
        return self.header.id

    @property
    def events(self) -> int:
        """How many events the log holds."""
        return self.summary.events

    @property
    def first_activity(self) -> int | None:
        """The time (epoch ms) of the first event."""
        return self.summary.first_activity

    @property
    def last_activity(self) -> int:
        """The time (epoch ms) of the last event (the creation time while it has none)."""
        last = self.summary.last_activity
        return self.header.created_at if last is None else last

    @property
    def open_turn(self) -> int | None:
        """The turn the log leaves open, or None."""
        return self.summary.open_turn

    def to_json(self) -> dict[str, Any]:
        """Return the listing row as a JSON object: the header's fields, the revision and
        the summary's."""
        row: dict[str, Any] = {"id": self.header.id}
        row.update(self.header.to_json())
        row["revision"] = self.revision
        row.update(self.summary.to_json())
        row["lastActivity"] = self.last_activity
        row["problem"] = self.problem
        row["stale"] = self.stale
        return row


class StoredSummary(NamedTuple):
    """A listing row as a store returns it: the stored header JSON, the revision, and the
    summary (None when the store holds none it can trust: the policy computes it from the
    log for that listing, and writes nothing)."""

    header: Mapping[str, Any]
    revision: str
    summary: SessionSummary | None


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SessionQuery:
    """A checked listing query, as a store answers it.

    Rows are ordered by ``sort_key`` descending, then id ascending; ``after`` is the
    (sort key, id) of the last row of the previous page (only rows after it); ``limit``
    None means every row. ``title`` keeps titles holding it (ASCII letters compared
    without case); ``meta`` keeps headers whose ``meta`` has each key with exactly that
    value; ``since`` (inclusive) and ``until`` (exclusive) bound the last activity time.
    """

    order: Order = "last_activity"
    after: tuple[int, str] | None = None
    limit: int | None = None
    title: str | None = None
    meta: tuple[tuple[str, MetaValue], ...] = ()
    since: int | None = None
    until: int | None = None

    def fingerprint(self) -> str:
        """Name the filters and the order (not the page): a cursor is only valid for the
        query it came from."""
        key = [
            self.order,
            self.title,
            [list(item) for item in self.meta],
            _bound_key(self.since),
            _bound_key(self.until),
        ]
        return hashlib.blake2b(orjson.dumps(key), digest_size=6).hexdigest()


def _bound_key(bound: int | None) -> int | str | None:
    """A time bound as the fingerprint holds it: a bound beyond 64 bits (which keeps every
    row or none) as its digits, since orjson encodes no wider integer; any other as it is,
    so a cursor of any query that could be fingerprinted before still matches."""
    if bound is None or -(2**63) <= bound < 2**64:
        return bound
    return str(bound)


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of a listing and the cursor of the next (None after the last page)."""

    sessions: tuple[SessionInfo, ...]
    next: str | None

    def to_json(self) -> dict[str, Any]:
        """Return ``{"sessions": [...], "next": cursor-or-null}``."""
        return {"sessions": [info.to_json() for info in self.sessions], "next": self.next}


@final
class SessionListing:
    """What ``ledger.list_sessions(...)`` returns: await it for one page (``SessionPage``),
    or iterate it with ``async for`` for every matching session, page by page (``limit``
    is then the page size)."""

    __slots__ = ("_fetch", "_query")

    def __init__(
        self, fetch: Callable[[SessionQuery], Awaitable[SessionPage]], query: SessionQuery
    ) -> None:
        self._fetch = fetch
        self._query = query

    def __await__(self) -> Generator[Any, None, SessionPage]:
        return self._fetch(self._query).__await__()

    async def __aiter__(self) -> AsyncIterator[SessionInfo]:
        query = self._query
        size = query.limit or 500
        query = dataclasses.replace(query, limit=size)
        while True:
            page = await self._fetch(query)
            for info in page.sessions:
                yield info
            if page.next is None:
                return
            last = page.sessions[-1]
            query = dataclasses.replace(query, after=(sort_key(last, query.order), last.id))


def ascii_lower(text: str) -> str:
    """Lower-case the ASCII letters of *text* only (what every backend's SQL does alike)."""
    return text.translate(_ASCII_LOWER)


def sort_key(info: SessionInfo, order: Order) -> int:
    """Return the time *info* is ordered by in *order*."""
    return info.last_activity if order == "last_activity" else info.header.created_at


def matches_query(info: SessionInfo, query: SessionQuery) -> bool:
    """Whether *info* passes the filters of *query* (not its page)."""
    header = info.header
    title = query.title
    if title is not None and (
        header.title is None or ascii_lower(title) not in ascii_lower(header.title)
    ):
        return False
    if query.meta:
        meta = header.meta
        if meta is None:
            return False
        for key, want in query.meta:
            if key not in meta:
                return False
            have = meta[key]
            if type(have) is not type(want) or have != want:
                return False
    last = info.last_activity
    if query.since is not None and last < query.since:
        return False
    return not (query.until is not None and last >= query.until)


def select(infos: Iterable[SessionInfo], query: SessionQuery) -> list[SessionInfo]:
    """Answer *query* over every summary: the rows of its page, and one more when there
    are more (how the caller knows a next page exists)."""
    order = query.order
    rows = [info for info in infos if matches_query(info, query)]
    rows.sort(key=lambda info: (-sort_key(info, order), info.header.id))
    if query.after is not None:
        key, last_id = query.after
        rows = [
            info
            for info in rows
            if sort_key(info, order) < key
            or (sort_key(info, order) == key and info.header.id > last_id)
        ]
    if query.limit is not None:
        rows = rows[: query.limit + 1]
    return rows


def encode_cursor(query: SessionQuery, last: SessionInfo) -> str:
    """Return the opaque cursor of the page that follows *last* in *query*."""
    body = [_CURSOR_VERSION, query.fingerprint(), sort_key(last, query.order), last.header.id]
    return base64.urlsafe_b64encode(orjson.dumps(body)).decode("ascii").rstrip("=")


def _decode_cursor(cursor: object, query: SessionQuery) -> tuple[int, str]:
    if type(cursor) is not str or not cursor or len(cursor) > 4096:
        raise QueryError(f"malformed cursor {_shown(cursor)}: pass the 'next' of a page")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise QueryError(f"malformed cursor {_shown(cursor)}: pass the 'next' of a page") from None
    if (
        type(body) is not list
        or len(body) != 4
        or body[0] != _CURSOR_VERSION
        or type(body[1]) is not str
        or type(body[2]) is not int
        or type(body[3]) is not str
    ):
        raise QueryError(f"malformed cursor {_shown(cursor)}: pass the 'next' of a page")
    if body[1] != query.fingerprint():
        raise QueryError(
            "this cursor belongs to a listing with other filters or another order: "
            "repeat the query it came from"
        )
    return body[2], body[3]


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def to_epoch_ms(value: object, name: str) -> int | None:
    """Return *value* (epoch ms as an int, or a ``datetime``; naive means UTC) as epoch
    ms, or None for None."""
    if value is None:
        return None
    if type(value) is int:
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp() * 1000)
    raise QueryError(f"{name} must be epoch milliseconds (int) or a datetime, got {_shown(value)}")


#: The epoch ms an ISO date and time can name (the years 1 to 9999, UTC).
_ISO_TIMES: Final = range(-62_135_596_800_000, 253_402_300_800_000)
_DURATION: Final = re.compile(r"(\d{1,9})\s*(ms|s|m|h|d|w)")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_UNIT_MS["w"] = 7 * _UNIT_MS["d"]


def parse_duration(text: object, name: str) -> int:
    """Return a duration such as ``30d``, ``12h``, ``90m``, ``2w`` (or a ``timedelta``) in
    ms."""
    if isinstance(text, datetime.timedelta):
        if text < datetime.timedelta(0):
            raise QueryError(f"{name} must not be negative, got {text}")
        return int(text.total_seconds() * 1000)
    if type(text) is str:
        match = _DURATION.fullmatch(text.strip())
        if match is not None:
            return int(match.group(1)) * _UNIT_MS[match.group(2)]
    raise QueryError(f"{name} must be a duration like 30d, 12h, 90m, 45s or 2w, got {_shown(text)}")


def parse_when(text: str, name: str, *, now: int) -> int:
    """Return the time *text* names, in epoch ms: a duration ago (``2d``), an ISO date
    (``2026-11-30``, midnight UTC) or an ISO date and time (UTC unless it gives an
    offset)."""
    if _DURATION.fullmatch(text.strip()) is not None:
        result = now - parse_duration(text, name)
    else:
        try:
            moment = datetime.datetime.fromisoformat(text.strip())
        except ValueError:
            raise QueryError(
                f"{name} must be a duration ago (2d, 12h) or an ISO date or time "
                f"(2026-11-30, 2026-11-30T08:00), got {_shown(text)}"
            ) from None
        converted = to_epoch_ms(moment, name)
        assert converted is not None
        result = converted
    if result not in _ISO_TIMES:
        # The next page's command names the bound as an ISO time (UTC), which could not.
        raise QueryError(
            f"{name} {_shown(text)} names a time outside the years 1 to 9999 (UTC), "
            "which the next page could not name"
        )
    return result


def parse_meta_filter(items: Iterable[str]) -> dict[str, MetaValue]:
    """Parse ``KEY=VALUE`` filters: VALUE is read as JSON when it is a JSON string, number,
    ``true``, ``false`` or ``null``, and as text otherwise (``--meta user=ana``)."""
    meta: dict[str, MetaValue] = {}
    for item in items:
        key, equals, text = item.partition("=")
        if not equals or not key:
            raise QueryError(f"a meta filter is KEY=VALUE, got {_shown(item)}")
        value: Any
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = text
        if not (value is None or type(value) in (str, int, bool)):
            value = text
        if key in meta and meta[key] != value:
            raise QueryError(f"meta key {key!r} is filtered twice with different values")
        meta[key] = value
    return meta


def _checked_meta(meta: object) -> tuple[tuple[str, MetaValue], ...]:
    if meta is None:
        return ()
    if not isinstance(meta, Mapping):
        raise QueryError(f"meta must be a mapping of key to value, got {_shown(meta)}")
    items: list[tuple[str, MetaValue]] = []
    for key, value in meta.items():
        if type(key) is not str or not key:
            raise QueryError(f"meta filter keys must be non-empty strings, got {_shown(key)}")
        if not (value is None or type(value) in (str, int, bool)):
            raise QueryError(
                f"meta filter {key!r} must compare with a string, integer, bool or None, "
                f"got {_shown(value)}"
            )
        items.append((key, value))
    return tuple(sorted(items, key=lambda item: item[0]))


def make_query(
    *,
    order: object = "last_activity",
    limit: object = None,
    after: object = None,
    title: object = None,
    meta: object = None,
    since: object = None,
    until: object = None,
) -> SessionQuery:
    """Check a listing's arguments and return the query they make (``QueryError``)."""
    if order not in ORDERS:
        raise QueryError(f"order must be one of {', '.join(ORDERS)}, got {_shown(order)}")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise QueryError(f"limit must be a positive integer, got {_shown(limit)}")
    if title is not None and (type(title) is not str or not title):
        raise QueryError(f"title must be a non-empty string, got {_shown(title)}")
    query = SessionQuery(
        order=order,  # checked against ORDERS above
        limit=limit,
        title=title,
        meta=_checked_meta(meta),
        since=to_epoch_ms(since, "since"),
        until=to_epoch_ms(until, "until"),
    )
    if after is not None:
        query = dataclasses.replace(query, after=_decode_cursor(after, query))
    return query
