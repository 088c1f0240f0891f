"""The demo's scripted agent: a fake streaming model, two tools and a harness loop.

Nothing here touches the network. ``ScriptedModel`` streams a scripted step as
token-sized chunks with small, seeded timing gaps, the way a provider adapter delivers
them; ``DemoHarness`` records everything through a live ``Session`` and flushes at the
two boundaries that matter for crash safety (docs/durability.md, "write-behind"): before
a model request (the prompt is durable before anyone pays for it) and before a tool runs
(a ``tool/call`` on disk is what lets a crash be repaired as ``TOOL_OUTCOME_UNKNOWN``
instead of ``TOOL_NOT_STARTED``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

import orjson

from sessionledger.cli._words import plural
from sessionledger.model._events import APPEND, SessionEvent
from sessionledger.model._session import Session
from sessionledger.model._vocabulary import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    assistant_message,
    tool_call_block,
    tool_result,
    user_message,
)
from sessionledger.runtime._ledger import Ledger

PROVIDER: Final = "scripted"
MODEL: Final = "demo-1"
SYSTEM_PROMPT: Final = "You are a careful coding agent. Use tools to look before you answer."

#: The tool declarations the demo's request header advertises.
TOOLS: Final = (
    {
        "name": "read_file",
        "description": "Read a text file from the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "run_command",
        "description": "Run a shell command in the workspace.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
)

Tool = Callable[[Mapping[str, Any]], Awaitable[str]]
Report = Callable[[str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCallPlan:
    """A tool call the scripted model will make."""

    id: str
    name: str
    arguments: str


@dataclasses.dataclass(frozen=True, slots=True)
class StepScript:
    """What the scripted model says in one step: reasoning, text, then tool calls."""

    reasoning: str = ""
    text: str = ""
    tool_calls: tuple[ToolCallPlan, ...] = ()


_WORDS: Final = re.compile(r"\s*\S+|\s+")


class ScriptedModel:
    """A deterministic stand-in for a streaming LLM API.

    Texts are cut into token-sized pieces (a word, or 2-5 characters of a longer one)
    and delivered with gaps of *min_gap_ms*-*max_gap_ms*, all drawn from one seeded
    ``random.Random``: the same seed gives the same chunks.
    """

    provider = PROVIDER
    model = MODEL

    def __init__(self, seed: int, *, min_gap_ms: float = 1.0, max_gap_ms: float = 6.0) -> None:
        self._random = random.Random(seed)
        self._gaps = (min_gap_ms / 1000, max_gap_ms / 1000)

    def tokens(self, text: str) -> list[str]:
        """Cut *text* into token-sized pieces whose concatenation is *text*."""
        pieces: list[str] = []
        for word in _WORDS.findall(text):
            while len(word) > 6:
                size = self._random.randint(2, 5)
                pieces.append(word[:size])
                word = word[size:]
            pieces.append(word)
        return pieces

    async def _pause(self) -> None:
        await asyncio.sleep(self._random.uniform(*self._gaps))

    async def stream(self, script: StepScript) -> AsyncIterator[dict[str, Any]]:
        """Yield the chunks of one step (the ``chunk`` kinds of docs/events.md), then usage
        and finish."""
        index = 0
        produced = 0
        for kind, text in (("reasoning", script.reasoning), ("text", script.text)):
            if not text:
                continue
            yield {"type": "block-start", "index": index, "blockType": kind}
            for piece in self.tokens(text):
                await self._pause()
                produced += 1
                yield {"type": f"{kind}-delta", "index": index, "text": piece}
            yield {"type": "block-end", "index": index, "block": {"type": kind, "text": text}}
            index += 1
        for call in script.tool_calls:
            yield {"type": "block-start", "index": index, "blockType": "tool-call"}
            for position, piece in enumerate(self.tokens(call.arguments)):
                await self._pause()
                produced += 1
                delta: dict[str, Any] = {"type": "tool-call-delta", "index": index, "id": call.id}
                if position == 0:
                    delta["name"] = call.name
                delta["argumentsDelta"] = piece
                yield delta
            yield {
                "type": "block-end",
                "index": index,
                "block": tool_call_block(call.id, call.name, call.arguments),
            }
            index += 1
        usage = {"inputTokens": 180 + 40 * index, "outputTokens": produced}
        yield {"type": "usage", "usage": usage}
        yield {"type": "finish", "reason": "tool-calls" if script.tool_calls else "stop"}


class DemoHarness:
    """The harness loop of one session: turns, model steps and tool calls, recorded as
    events with their provenance (docs/surface.md, "provenance") and flushed at the right
    boundaries."""

    def __init__(
        self,
        ledger: Ledger,
        session: Session,
        model: ScriptedModel,
        tools: Mapping[str, Tool],
        report: Report = lambda line: None,
    ) -> None:
        self.ledger = ledger
        self.session = session
        self.model = model
        self.tools = tools
        self.report = report

    def start_turn(self, turn: int, prompt: str, *, reason: str) -> None:
        """Open *turn* with the user's prompt and the request header in force."""
        session = self.session
        session.append(TURN_START, {"turn": turn})
        session.append(
            REQUEST_HEADER,
            {
                "reason": reason,
                "header": {
                    "config": {"provider": PROVIDER, "model": MODEL},
                    "system": SYSTEM_PROMPT,
                    "tools": list(TOOLS),
                },
            },
        )
        session.append(USER_MESSAGE, user_message(prompt, id=f"user-{turn}"), surface_op=APPEND)
        self.report(f"turn {turn}: the user asks {prompt!r}")

    async def model_step(self, turn: int, step: int, script: StepScript) -> SessionEvent:
        """Stream one model step into the log and record the assembled message."""
        session = self.session
        session.append(STEP_START, {"turn": turn, "step": step})
        # Flush before the request: the prompt and everything before it survive a crash
        # during a (slow, paid) model call.
        await self.ledger.flush(session)
        chunk_seqs: list[int] = []
        blocks: dict[int, Any] = {}
        usage: Any = None
        async for chunk in self.model.stream(script):
            event = session.append(ASSISTANT_CHUNK, {"turn": turn, "step": step, "chunk": chunk})
            chunk_seqs.append(event.seq)
            if chunk["type"] == "block-end":
                blocks[chunk["index"]] = chunk["block"]
            elif chunk["type"] == "usage":
                usage = chunk["usage"]
        message = assistant_message(
            [blocks[index] for index in sorted(blocks)],
            provider=PROVIDER,
            model=MODEL,
            id=f"assistant-{turn}-{step}",
        )
        data: dict[str, Any] = {"turn": turn, "step": step, "message": message}
        if usage is not None:
            data["usage"] = usage
        event = session.append(
            ASSISTANT_MESSAGE, data, surface_op=APPEND, source_event_seqs=chunk_seqs
        )
        kinds = ", ".join(str(block["type"]) for block in message["content"])
        self.report(
            f"  step {step}: streamed {plural(len(chunk_seqs), 'chunk')} ({kinds}) → "
            f"assistant/message seq {event.seq}"
        )
        return event

    async def run_tool(self, turn: int, step: int, call: ToolCallPlan) -> SessionEvent:
        """Record the call, make it durable, run the tool and record its result."""
        session = self.session
        recorded = session.append(
            TOOL_CALL,
            {
                "turn": turn,
                "step": step,
                "callId": call.id,
                "name": call.name,
                "arguments": call.arguments,
            },
        )
        # Flush before the tool runs: once it may have side effects, the log must say
        # that it started, so a crash is repaired as "outcome unknown".
        await self.ledger.flush(session)
        self.report(f"  tool/call seq {recorded.seq}: {call.name}({call.arguments}) is durable")
        output = await self.tools[call.name](orjson.loads(call.arguments))
        result = session.append(
            TOOL_RESULT,
            {
                "turn": turn,
                "step": step,
                "message": tool_result(call.id, output, id=f"result-{call.id}"),
            },
            surface_op=APPEND,
            source_event_seqs=[recorded.seq],
        )
        self.report(f"  tool/result seq {result.seq}: {plural(len(output), 'character')}")
        return result

    def end_step(self, turn: int, step: int) -> None:
        """Close a step."""
        self.session.append(STEP_END, {"turn": turn, "step": step})

    async def end_turn(self, turn: int) -> None:
        """Close a completed turn and make it durable."""
        self.session.append(TURN_END, {"turn": turn, "reason": {"kind": "completed"}})
        await self.ledger.flush(self.session)
        self.report(f"turn {turn}: completed and flushed")


