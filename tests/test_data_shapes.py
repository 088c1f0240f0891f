"""The core vocabulary's data shapes: refused where an event is made, accepted where a
stored log is read, reported by ``verify`` (docs/events.md, "Where these shapes are
checked").

The oracle is exact: a refused append leaves the log as it was; a stored log holding
events of earlier writers (a ``turn/end`` whose reason is ``null``, or that has only an
``error`` field) resumes event for event on every backend, and ``verify`` names exactly
those events.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from sessionledger import EventDataError, Ledger, Session, SessionHeader
from sessionledger.model._shapes import CHUNK_KINDS, TURN_END_KINDS, data_shape_problem
from sessionledger.model._snapshot import snapshot
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.builders import closed_turn
from sessionledger.testing.strategies import session_logs
from sessionledger_jsonl import JsonlPersistence
from sessionledger_postgres import PostgresPersistence
from sessionledger_postgres.plugin import parse_postgres_url
from sessionledger_postgres.testing import drop_schema, with_options
from sessionledger_sqlite import SqlitePersistence


def chunk(**fields: Any) -> dict[str, Any]:
    return {"turn": 1, "step": 1, "chunk": fields}


CALL = {"turn": 1, "step": 1, "callId": "c1", "name": "read", "arguments": "{}"}
PAUSE = {"turn": 1, "step": 1, "callId": "c1", "reason": {"kind": "approval"}}

#: (type, data, what the message must say) for payloads an append must refuse.
REFUSED = [
    ("turn/start", None, "data must be a JSON object"),
    ("turn/start", {}, "data.turn must be an integer >= 1"),
    ("turn/start", {"turn": 0}, "data.turn must be an integer >= 1"),
    ("turn/start", {"turn": True}, "data.turn must be an integer >= 1"),
    ("turn/start", {"turn": "1"}, "data.turn must be an integer >= 1"),
    ("turn/end", {"turn": 1, "reason": "completed"}, "data.reason must be an object"),
    ("turn/end", {"turn": 1, "reason": None}, "data.reason must be an object"),
    ("turn/end", {"turn": 1}, "data.reason must be an object"),
    ("turn/end", {"turn": 1, "reason": {"kind": "done"}}, "kind one of completed"),
    ("turn/end", {"turn": 1, "reason": {"kind": "error"}}, "error: {code: str, message: str}"),
    (
        "turn/end",
        {"turn": 1, "reason": {"kind": "error", "error": {"code": "X"}}},
        "error: {code: str, message: str}",
    ),
    ("step/start", {"turn": 1}, "data.step must be an integer >= 1"),
    ("step/end", {"turn": 1, "step": 1.0}, "data.step must be an integer >= 1"),
    ("assistant/chunk", {"turn": 1, "step": 1}, "data.chunk must be an object"),
    ("assistant/chunk", chunk(type="text"), "type is one of block-start"),
    ("assistant/chunk", chunk(type="text-delta", text="x"), "needs an index >= 0"),
    ("assistant/chunk", chunk(type="text-delta", index=-1, text="x"), "needs an index >= 0"),
    ("assistant/chunk", chunk(type="text-delta", index=0), "needs text: str"),
    ("assistant/chunk", chunk(type="reasoning-delta", index=0, text=1), "needs text: str"),
    ("assistant/chunk", chunk(type="block-start", index=0), "needs blockType"),
    (
        "assistant/chunk",
        chunk(type="tool-call-delta", index=0, argumentsDelta="{"),
        "needs id: a non-empty str",
    ),
    (
        "assistant/chunk",
        chunk(type="tool-call-delta", index=0, id="c", argumentsDelta="{", name=3),
        "needs name: str",
    ),
    ("assistant/chunk", chunk(type="block-end", index=0, block="text"), "needs block:"),
    ("assistant/chunk", chunk(type="usage", usage=3), "needs usage: an object"),
    ("assistant/chunk", chunk(type="finish"), "needs reason: a str or {kind: str}"),
    ("assistant/chunk", chunk(type="finish", reason={}), "needs reason: a str or {kind: str}"),
    ("tool/call", {**CALL, "callId": ""}, "data.callId must be a non-empty str"),
    ("tool/call", {**CALL, "name": None}, "data.name must be a non-empty str"),
    ("tool/call", {**CALL, "arguments": {}}, "data.arguments must be the raw JSON text"),
    ("tool/call", {**CALL, "step": None}, "data.step must be an integer >= 1"),
    ("tool/paused", {**PAUSE, "callId": 7}, "data.callId must be a non-empty str"),
    ("tool/paused", {**PAUSE, "reason": "approval"}, "data.reason must be an object {kind"),
    ("tool/paused", {**PAUSE, "reason": {"kind": ""}}, "data.reason must be an object {kind"),
    ("tool/paused", {**PAUSE, "turn": 0}, "data.turn must be an integer >= 1"),
    ("request/context", {"provider": "acme"}, "data.model must be a non-empty str"),
    (
        "request/context",
        {"provider": "acme", "model": "m", "contextWindow": "big"},
        "data.contextWindow must be an integer >= 1",
    ),
    ("session/end-seed", [], "data must be a JSON object"),
]

#: Payloads an append accepts: every reason kind and chunk kind, optional and extra fields.
ACCEPTED = [
    ("turn/start", {"turn": 1, "trigger": "user"}),
    *[("turn/end", {"turn": 1, "reason": {"kind": k}}) for k in TURN_END_KINDS if k != "error"],
    ("turn/end", {"turn": 2, "reason": {"kind": "aborted", "cause": {"kind": "user"}}}),
    ("turn/end", {"turn": 2, "reason": {"kind": "error", "error": {"code": "E", "message": ""}}}),
    ("step/start", {"turn": 1, "step": 3}),
    ("assistant/chunk", chunk(type="block-start", index=0, blockType="text")),
    ("assistant/chunk", chunk(type="text-delta", index=0, text="")),
    ("assistant/chunk", chunk(type="reasoning-delta", index=1, text="hm")),
    ("assistant/chunk", chunk(type="tool-call-delta", index=2, id="c", argumentsDelta="")),
    (
        "assistant/chunk",
        chunk(type="tool-call-delta", index=2, id="c", name="f", argumentsDelta=""),
    ),
    ("assistant/chunk", chunk(type="block-end", index=0, block={"type": "text", "text": "x"})),
    ("assistant/chunk", chunk(type="usage", usage={"inputTokens": 1, "outputTokens": 2})),
    ("assistant/chunk", chunk(type="finish", reason="stop")),
    ("assistant/chunk", chunk(type="finish", reason={"kind": "tool-calls"})),
    ("tool/call", CALL),
    ("tool/paused", PAUSE),
    ("tool/paused", {**PAUSE, "reason": {"kind": "my-own", "by": "reviewer"}}),
    ("request/context", {"provider": "acme", "model": "m", "contextWindow": 128000}),
    ("session/end-seed", {}),
]


def detached() -> Session:
    return Session.create(header=SessionHeader(id="shapes", created_at=0))


def test_every_reason_kind_and_chunk_kind_has_an_accepted_case() -> None:
    chunks = {data["chunk"]["type"] for _, data in ACCEPTED if "chunk" in data}
    reasons = {data["reason"]["kind"] for kind, data in ACCEPTED if kind == "turn/end"}
    assert chunks == set(CHUNK_KINDS)
    assert reasons == set(TURN_END_KINDS)


@pytest.mark.parametrize(("event_type", "data", "says"), REFUSED)
def test_an_append_refuses_data_that_breaks_its_type_shape(
    event_type: str, data: Any, says: str
) -> None:
    session = detached()
    closed_turn(session, 1)
    before = session.events
    with pytest.raises(EventDataError) as caught:
        session.append(event_type, data)
    assert caught.value.code == "BAD_DATA"
    assert str(caught.value).startswith(event_type)
    assert says in str(caught.value)
    assert caught.value.session_id == "shapes"
    assert session.events is before
    # verify says the same about a stored event
    problem = data_shape_problem(event_type, snapshot(data))
    assert problem is not None
    assert says in problem


@pytest.mark.parametrize(("event_type", "data"), ACCEPTED)
def test_an_append_accepts_every_documented_shape(event_type: str, data: Any) -> None:
    session = detached()
    assert session.append(event_type, data).seq == 0
    assert data_shape_problem(event_type, snapshot(data)) is None


@settings(max_examples=60)
@given(session_logs())
def test_the_generated_logs_the_suite_relies_on_have_the_documented_shapes(
    log: list[dict[str, Any]],
) -> None:
    problems = [
        (envelope["seq"], problem)
        for envelope in log
        if (problem := data_shape_problem(envelope["type"], snapshot(envelope["data"])))
    ]
    assert problems == []


# -- stored logs of earlier writers: loaded as they are, reported by verify -------------

#: What the original system's logs hold: turn/end reasons this library refuses at append.
EARLIER_WRITER = [
    {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
    {"type": "turn/end", "seq": 1, "time": 2, "data": {"turn": 1, "reason": None}},
    {"type": "turn/start", "seq": 2, "time": 3, "data": {"turn": 2}},
    {
        "type": "turn/end",
        "seq": 3,
        "time": 4,
        "data": {"turn": 2, "error": {"code": "UNKNOWN", "message": "model failed"}},
    },
]


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgresql"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str | None, type[SessionPersistence] | None, Any]]:
    kind = request.param
    if kind == "memory":
        from sessionledger.storage._memory import MemoryPersistence

        shared: dict[str, Any] = {}
        yield None, None, lambda: MemoryPersistence(store=shared)
    elif kind == "jsonl":
        root = tmp_path / "sessions"
        yield f"jsonl:{root}", JsonlPersistence, lambda: JsonlPersistence(root)
    elif kind == "sqlite":
        path = tmp_path / "ledger.db"
        yield f"sqlite:{path}", SqlitePersistence, lambda: SqlitePersistence(path)
    else:
        base = request.getfixturevalue("pg_url")
        schema = f"shapes_{uuid.uuid4().hex[:12]}"
        url = with_options(base, schema=schema, pool_max_size=2)
        dsn, options = parse_postgres_url(url)
        yield url, PostgresPersistence, lambda: PostgresPersistence(dsn, **options)
        await drop_schema(base, schema)


async def test_a_stored_log_of_an_earlier_writer_resumes_event_for_event(backend: Any) -> None:
    url, _, make = backend
    store = make()
    await store.create(SessionHeader(id="earlier", created_at=0))
    await store.append("earlier", EARLIER_WRITER)
    await store.close()
    async with Ledger(persistence=make(), load_entrypoints=False) as ledger:
        session = await ledger.resume("earlier")
        stored = [event.to_json() for event in session.events[: len(EARLIER_WRITER)]]
        assert stored == EARLIER_WRITER
        assert [event.type for event in session.events[len(EARLIER_WRITER) :]] == [
            "session/end-seed"
        ]
        # the session goes on, and new events must have the shapes
        session.append("turn/start", {"turn": 3})
        with pytest.raises(EventDataError):
            session.append("turn/end", {"turn": 3, "reason": "completed"})
        session.append("turn/end", {"turn": 3, "reason": {"kind": "completed"}})
    if url is None:
        return
    # verify names exactly the two events, with the rule and the seq, and exits 1
    done = subprocess.run(
        [sys.executable, "-m", "sessionledger", "--store", url, "verify", "earlier", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    (session_report,) = report["sessions"]
    shapes = [problem for problem in session_report["problems"] if problem["rule"] == "BAD_DATA"]
    assert [problem["seq"] for problem in shapes] == [1, 3]
    assert all("data.reason must be an object" in problem["message"] for problem in shapes)
