"""What a ledger accepts, it can read back (docs/plugins.md), on every backend and
for every way of building a ledger.

The ways: ``Ledger.open(url, plugins=…)``; ``Ledger(persistence=Backend(…), plugins=…)``;
``Ledger(persistence=open_store(url), plugins=…)`` (a backend built without the plugin);
a backend built with only the core vocabulary; and a plugin published as an entry point.
The oracle is exact: after release and resume, and after close and a new ledger built
the same way, the resumed log is event for event what the ledger accepted; a refused
append left the log (in memory and stored) unchanged.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger import (
    EventType,
    EventTypeRegistry,
    FormatUnsupportedError,
    Ledger,
    SeedError,
    SessionEvent,
    UnknownEventTypeError,
    hookimpl,
    open_store,
)
from sessionledger.storage._memory import MemoryPersistence
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn
from sessionledger_jsonl import JsonlPersistence
from sessionledger_postgres import PostgresPersistence
from sessionledger_postgres.plugin import parse_postgres_url
from sessionledger_postgres.testing import drop_schema, with_options
from sessionledger_sqlite import SqlitePersistence

BACKENDS = ["memory", "jsonl", "sqlite", "postgresql"]
WAYS = ["open", "backend", "open_store", "core_only_backend", "entry_point"]


class Plugin:
    """Declares the event types it is given, like a harness's plugin would."""

    def __init__(self, *types: EventType) -> None:
        self.types = list(types)

    @hookimpl
    def ledger_event_types(self) -> list[EventType]:
        return list(self.types)


@dataclass
class Store:
    """One empty store of a kind: its URL, and how to build its backend directly."""

    kind: str
    url: str
    direct: Callable[..., SessionPersistence]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    kind = request.param
    if kind == "memory":
        url = f"memory:types-{uuid.uuid4().hex[:12]}"  # a store of this process, by name
        shared = open_store(url)
        assert isinstance(shared, MemoryPersistence)
        yield Store(kind, url, lambda **kw: MemoryPersistence(store=shared.store, **kw))
    elif kind == "jsonl":
        root = tmp_path / "sessions"
        yield Store(kind, f"jsonl:{root}", lambda **kw: JsonlPersistence(root, **kw))
    elif kind == "sqlite":
        path = tmp_path / "ledger.db"
        yield Store(kind, f"sqlite:{path}", lambda **kw: SqlitePersistence(path, **kw))
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"types_{uuid.uuid4().hex[:12]}"
        url = with_options(base, schema=schema, pool_max_size=2)
        dsn, options = parse_postgres_url(url)
        yield Store(kind, url, lambda **kw: PostgresPersistence(dsn, **options, **kw))
        await drop_schema(base, schema)


def build(way: str, store: Store, plugins: list[object]) -> Ledger:
    """A ledger on *store* built the way *way* names, with *plugins*."""
    url = store.url
    if way in ("open", "entry_point"):
        return Ledger.open(url, plugins=plugins)
    if way == "backend":
        return Ledger(persistence=store.direct(), plugins=plugins)
    if way == "open_store":
        return Ledger(persistence=open_store(url), plugins=plugins)
    assert way == "core_only_backend"
    core = EventTypeRegistry.with_core()
    return Ledger(persistence=store.direct(event_types=core), plugins=plugins)


def assert_resumes(resumed: tuple[SessionEvent, ...], accepted: tuple[SessionEvent, ...]) -> None:
    """Exactly the accepted events, then at most the marker a resume adds after them."""
    assert resumed[: len(accepted)] == accepted
    assert [event.type for event in resumed[len(accepted) :]] in ([], ["session/end-seed"])


