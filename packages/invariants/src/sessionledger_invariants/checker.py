"""Two-phase per-session checking: the base the invariants plugin and plugin authors share.

A ``SessionChecker`` keeps one state per live session and moves it along the committed
log with the hooks of docs/plugins.md:

- ``ledger_validate`` computes the next state from the *committed* one and stages it,
  keyed by the candidate event (raising ``InvariantError`` vetoes the append);
- ``ledger_committed`` applies the staged state only when the committed event *is* the
  staged candidate, so a veto by a later validator — or any failure before the commit —
  leaves the state exactly as it was; the stale stage is overwritten by the next append;
- ``ledger_session_created`` replays the log a session starts with (a seed, a fork, a
  resumed log) and refuses the session when that log breaks a rule;
- ``ledger_session_closed`` drops the state.

A subclass says only what its state is and how one event moves it (``initial_state``,
``advance``, optionally ``recover``); ``check(events)`` runs the same rules offline.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final

from sessionledger._errors import InvariantError
from sessionledger.model._events import SessionEvent
from sessionledger.plugins._hookspecs import hookimpl
from sessionledger_invariants.rules import SEQ_ORDER

if TYPE_CHECKING:
    from collections.abc import Callable

    from sessionledger.model._session import Session

__all__ = ["SessionChecker", "Violation"]

logger = logging.getLogger("sessionledger.invariants")

S = TypeVar("S")


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule found by an offline check: the event's seq, the rule, what was
    expected and what was seen."""

    seq: int
    rule: str | None
    message: str


@final
class _Slot(Generic[S]):
    """One session's committed state and the state staged for its current candidate."""

    __slots__ = ("candidate", "last_seq", "staged", "state")

    def __init__(self, state: S) -> None:
        self.state = state
        self.last_seq = -1
        self.candidate: SessionEvent | None = None
        self.staged = state


def _seq_error(last_seq: int, event: SessionEvent) -> InvariantError:
    return InvariantError(
        f"{event.type}: expected a seq above {last_seq}, saw seq {event.seq}",
        rule=SEQ_ORDER,
        seq=event.seq,
    )


