"""A real LangChain chain (fake chat model, ``RunnableWithMessageHistory``) on a ledger,
used by the tests in-process and as a child process:

    python lc_scenarios.py write URL SESSION   # the two-turn conversation; prints its history
    python lc_scenarios.py read URL SESSION    # prints the history
    python lc_scenarios.py crash URL SESSION   # stops after the AI tool-call message; waits
    python lc_scenarios.py sync URL SESSION    # the two-turn conversation from sync code
    python lc_scenarios.py crash-stream URL SESSION  # streams an answer, stops mid-stream

Histories are printed as ``messages_to_dict`` JSON, one line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    messages_to_dict,
)
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from sessionledger import Ledger
from sessionledger_langchain import LedgerChatMessageHistory, LedgerThread

CALL_ID = "call-add-1"
TOOL_CALL = AIMessage(
    content="Let me add them.",
    tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": CALL_ID, "type": "tool_call"}],
    response_metadata={"model_provider": "fake", "model_name": "fake-1"},
    usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
)
ANSWER = AIMessage(content="2 + 3 is 5.")
WELCOME = AIMessage(content="You're welcome.")
TOOL_OUTPUT = ToolMessage(content="5", tool_call_id=CALL_ID)


class Chain:
    """``RunnableWithMessageHistory`` around a fake model that answers with *responses*;
    ``seen`` keeps the messages the model was given at each call."""

    def __init__(self, history: LedgerChatMessageHistory, responses: Sequence[AIMessage]):
        self.history = history
        self.seen: list[list[BaseMessage]] = []
        model = FakeMessagesListChatModel(responses=list(responses))

        def capture(messages: list[BaseMessage]) -> list[BaseMessage]:
            self.seen.append(list(messages))
            return messages

        inner: Runnable[Any, Any] = RunnableLambda(capture) | model
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # LangChain points to LangGraph
            self.runnable = RunnableWithMessageHistory(inner, lambda session_id: history)
        self.config: Any = {"configurable": {"session_id": history.session_id}}

    async def ask(self, value: Any) -> BaseMessage:
        out: BaseMessage = await self.runnable.ainvoke(value, self.config)
        return out

    def ask_sync(self, value: Any) -> BaseMessage:
        out: BaseMessage = self.runnable.invoke(value, self.config)
        return out


async def two_turns(chain: Chain) -> list[BaseMessage]:
    """Turn 1 with a tool call and its result, turn 2 plain; returns what was added."""
    first = await chain.ask("What is 2 + 3?")
    second = await chain.ask([TOOL_OUTPUT])
    third = await chain.ask("Thanks!")
    return [
        HumanMessage(content="What is 2 + 3?"),
        first,
        TOOL_OUTPUT,
        second,
        HumanMessage(content="Thanks!"),
        third,
    ]


def two_turns_sync(chain: Chain) -> list[BaseMessage]:
    first = chain.ask_sync("What is 2 + 3?")
    second = chain.ask_sync([TOOL_OUTPUT])
    third = chain.ask_sync("Thanks!")
    return [
        HumanMessage(content="What is 2 + 3?"),
        first,
        TOOL_OUTPUT,
        second,
        HumanMessage(content="Thanks!"),
        third,
    ]


def dump(messages: list[BaseMessage]) -> str:
    return json.dumps(messages_to_dict(messages))


async def child(mode: str, url: str, session_id: str) -> None:
    async with Ledger.open(url) as ledger:
        history = LedgerChatMessageHistory(session_id, ledger)
        if mode == "write":
            await two_turns(Chain(history, [TOOL_CALL, ANSWER, WELCOME]))
        elif mode == "crash":
            await Chain(history, [TOOL_CALL]).ask("What is 2 + 3?")
            print("READY", flush=True)  # the AI tool-call message is durable
            while True:  # the tool "runs" until the parent kills this process
                await asyncio.sleep(3600)
        elif mode == "crash-stream":
            await stream_and_stall(history)
        print(dump(await history.aget_messages()), flush=True)


async def stream_and_stall(history: LedgerChatMessageHistory) -> None:
    """Stream an answer through the history-keeping chain; stall after its first chunk
    (the parent kills the process there)."""
    model = GenericFakeChatModel(messages=iter([AIMessage(content="Once upon a time.")]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        runnable = RunnableWithMessageHistory(model, lambda session_id: history)
    config: Any = {"configurable": {"session_id": history.session_id}}
    async for _chunk in runnable.astream("Tell me a story.", config):
        print("STREAMING", flush=True)
        while True:
            await asyncio.sleep(3600)


def sync_child(url: str, session_id: str) -> None:
    with LedgerThread(url) as ledger_thread:
        history = ledger_thread.history(session_id)
        two_turns_sync(Chain(history, [TOOL_CALL, ANSWER, WELCOME]))
        print(dump(history.messages), flush=True)


if __name__ == "__main__":
    mode, url, session_id = sys.argv[1:4]
    if mode == "sync":
        sync_child(url, session_id)
    else:
        asyncio.run(child(mode, url, session_id))
