"""A pydantic-ai agent whose ``deploy`` tool needs an approval (offline ``FunctionModel``),
shared by the approval tests and their child processes.

As a script: ``python pa_approval.py MODE URL SESSION_ID``

- ``stop``: run until the agent stops for the approval (recording node by node);
- ``resume``: approve the paused call and run on (``start_approved`` first);
- ``crash``: like ``resume`` with a tool that prints ``IN_TOOL`` and blocks, so the parent
  can SIGKILL the process while the approved tool runs.

Each prints the run's ``all_messages()`` as JSON.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
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

CALL_ID = "call-deploy"


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask to deploy; answer with what the tool said once its result is back."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    returns = [part for part in last.parts if isinstance(part, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"Deployed: {returns[-1].model_response_str()}")])
    return ModelResponse(parts=[ToolCallPart("deploy", {"target": "prod"}, CALL_ID)])


def make_agent(block_in_tool: bool = False) -> Agent[None, str | DeferredToolRequests]:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(script), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def deploy(target: str) -> str:
        if block_in_tool:
            print("IN_TOOL", flush=True)
            time.sleep(60)  # the parent kills the process here
        return f"deployed {target}"

    return agent


def dump(messages: list[ModelMessage]) -> str:
    return ModelMessagesTypeAdapter.dump_json(messages).decode()


APPROVED = DeferredToolResults(approvals={CALL_ID: True})


async def run(history: LedgerHistory, agent: Any, prompt: str | None, results: Any) -> Any:
    """One run, every message recorded before the node that follows it runs."""
    history_now = await history.load()
    async with agent.iter(prompt, message_history=history_now, deferred_tool_results=results) as it:
        async for _node in history.recording(it):
            pass
    return it


async def main(mode: str, url: str, session_id: str) -> None:
    async with Ledger.open(url) as ledger:
        history = LedgerHistory(session_id, ledger)
        if mode == "stop":
            done = await run(history, make_agent(), "Deploy to prod.", None)
            assert isinstance(done.result.output, DeferredToolRequests)
        else:
            assert await history.start_approved(APPROVED) == [CALL_ID]
            done = await run(history, make_agent(block_in_tool=mode == "crash"), None, APPROVED)
        print(dump(done.all_messages()))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
