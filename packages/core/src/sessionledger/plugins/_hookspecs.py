"""The hooks a sessionledger plugin can implement (docs/plugins.md, "the hooks").

Implement any of them on a class or module decorated with ``@hookimpl`` and pass it to
``Ledger(plugins=[...])``, or publish it under the ``sessionledger`` entry-point group.
An implementation may accept any subset of a hook's arguments.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Protocol

import pluggy

if TYPE_CHECKING:
    from sessionledger.model._events import SessionEvent
    from sessionledger.model._registry import EventType, EventTypeRegistry
    from sessionledger.model._session import Session
    from sessionledger.storage._persistence import SessionPersistence

#: The pluggy project name and the entry-point group plugins are discovered through.
PROJECT_NAME = "sessionledger"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class BackendFactory(Protocol):
    """Build a backend for a store URL such as ``sqlite:path/to/ledger.db``."""

    def __call__(self, url: str, *, event_types: EventTypeRegistry) -> SessionPersistence: ...


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
def ledger_backends() -> Mapping[str, BackendFactory]:  # type: ignore[empty-body]
    """Return ``{scheme: factory}`` for the store URLs this plugin serves."""
