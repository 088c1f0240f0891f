"""The plugin inside a real ``Ledger``: two-phase staging, replay at creation, activation."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from invariants_builders import (
    AM,
    CH,
    PLUGIN,
    SE,
    SS,
    TC,
    TE,
    TR,
    TS,
    UM,
    HarnessTypes,
    log,
    put,
    refused,
)

from sessionledger import Ledger
from sessionledger._errors import ConfigError, ForkError, InvariantError, MessageShapeError
from sessionledger.model._events import SessionHeader
from sessionledger.model._session import Session
from sessionledger.plugins._hookspecs import hookimpl
from sessionledger.plugins._manager import AUTOLOAD_SWITCH
from sessionledger.storage._memory import MemoryPersistence
from sessionledger_invariants import EMPTY_TRACE, ENABLE_SWITCH, InvariantsPlugin, Trace
from sessionledger_invariants import rules as R


class LaterVeto:
    """A validator that runs after the invariants plugin and vetoes the next *n* appends."""

    def __init__(self, times: int = 1) -> None:
        self.times = times
        self.seen: list[int] = []

    @hookimpl(trylast=True)
    def ledger_validate(self, session: Session, event) -> None:
        self.seen.append(event.seq)
        if self.times:
            self.times -= 1
            raise RuntimeError("later dispatch veto")


class HostileObserver:
    """An observer that runs before the invariants plugin and always fails."""

    @hookimpl(tryfirst=True)
    def ledger_committed(self, session: Session, event) -> None:
        raise RuntimeError("hostile observer")


# -- two-phase staging -------------------------------------------------------------------------


def test_a_refused_append_leaves_log_and_trace_unchanged(session, plugin):
    put(session, TS(1), SS(1, 1))
    events, trace = session.events, plugin.trace(session)
    refused(session, TS(2), R.TURN_START_WHILE_OPEN, plugin)
    assert session.events is events
    assert plugin.trace(session) is trace
    put(session, SE(1, 1), TE(1))


def test_a_later_validators_veto_leaves_the_trace_unadvanced():  # I3
    plugin, veto = InvariantsPlugin(), LaterVeto()
    session = Ledger(plugins=[plugin, veto], load_entrypoints=False).create("s")
    with pytest.raises(RuntimeError, match="later dispatch veto"):
        put(session, TS(1))
    # The plugin validated (and staged) the candidate before the veto ran...
    assert veto.seen == [0]
    # ...and applied nothing: turn 1 is not open, so turn/start 1 is accepted again.
    assert session.events == ()
    assert plugin.trace(session) is EMPTY_TRACE
    assert plugin.last_seq_of(session) == -1
    put(session, TS(1), TE(1))
    assert plugin.trace(session) == Trace(None, None, 2, 1)


def test_only_the_staged_event_itself_applies_its_stage():
    plugin, veto = InvariantsPlugin(), LaterVeto()
    session = Ledger(plugins=[plugin, veto], load_entrypoints=False).create("s")
    with pytest.raises(RuntimeError):
        put(session, TS(1))  # staged "turn 1 open", then vetoed
    other = log(PLUGIN())[0]  # a different event with the same seq reaches the observer
    plugin.ledger_committed(session, other)
    assert plugin.trace(session) is EMPTY_TRACE
    assert plugin.last_seq_of(session) == 0


def test_a_vetoed_step_change_does_not_leak_into_the_next_append():
    plugin, veto = InvariantsPlugin(), LaterVeto(times=0)
    session = Ledger(plugins=[plugin, veto], load_entrypoints=False).create("s")
    put(session, TS(1), SS(1, 1), TC(1, 1, "c"))
    veto.times = 1
    with pytest.raises(RuntimeError):
        put(session, TR(1, 1, "c"))  # staged: "c" answered
    put(session, TR(1, 1, "c"))  # still pending, so still answerable
    assert plugin.trace(session) == Trace(1, 1, 2, 2, frozenset())


def test_a_core_failure_before_validation_leaves_the_trace_unchanged(session, plugin):
    put(session, TS(1))
    trace = plugin.trace(session)
    with pytest.raises(MessageShapeError):
        session.append("user/message", {"role": "user"}, surface_op="append")
    assert plugin.trace(session) is trace
    assert plugin.last_seq_of(session) == 0


def test_a_failing_observer_does_not_stop_the_trace(caplog):  # I4
    plugin = InvariantsPlugin()
    session = Ledger(plugins=[plugin, HostileObserver()], load_entrypoints=False).create("s")
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        put(session, TS(1), TE(1))
    hostile = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(hostile) == 2
    assert plugin.trace(session) == Trace(None, None, 2, 1)
    refused(session, TS(1), R.TURN_NUMBER, plugin)


def test_a_committed_event_the_plugin_did_not_validate_still_moves_the_trace(session, plugin):
    put(session, TS(1))
    stray = log(TS(1), SS(1, 1))[1]  # as if committed behind the plugin's back
    plugin.ledger_committed(session, stray)
    assert plugin.trace(session) == Trace(1, 1, 2, 2)
    bad = log(TS(1), SS(1, 1), SS(1, 2))[2]
    with pytest.raises(InvariantError) as caught:
        plugin.ledger_committed(session, bad)
    assert caught.value.rule == R.STEP_START_WHILE_OPEN
    assert plugin.trace(session) == Trace(1, 2, 2, 3)  # follows the log regardless


async def test_closing_a_session_drops_its_trace(ledger, plugin):
    session = ledger.create("s")
    put(session, TS(1))
    await ledger.delete("s")
    assert plugin.trace(session) is None


# -- replay of the log a session starts with ---------------------------------------------------


async def test_a_fork_is_replayed_into_a_trace(ledger, plugin):
    source = ledger.create("source")
    put(source, TS(1), UM(), SS(1, 1), AM(1, 1), SE(1, 1), TE(1))
    child = await ledger.fork(source, child_id="child")
    assert [e.type for e in child.events][-1] == "session/end-seed"
    assert plugin.trace(child) == Trace(None, None, 2, 2)
    assert plugin.last_seq_of(child) == len(child.events) - 1
    refused(child, TS(1), R.TURN_NUMBER, plugin)
    put(child, TS(2))


async def test_a_fork_at_an_earlier_boundary_replays_only_the_prefix(ledger, plugin):
    source = ledger.create("source")
    put(source, TS(1), TE(1), TS(2), TE(2))
    child = await ledger.fork(source, boundary=1, child_id="child")
    assert plugin.trace(child) == Trace(None, None, 2, 1)
    put(child, TS(2))


async def _store_unchecked(store: dict, session_id: str, *events) -> None:
    """Write *events* straight to a memory store: no ledger, so nothing checks them."""
    backend = MemoryPersistence(store=store)
    await backend.create(SessionHeader(id=session_id, created_at=1))
    await backend.append(session_id, log(*events))
    await backend.close()


async def test_an_invalid_seed_fails_the_fork():  # I28
    store: dict = {}
    await _store_unchecked(store, "bad", TS(1), TE(1), TS(3), TE(3))
    plugin = InvariantsPlugin()
    async with Ledger(
        MemoryPersistence(store=store), plugins=[plugin], load_entrypoints=False
    ) as ledger:
        with pytest.raises(InvariantError) as caught:
            await ledger.fork("bad", child_id="child")
        error = caught.value
        assert (error.rule, error.seq, error.session_id) == (R.TURN_NUMBER, 2, "child")
        assert ledger.get("child") is None
        assert [s.id for s in ledger.live_sessions()] == []


async def test_a_resumed_session_is_repaired_and_replayed():
    store: dict = {}
    async with Ledger(
        MemoryPersistence(store=store), plugins=[InvariantsPlugin()], load_entrypoints=False
    ) as first:
        crashed = first.create("crashed")
        put(crashed, TS(1), TE(1), TS(2), SS(2, 1), AM(2, 1, ("a", "b")), TC(2, 1, "a"))
        # The process "crashes" here: turn 2 stays open in the store.
    plugin = InvariantsPlugin()
    async with Ledger(
        MemoryPersistence(store=store), plugins=[plugin], load_entrypoints=False
    ) as second:
        resumed = await second.resume("crashed")
        types = [e.type for e in resumed.events][6:]
        assert types == ["tool/result", "tool/result", "step/end", "turn/end", "session/end-seed"]
        assert plugin.trace(resumed) == Trace(None, None, 3, 2)
        refused(resumed, TS(2), R.TURN_NUMBER, plugin)
        put(resumed, TS(3), TE(3))


async def test_an_invalid_stored_log_is_refused_on_resume():
    store: dict = {}
    await _store_unchecked(store, "bad", TS(1), SS(1, 1), SS(1, 2), SE(1, 2), TE(1))
    async with Ledger(
        MemoryPersistence(store=store), plugins=[InvariantsPlugin()], load_entrypoints=False
    ) as ledger:
        with pytest.raises(InvariantError) as caught:
            await ledger.resume("bad")
        assert (caught.value.rule, caught.value.seq) == (R.STEP_START_WHILE_OPEN, 2)
        assert ledger.get("bad") is None


def test_an_unannounced_session_is_adopted_from_its_log(ledger, plugin):  # I32, lazily
    session = Session.create("manual", seed=log(TS(1)), hooks=ledger.plugins.session_hooks)
    assert plugin.trace(session) is None
    refused(session, TS(2), R.TURN_START_WHILE_OPEN)  # adopts the session on the way
    assert plugin.trace(session) == Trace(1, None, 2, 1)
    assert plugin.last_seq_of(session) == 1  # turn/start, session/end-seed
    put(session, TE(1))


def test_adopting_a_broken_log_warns_and_carries_on(ledger, plugin, caplog):
    seed = log(TS(1), TS(2), CH(2, 1))
    session = Session.create("manual", seed=seed, hooks=ledger.plugins.session_hooks)
    with caplog.at_level(logging.WARNING, logger="sessionledger.invariants"):
        put(session, SS(2, 1))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "at seq 1" in warnings[0]
    assert "at seq 2" in warnings[1]
    assert plugin.trace(session) == Trace(2, 1, 3, 2)


# -- activation --------------------------------------------------------------------------------


def _invariant_plugins(ledger: Ledger) -> list[InvariantsPlugin]:
    return [p for p in ledger.plugins.pm.get_plugins() if isinstance(p, InvariantsPlugin)]


@pytest.fixture
def autoload(monkeypatch):
    """Entry points are loaded (the variable that disables them is unset)."""
    monkeypatch.delenv(AUTOLOAD_SWITCH, raising=False)
    return monkeypatch


def test_the_environment_switch_enables_the_plugin(autoload):
    autoload.setenv(ENABLE_SWITCH, "1")
    ledger = Ledger(plugins=[HarnessTypes()])
    (plugin,) = _invariant_plugins(ledger)
    session = ledger.create("s")
    refused(session, TE(1), R.TURN_END_MISMATCH, plugin)


def test_each_ledger_gets_its_own_plugin(autoload):
    autoload.setenv(ENABLE_SWITCH, "true")
    (first,) = _invariant_plugins(Ledger())
    (second,) = _invariant_plugins(Ledger())
    assert first is not second


def test_an_explicit_plugin_is_not_registered_twice(autoload):
    autoload.setenv(ENABLE_SWITCH, "1")
    mine = InvariantsPlugin()
    assert _invariant_plugins(Ledger(plugins=[mine])) == [mine]


@pytest.mark.invariants_off
@pytest.mark.parametrize("value", [None, "", "0", "off", "False"])
def test_the_plugin_is_off_by_default(autoload, value):
    if value is None:
        autoload.delenv(ENABLE_SWITCH, raising=False)
    else:
        autoload.setenv(ENABLE_SWITCH, value)
    ledger = Ledger()
    assert _invariant_plugins(ledger) == []
    put(ledger.create("s"), TE(7))  # nothing checks it


def test_an_unclear_switch_value_is_a_configuration_error(autoload):
    autoload.setenv(ENABLE_SWITCH, "sometimes")
    with pytest.raises(ConfigError, match=ENABLE_SWITCH):
        Ledger()


@pytest.mark.invariants_off
def test_the_switch_needs_entry_points(autoload):
    autoload.setenv(ENABLE_SWITCH, "1")
    assert _invariant_plugins(Ledger(load_entrypoints=False)) == []


def test_the_switch_is_read_when_the_ledger_is_built(autoload):
    autoload.setenv(ENABLE_SWITCH, "1")
    ledger = Ledger(plugins=[HarnessTypes()])
    autoload.setenv(ENABLE_SWITCH, "0")
    with pytest.raises(InvariantError):
        put(ledger.create("s"), PLUGIN(), TE(1))


async def test_fork_refuses_an_open_turn_before_the_plugin_sees_it(ledger):
    source = ledger.create("source")
    put(source, TS(1), SS(1, 1))
    with pytest.raises(ForkError) as caught:
        await ledger.fork(source)
    assert caught.value.code == "OPEN_TURN"


# -- plugin authors: the README's examples -----------------------------------------------------


def _readme_example(marker: str) -> dict:
    """Run the README's python block that defines *marker*; return its namespace."""
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    blocks = [block.split("```", 1)[0] for block in readme.split("```python\n")[1:]]
    (code,) = [block for block in blocks if marker in block]
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace


