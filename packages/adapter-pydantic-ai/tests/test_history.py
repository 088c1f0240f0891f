"""A real pydantic-ai ``Agent`` on a scripted ``FunctionModel``, its history in a ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pa_agent import SEEN, dump, make_agent, run_turn
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
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
from pydantic_ai.models.test import TestModel

from sessionledger import Ledger
from sessionledger.model._repair import TOOL_OUTCOME_UNKNOWN, TOOL_OUTCOME_UNKNOWN_TEXT
from sessionledger.views._formats import to_openai_messages
from sessionledger_pydantic_ai import META_KEY, LedgerHistory

CHILD = Path(__file__).with_name("pa_agent.py")


def child(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), *arguments],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )


def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionledger", *arguments],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def types(session: Any) -> list[str]:
    return [event.type for event in session.events]


async def test_two_turns_with_a_tool_call_round_trip(store_url: str) -> None:
    agent = make_agent()
    async with Ledger.open(store_url) as ledger:
        history = LedgerHistory("chat", ledger)
        assert await history.load() == []
        # Turn 1 the plain way: run, then record what the run produced.
        first = await agent.run("count the lines", message_history=await history.load())
        await history.record(first.new_messages())
        # Turn 2 node by node: each response is durable before its tools run.
        second = await run_turn(history, agent, "write it down")
        loaded = await history.load()
        assert dump(loaded) == dump(second.all_messages())
        assert [m.kind for m in loaded] == ["request", "response"] * 4
        assert second.result is not None
        assert second.result.output == "tool said: wrote notes.txt"
        session = await history.session()
        turn = [
            "turn/start", "user/message", "step/start", "assistant/message", "tool/call",
            "tool/result", "step/end", "step/start", "assistant/message", "step/end",
            "turn/end",
        ]  # fmt: skip
        assert types(session) == turn + turn
        calls = [e for e in session.events if e.type == "tool/call"]
        results = [e for e in session.events if e.type == "tool/result"]
        assert [r.source_event_seqs for r in results] == [(c.seq,) for c in calls]
        assert [c.data["name"] for c in calls] == ["count_lines", "write_file"]
        assert json.loads(calls[0].data["arguments"]) == {"path": "notes.txt"}
        ends = [e.data for e in session.events if e.type == "turn/end"]
        assert ends == [
            {"turn": 1, "reason": {"kind": "completed"}},
            {"turn": 2, "reason": {"kind": "completed"}},
        ]
        reply = next(e for e in session.events if e.type == "assistant/message").data["message"]
        assert reply["source"] == {
            "kind": "model",
            "provider": "pydantic-ai",
            "model": "function:script:",
        }
        assert [b["type"] for b in reply["content"]] == ["text", "tool-call"]
        # The ledger's own view is a plain history too; the JSON rides on the anchors.
        derived = session.derive_messages()
        assert [m["role"] for m in derived] == ["user", "assistant", "user", "assistant"] * 2
        assert all("message" in m[META_KEY] for m in derived)
    # A fresh ledger on the same store reads the same history.
    async with Ledger.open(store_url) as ledger:
        assert dump(await LedgerHistory("chat", ledger).load()) == dump(second.all_messages())


async def test_restart_in_a_new_process_loads_the_same_messages(store_url: str) -> None:
    first = child("turn", store_url, "restart", "count the lines")
    second = child("turn", store_url, "restart", "write it down")
    assert len(json.loads(first.stdout)) == 4
    recorded = json.loads(second.stdout)
    assert len(recorded) == 8
    loaded = child("load", store_url, "restart")
    assert json.loads(loaded.stdout) == recorded
    # Byte for byte, and in this process as well.
    assert loaded.stdout.strip() == second.stdout.strip()
    async with Ledger.open(store_url) as ledger:
        assert dump(await LedgerHistory("restart", ledger).load()) == second.stdout.strip()


def kill_in_tool(store_url: str, session_id: str) -> None:
    """Run a turn in a child and SIGKILL it while ``write_file`` runs."""
    process = subprocess.Popen(
        [sys.executable, str(CHILD), "crash", store_url, session_id, "write it down"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "IN_TOOL"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
        assert process.stdout is not None
        process.stdout.close()
    assert process.returncode == -signal.SIGKILL


async def test_sigkill_between_tool_call_and_return_then_carry_on(store_url: str) -> None:
    child("turn", store_url, "crashy", "count the lines")
    kill_in_tool(store_url, "crashy")
    async with Ledger.open(store_url) as ledger:
        history = LedgerHistory("crashy", ledger)
        loaded = await history.load()  # resumes the session: repair closes the turn
        session = await history.session()
        closer = next(e for e in session.events if e.type == "tool/result" and "error" in e.data)
        assert closer.data["error"]["code"] == TOOL_OUTCOME_UNKNOWN
        call = session.event_at(closer.source_event_seqs[0])
        assert call.type == "tool/call"
        assert call.data["name"] == "write_file"
        # The model's view ends with the call and the repair's answer to it.
        assert [m.kind for m in loaded] == ["request", "response"] * 3 + ["request"]
        [unknown] = loaded[-1].parts
        assert isinstance(unknown, ToolReturnPart)
        assert unknown.tool_call_id == call.data["callId"]
        assert unknown.tool_name == "write_file"
        assert unknown.content == TOOL_OUTCOME_UNKNOWN_TEXT
        assert unknown.outcome == "interrupted"
        assert dump(await history.load()) == dump(loaded)  # deterministic
        # The next run carries on from there: the model reads the unknown outcome.
        SEEN.clear()
        run = await run_turn(history, make_agent(), None)
        assert run.result is not None
        assert run.result.output == f"tool said: {TOOL_OUTCOME_UNKNOWN_TEXT}"
        seen_last = SEEN[-1][-1]
        assert isinstance(seen_last, ModelRequest)
        assert seen_last.parts[-1].content == TOOL_OUTCOME_UNKNOWN_TEXT
        # What the run produced round-trips exactly, after the history it was given. (The
        # run stamps its run id and instructions on the trailing request it answered, in
        # its own copy; the ledger's closer is the fact, and load re-derives it.)
        after = await history.load()
        assert dump(after[: len(loaded)]) == dump(loaded)
        assert dump(after[len(loaded) :]) == dump(run.new_messages())
        assert [m.kind for m in run.new_messages()] == ["response"]
        # And a further turn on top of the repaired one.
        run = await run_turn(history, make_agent(), "count again")
        assert dump(await history.load()) == dump(run.all_messages())
        assert types(session)[-3:] == ["assistant/message", "step/end", "turn/end"]


async def test_cli_show_transcript_verify_are_clean(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'ledger.db'}"
    child("turn", url, "cli", "count the lines")
    kill_in_tool(url, "cli")
    async with Ledger.open(url) as ledger:
        history = LedgerHistory("cli", ledger)
        await run_turn(history, make_agent(), None)
        await run_turn(history, make_agent(), "hello")
    verify = cli("--store", url, "verify", "cli")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "ok" in verify.stdout
    show = cli("--store", url, "show", "cli")
    assert show.returncode == 0, show.stderr
    for kind in ("turn/start", "tool/call", "tool/result", "turn/end"):
        assert kind in show.stdout
    transcript = cli("--store", url, "transcript", "cli")
    assert transcript.returncode == 0, transcript.stderr
    assert "you said 'hello'" in transcript.stdout
    assert "count_lines" in transcript.stdout
    shown = cli("--store", url, "show", "--json", "cli")
    events = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert sum(e["type"] == "turn/end" for e in events) == 4


class Answer(BaseModel):
    value: int


async def test_output_tool_and_test_model(store_url: str) -> None:
    agent = Agent(TestModel(), output_type=Answer)

    @agent.tool_plain
    def lookup(key: str) -> str:
        return f"value of {key}"

    async with Ledger.open(store_url) as ledger:
        history = LedgerHistory("typed", ledger)
        first = await run_turn(history, agent, "look it up")
        second = await agent.run("again", message_history=await history.load())
        await history.record(second.new_messages())
        assert isinstance(second.output, Answer)
        assert dump(await history.load()) == dump(second.all_messages())
        assert len(second.all_messages()) > len(first.all_messages())
        session = await history.session()
        assert types(session).count("turn/start") == 2
        assert types(session).count("turn/end") == 2


@pytest.mark.parametrize("messages", [[], None])
async def test_record_nothing_writes_nothing(messages: Any) -> None:
    async with Ledger.open("memory:") as ledger:
        history = LedgerHistory("empty", ledger)
        await history.record(messages or [])
        assert (await history.session()).seq == 0
        assert ModelMessagesTypeAdapter.dump_json(await history.load()) == b"[]"


async def test_a_tool_retry_is_an_error_result_and_round_trips(store_url: str) -> None:
    agent = make_agent()
    tries: list[str] = []

    @agent.tool_plain
    def flaky(path: str) -> str:
        tries.append(path)
        if len(tries) == 1:
            raise ModelRetry("try another path")
        return "fine"

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns and returns[-1].outcome == "success":
            return ModelResponse(parts=[TextPart("ok")])
        return ModelResponse(parts=[ToolCallPart("flaky", {"path": f"p{len(messages)}"})])

    async with Ledger.open(store_url) as ledger:
        history = LedgerHistory("retry", ledger)
        with agent.override(model=FunctionModel(script)):
            run = await run_turn(history, agent, "go")
        assert dump(await history.load()) == dump(run.all_messages())
        session = await history.session()
        results = [
            e.data["message"]["content"][0] for e in session.events if e.type == "tool/result"
        ]
        assert [r.get("isError", False) for r in results] == [True, False]
        assert len(tries) == 2
        assert types(session)[-1] == "turn/end"
        # The ledger's derived history is a valid provider request body too.
        body = to_openai_messages(session.derive_messages())
        assert [m["role"] for m in body] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
