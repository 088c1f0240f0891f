"""The viewer's web application: its pages, its one JSON route and the headers every
response carries (docs/viewer.md).

Read-only by construction: the store is opened through ``Ledger.open`` and only read
(``inspect``, ``list_sessions``, ``search``, a revision); no route writes, and a store
that does not exist yet shows as empty instead of being created. A session read whole
is kept while its stored revision stays the same, so paging a large log reads it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any, Final

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sessionledger import (
    Ledger,
    LedgerError,
    Session,
    SessionNotFoundError,
    messages_at,
)
from sessionledger_viewer import _describe as describe, _timeline as timing

HERE: Final = Path(__file__).parent
#: Events per page of the log, surface nodes per page of the surface.
PAGE: Final = 200
#: Turns per page of the timeline.
TURNS: Final = 100
#: Sessions per page of the listing, hits of a search.
LISTED: Final = 50
#: New events one live update carries at most (the page asks again for the rest).
TAIL: Final = 500
#: How long a live update waits for the store to acknowledge a new event, in seconds.
LONG_POLL: Final = 25.0
#: Sessions per page when the listing is read for one session's stored length.
_LISTED_AT_ONCE: Final = 500
#: Messages per page of the messages at a seq.
MESSAGES: Final = 100

#: Every response's policy: nothing from anywhere but this server, no inline script or
#: style, no frames, no forms posted elsewhere. Session content is untrusted.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS: Final = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)
#: The names this server answers to: a page of another site cannot reach it through a
#: name of its own that resolves here (DNS rebinding).
LOCAL_NAMES: Final = ("127.0.0.1", "localhost", "[::1]", "::1")


class _SecurityHeaders:
    """Add ``_HEADERS`` to every response, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, sending)


@dataclasses.dataclass
class _Cached:
    """A session as read, with ``stored`` events of its ``length`` (the rest of its
    ``first_live_seq`` are closers its crash repair added in memory only)."""

    revision: str | None
    session: Session
    history: describe.SurfaceHistory
    stored: int

    @property
    def length(self) -> int:
        """The events a page shows: the stored ones and any repair closers, but not the
        marker a restore appends after its seed."""
        return self.session.first_live_seq


class Viewer:
    """The state of one viewer: its ledger (opened at startup) and the sessions read."""

    def __init__(self, store_url: str, plugins: Iterable[object] = ()) -> None:
        self.store_url = store_url
        self.plugins = tuple(plugins)
        self._ledger: Ledger | None = None
        self._cache: dict[str, _Cached] = {}
        # One read at a time: two pages of a large log asked for at once read it once.
        self._reading = asyncio.Lock()

    @property
    def ledger(self) -> Ledger:
        assert self._ledger is not None, "the viewer's ledger opens with the app"
        return self._ledger

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[None]:
        async with Ledger.open(self.store_url, plugins=self.plugins) as ledger:
            self._ledger = ledger
            try:
                yield
            finally:
                self._ledger = None
                self._cache.clear()

    async def revision(self, session_id: str) -> str | None:
        persistence = self.ledger.persistence
        return None if persistence is None else await persistence.revision(session_id)

    async def _stored_length(self, session_id: str, length: int) -> int:
        """How many of a session's *length* events are stored: a repair's closers come
        after them, in memory until a resume writes them. The listing's summary counts
        the stored events without reading them (the log is read only when the store's
        summary is missing or stale)."""
        async for info in self.ledger.list_sessions(limit=_LISTED_AT_ONCE):
            if info.id == session_id:
                return min(info.events, length) if info.problem is None else length
        return length

    async def wait_for_event(self, session_id: str, after: int) -> None:
        """Return once the store acknowledged an event of *session_id* after seq *after*
        (the live feed, docs/feed.md), the session is gone, or ``LONG_POLL`` passed."""
        feed = self.ledger.follow(session_id, after=after)
        try:
            await asyncio.wait_for(anext(feed), LONG_POLL)
        except (TimeoutError, StopAsyncIteration, SessionNotFoundError):
            pass  # the page reads the session again, and learns what happened
        finally:
            await feed.aclose()

    async def read(self, session_id: str) -> _Cached:
        """The session as stored now (repaired in memory only, as ``inspect`` does)."""
        async with self._reading:
            return await self._read(session_id)

    async def _read(self, session_id: str) -> _Cached:
        revision = await self.revision(session_id)
        cached = self._cache.get(session_id)
        if cached is not None and revision is not None and cached.revision == revision:
            return cached
        session = await self.ledger.inspect(session_id)
        cached = _Cached(
            revision,
            session,
            describe.surface_history(session),
            await self._stored_length(session_id, session.first_live_seq),
        )
        self._cache = {session_id: cached}  # one large log in memory at a time
        return cached


