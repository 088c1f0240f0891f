"""The demo's second process: resume the session, run turn 2 until its tool starts.

``python -m sessionledger.cli._demo_child --store URL --session ID --seed N``

It resumes the session the demo wrote, opens turn 2, streams the model's step, records
the ``tool/call`` and flushes it, then prints ``READY_MARKER`` and "runs" the tool (it
sleeps). The demo kills it with SIGKILL at that moment: a real crash mid-tool, with
the call durable and its result never written. Every other line it prints is
narration the demo relays.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sessionledger.cli._demo_agent import (
    TURN_2_PROMPT,
    TURN_2_STEP_1,
    DemoHarness,
    ScriptedModel,
)
from sessionledger.cli._plugins import invariants_plugins
from sessionledger.cli._stores import opened_ledger
from sessionledger.model._vocabulary import TURN_START

#: Printed (and flushed) once the tool/call is durable and the tool is "running".
READY_MARKER: Final = "@@sessionledger-demo: tool running@@"

#: How long the fake tool runs if nobody kills it (the demo kills it at once).
TOOL_SECONDS: Final = 60.0


def _say(line: str) -> None:
    print(line, flush=True)


async def _run_command(arguments: Mapping[str, Any]) -> str:
    print(READY_MARKER, flush=True)
    await asyncio.sleep(TOOL_SECONDS)
    return "the demo should have killed this process by now"


async def run(store: str, session_id: str, seed: int) -> None:
    """Resume *session_id* and play turn 2 up to the running tool."""
    async with opened_ledger(store, plugins=invariants_plugins()) as ledger:
        session = await ledger.resume(session_id)
        turn = 1 + sum(1 for event in session.events if event.type == TURN_START)
        _say(f"resumed {session_id} at seq {session.seq} (pid of this process: {os.getpid()})")
        harness = DemoHarness(
            ledger, session, ScriptedModel(seed + turn), {"run_command": _run_command}, _say
        )
        harness.start_turn(turn, TURN_2_PROMPT, reason="resume")
        await harness.model_step(turn, 1, TURN_2_STEP_1)
        for call in TURN_2_STEP_1.tool_calls:
            await harness.run_tool(turn, 1, call)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments and run turn 2."""
    parser = argparse.ArgumentParser(prog="python -m sessionledger.cli._demo_child")
    parser.add_argument("--store", required=True)
    parser.add_argument("--session", required=True)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    asyncio.run(run(args.store, args.session, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
