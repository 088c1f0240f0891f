"""The hooks a sessionledger plugin can implement (docs/plugins.md, "the hooks").

Implement any of them on a class or module decorated with ``@hookimpl`` and pass it to
``Ledger(plugins=[...])``, or publish it under the ``sessionledger`` entry-point group.
An implementation may accept any subset of a hook's arguments.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import pluggy

from sessionledger.model._registry import PROJECT_NAME

if TYPE_CHECKING:
    from sessionledger.model._events import SessionEvent
    from sessionledger.model._registry import EventType
    from sessionledger.model._session import Session


hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class LogFinding(Protocol):
    """What ``ledger_check_log`` returns for each problem: any object with these three
    attributes (a dataclass, a named tuple; the invariants' ``Violation`` is one)."""

    @property
    def seq(self) -> int | None:
        """The seq of the event the problem is about, or None for the log as a whole."""

    @property
    def rule(self) -> str | None:
        """A stable identifier of the rule that is broken, such as ``turn-number``."""

    @property
    def message(self) -> str:
        """What was expected and what the log holds, for a person."""


@hookspec
def ledger_event_types() -> list[EventType]:  # type: ignore[empty-body]
    """Return the event types this plugin adds.

    Called once when the ledger is built. A name registered twice, or a plugin type with
    ``surface=True``, makes ``Ledger(...)`` raise ``ConfigError``.
    """


@hookspec
def ledger_validate(session: Session, event: SessionEvent) -> None:
    """Check a candidate event before it is committed; raise to veto it.

    The exception reaches the caller of ``append`` unchanged and nothing is committed.
    Must not mutate the session or append to it. State a validator wants to keep for the
    event is staged keyed by ``event`` and applied in ``ledger_committed`` for that event,
    because a later validator may still veto it.
    """


@hookspec
def ledger_committed(session: Session, event: SessionEvent) -> None:
    """React to an event that is now part of the log.

    Failures are contained per implementation: logged on logger ``sessionledger`` and the
    other implementations still run. Appending to the same session from here raises
    ``ReentrantAppendError`` (also contained).
    """


@hookspec
def ledger_session_created(session: Session) -> None:
    """A session became live in a ledger (created, forked or resumed).

    Seeded and resumed sessions arrive with their whole log already in place; a plugin
    that keeps per-session state replays ``session.events`` here and may raise to refuse
    the session (the ledger then does not publish it).
    """


@hookspec
def ledger_session_closed(session: Session) -> None:
    """A live session left its ledger (deleted or the ledger closed). Failures are logged."""


@hookspec
def ledger_flush(session: Session) -> Awaitable[None] | None:
    """Make what *session* committed so far durable; return an awaitable or None.

    All implementations are awaited together; once all have settled, the first failure in
    registration order is raised from ``ledger.flush``.
    """


@hookspec
def ledger_plugins(plugins: tuple[object, ...]) -> list[object]:  # type: ignore[empty-body]
    """Return more plugin objects to register for this ledger, given those registered so far.

    Called once while a ledger is built, after entry points and explicit plugins. It lets a
    package that is installed but inactive by default (such as the invariants plugin,
    switched on by an environment variable) add a fresh, per-ledger plugin object — and
    add nothing when the caller already registered one.
    """


@hookspec
def ledger_backends() -> Mapping[str, Callable[..., object]]:  # type: ignore[empty-body]
    """Return ``{scheme: factory}`` for the store URLs this plugin serves: each factory is a
    ``sessionledger.storage.BackendFactory`` (typed there, a layer above the hooks)."""


@hookspec
def ledger_offered_validators(plugins: tuple[object, ...]) -> list[object]:  # type: ignore[empty-body]
    """Return fresh validator plugins that stay off by default, for a tool that writes
    events on the user's behalf to register; given the plugins registered so far.

    Called only by such a tool (the command line's ``demo`` and ``import``), never while
    a ledger is built: an installed plugin offers checks there without imposing them on
    every ledger. Return ``[]`` when *plugins* already holds one of yours.
    """


@hookspec
def ledger_check_log(events: Sequence[SessionEvent]) -> Iterable[LogFinding]:  # type: ignore[empty-body]
    """Check a stored log offline and return every problem found, in log order (empty
    for a sound log); each has ``seq``, ``rule`` and ``message`` (``LogFinding``).

    Run by ``sessionledger verify`` on each stored session and by ``import`` on the
    history before anything is written. Must not raise for a problem in the log: report it
    and go on. The events are those stored, possibly of types no plugin declares.
    """
