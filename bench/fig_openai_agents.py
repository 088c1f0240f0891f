"""Figure 10: the OpenAI Agents SDK on ``LedgerSession`` against its own ``SQLiteSession``.

The same conversation runs through the SDK's real ``Runner`` with a scripted fake model (no
network, tracing off): ``chat_messages / 2`` exchanges of ~0.5 KB messages, every fifth one
with a tool call first (``function_call``, its output, then the answer). Each exchange is
one ``Runner.run(agent, text, session=…)``: the SDK reads the history (``get_items``), saves
the input, then the model's items (``add_items``), exactly as in a user's program.

Contenders, each on a fresh SQLite file in WAL mode with ``synchronous=FULL`` (the same
durability: every ``add_items`` is on disk when it returns):

- ``sdk``: the SDK's ``SQLiteSession("chat", path)`` (a transaction per ``add_items``);
- ``ledger``: ``LedgerSession("chat", ledger)`` on a ``sessionledger`` SQLite ledger (a
  ``flush`` per ``add_items``).

The figure is time per saved item, ``ledger`` ÷ ``sdk`` (goal ≤ 1.5x). For context, the same
items saved and read back through the two sessions alone, without the ``Runner``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import Figure, Section, Settings, measure, paired, spread
from bench.stores import ready_to_write, scratch
from bench.workloads import chat_texts
from sessionledger import Ledger
from sessionledger_sqlite import SqlitePersistence

__all__ = ["available", "run"]

_counter = itertools.count()
TOOL_EVERY = 5


def available() -> str | None:
    """Return why the figure cannot run (a missing package), or None when it can."""
    for module in ("agents", "sessionledger_openai_agents"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            return f"no module {module!r}; install packages/adapter-openai-agents"
    return None


def _script(texts: list[str]) -> tuple[list[str], list[list[Any]]]:
    """The user inputs and the model's scripted responses, in call order."""
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    inputs: list[str] = []
    responses: list[list[Any]] = []
    for index in range(0, len(texts) - 1, 2):
        exchange = index // 2
        inputs.append(texts[index])
        if exchange % TOOL_EVERY == TOOL_EVERY - 1:
            arguments = json.dumps({"a": exchange, "b": 1})
            call = ResponseFunctionToolCall(
                id=f"fc_{exchange}",
                type="function_call",
                call_id=f"call_{exchange}",
                name="add",
                arguments=arguments,
                status="completed",
            )
            responses.append([call])
        text = ResponseOutputText(type="output_text", text=texts[index + 1], annotations=[])
        message = ResponseOutputMessage(
            id=f"msg_{exchange}",
            type="message",
            role="assistant",
            status="completed",
            content=[text],
        )
        responses.append([message])
    return inputs, responses


