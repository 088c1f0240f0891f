"""A pydantic-ai agent on a scripted ``FunctionModel`` (offline), shared by the tests and
their child processes.

As a script: ``python pa_agent.py MODE URL SESSION_ID [PROMPT]``

- ``turn``: run one turn (recording node by node) and print the run's ``all_messages()``
  as JSON;
- ``crash``: run one turn whose ``write_file`` tool prints ``IN_TOOL`` and blocks, so the
  parent can SIGKILL the process between the recorded tool call and its return;
- ``load``: print ``load()`` as JSON.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from sessionledger import Ledger
from sessionledger_pydantic_ai import LedgerHistory

#: Every request the model received, newest last (the tests look at what it saw).
SEEN: list[list[ModelMessage]] = []


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask for a tool when the user asks to write or count; answer once a result is back."""
    SEEN.append(list(messages))
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    returns = [part for part in last.parts if isinstance(part, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"tool said: {returns[-1].model_response_str()}")])
    prompt = str(last.parts[-1].content)
    if prompt.startswith("write"):
        return ModelResponse(parts=[ToolCallPart("write_file", {"path": "notes.txt"})])
    if prompt.startswith("count"):
        return ModelResponse(
            parts=[TextPart("Counting."), ToolCallPart("count_lines", '{"path": "notes.txt"}')]
        )
    return ModelResponse(parts=[TextPart(f"you said {prompt!r}")])


def make_agent(block_in_tool: bool = False) -> Agent[None, str]:
    agent = Agent(FunctionModel(script), instructions="You help with files.")

    @agent.tool_plain
    def count_lines(path: str) -> int:
        return 42

    @agent.tool_plain
    def write_file(path: str) -> str:
        if block_in_tool:
            print("IN_TOOL", flush=True)
            time.sleep(60)  # the parent kills the process here
        return f"wrote {path}"

    return agent


def dump(messages: list[ModelMessage]) -> str:
    return ModelMessagesTypeAdapter.dump_json(messages).decode()


async def run_turn(history: LedgerHistory, agent: Agent[None, str], prompt: str | None) -> Any:
    """One turn, every model response recorded before its tools run."""
    async with agent.iter(prompt, message_history=await history.load()) as run:
        async for _node in history.recording(run):
            pass
    return run


async def main(mode: str, url: str, session_id: str, prompt: str | None) -> None:
    async with Ledger.open(url) as ledger:
        history = LedgerHistory(session_id, ledger)
        if mode == "load":
            print(dump(await history.load()))
            return
        run = await run_turn(history, make_agent(block_in_tool=mode == "crash"), prompt)
        print(dump(run.all_messages()))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    asyncio.run(main(*arguments[:3], arguments[3] if len(arguments) > 3 else None))