@pytest.mark.asyncio
@pytest.mark.parametrize("way", WAYS)
async def test_a_ledger_resumes_the_plugin_events_it_accepted(
    store: Store,
    way: str,
    publish_event_type: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugins: list[object] = [Plugin(EventType("plan/update"))]
    if way == "entry_point":
        monkeypatch.delenv("SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD", raising=False)
        publish_event_type("plan/update")
        plugins = []
    ledger = build(way, store, plugins)
    session = ledger.create("planned")
    closed_turn(session, 1)
    session.append("plan/update", {"steps": ["read", "answer"]})
    closed_turn(session, 2)
    accepted = session.events
    await ledger.flush(session)
    # In the same process, after release: the ledger's backend reads with its types ...
    await ledger.release(session)
    assert ledger.persistence is not None
    assert (await ledger.persistence.load("planned")).events == accepted
    # That direct load made the backend object itself the session's writer (one writer
    # per ledger, docs/durability.md): it lets go before the ledger takes it back.
    await ledger.persistence.release("planned")
    resumed = await ledger.resume("planned")
    assert_resumes(resumed.events, accepted)
    resumed.append("plan/update", {"steps": ["more"]})
    after = resumed.events
    await ledger.close()
    # ... and in a new ledger built the same way.
    again = build(way, store, plugins)
    reopened = await again.resume("planned")
    assert_resumes(reopened.events, after)
    await again.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("way", ["open", "backend", "open_store", "core_only_backend"])
async def test_an_unknown_type_is_refused_at_append_and_the_log_is_unchanged(
    store: Store, way: str
) -> None:
    ledger = build(way, store, [])
    session = ledger.create("strict")
    closed_turn(session, 1)
    before = session.events
    with pytest.raises(UnknownEventTypeError) as refused:
        session.append("my/thing", {"a": 1})
    error = refused.value
    assert error.code == "UNKNOWN_EVENT_TYPE"
    assert error.event_type == "my/thing"
    assert error.session_id == "strict"
    message = str(error)
    assert "'my/thing'" in message
    assert "ledger_event_types" in message
    assert "EventType" in message
    assert "ignorable=True" in message
    assert session.events is before
    kept = session.append("my/thing", {"a": 2}, ignorable=True)
    assert kept.seq == len(before)
    await ledger.close()
    again = build(way, store, [])
    resumed = await again.resume("strict")
    assert resumed.events[: len(before) + 1] == (*before, kept)
    assert "my/thing" not in [event.type for event in resumed.events if not event.ignorable]
    await again.close()


@pytest.mark.asyncio
async def test_a_fork_seed_of_an_unknown_type_is_refused(store: Store) -> None:
    writer = build("open", store, [Plugin(EventType("plan/update"))])
    source = writer.create("source")
    closed_turn(source, 1)
    source.append("plan/update", {"steps": []})
    await writer.close()
    reader = build("open", store, [])
    with pytest.raises(SeedError) as refused:
        await reader.fork("source", child_id="child")
    assert refused.value.code == "UNKNOWN_EVENT_TYPE"
    assert reader.get("child") is None
    with pytest.raises(FormatUnsupportedError) as live:
        await reader.resume("source")
    assert live.value.code == "UNKNOWN_EVENT_TYPE"
    assert live.value.seq == len(source.events) - 1
    assert "probably not loaded" in str(live.value)
    assert "--plugin" in str(live.value)
    # Reading is not going live: the event is there, as stored.
    viewed = await reader.inspect("source")
    assert viewed.events[: len(source.events)] == source.events
    await reader.close()


def test_a_detached_session_accepts_any_type() -> None:
    from sessionledger import Session

    assert Session.create("free").append("my/thing", {"a": 1}).type == "my/thing"


# -- the property -------------------------------------------------------------------------

POOL = ["p/a", "p/b", "p/c", "p/d"]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[EventType], list[tuple[str, bool, int]]]:
    """A set of plugin types (some ignorable) and appends of pool types."""
    declared = draw(st.lists(st.sampled_from(POOL), unique=True, max_size=len(POOL)))
    types = [EventType(name, ignorable=draw(st.booleans())) for name in declared]
    appends = draw(
        st.lists(
            st.tuples(st.sampled_from(POOL), st.booleans(), st.integers(0, 9)),
            max_size=12,
        )
    )
    return types, appends


async def _play(
    way: str, store: Store, types: list[EventType], appends: list[tuple[str, bool, int]]
) -> None:
    session_id = f"prop-{uuid.uuid4().hex[:10]}"
    ledger = build(way, store, [Plugin(*types)])
    session = ledger.create(session_id)
    known = {event_type.name for event_type in types}
    for name, ignorable, value in appends:
        before = session.events
        try:
            session.append(name, {"value": value}, ignorable=ignorable)
        except UnknownEventTypeError:
            assert name not in known
            assert not ignorable
            assert session.events is before
        else:
            assert name in known or ignorable
        if value % 4 == 0:
            await ledger.flush(session)
    accepted: tuple[SessionEvent, ...] = session.events
    await ledger.close()
    again = build(way, store, [Plugin(*types)])
    try:
        if not accepted:
            return  # nothing was stored: there is nothing to resume
        resumed = await again.resume(session_id)
        assert_resumes(resumed.events, accepted)
    finally:
        await again.close()


@pytest.mark.parametrize("way", ["open", "backend", "open_store", "core_only_backend"])
def test_what_a_ledger_accepts_it_resumes(store: Store, way: str) -> None:
    @settings(max_examples=25)
    @given(scenarios())
    def check(scenario: tuple[list[EventType], list[tuple[str, bool, int]]]) -> None:
        asyncio.run(_play(way, store, *scenario))

    check()