class SessionChecker(Generic[S]):
    """Check every append of every live session against a state machine, before commit.

    Subclass it, implement ``initial_state`` and ``advance``, and register an instance
    (``Ledger(plugins=[MyChecker()])``). ``advance`` must be pure: return the new state
    (the same object when nothing changed) or raise ``InvariantError(message, rule=...)``;
    ``session_id`` and ``seq`` are filled in for you. Every checker also refuses an event
    whose seq is not above the last committed one (rule ``seq-order``): its state would
    not follow the log otherwise. A live ``Session`` never produces one; direct hook calls
    and stored logs can.

    Sessions announced by the ledger (created, forked, resumed) are replayed strictly
    when announced. A session the checker never saw announced (built by hand with a
    ledger's hooks, or announced before the checker existed) is adopted at its first
    validated append: its committed log is replayed leniently — violations already
    committed are logged on ``sessionledger.invariants`` and ``recover`` continues past
    them — and the candidate is then checked as usual.
    """

    def __init__(self) -> None:
        self._slots: dict[Session, _Slot[S]] = {}

    # -- what a subclass provides ---------------------------------------------------------

    def initial_state(self) -> S:
        """Return the state of an empty log."""
        raise NotImplementedError

    def advance(self, state: S, event: SessionEvent) -> S:
        """Return the state after *event*, or raise ``InvariantError`` to refuse it.

        Must not mutate *state*: the result is only staged until the event commits.
        """
        raise NotImplementedError

    def recover(self, state: S, event: SessionEvent, error: InvariantError) -> S:
        """Return the best-effort state after a committed *event* that broke a rule.

        Used by ``check`` and by lenient adoption, which continue past a violation. The
        default ignores the event (keeps *state*).
        """
        return state

    # -- reading --------------------------------------------------------------------------

    def state_of(self, session: Session) -> S | None:
        """Return the committed state of *session*, or None when it is not tracked."""
        slot = self._slots.get(session)
        return None if slot is None else slot.state

    def last_seq_of(self, session: Session) -> int | None:
        """Return the seq of the last committed event applied for *session*."""
        slot = self._slots.get(session)
        return None if slot is None else slot.last_seq

    def check(self, events: Iterable[SessionEvent | Mapping[str, Any]]) -> list[Violation]:
        """Check a whole log offline and return every violation, in log order; never
        raises for a violation.

        After a violation the check carries on from ``recover``'s state (and from the
        event's own seq), so each mistake is reported where it is made. Envelope dicts
        are parsed with ``SessionEvent.from_json``; one that is not an event at all raises
        ``EventEnvelopeError``.
        """
        found: list[Violation] = []

        def report(event: SessionEvent, error: InvariantError) -> None:
            found.append(Violation(event.seq, error.rule, str(error.args[0])))

        self._replay((_as_event(item) for item in events), report)
        return found

    # -- hooks ----------------------------------------------------------------------------

    @hookimpl
    def ledger_validate(self, session: Session, event: SessionEvent) -> None:
        """Check *event* against the committed state and stage the state it leads to."""
        slot = self._slots.get(session)
        if slot is None:
            slot = self._adopt(session, session.event_log())
        if event.seq <= slot.last_seq:
            raise _with_context(_seq_error(slot.last_seq, event), session, event)
        try:
            slot.staged = self.advance(slot.state, event)
        except InvariantError as error:
            _with_context(error, session, event)
            raise
        slot.candidate = event

    @hookimpl
    def ledger_committed(self, session: Session, event: SessionEvent) -> None:
        """Apply the state staged for exactly this event."""
        slot = self._slots.get(session)
        if slot is not None and slot.candidate is event:
            slot.state = slot.staged
            slot.last_seq = event.seq
            slot.candidate = None
            return
        if slot is None:
            # The log already holds the event: adopting it replays it too.
            self._adopt(session, session.event_log())
            return
        # Committed without passing this checker's validation (a direct hook call): the
        # state still follows the log, and the observer failure is logged by the session.
        out_of_order = event.seq <= slot.last_seq
        seq_error = _seq_error(slot.last_seq, event) if out_of_order else None
        slot.last_seq = event.seq
        state = slot.state
        try:
            slot.state = self.advance(state, event)
        except InvariantError as error:
            slot.state = self.recover(state, event, error)
            raise _with_context(seq_error or error, session, event) from None
        if seq_error is not None:
            raise _with_context(seq_error, session, event)

    @hookimpl
    def ledger_session_created(self, session: Session) -> None:
        """Replay the log *session* starts with; a broken rule refuses the session."""

        def refuse(event: SessionEvent, error: InvariantError) -> None:
            raise _with_context(error, session, event)

        self._slots.pop(session, None)
        self._slots[session] = self._replay(session.event_log(), refuse)

    @hookimpl
    def ledger_session_closed(self, session: Session) -> None:
        """Forget the state of a session that left its ledger."""
        self._slots.pop(session, None)

    # -- plumbing -------------------------------------------------------------------------

    def _adopt(self, session: Session, events: Iterable[SessionEvent]) -> _Slot[S]:
        def warn(event: SessionEvent, error: InvariantError) -> None:
            logger.warning(
                "%s: session %r was not announced to it and its committed log breaks a "
                "rule at seq %d: %s",
                type(self).__name__,
                session.id,
                event.seq,
                error.args[0],
            )

        slot = self._slots[session] = self._replay(events, warn)
        return slot

    def _replay(
        self,
        events: Iterable[SessionEvent],
        report: Callable[[SessionEvent, InvariantError], None],
    ) -> _Slot[S]:
        """Walk *events* from the initial state, calling *report* for each violation and
        carrying on with the recovered state (unless *report* raises)."""
        slot = _Slot(self.initial_state())
        advance = self.advance
        state = slot.state
        last_seq = -1
        for event in events:
            if event.seq <= last_seq:
                report(event, _seq_error(last_seq, event))
            last_seq = event.seq
            try:
                state = advance(state, event)
            except InvariantError as error:
                report(event, error)
                state = self.recover(state, event, error)
        slot.state = slot.staged = state
        slot.last_seq = last_seq
        return slot


def _with_context(error: InvariantError, session: Session, event: SessionEvent) -> InvariantError:
    if error.session_id is None:
        error.session_id = session.id
    if error.seq is None:
        error.seq = event.seq
    return error


def _as_event(item: SessionEvent | Mapping[str, Any]) -> SessionEvent:
    return item if type(item) is SessionEvent else SessionEvent.from_json(item)
