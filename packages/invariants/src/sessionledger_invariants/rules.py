"""The rule identifiers of the turn/step/tool invariant, one per check.

An ``InvariantError`` and a ``Violation`` carry one of these in ``rule``. They are stable:
tests, log filters and the ``verify`` command may match on them, so a rule is never
renamed, only added. ``RULES`` maps each identifier to the one-line description used in
the package README.
"""

from __future__ import annotations

from typing import Final

from sessionledger.model._snapshot import FrozenDict

__all__ = [
    "REPLACE_OUTSIDE_TURN",
    "RULES",
    "SEQ_ORDER",
    "STEP_NUMBER",
    "STEP_SCOPE",
    "STEP_START_TURN",
    "STEP_START_WHILE_OPEN",
    "TOOL_PAUSE_UNREQUESTED",
    "TOOL_RESULT_UNPAIRED",
    "TURN_END_MISMATCH",
    "TURN_END_STEP_OPEN",
    "TURN_NUMBER",
    "TURN_SCOPE",
    "TURN_START_WHILE_OPEN",
]

SEQ_ORDER: Final = "seq-order"
TURN_START_WHILE_OPEN: Final = "turn-start-while-open"
TURN_NUMBER: Final = "turn-number"
TURN_END_MISMATCH: Final = "turn-end-mismatch"
TURN_END_STEP_OPEN: Final = "turn-end-step-open"
STEP_START_TURN: Final = "step-start-turn"
STEP_START_WHILE_OPEN: Final = "step-start-while-open"
STEP_NUMBER: Final = "step-number"
STEP_SCOPE: Final = "step-scope"
TOOL_RESULT_UNPAIRED: Final = "tool-result-unpaired"
REPLACE_OUTSIDE_TURN: Final = "replace-outside-turn"
TOOL_PAUSE_UNREQUESTED: Final = "tool-pause-unrequested"
TURN_SCOPE: Final = "turn-scope"

#: Rule identifier → what it checks, in the order a reader meets them in a turn.
RULES: Final = FrozenDict(
    {
        SEQ_ORDER: "every event's seq is greater than the last committed seq",
        TURN_START_WHILE_OPEN: "turn/start only when no turn is open",
        TURN_NUMBER: "turn/start carries the next turn number (1, 2, 3… per session)",
        TURN_END_MISMATCH: "turn/end names the open turn",
        TURN_END_STEP_OPEN: "turn/end only when no step is open",
        STEP_START_TURN: "step/start names the open turn",
        STEP_START_WHILE_OPEN: "step/start only when no step is open",
        STEP_NUMBER: "step/start carries the next step number (1, 2, 3… per turn)",
        STEP_SCOPE: (
            "step/end, assistant/chunk, assistant/message, tool/call, tool/paused and "
            "appended tool/result name the open turn and step"
        ),
        TOOL_RESULT_UNPAIRED: (
            "an appended tool/result answers a tool/call pending in the open step "
            "(a TOOL_NOT_STARTED repair result is exempt)"
        ),
        TOOL_PAUSE_UNREQUESTED: (
            "tool/paused names a call an assistant message of the open step requested "
            "and no tool/result answered yet"
        ),
        REPLACE_OUTSIDE_TURN: "a replacement tool/result is appended inside an open turn",
        TURN_SCOPE: "request/header and request/context are appended inside an open turn",
    }
)