def _agent(responses: list[list[Any]]) -> Any:
    from agents import Agent, function_tool
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage

    class Scripted(Model):
        def __init__(self) -> None:
            self.left = iter(responses)

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            return ModelResponse(output=next(self.left), usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError

    @function_tool
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    return Agent(name="assistant", instructions="Be brief.", model=Scripted(), tools=[add])


async def _conversation(kind: str, path: Path, texts: list[str]) -> dict[str, float]:
    from agents import Runner, SQLiteSession

    from sessionledger_openai_agents import LedgerSession

    inputs, responses = _script(texts)
    agent = _agent(responses)
    ledger: Ledger | None = None
    if kind == "sdk":
        session: Any = SQLiteSession("chat", str(path))  # creates the schema untimed
    else:
        persistence = SqlitePersistence(path)
        await ready_to_write(persistence)  # the file, its schema and connection: untimed
        ledger = Ledger(persistence, load_entrypoints=False)
        session = LedgerSession("chat", ledger)
        await session.session()
    try:
        start = time.perf_counter()
        for text in inputs:
            await Runner.run(agent, text, session=session)
        seconds = time.perf_counter() - start
        items = len(await session.get_items())
    finally:
        if ledger is not None:
            await ledger.close()
        else:
            session.close()
    return {"seconds": seconds, "items": items}


async def _sessions_alone(kind: str, path: Path, batches: list[list[Any]]) -> dict[str, float]:
    from agents import SQLiteSession

    from sessionledger_openai_agents import LedgerSession

    ledger: Ledger | None = None
    if kind == "sdk":
        session: Any = SQLiteSession("chat", str(path))
    else:
        persistence = SqlitePersistence(path)
        await ready_to_write(persistence)
        ledger = Ledger(persistence, load_entrypoints=False)
        session = LedgerSession("chat", ledger)
        await session.session()
    try:
        start = time.perf_counter()
        for batch in batches:
            await session.add_items(batch)
        items = await session.get_items()
        seconds = time.perf_counter() - start
    finally:
        if ledger is not None:
            await ledger.close()
        else:
            session.close()
    return {"seconds": seconds, "items": len(items)}


def _batches(texts: list[str]) -> list[list[Any]]:
    """The items the SDK saves for the conversation, batch by batch (as it calls add_items)."""
    inputs, responses = _script(texts)
    out: list[list[Any]] = []
    answers = iter(responses)
    for exchange, text in enumerate(inputs):
        out.append([{"role": "user", "content": text}])
        if exchange % TOOL_EVERY == TOOL_EVERY - 1:
            (call,) = next(answers)
            item = call.model_dump(exclude_unset=True)
            output = {"call_id": item["call_id"], "output": "1", "type": "function_call_output"}
            out.append([item, output])
        (message,) = next(answers)
        out.append([message.model_dump(exclude_unset=True)])
    return out


def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
    """Run figure 10 (or report the adapter missing)."""
    reason = available()
    if reason is not None:
        figure = Figure("10-oa", "OpenAI Agents SDK sessions", "≤ 1.5x", None, None, note=reason)
        return [figure], []
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    texts = chat_texts(settings.chat_messages)
    batches = _batches(texts)
    with scratch() as root, asyncio.Runner() as runner:

        def contender(
            job: Callable[[str, Path, Any], Awaitable[dict[str, float]]], kind: str, arg: Any
        ) -> Callable[[], Awaitable[dict[str, float]]]:
            return lambda: job(kind, root / f"{kind}-{next(_counter)}.db", arg)

        full = measure(
            {kind: contender(_conversation, kind, texts) for kind in ("sdk", "ledger")},
            settings.repeats,
            runner=runner,
        )
        alone = measure(
            {kind: contender(_sessions_alone, kind, batches) for kind in ("sdk", "ledger")},
            settings.repeats,
            runner=runner,
        )
    return _report(full, alone, len(batches))


def _per_item(samples: list[dict[str, float]]) -> list[float]:
    return [sample["seconds"] / sample["items"] for sample in samples]


def _ms(values: list[float]) -> str:
    median, low, high = spread(values)
    return f"{median * 1e3:.3f} ({low * 1e3:.3f}-{high * 1e3:.3f})"


def _report(
    full: dict[str, list[dict[str, float]]],
    alone: dict[str, list[dict[str, float]]],
    batches: int,
) -> tuple[list[Figure], list[Section]]:
    items = int(full["sdk"][0]["items"])
    assert all(sample["items"] == items for samples in full.values() for sample in samples)
    figures = []
    rows = []
    for key, title, results, goal in (
        ("10-oa-runner", "Runner.run conversation", full, ("le", 1.5)),
        ("10-oa-session", "add_items + get_items alone (context)", alone, None),
    ):
        ours, theirs = _per_item(results["ledger"]), _per_item(results["sdk"])
        ratio, low, high = paired(ours, theirs)
        figures.append(
            Figure(
                key,
                f"time per saved item, {title}: LedgerSession ÷ the SDK's SQLiteSession",
                "≤ 1.5x" if goal else "context",
                goal,  # type: ignore[arg-type]
                ratio,
                low,
                high,
                f"LedgerSession {_ms(ours)} ms; SQLiteSession {_ms(theirs)} ms per item",
                f"{items} items; same fake model, file SQLite WAL synchronous=FULL for both",
            )
        )
        rows.append(f"| {title} | {_ms(theirs)} | {_ms(ours)} | {ratio:.2f}x |")
    body = "\n".join(
        [
            "| what | SQLiteSession ms/item | LedgerSession ms/item | ratio |",
            "|---|---|---|---|",
            *rows,
            "",
            f"{items} items saved in {batches} add_items calls; every fifth exchange calls a "
            "tool. Per-item time includes the SDK's own work (the Runner, the history read "
            "at the start of every run).",
        ]
    )
    data = {
        "ms_per_item": {
            name: {kind: spread(_per_item(samples))[0] * 1e3 for kind, samples in res.items()}
            for name, res in (("runner", full), ("session", alone))
        }
    }
    return figures, [Section("Figure 10 detail: OpenAI Agents SDK sessions", body, data)]
