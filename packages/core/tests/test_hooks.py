"""Plugins through pluggy: validators, observers, event types, lifecycle, flush.

What each hook promises: docs/plugins.md, "the hooks".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from sessionledger import (
    ConfigError,
    EventType,
    Ledger,
    NotLiveError,
    ReentrantAppendError,
    Replace,
    Session,
    SessionEvent,
    hookimpl,
    user_message,
)


class TestTypes:
    """The event types these tests append: a ledger refuses types it does not know."""

    @hookimpl
    def ledger_event_types(self) -> list[EventType]:
        names = ("x", "y", "inner", "outer", "after", "next", "mirrored")
        return [EventType(name) for name in names]


def ledger(*plugins: object) -> Ledger:
    return Ledger(plugins=[TestTypes(), *plugins], load_entrypoints=False)


def U(text: str = "u") -> dict[str, Any]:
    return dict(user_message(text))


def A(text: str = "a") -> dict[str, Any]:
    from sessionledger import assistant_message

    return {
        "turn": 1,
        "step": 1,
        "message": assistant_message(text, provider="mock", model="mock"),
    }


class Veto(Exception):
    pass


class Recorder:
    """Record every candidate and every committed event."""

    def __init__(self, label: str = "recorder", log: list[Any] | None = None) -> None:
        self.label = label
        self.log = log if log is not None else []

    @hookimpl
    def ledger_validate(self, session: Session, event: SessionEvent) -> None:
        self.log.append((self.label, "validate", event.type, event.seq, len(session.events)))

    @hookimpl
    def ledger_committed(self, session: Session, event: SessionEvent) -> None:
        self.log.append((self.label, "committed", event.type, event.seq, len(session.events)))


# --- validators -----------------------------------------------------------------------------


def test_validator_veto_propagates_unchanged_and_commits_nothing() -> None:
    raised = Veto("reject first candidate")
    candidates: list[SessionEvent] = []
    seen_lengths: list[int] = []

    class RejectFirst:
        @hookimpl
        def ledger_validate(self, session: Session, event: SessionEvent) -> None:
            candidates.append(event)
            seen_lengths.append(len(session.events))
            if len(candidates) == 1:
                raise raised

    observed: list[SessionEvent] = []

    class Observer:
        @hookimpl
        def ledger_committed(self, event: SessionEvent) -> None:
            observed.append(event)

    led = ledger(RejectFirst(), Observer())
    s = led.create("veto")
    events_before = s.events
    with pytest.raises(Veto) as caught:
        s.append("turn/start", {"turn": 1})
    assert caught.value is raised
    assert s.events is events_before
    assert s.events == ()
    assert observed == []
    second = s.append("turn/start", {"turn": 1})
    assert second.seq == 0
    assert [c.seq for c in candidates] == [0, 0]
    assert seen_lengths == [0, 0]
    assert candidates[1] is second
    assert observed == [second]
    with pytest.raises(TypeError):
        candidates[0].data["turn"] = 2


def test_j11_vetoed_replace_leaves_surface_and_generation() -> None:
    class NoReplaces:
        @hookimpl
        def ledger_validate(self, event: SessionEvent) -> None:
            if isinstance(event.surface_op, Replace):
                raise Veto("no replaces")

    s = ledger(NoReplaces()).create("j11")
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    s.append("user/message", U("source"), surface_op="append")
    with pytest.raises(Veto):
        s.append("assistant/message", A(), surface_op=Replace(2, 2), source_event_seqs=[2])
    assert len(s.events) == 3
    assert s.surface.nodes == (2,)
    assert s.surface.replace_generation == 0
    s.append("user/message", U("next"), surface_op="append")
    assert s.surface.nodes == (2, 3)
    assert s.surface.replace_generation == 0


def test_validator_that_always_raises_blocks_every_append() -> None:
    class Never:
        @hookimpl
        def ledger_validate(self) -> None:
            raise Veto("never")

    rec = Recorder()
    s = ledger(Never(), rec).create("j12")
    for _ in range(3):
        with pytest.raises(Veto):
            s.append("x", None)
    assert s.events == ()
    assert [entry for entry in rec.log if entry[1] == "committed"] == []


def test_reentrant_append_from_validator_propagates() -> None:
    class Reenter:
        @hookimpl
        def ledger_validate(self, session: Session, event: SessionEvent) -> None:
            if event.type == "outer":
                session.append("inner", None)

    rec = Recorder()
    s = ledger(Reenter(), rec).create("reenter-validate")
    with pytest.raises(ReentrantAppendError) as caught:
        s.append("outer", None)
    assert caught.value.code == "REENTRANT"
    assert s.events == ()
    assert [e for e in rec.log if e[1] == "committed"] == []
    assert s.append("after", None).seq == 0


def test_staged_state_is_applied_only_for_committed_events() -> None:
    # A plugin stages in ledger_validate keyed by the candidate and applies in
    # ledger_committed; a later validator's veto must leave the state unadvanced.
    class Counter:
        def __init__(self) -> None:
            self.staged: dict[int, int] = {}
            self.count = 0

        @hookimpl(tryfirst=True)
        def ledger_validate(self, event: SessionEvent) -> None:
            self.staged[id(event)] = self.count + 1

        @hookimpl
        def ledger_committed(self, event: SessionEvent) -> None:
            self.count = self.staged.pop(id(event))

    class VetoOdd:
        @hookimpl(trylast=True)
        def ledger_validate(self, event: SessionEvent) -> None:
            if event.data == "veto":
                raise Veto("vetoed")

    counter = Counter()
    s = ledger(counter, VetoOdd()).create("stage")
    s.append("x", "ok")
    with pytest.raises(Veto):
        s.append("x", "veto")
    s.append("x", "ok")
    assert counter.count == 2


def test_validators_and_observers_do_not_run_for_detached_sessions() -> None:
    rec = Recorder()
    ledger(rec)
    Session.create("detached").append("x", None)
    assert rec.log == []


# --- observers ------------------------------------------------------------------------------


def test_failing_observer_is_logged_and_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        @hookimpl
        def ledger_committed(self, event: SessionEvent) -> None:
            raise RuntimeError("sync event observer")

    before, after = Recorder("before"), Recorder("after")
    broken = Broken()
    led = ledger(before, broken, after)
    s = led.create("contained-event")
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        event = s.append("x", None)
    assert s.events == (event,)
    committed = [entry[0] for entry in before.log + after.log if entry[1] == "committed"]
    assert sorted(committed) == ["after", "before"]
    records = [r for r in caplog.records if r.name == "sessionledger"]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.WARNING
    assert led.plugins.pm.get_name(broken) in record.getMessage()
    assert "contained-event" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)


def test_failing_observer_warning_names_the_plugin_class(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenObserverPlugin:
        @hookimpl
        def ledger_committed(self) -> None:
            raise RuntimeError("boom")

    s = ledger(BrokenObserverPlugin()).create("named")
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        s.append("x", None)
    assert "BrokenObserverPlugin" in caplog.records[0].getMessage()


def test_observer_sees_the_committed_log() -> None:
    checks: list[Any] = []

    class Check:
        @hookimpl
        def ledger_committed(self, session: Session, event: SessionEvent) -> None:
            checks.append(
                (
                    session.events[-1] is event,
                    session.seq == event.seq + 1,
                    session.event_at(event.seq) is event,
                )
            )

    s = ledger(Check()).create("observe")
    s.append("x", None)
    s.append("user/message", U(), surface_op="append")
    assert checks == [(True, True, True)] * 2


def test_reentrant_append_from_observer_is_contained(caplog: pytest.LogCaptureFixture) -> None:
    errors: list[BaseException] = []

    class Reenter:
        @hookimpl(tryfirst=True)
        def ledger_committed(self, session: Session, event: SessionEvent) -> None:
            try:
                session.append("x", {"todos": []})
            except ReentrantAppendError as error:
                errors.append(error)
                raise

    later = Recorder("later")
    s = ledger(Reenter(), later).create("reenter-observe")
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        outer = s.append("turn/start", {"turn": 1})
    assert s.events == (outer,)
    assert len(errors) == 1
    assert errors[0].code == "REENTRANT"  # type: ignore[attr-defined]
    assert [e for e in later.log if e[1] == "committed"] == [
        ("later", "committed", "turn/start", 0, 1)
    ]
    warnings = [r for r in caplog.records if r.name == "sessionledger"]
    assert len(warnings) == 1
    assert isinstance(warnings[0].exc_info[1], ReentrantAppendError)  # type: ignore[index]
    # The guard is released afterwards.
    assert s.append("next", None).seq == 1


def test_append_to_another_session_from_an_observer_works() -> None:
    led: Ledger

    class Mirror:
        @hookimpl
        def ledger_committed(self, session: Session, event: SessionEvent) -> None:
            if session.id == "main":
                other = led.get("mirror")
                assert other is not None
                other.append("mirrored", event.seq)

    led = ledger(Mirror())
    main, mirror = led.create("main"), led.create("mirror")
    main.append("x", None)
    main.append("x", None)
    assert [e.data for e in mirror.events] == [0, 1]


def test_observer_exception_does_not_leave_the_session_busy() -> None:
    class Broken:
        @hookimpl
        def ledger_committed(self) -> None:
            raise RuntimeError("boom")

    s = ledger(Broken()).create("busy")
    logging.getLogger("sessionledger").disabled = True
    try:
        s.append("x", None)
        s.append("y", None)
    finally:
        logging.getLogger("sessionledger").disabled = False
    assert [e.type for e in s.events] == ["x", "y"]


# --- argument subsets and call order --------------------------------------------------------


def test_impls_may_take_any_subset_of_arguments() -> None:
    calls: list[Any] = []

    class Subsets:
        @hookimpl
        def ledger_validate(self, event: SessionEvent) -> None:
            calls.append(("validate-event", event.seq))

        @hookimpl
        def ledger_committed(self, session: Session) -> None:
            calls.append(("committed-session", session.id))

    class Nothing:
        @hookimpl
        def ledger_validate(self) -> None:
            calls.append(("validate-nothing",))

        @hookimpl
        def ledger_committed(self) -> None:
            calls.append(("committed-nothing",))

    class Swapped:
        @hookimpl
        def ledger_validate(self, event: SessionEvent, session: Session) -> None:
            calls.append(("validate-swapped", event.seq, session.id))

        @hookimpl
        def ledger_committed(self, event: SessionEvent, session: Session) -> None:
            calls.append(("committed-swapped", event.seq, session.id))

    s = ledger(Subsets(), Nothing(), Swapped()).create("subsets")
    s.append("x", None)
    assert sorted(calls, key=str) == sorted(
        [
            ("validate-event", 0),
            ("committed-session", "subsets"),
            ("validate-nothing",),
            ("committed-nothing",),
            ("validate-swapped", 0, "subsets"),
            ("committed-swapped", 0, "subsets"),
        ],
        key=str,
    )


def test_tryfirst_trylast_and_last_registered_first_order() -> None:
    log: list[Any] = []

    def plugin(label: str, **marks: bool) -> object:
        class Ordered:
            @hookimpl(**marks)
            def ledger_validate(self) -> None:
                log.append(("validate", label))

            @hookimpl(**marks)
            def ledger_committed(self) -> None:
                log.append(("committed", label))

        return Ordered()

    s = ledger(
        plugin("last", trylast=True),
        plugin("plain-1"),
        plugin("first", tryfirst=True),
        plugin("plain-2"),
    ).create("order")
    s.append("x", None)
    expected = ["first", "plain-2", "plain-1", "last"]
    assert [label for kind, label in log if kind == "validate"] == expected
    assert [label for kind, label in log if kind == "committed"] == expected
    assert log.index(("validate", "last")) < log.index(("committed", "first"))


# --- event types from plugins ---------------------------------------------------------------


def test_plugin_event_type_validate_runs_on_append() -> None:
    received: list[Any] = []

    def check(data: Any) -> None:
        received.append(data)
        if data.get("ok") is not True:
            raise ValueError("todo/write needs ok")

    class Types:
        @hookimpl
        def ledger_event_types(self) -> list[EventType]:
            return [EventType("todo/write", validate=check)]

    rec = Recorder()
    led = ledger(Types(), rec)
    s = led.create("types")
    with pytest.raises(ValueError, match="needs ok"):
        s.append("todo/write", {"ok": False})
    assert s.events == ()
    assert [e for e in rec.log if e[1] == "validate"] == []
    s.append("todo/write", {"ok": True})
    assert len(s.events) == 1
    assert received[-1] == {"ok": True}
    with pytest.raises(TypeError):
        received[-1]["ok"] = False
    assert "todo/write" in led.plugins.event_types
    assert led.plugins.event_types.get("todo/write").validate is check  # type: ignore[union-attr]


def test_plugin_event_type_validate_runs_on_seed_of_a_ledger_session() -> None:
    class Types:
        @hookimpl
        def ledger_event_types(self) -> list[EventType]:
            def check(data: Any) -> None:
                if data != {"ok": True}:
                    raise ValueError("bad")

            return [EventType("plugin/checked", validate=check)]

    led = ledger(Types())
    hooks = led.plugins.session_hooks
    from sessionledger import SeedError

    with pytest.raises(SeedError) as caught:
        Session.create(
            "seeded",
            seed=[{"type": "plugin/checked", "seq": 0, "time": 1, "data": {}}],
            hooks=hooks,
        )
    assert caught.value.index == 0
    assert isinstance(caught.value.__cause__, ValueError)


def test_ignorable_event_type_marks_its_events() -> None:
    class Types:
        @hookimpl
        def ledger_event_types(self) -> list[EventType]:
            return [EventType("plugin/note", ignorable=True)]

    s = ledger(Types()).create("ignorable")
    e = s.append("plugin/note", {"text": "x"})
    assert e.ignorable is True
    assert e.to_json()["ignorable"] is True
    assert s.append("x", None).ignorable is False


@pytest.mark.parametrize(
    "declared",
    [
        [EventType("turn/start")],
        [EventType("user/message")],
        [EventType("plugin/a"), EventType("plugin/a")],
        [EventType("plugin/surface", surface=True)],
        [EventType("user/message", surface=True)],
    ],
    ids=[
        "core duplicate",
        "surface core duplicate",
        "own duplicate",
        "surface",
        "surface core name",
    ],
)
def test_invalid_plugin_event_types_raise_config_error(declared: list[EventType]) -> None:
    class Types:
        @hookimpl
        def ledger_event_types(self) -> list[EventType]:
            return declared

    with pytest.raises(ConfigError) as caught:
        ledger(Types())
    assert caught.value.code == "CONFIG"


def test_two_plugins_declaring_one_type_raise_config_error() -> None:
    def plugin() -> object:
        class Types:
            @hookimpl
            def ledger_event_types(self) -> list[EventType]:
                return [EventType("plugin/shared")]

        return Types()

    with pytest.raises(ConfigError):
        ledger(plugin(), plugin())


def test_event_type_needs_a_name() -> None:
    with pytest.raises(ConfigError):
        EventType("")


@pytest.mark.parametrize("kind", ["unknown hook", "extra argument", "wrapper", "same object twice"])
def test_invalid_plugins_raise_config_error(kind: str) -> None:
    class UnknownHook:
        @hookimpl
        def ledger_no_such_hook(self) -> None:
            pass

    class ExtraArgument:
        @hookimpl
        def ledger_validate(self, session: Session, event: SessionEvent, extra: Any) -> None:
            pass

    class Wrapper:
        @hookimpl(wrapper=True)
        def ledger_committed(self) -> Any:
            return (yield)

    plugins: list[object] = {
        "unknown hook": [UnknownHook()],
        "extra argument": [ExtraArgument()],
        "wrapper": [Wrapper()],
        "same object twice": [Recorder()] * 2,
    }[kind]
    with pytest.raises(ConfigError):
        ledger(*plugins)


# --- session lifecycle ----------------------------------------------------------------------


def test_session_created_raising_refuses_the_session() -> None:
    refuse = [True]
    announced: list[str] = []

    class Gate:
        @hookimpl
        def ledger_session_created(self, session: Session) -> None:
            announced.append(session.id)
            if refuse[0]:
                raise Veto("refused")

    led = ledger(Gate())
    with pytest.raises(Veto):
        led.create("gated")
    assert led.get("gated") is None
    assert led.live_sessions() == []
    refuse[0] = False
    s = led.create("gated")
    assert led.get("gated") is s
    assert announced == ["gated", "gated"]
    s.append("x", None)
    assert len(s.events) == 1


def test_session_created_sees_a_session_with_hooks_attached() -> None:
    seen: list[Any] = []

    class Watch:
        @hookimpl
        def ledger_session_created(self, session: Session) -> None:
            seen.append((session.id, session.events, session.hooks.validators != ()))

        @hookimpl
        def ledger_validate(self) -> None:
            pass

    led = ledger(Watch())
    s = led.create("watched")
    assert seen == [("watched", (), True)]
    assert led.get("watched") is s
    assert led.live_sessions() == [s]


async def test_session_closed_failures_are_logged_on_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    closed: list[str] = []

    class Closer:
        @hookimpl
        def ledger_session_closed(self, session: Session) -> None:
            closed.append(session.id)
            raise RuntimeError("close failed")

    led = ledger(Closer())
    led.create("a")
    led.create("b")
    with caplog.at_level(logging.WARNING, logger="sessionledger"):
        await led.close()
    assert sorted(closed) == ["a", "b"]
    assert len([r for r in caplog.records if r.name == "sessionledger"]) == 2


# --- flush ----------------------------------------------------------------------------------


async def test_flush_of_a_session_not_live_raises_not_live() -> None:
    calls: list[str] = []

    class Flusher:
        @hookimpl
        def ledger_flush(self, session: Session) -> None:
            calls.append(session.id)

    led, other = ledger(Flusher()), ledger()
    for stranger in (Session.create("detached"), other.create("elsewhere")):
        with pytest.raises(NotLiveError) as caught:
            await led.flush(stranger)
        assert caught.value.code == "NOT_LIVE"
    led.create("same-id")
    with pytest.raises(NotLiveError):
        await led.flush(other.create("same-id"))
    assert calls == []


async def test_flush_calls_every_implementation_with_the_session() -> None:
    calls: list[Any] = []

    class SyncFlush:
        @hookimpl
        def ledger_flush(self, session: Session) -> None:
            calls.append(("sync", session.id))

    class AsyncFlush:
        @hookimpl
        def ledger_flush(self, session: Session) -> Any:
            async def run() -> None:
                await asyncio.sleep(0)
                calls.append(("async", session.id))

            return run()

    led = ledger(SyncFlush(), AsyncFlush())
    s = led.create("flushed")
    assert await led.flush(s) is None
    assert sorted(calls) == [("async", "flushed"), ("sync", "flushed")]


async def test_flush_raises_first_failure_in_registration_order_after_all_settle() -> None:
    b_failed = asyncio.Event()
    c_done = asyncio.Event()
    finished: list[str] = []

    class FirstFailsLate:
        @hookimpl
        def ledger_flush(self) -> Any:
            async def run() -> None:
                await b_failed.wait()
                finished.append("a")
                raise Veto("a failed")

            return run()

    class SecondFailsAtOnce:
        @hookimpl
        def ledger_flush(self) -> Any:
            async def run() -> None:
                b_failed.set()
                finished.append("b")
                raise OSError("b failed")

            return run()

    class ThirdSyncRaise:
        @hookimpl
        def ledger_flush(self) -> None:
            finished.append("c-sync")
            raise RuntimeError("sync failure")

    class FourthSlow:
        @hookimpl
        def ledger_flush(self) -> Any:
            async def run() -> None:
                await b_failed.wait()
                for _ in range(20):
                    await asyncio.sleep(0)
                finished.append("d")
                c_done.set()

            return run()

    led = ledger(FirstFailsLate(), SecondFailsAtOnce(), ThirdSyncRaise(), FourthSlow())
    s = led.create("flush-order")
    with pytest.raises(Veto, match="a failed"):
        await led.flush(s)
    assert c_done.is_set()
    assert sorted(finished) == ["a", "b", "c-sync", "d"]
    assert finished.index("b") < finished.index("a")


async def test_flush_raises_a_sync_failure_when_it_comes_first() -> None:
    done: list[str] = []

    class SyncFails:
        @hookimpl
        def ledger_flush(self) -> None:
            raise Veto("sync first")

    class Slow:
        @hookimpl
        def ledger_flush(self) -> Any:
            async def run() -> None:
                for _ in range(10):
                    await asyncio.sleep(0)
                done.append("slow")

            return run()

    led = ledger(SyncFails(), Slow())
    with pytest.raises(Veto, match="sync first"):
        await led.flush(led.create("s"))
    assert done == ["slow"]


async def test_flush_without_implementations_returns() -> None:
    led = ledger()
    assert await led.flush(led.create("nothing")) is None


# --- entry points and the autoload switch ---------------------------------------------------


def test_entry_point_plugins_are_loaded_by_default(
    publish_event_type: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    type_name = publish_event_type()
    assert type_name in Ledger().plugins.event_types
    assert type_name not in Ledger(load_entrypoints=False).plugins.event_types


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_autoload_switch_disables_entry_points(
    publish_event_type: Callable[[], str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    type_name = publish_event_type()
    monkeypatch.setenv("SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD", value)
    assert type_name not in Ledger().plugins.event_types
    assert type_name not in Ledger(load_entrypoints=True).plugins.event_types


@pytest.mark.parametrize("value", ["", "0"])
def test_autoload_switch_off_values_keep_entry_points(
    publish_event_type: Callable[[], str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    type_name = publish_event_type()
    monkeypatch.setenv("SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD", value)
    assert type_name in Ledger().plugins.event_types


def test_autoload_switch_is_read_when_the_ledger_is_built(
    publish_event_type: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    type_name = publish_event_type()
    monkeypatch.setenv("SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD", "1")
    disabled = Ledger()
    monkeypatch.delenv("SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD")
    enabled = Ledger()
    assert type_name not in disabled.plugins.event_types
    assert type_name in enabled.plugins.event_types


# --- what a plugin offers the command line: validators, offline checks ----------------------


class Finding(NamedTuple):
    seq: int | None
    rule: str | None
    message: str


class NoX:
    """A validator that refuses every ``x`` event."""

    @hookimpl
    def ledger_validate(self, event: SessionEvent) -> None:
        if event.type == "x":
            raise Veto(f"no x at seq {event.seq}")


class OffersChecks:
    """A third-party plugin: offers ``NoX`` to commands that write, checks stored logs."""

    @hookimpl
    def ledger_offered_validators(self, plugins: tuple[object, ...]) -> list[object]:
        return [] if any(isinstance(plugin, NoX) for plugin in plugins) else [NoX()]

    @hookimpl
    def ledger_check_log(self, events: list[SessionEvent]) -> list[Finding]:
        return [Finding(event.seq, "no-x", "an x event") for event in events if event.type == "x"]


class ChecksTheEnd:
    @hookimpl
    def ledger_check_log(self, events: list[SessionEvent]) -> list[Finding]:
        return [Finding(None, "short", f"{len(events)} events")] if len(events) < 3 else []


def test_offered_validators_are_fresh_and_left_out_of_the_ledger_itself() -> None:
    led = ledger(OffersChecks())
    led.create("free").append("x", {})  # offered, not imposed
    offered = led.plugins.offered_validators()
    assert [type(plugin) for plugin in offered] == [NoX]
    assert led.plugins.offered_validators()[0] is not offered[0]
    assert ledger(OffersChecks(), NoX()).plugins.offered_validators() == []
    checked = ledger(OffersChecks(), *offered).create("checked")
    with pytest.raises(Veto, match="no x at seq 0"):
        checked.append("x", {})
    assert checked.seq == 0
    assert ledger().plugins.offered_validators() == []


def test_offline_checks_run_plugin_by_plugin_in_registration_order() -> None:
    plugins = ledger(OffersChecks(), ChecksTheEnd()).plugins
    assert plugins.log_checkers() == [
        f"{__name__}.OffersChecks",
        f"{__name__}.ChecksTheEnd",
    ]
    session = ledger().create("s")
    session.append("x", {})
    session.append("y", {})
    assert plugins.check_log(session.events) == [
        Finding(0, "no-x", "an x event"),
        Finding(None, "short", "2 events"),
    ]
    assert ledger().plugins.log_checkers() == []
    assert ledger().plugins.check_log(session.events) == []


class NotAList:
    @hookimpl
    def ledger_check_log(self) -> Any:
        return 3

    @hookimpl
    def ledger_offered_validators(self) -> Any:
        return 3


class NotFindings:
    @hookimpl
    def ledger_check_log(self) -> Any:
        return ["text"]


def test_a_plugin_returning_the_wrong_shape_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ledger_check_log must return a list"):
        ledger(NotAList()).plugins.check_log([])
    with pytest.raises(ConfigError, match="ledger_offered_validators must return a list"):
        ledger(NotAList()).plugins.offered_validators()
    with pytest.raises(ConfigError, match="returned str, which lacks seq, rule or message"):
        ledger(NotFindings()).plugins.check_log([])


def test_an_entry_point_plugin_offers_its_check(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Published like any installed plugin: found through the entry point, never by name.
    monkeypatch.delenv("SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    directory = tmp_path_factory.mktemp("dist")
    (directory / "fake_checks_plugin.py").write_text(
        "import collections\n"
        "from sessionledger import hookimpl\n\n"
        "Found = collections.namedtuple('Found', 'seq rule message')\n\n"
        "@hookimpl\n"
        "def ledger_check_log(events):\n"
        "    return [Found(e.seq, 'odd', 'odd seq') for e in events if e.seq % 2]\n"
    )
    dist = directory / "fake_checks_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-checks\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[sessionledger]\nfake-checks = fake_checks_plugin\n")
    monkeypatch.syspath_prepend(str(directory))
    plugins = Ledger().plugins
    assert "fake-checks" in plugins.log_checkers()
    session = ledger().create("s")
    for _ in range(3):
        session.append("x", {})
    assert (1, "odd", "odd seq") in [tuple(found) for found in plugins.check_log(session.events)]
    assert "fake-checks" not in Ledger(load_entrypoints=False).plugins.log_checkers()
