"""Turn/step/tool execution invariants for sessionledger, as a pre-commit plugin.

Enable it per ledger with ``Ledger(plugins=[InvariantsPlugin()])``, or for every ledger
built while ``SESSIONLEDGER_INVARIANTS=1`` is set. ``check_log(events)`` checks a stored
log offline. ``SessionChecker`` is the two-phase base plugin authors use for rules of
their own event types.
"""

from __future__ import annotations

from sessionledger_invariants.checker import SessionChecker, Violation
from sessionledger_invariants.plugin import ENABLE_SWITCH, InvariantsPlugin, check_log
from sessionledger_invariants.rules import RULES
from sessionledger_invariants.trace import EMPTY_TRACE, Trace, advance

__all__ = [
    "EMPTY_TRACE",
    "ENABLE_SWITCH",
    "RULES",
    "InvariantsPlugin",
    "SessionChecker",
    "Trace",
    "Violation",
    "advance",
    "check_log",
]
