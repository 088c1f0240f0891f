"""A child process driving the SDK's real ``Runner`` on a ``LedgerSession``.

python openai_agents_child.py converse STORE_URL SESSION_ID
    two turns with a tool call; prints the session's items as JSON
python openai_agents_child.py read STORE_URL SESSION_ID
    prints the session's items as JSON
python openai_agents_child.py crash-plain STORE_URL SESSION_ID MARKER
python openai_agents_child.py crash-approval STORE_URL SESSION_ID MARKER
    a run whose tool writes MARKER and blocks until the parent kills the process
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from agents import Runner
from openai_agents_fakes import (
    MODEL_NAME,
    ScriptedModel,
    add,
    agent,
    approval_tool,
    blocking_tool,
    call,
    say,
)

from sessionledger import Ledger
from sessionledger_openai_agents import LedgerSession


async def main(command: str, url: str, session_id: str, marker: str | None) -> None:
    async with Ledger.open(url) as ledger:
        session = LedgerSession(session_id, ledger, model=MODEL_NAME)
        if command == "converse":
            model = ScriptedModel(
                [
                    [call("add", {"a": 2, "b": 3}, "call_add")],
                    [say("2 + 3 = 5", "msg_1")],
                    [say("You are welcome.", "msg_2")],
                ]
            )
            bot = agent(model, [add])
            await Runner.run(bot, "What is 2 + 3?", session=session)
            await Runner.run(bot, "Thanks!", session=session)
        elif command == "crash-plain":
            assert marker is not None
            model = ScriptedModel([[call("deploy", {"target": "prod"}, "call_deploy")]])
            bot = agent(model, [blocking_tool(Path(marker))])
            await Runner.run(bot, "Deploy to prod.", session=session)
        elif command == "crash-approval":
            assert marker is not None
            model = ScriptedModel([[call("deploy", {"target": "prod"}, "call_deploy")]])
            bot = agent(model, [approval_tool(Path(marker))])
            first = await Runner.run(bot, "Deploy to prod.", session=session)
            state = first.to_state()
            state.approve(first.interruptions[0])
            await Runner.run(bot, state, session=session)  # the tool blocks: killed here
        print(json.dumps(await session.get_items()))


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], args[3] if len(args) > 3 else None))