@pytest.fixture(params=["class CompactionBrackets(", "class CompactionBracketsByHand"])
def with_brackets(request):
    """Build a ledger with the invariants plugin, one of the README's bracket checkers (a
    fresh one per ledger) and *extra* plugins."""
    namespace = _readme_example(request.param)
    checker_class = namespace[request.param.removeprefix("class ").rstrip("(")]

    def build(*extra: object) -> Ledger:
        checker = checker_class()
        types = [] if hasattr(checker, "ledger_event_types") else [_CompactionTypes()]
        plugins = [InvariantsPlugin(), checker, *types, *extra]
        return Ledger(plugins=plugins, load_entrypoints=False)

    return build


@pytest.fixture
def brackets(with_brackets) -> Ledger:
    return with_brackets()


class _CompactionTypes:
    @hookimpl
    def ledger_event_types(self):
        from sessionledger import EventType

        return [EventType("compaction/start"), EventType("compaction/end")]


def test_the_readme_bracket_rule_accepts_alternating_brackets(brackets):
    session = brackets.create("s")
    start, end = PLUGIN("compaction/start"), PLUGIN("compaction/end")
    put(session, start, TS(1), TE(1), end, start, end)


@pytest.mark.parametrize(
    ("events", "rule"),
    [
        (("compaction/start", "compaction/start"), "compaction-nested"),
        (("compaction/end",), "compaction-unopened"),
        (("compaction/start", "compaction/end", "compaction/end"), "compaction-unopened"),
    ],
)
def test_the_readme_bracket_rule_refuses_unbalanced_brackets(brackets, events, rule):
    session = brackets.create("s")
    *accepted, last = events
    put(session, *(PLUGIN(kind) for kind in accepted))
    with pytest.raises(InvariantError) as caught:
        put(session, PLUGIN(last))
    assert caught.value.rule == rule
    assert len(session.events) == len(accepted)


def test_the_readme_bracket_rule_survives_a_later_veto(with_brackets):
    session = with_brackets(LaterVeto()).create("s")
    with pytest.raises(RuntimeError):
        put(session, PLUGIN("compaction/start"))
    put(session, PLUGIN("compaction/start"), PLUGIN("compaction/end"))


async def test_the_readme_bracket_rule_refuses_a_broken_fork(brackets):
    source = brackets.create("source")
    put(source, PLUGIN("compaction/start"))
    child = await brackets.fork(source, child_id="child")  # an open bracket is inherited
    with pytest.raises(InvariantError):
        put(child, PLUGIN("compaction/start"))
    put(child, PLUGIN("compaction/end"))


def test_a_session_checker_checks_offline_too():
    checker = _readme_example("class CompactionBrackets(")["CompactionBrackets"]()
    events = log(PLUGIN("compaction/end"), PLUGIN("compaction/start"), PLUGIN("compaction/start"))
    assert [(v.seq, v.rule) for v in checker.check(events)] == [
        (0, "compaction-unopened"),
        (2, "compaction-nested"),
    ]
