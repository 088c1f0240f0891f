"""Crash repair's closers satisfy the invariants, offline and on resume."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from invariants_builders import AM, CH, SE, SS, TC, TE, TR, TS, UM, log, put

from sessionledger import Ledger
from sessionledger.model._events import SessionEvent
from sessionledger.model._repair import interrupted_turn_closers
from sessionledger.model._session import Session
from sessionledger.storage._memory import MemoryPersistence
from sessionledger.testing.strategies import session_logs
from sessionledger_invariants import InvariantsPlugin, Trace, check_log


@settings(max_examples=80, deadline=None)
@given(session_logs(max_turns=3, open_tail=True))
def test_closers_of_any_interrupted_log_pass_the_invariants(envelopes):
    closers = interrupted_turn_closers(envelopes)
    assert closers, "an open-tail log always gets closers"
    assert check_log(envelopes) == []
    assert check_log([*envelopes, *closers]) == []


@settings(max_examples=40, deadline=None)
@given(session_logs(max_turns=2, open_tail=True))
def test_a_repaired_log_seeds_a_checked_session(envelopes):
    plugin = InvariantsPlugin()
    ledger = Ledger(plugins=[plugin], load_entrypoints=False)
    repaired = [*envelopes, *interrupted_turn_closers(envelopes)]
    session = Session.create("r", seed=repaired, hooks=ledger.plugins.session_hooks)
    plugin.ledger_session_created(session)  # strict replay: raises on any violation
    trace = plugin.trace(session)
    assert trace is not None
    assert trace.open_turn is None
    put(session, TS(trace.next_turn))


INTERRUPTED = {
    "mid-stream": (TS(1), UM(), SS(1, 1), CH(1, 1)),
    "turn without a step": (TS(1), UM()),
    "between steps": (TS(1), SS(1, 1), AM(1, 1), SE(1, 1)),
    "call never started": (TS(1), SS(1, 1), AM(1, 1, ("a",))),
    "call outcome unknown": (TS(1), SS(1, 1), AM(1, 1, ("a",)), TC(1, 1, "a")),
    "calls mixed": (
        TS(1),
        SS(1, 1),
        AM(1, 1, ("a", "b", "c")),
        TC(1, 1, "a"),
        TR(1, 1, "a"),
        TC(1, 1, "b"),
    ),
    "call recorded without a request": (TS(1), SS(1, 1), TC(1, 1, "x")),
    "second step": (TS(1), SS(1, 1), SE(1, 1), SS(1, 2), AM(1, 2, ("z",))),
}


@pytest.mark.parametrize("tail", INTERRUPTED.values(), ids=INTERRUPTED.keys())
async def test_resume_commits_closers_the_plugin_accepts(tail):
    store: dict = {}
    async with Ledger(
        MemoryPersistence(store=store), plugins=[InvariantsPlugin()], load_entrypoints=False
    ) as before_crash:
        put(before_crash.create("s"), TS(1), TE(1), *(_renumber(event, 2) for event in tail))
    plugin = InvariantsPlugin()
    async with Ledger(
        MemoryPersistence(store=store), plugins=[plugin], load_entrypoints=False
    ) as after_crash:
        resumed = await after_crash.resume("s")
        assert resumed.events[-2].data["reason"] == {"kind": "interrupted"}
        assert plugin.trace(resumed) == Trace(None, None, 3, plugin.trace(resumed).next_step)
        put(resumed, TS(3), TE(3))
    assert check_log(resumed.events) == []


def _renumber(event: dict, turn: int) -> dict:
    """Move a turn-1 builder event into *turn*."""
    data = event["data"]
    if isinstance(data, dict) and data.get("turn") == 1:
        data = {**data, "turn": turn}
    return {**event, "data": data}


def test_the_core_repair_fixture_passes():
    events = log(TS(1), SS(1, 1), AM(1, 1, ("a", "b")), TC(1, 1, "a"))
    closers = [SessionEvent.from_json(c) for c in interrupted_turn_closers(events)]
    assert [c.data.get("error", {}).get("code") for c in closers[:2]] == [
        "TOOL_OUTCOME_UNKNOWN",
        "TOOL_NOT_STARTED",
    ]
    assert check_log([*events, *closers]) == []
