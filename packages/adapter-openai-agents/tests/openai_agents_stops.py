"""A child process stopping the SDK's real ``Runner`` where a real application stops
(test_stops.py).

python openai_agents_stops.py pause STORE_URL SESSION_ID STATE
    a run that stops at a pending approval: the RunState goes to STATE, the ledger is
    closed normally (a clean stop, not a crash); prints the items
python openai_agents_stops.py approve STORE_URL SESSION_ID STATE
    loads STATE, approves the call and finishes the run; prints the items
python openai_agents_stops.py crash-stream STORE_URL SESSION_ID MARKER
    a streamed run whose model writes MARKER after its first text delta and blocks
python openai_agents_stops.py read STORE_URL SESSION_ID
    prints the items
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from agents import Runner, RunState, function_tool
from agents.models.interface import Model
from agents.testing import (
    ModelCall,
    ModelStep,
    ScriptedModel as SdkScriptedModel,
    assistant_message,
)
from openai_agents_fakes import MODEL_NAME, ScriptedModel, agent, call, say

from sessionledger import Ledger
from sessionledger_openai_agents import LedgerRunHooks, LedgerSession


@function_tool(name_override="deploy", needs_approval=True)
def deploy_tool(target: str) -> str:
    """Deploy to a target (after a human approved it)."""
    return f"deployed to {target}"


def stalling_stream(marker: Path) -> Model:
    """The SDK's own scripted model, streaming an answer that stalls after its first text
    delta (``marker`` written then): the parent kills the process mid-stream."""

    async def events(call: ModelCall) -> AsyncIterator[Any]:
        inner = SdkScriptedModel([ModelStep(output=[assistant_message("Once upon a time")])])
        stream = inner.stream_response(
            call.system_instructions, call.input, call.model_settings, call.tools,
            call.output_schema, call.handoffs, call.tracing,
            previous_response_id=None, conversation_id=None, prompt=None,
        )  # fmt: skip
        async for event in stream:
            yield event
            if event.type == "response.output_text.delta":
                marker.write_text("streaming")
                while True:
                    time.sleep(1)

    return SdkScriptedModel([ModelStep.stream(events)])


async def main(command: str, url: str, session_id: str, path: str | None) -> None:
    async with Ledger.open(url) as ledger:
        session = LedgerSession(session_id, ledger, model=MODEL_NAME)
        if command == "pause":
            assert path is not None
            model = ScriptedModel([[call("deploy", {"target": "prod"}, "call_deploy")]])
            bot = agent(model, [deploy_tool])
            paused = await Runner.run(bot, "Deploy to prod.", session=session)
            assert paused.interruptions, "the run did not stop for approval"
            Path(path).write_text(paused.to_state().to_string())
        elif command == "approve":
            assert path is not None
            bot = agent(ScriptedModel([[say("Deployed to prod.", "msg_done")]]), [deploy_tool])
            state = await RunState.from_string(bot, Path(path).read_text())
            state.approve(state.get_interruptions()[0])
            await Runner.run(bot, state, session=session, hooks=LedgerRunHooks(session))
        elif command == "crash-stream":
            assert path is not None
            streamed = Runner.run_streamed(
                agent(stalling_stream(Path(path)), []), "Tell me a story.", session=session
            )
            async for _ in streamed.stream_events():
                pass
        print(json.dumps(await session.get_items()))


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], args[3] if len(args) > 3 else None))