def summarise_package(text: str) -> str:
    """Return the scripted model's summary of a ``package.json`` text."""
    try:
        package = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "That file is not valid JSON, so I cannot summarise it."
    if type(package) is not dict:
        return "That file does not hold a JSON object."
    name = package.get("name", "an unnamed package")
    lines = [f"{name} {package.get('version', '')}".strip() + f": {package.get('description', '')}"]
    scripts = package.get("scripts") or {}
    if scripts:
        lines.append("Scripts: " + ", ".join(f"{key} ({value})" for key, value in scripts.items()))
    for field, label in (("dependencies", "Dependencies"), ("devDependencies", "Dev tools")):
        deps = package.get(field) or {}
        if deps:
            lines.append(f"{label}: " + ", ".join(f"{key} {value}" for key, value in deps.items()))
    return "\n".join(lines)


# -- the scenario both demo processes play -----------------------------------------------

#: The workspace file turn 1 reads.
PACKAGE_JSON: Final = {
    "name": "tiny-weather",
    "version": "1.2.0",
    "description": "A command-line weather lookup with offline caching",
    "scripts": {"start": "node bin/weather.js", "test": "vitest run", "lint": "eslint src"},
    "dependencies": {"undici": "^6.19.0", "yargs": "^17.7.2"},
    "devDependencies": {"eslint": "^9.9.0", "vitest": "^2.0.5"},
}

TURN_1_PROMPT: Final = "Please read package.json and summarise it for me."
TURN_1_STEP_1: Final = StepScript(
    reasoning=(
        "The user wants a summary of package.json. I have not seen the file yet, so I "
        "should read it before saying anything about it."
    ),
    tool_calls=(ToolCallPlan("call-read-1", "read_file", '{"path": "package.json"}'),),
)

TURN_2_PROMPT: Final = "Great. Now bump the minor version and run the test suite."
TURN_2_STEP_1: Final = StepScript(
    reasoning=(
        "Bumping the version edits package.json and the tests take a while; one command "
        "does both, so I will run it and wait for the result."
    ),
    tool_calls=(
        ToolCallPlan("call-run-2", "run_command", '{"command": "npm version minor && npm test"}'),
    ),
)


def turn_1_answer(tool_output: str) -> StepScript:
    """Return step 2 of turn 1: the model answers from what the tool returned."""
    return StepScript(text="Here is what package.json says.\n" + summarise_package(tool_output))
