"""A scripted fake ``Model`` for the SDK's real ``Runner``, and the tools the tests use.

No network: the model answers from a script, tracing is disabled on import.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

set_tracing_disabled(True)
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

MODEL_NAME = "fake-1"


def say(text: str, id: str = "msg_1") -> TResponseOutputItem:
    """An assistant message output item."""
    return ResponseOutputMessage(
        id=id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def think(text: str, id: str = "rs_1") -> TResponseOutputItem:
    """A reasoning output item with one summary."""
    return ResponseReasoningItem(
        id=id, type="reasoning", summary=[Summary(type="summary_text", text=text)]
    )


def call(name: str, arguments: dict[str, Any], call_id: str) -> TResponseOutputItem:
    """A function call output item."""
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        type="function_call",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        status="completed",
    )


class ScriptedModel(Model):
    """Answers each model call with the next scripted response; records every input."""

    def __init__(self, responses: list[list[TResponseOutputItem]]) -> None:
        self.responses = list(responses)
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        self.inputs.append(json.loads(json.dumps(items)))
        if not self.responses:
            raise AssertionError("the fake model ran out of scripted responses")
        return ModelResponse(output=self.responses.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests do not stream")


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


def blocking_tool(marker: Path) -> Any:
    """A tool that writes ``marker`` and then blocks forever (the parent kills the process)."""

    @function_tool(name_override="deploy")
    def deploy(target: str) -> str:
        """Deploy to a target."""
        marker.write_text(target)
        while True:
            time.sleep(1)

    return deploy


def approval_tool(marker: Path) -> Any:
    """Like ``blocking_tool`` but needing approval, so the SDK saves the call on its own."""

    @function_tool(name_override="deploy", needs_approval=True)
    def deploy(target: str) -> str:
        """Deploy to a target."""
        marker.write_text(target)
        while True:
            time.sleep(1)

    return deploy


def agent(model: Model, tools: list[Any]) -> Agent[Any]:
    return Agent(name="assistant", instructions="Be brief.", model=model, tools=tools)