def event_href(session_id: str) -> Callable[[int], str]:
    """Where a link to an event of *session_id* goes: its page."""
    base = "/sessions/" + urllib.parse.quote(session_id, safe="")
    return lambda seq: f"{base}/events/{seq}"


def messages_href(session_id: str) -> Callable[[int], str]:
    """Where a link to the messages of *session_id* at a seq goes."""
    base = "/sessions/" + urllib.parse.quote(session_id, safe="")
    return lambda seq: f"{base}/messages?at={seq}"


def _int(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None or not value.strip():
        return default
    try:
        return int(value)
    except ValueError:
        return default


def environment() -> Environment:
    """The templates, every value escaped (session content is untrusted)."""
    templates = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates.filters["ranges"] = describe.seq_ranges
    templates.globals["moment"] = describe.moment
    templates.globals["seconds"] = timing.seconds
    templates.globals["shown"] = timing.shown
    return templates


def allowed_hosts(host: str) -> list[str]:
    """The Host names requests may carry when the server listens on *host*: this
    machine's names, and *host* itself; any name when it listens on every address (there
    is then no telling which names are the machine's)."""
    if host in ("0.0.0.0", "::", ""):
        return ["*"]
    return [*LOCAL_NAMES, host, f"[{host}]" if ":" in host else host]


def create_app(
    store_url: str, *, plugins: Iterable[object] = (), host: str = "127.0.0.1"
) -> Starlette:
    """The viewer of the store at *store_url*, as an ASGI application, for a server that
    listens on *host*."""
    viewer = Viewer(store_url, plugins)
    templates = Jinja2Templates(env=environment())

    def page(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        return templates.TemplateResponse(
            request, name, {"store": store_url, **context}, status_code=status
        )

    async def sessions(request: Request) -> Response:
        text = request.query_params.get("q", "").strip()
        title = request.query_params.get("title", "").strip() or None
        after = request.query_params.get("after") or None
        if text:
            hits = await viewer.ledger.search(text, limit=LISTED)
            return page(request, "sessions.html", q=text, title=title, hits=hits, listed=None)
        listed = await viewer.ledger.list_sessions(limit=LISTED, after=after, title=title)
        return page(request, "sessions.html", q="", title=title, hits=None, listed=listed)

    async def session(request: Request) -> Response:
        session_id = request.path_params["id"]
        cached = await viewer.read(session_id)
        log, history = cached.session, cached.history
        length = cached.length
        start = _int(request, "from", max(length - PAGE, 0))
        start = min(max(start, 0), max(length - 1, 0))
        nodes = history.nodes
        surface_start = min(max(_int(request, "surface", 0), 0), max(len(nodes) - 1, 0))
        surface = describe.surface_items(log, nodes[surface_start : surface_start + PAGE])
        return page(
            request,
            "session.html",
            header=log.header,
            length=length,
            start=start,
            page_size=PAGE,
            rows=describe.rows(log, start, min(start + PAGE, length), history, cached.stored),
            stored=cached.stored,
            surface=surface,
            surface_start=surface_start,
            node_count=len(nodes),
            replaced=history.replaced,
            revision=cached.revision or "",
            href=event_href(session_id),
            before=messages_href(session_id),
        )

    async def event(request: Request) -> Response:
        session_id = request.path_params["id"]
        seq = request.path_params["seq"]
        cached = await viewer.read(session_id)
        log = cached.session
        if not 0 <= seq < cached.length:
            return page(request, "missing.html", 404, what=f"seq {seq} of session {session_id}")
        chosen = log.event_at(seq)
        return page(
            request,
            "event.html",
            header=log.header,
            event=chosen,
            stored=describe.stored_json(chosen),
            op=describe.op_text(chosen),
            length=cached.length,
            stored_here=seq < cached.stored,
            cited_by=describe.cited_by(log, seq),
            shadowed_by=cached.history.shadowed_by.get(seq),
            provenance=describe.provenance(log, chosen) if chosen.surface_op else "",
        )

    async def messages(request: Request) -> Response:
        session_id = request.path_params["id"]
        cached = await viewer.read(session_id)
        log, length = cached.session, cached.length
        at = min(max(_int(request, "at", length - 1), 0), max(length - 1, 0))
        history = messages_at(log.event_log(), at) if length else []
        count = len(history)
        first = min(max(_int(request, "from", max(count - MESSAGES, 0)), 0), count)
        shown = describe.shown_messages(history[first : first + MESSAGES])
        return page(
            request,
            "messages.html",
            header=log.header,
            at=at,
            length=length,
            messages=shown,
            count=count,
            first=first,
            page_size=MESSAGES,
        )

    async def timeline(request: Request) -> Response:
        session_id = request.path_params["id"]
        cached = await viewer.read(session_id)
        log, length = cached.session, cached.length
        turns = timing.timeline(log, length)
        first = min(max(_int(request, "from", max(len(turns) - TURNS, 0)), 0), len(turns))
        shown_turns = turns[first : first + TURNS]
        return page(
            request,
            "timeline.html",
            header=log.header,
            turns=shown_turns,
            turn_count=len(turns),
            first=first,
            page_size=TURNS,
            longest=timing.longest(shown_turns),
            requests=timing.requests(log, length),
            href=event_href(session_id),
        )

    async def tail(request: Request) -> Response:
        """The events after ``after`` (at most ``TAIL``) and the session's revision: what
        a session page that stays open appends to its log (``viewer.js``). With
        ``wait=1`` and nothing after ``after`` yet, the answer waits for the store to
        acknowledge the next event (the live feed), at most ``LONG_POLL`` seconds."""
        session_id = request.path_params["id"]
        after = _int(request, "after", -1)
        cached = await viewer.read(session_id)
        if request.query_params.get("wait") == "1" and after + 1 >= cached.length:
            # Closers a repair would add are shown but not stored: wait past the stored.
            await viewer.wait_for_event(session_id, min(after, cached.stored - 1))
            cached = await viewer.read(session_id)
        log, history = cached.session, cached.history
        end = min(after + 1 + TAIL, cached.length)
        rows = describe.rows(log, after + 1, end, history, cached.stored)
        return JSONResponse(
            {
                "revision": cached.revision,
                "length": cached.length,
                "events": [row.to_json() for row in rows],
            }
        )

    async def failed(request: Request, error: Exception) -> Response:
        if isinstance(error, SessionNotFoundError):
            return page(request, "missing.html", 404, what=f"session {error.session_id}")
        assert isinstance(error, LedgerError)
        return page(request, "failed.html", 500, error=error)

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204)  # browsers ask; there is none

    routes = [
        Route("/", sessions, name="sessions"),
        Route("/favicon.ico", no_icon),
        Route("/sessions/{id:path}/events/{seq:int}", event, name="event"),
        Route("/sessions/{id:path}/messages", messages, name="messages"),
        Route("/sessions/{id:path}/timeline", timeline, name="timeline"),
        Route("/api/sessions/{id:path}/tail", tail, name="tail"),
        Route("/sessions/{id:path}", session, name="session"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with viewer.opened():
            yield

    return Starlette(
        routes=routes,
        middleware=[
            Middleware(_SecurityHeaders),
            Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(host)),
        ],
        exception_handlers={LedgerError: failed},
        lifespan=lifespan,
    )
