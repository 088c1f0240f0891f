"""A pydantic-ai agent stopped where a real application stops (offline ``FunctionModel``),
shared by test_stops.py and its child processes.

As a script: ``python pa_stops.py MODE URL SESSION_ID [MARKER]``

- ``pause``: a run whose tool needs approval ends with ``DeferredToolRequests``; the run's
  messages are recorded and the ledger closed normally; prints ``all_messages()``;
- ``approve``: loads the history, approves the pending call, finishes the run; prints
  ``all_messages()``;
- ``crash-stream``: a streamed run whose model writes MARKER after its first text chunk
  and blocks there (the parent SIGKILLs the process);
- ``load``: prints ``load()``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

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

CALL_ID = "call_deploy"


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Ask to deploy; once the tool's result is back, say so."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    returns = [part for part in last.parts if isinstance(part, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"done: {returns[-1].model_response_str()}")])
    return ModelResponse(parts=[ToolCallPart("deploy", {"target": "prod"}, CALL_ID)])


def deploying_agent() -> Agent[None, str | DeferredToolRequests]:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(answer), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def deploy(target: str) -> str:
        return f"deployed to {target}"

    return agent


def stalling_agent(marker: Path) -> Agent[None, str]:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "Once upon"
        marker.write_text("streaming")
        while True:
            time.sleep(1)  # the parent kills the process here
            yield ""

    return Agent(FunctionModel(answer, stream_function=stream))


def dump(messages: list[ModelMessage]) -> str:
    return ModelMessagesTypeAdapter.dump_json(messages).decode()


async def main(mode: str, url: str, session_id: str, marker: str | None) -> None:
    async with Ledger.open(url) as ledger:
        history = LedgerHistory(session_id, ledger)
        if mode == "load":
            print(dump(await history.load()))
        elif mode == "pause":
            paused = await deploying_agent().run("Deploy to prod.")
            assert isinstance(paused.output, DeferredToolRequests), paused.output
            await history.record(paused.new_messages(), output=paused.output)
            print(dump(paused.all_messages()))
        elif mode == "approve":
            loaded = await history.load()
            results = DeferredToolResults(approvals={CALL_ID: True})
            assert await history.start_approved(results) == [CALL_ID]
            done = await deploying_agent().run(
                message_history=loaded, deferred_tool_results=results
            )
            await history.record(done.new_messages(), output=done.output)
            print(dump(done.all_messages()))
        elif mode == "crash-stream":
            assert marker is not None
            agent = stalling_agent(Path(marker))
            async with agent.iter("Tell me a story.") as run:
                async for node in history.recording(run):
                    if Agent.is_model_request_node(node):
                        async with node.stream(run.ctx) as streamed:
                            async for _ in streamed.stream_text(delta=True):
                                pass


if __name__ == "__main__":
    arguments = sys.argv[1:]
    asyncio.run(main(*arguments[:3], arguments[3] if len(arguments) > 3 else None))
