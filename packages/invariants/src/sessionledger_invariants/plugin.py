"""The invariants plugin, its offline check, and the entry-point switch.

This module is the ``sessionledger`` entry point of the package. Loading it changes
nothing by itself: its only hook, ``ledger_plugins``, adds a fresh ``InvariantsPlugin``
to a ledger being built when ``SESSIONLEDGER_INVARIANTS`` is set then. The other way to
enable the checks is explicit: ``Ledger(plugins=[InvariantsPlugin()])``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

from sessionledger._errors import ConfigError, InvariantError
from sessionledger.model._events import SessionEvent
from sessionledger.plugins._hookspecs import hookimpl
from sessionledger_invariants.checker import SessionChecker, Violation
from sessionledger_invariants.trace import EMPTY_TRACE, TRANSITIONS, RuleBroken, Trace

if TYPE_CHECKING:
    from sessionledger.model._session import Session

__all__ = ["ENABLE_SWITCH", "InvariantsPlugin", "check_log", "ledger_plugins"]

#: Environment variable that enables the plugin for every ledger built while it is set.
ENABLE_SWITCH: Final = "SESSIONLEDGER_INVARIANTS"

_ON: Final = frozenset(("1", "true", "yes", "on"))
_OFF: Final = frozenset(("", "0", "false", "no", "off"))
_RECOVERED: Final = "_invariants_recovered"


@final
class InvariantsPlugin(SessionChecker[Trace]):
    """Veto any append that breaks the turn/step/tool execution invariant.

    One instance per ledger keeps one ``Trace`` per live session. A violation raises
    ``InvariantError`` (code ``INVARIANT``) with ``rule`` (see ``RULES``), ``seq`` and
    ``session_id``; the log and the trace stay as they were. A seeded, forked or resumed
    session whose log breaks a rule is refused when it is created.
    """

    def initial_state(self) -> Trace:
        """Return the trace of an empty log."""
        return EMPTY_TRACE

    @hookimpl
    def ledger_validate(self, session: Session, event: SessionEvent) -> None:
        """Check *event* against the committed trace and stage the trace it leads to."""
        # The base class's validation with its one indirection (``advance``) inlined: this
        # runs on every append, and the benchmark in bench/ holds it to >= 0.7x.
        slot = self._slots.get(session)
        if slot is None or event.seq <= slot.last_seq:
            return super().ledger_validate(session, event)  # adoption, or the seq rule
        rule = TRANSITIONS.get(event.type)
        if rule is None:
            slot.staged = slot.state
        else:
            try:
                slot.staged = rule(slot.state, event)
            except RuleBroken as broken:
                raise InvariantError(
                    broken.message, rule=broken.rule, seq=event.seq, session_id=session.id
                ) from None
        slot.candidate = event
        return None

    def advance(self, state: Trace, event: SessionEvent) -> Trace:
        """Return the trace after *event*, or raise ``InvariantError`` naming the rule."""
        rule = TRANSITIONS.get(event.type)
        if rule is None:
            return state
        try:
            return rule(state, event)
        except RuleBroken as broken:
            error = InvariantError(broken.message, rule=broken.rule)
            # Carried for recover(); private so the user-facing error stays as documented.
            setattr(error, _RECOVERED, broken.recovered)
        raise error

    def recover(self, state: Trace, event: SessionEvent, error: InvariantError) -> Trace:
        """Return the state the broken event claims (see ``RuleBroken.recovered``)."""
        recovered = getattr(error, _RECOVERED, None)
        return recovered if isinstance(recovered, Trace) else state

    def trace(self, session: Session) -> Trace | None:
        """Return the committed trace of *session*, or None when it is not tracked."""
        return self.state_of(session)


def check_log(events: Iterable[SessionEvent | Mapping[str, Any]]) -> list[Violation]:
    """Check a stored log offline and return every violation (``Violation(seq, rule,
    message)``) in log order; ``[]`` for a valid log.

    Never raises for a violation: after each one the check continues from the state the
    event claims. Used by ``sessionledger verify``.
    """
    return InvariantsPlugin().check(events)


def _switch_on() -> bool:
    value = os.environ.get(ENABLE_SWITCH, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigError(
        f"{ENABLE_SWITCH}={os.environ[ENABLE_SWITCH]!r} is not understood; "
        "use 1 to enable the invariants plugin or 0 to leave it off"
    )


@hookimpl
def ledger_plugins(plugins: tuple[object, ...]) -> list[object]:
    """Add a fresh ``InvariantsPlugin`` when ``SESSIONLEDGER_INVARIANTS`` is on and the
    ledger has none yet; add nothing otherwise.

    Read while each ledger is built, so a test can switch it with ``monkeypatch.setenv``.
    """
    if not _switch_on() or any(isinstance(plugin, InvariantsPlugin) for plugin in plugins):
        return []
    return [InvariantsPlugin()]
