"""The SDK's real ``Runner`` on a ``LedgerSession``: conversations, restarts, crashes, the CLI.

The model is a scripted fake (no network, tracing off); restarts and crashes are real
subprocesses, a crash is a real SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Runner, SQLiteSession
from openai_agents_fakes import MODEL_NAME, ScriptedModel, add, agent, call, say, think

from sessionledger import Ledger, thaw
from sessionledger.model._repair import TOOL_OUTCOME_UNKNOWN, TOOL_OUTCOME_UNKNOWN_TEXT
from sessionledger_openai_agents import ITEM_KEY, LedgerSession

CHILD = Path(__file__).with_name("openai_agents_child.py")


def script() -> list[list[Any]]:
    """Turn 1: reasoning + a tool call, then the answer; turn 2: a plain answer."""
    return [
        [think("The user wants a sum."), call("add", {"a": 2, "b": 3}, "call_add")],
        [say("2 + 3 = 5", "msg_1")],
        [say("You are welcome.", "msg_2")],
    ]


async def converse(session: Any) -> ScriptedModel:
    model = ScriptedModel(script())
    bot = agent(model, [add])
    first = await Runner.run(bot, "What is 2 + 3?", session=session)
    assert first.final_output == "2 + 3 = 5"
    second = await Runner.run(bot, "Thanks!", session=session)
    assert second.final_output == "You are welcome."
    return model


def child(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sessionledger", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


async def test_two_turns_with_a_tool_call_match_the_sdks_own_store(store_url: str) -> None:
    # Oracle: the SDK's own SQLiteSession, fed by the same script.
    reference = SQLiteSession("reference")
    reference_model = await converse(reference)
    expected = await reference.get_items()
    assert [item.get("type") for item in expected] == [
        None,
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
        None,
        "message",
    ]

    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("two-turns", ledger, model=MODEL_NAME)
        model = await converse(session)
        assert await session.get_items() == expected
        # The model saw exactly what it sees with the SDK's own store, history included.
        assert model.inputs == reference_model.inputs
        live = await session.session()
        assert [event.type for event in live.events] == [
            "turn/start",
            "user/message",
            "step/start",
            "assistant/message",  # reasoning
            "assistant/message",  # the function call
            "tool/call",
            "tool/result",
            "step/end",
            "step/start",
            "assistant/message",
            "step/end",
            "turn/end",
            "turn/start",
            "user/message",
            "step/start",
            "assistant/message",
            "step/end",
            "turn/end",
        ]
        by_type = {event.type: event for event in live.events}
        assert by_type["tool/result"].source_event_seqs == (5,)
        assert by_type["tool/call"].data["callId"] == "call_add"
        assert by_type["turn/end"].data["reason"] == {"kind": "completed"}
        answer = live.event_at(9).data["message"]
        assert answer["source"] == {"kind": "model", "provider": "openai", "model": MODEL_NAME}
        assert answer["content"] == ({"type": "text", "text": "2 + 3 = 5"},)
        assert thaw(answer[ITEM_KEY]) == expected[4]
        # The ledger's own views work on what the SDK wrote.
        texts = [block.get("text") for message in live.transcript() for block in message["content"]]
        assert "2 + 3 = 5" in texts
        assert "Thanks!" in texts
    reference.close()


async def test_a_restart_in_a_new_process_gives_the_same_items(store_url: str) -> None:
    written = json.loads(child("converse", store_url, "restart").stdout)
    assert len(written) == 6
    read = json.loads(child("read", store_url, "restart").stdout)
    assert read == written
    async with Ledger.open(store_url) as ledger:
        assert await LedgerSession("restart", ledger).get_items() == written


def kill_when_tool_runs(args: list[str], marker: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if process.poll() is not None:
                _, err = process.communicate()
                pytest.fail(f"the child ended before its tool ran: {err}")
            if time.monotonic() > deadline:
                pytest.fail("the child's tool never ran")
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        assert process.returncode == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


async def test_sigkill_between_a_function_call_and_its_output(
    store_url: str, tmp_path: Path
) -> None:
    # The SDK saves a call on its own only when it waits for approval; the approved run
    # then executes the tool before it saves the output: the process dies in between.
    marker = tmp_path / "tool-ran"
    kill_when_tool_runs(["crash-approval", store_url, "crashed", str(marker)], marker)
    assert marker.read_text() == "prod"

    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("crashed", ledger, model=MODEL_NAME)
        items = await session.get_items()
        assert [item.get("type") for item in items] == [
            None,
            "function_call",
            "function_call_output",
        ]
        assert items[0] == {"role": "user", "content": "Deploy to prod."}
        assert items[1]["call_id"] == "call_deploy"
        assert items[2] == {
            "type": "function_call_output",
            "call_id": "call_deploy",
            "output": TOOL_OUTCOME_UNKNOWN_TEXT,
        }
        live = await session.session()
        closer = next(event for event in live.events if event.type == "tool/result")
        assert closer.data["error"]["code"] == TOOL_OUTCOME_UNKNOWN
        # The stop for the approval was a pause; LedgerRunHooks recorded the approved
        # start (a second tool/call) before the tool ran, and repair cites that start.
        marks = [e.type for e in live.events if e.type in ("tool/call", "tool/paused")]
        assert marks == ["tool/call", "tool/paused", "tool/call"]
        started = [e.seq for e in live.events if e.type == "tool/call"][-1]
        assert closer.source_event_seqs == (started,)

        # The next run carries on: the model reads the outcome-unknown output.
        model = ScriptedModel([[say("I cannot tell whether it deployed; let me check.")]])
        result = await Runner.run(agent(model, [add]), "Did it deploy?", session=session)
        assert result.final_output.startswith("I cannot tell")
        assert model.inputs[0][:3] == items
        assert model.inputs[0][3] == {"role": "user", "content": "Did it deploy?"}
        after = await session.get_items()
        assert after[:3] == items
        assert len(after) == 5
        assert live.events[-1].type == "turn/end"
        assert live.events[-1].data["reason"] == {"kind": "completed"}
    assert cli("verify", "crashed", "--store", store_url).returncode == 0


async def test_sigkill_while_a_tool_runs_without_approval(store_url: str, tmp_path: Path) -> None:
    # Without approval the SDK saves a function_call together with its output, after the
    # tool ran: a crash while the tool runs leaves only the user's input stored.
    marker = tmp_path / "tool-ran"
    kill_when_tool_runs(["crash-plain", store_url, "plain", str(marker)], marker)

    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("plain", ledger, model=MODEL_NAME)
        assert await session.get_items() == [{"role": "user", "content": "Deploy to prod."}]
        live = await session.session()
        assert live.events[-2].data["reason"] == {"kind": "interrupted"}
        model = ScriptedModel([[say("Shall I try the deploy again?")]])
        result = await Runner.run(agent(model, [add]), "Well?", session=session)
        assert result.final_output == "Shall I try the deploy again?"
        assert model.inputs[0] == [
            {"role": "user", "content": "Deploy to prod."},
            {"role": "user", "content": "Well?"},
        ]
    assert cli("verify", "plain", "--store", store_url).returncode == 0


async def test_show_transcript_and_verify_are_clean(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'cli.db'}"
    child("converse", url, "cli-session")
    async with Ledger.open(url) as ledger:
        session = LedgerSession("cli-session", ledger, model=MODEL_NAME)
        await session.pop_item()

    show = cli("show", "cli-session", "--store", url)
    assert show.returncode == 0, show.stderr
    for expected in ("turn/start", "tool/call", "tool/result", "turn/end", "replace"):
        assert expected in show.stdout
    transcript = cli("transcript", "cli-session", "--store", url)
    assert transcript.returncode == 0, transcript.stderr
    for expected in ("What is 2 + 3?", "2 + 3 = 5", "Thanks!", "You are welcome."):
        assert expected in transcript.stdout  # the popped answer too
    verify = cli("verify", "cli-session", "--store", url)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "ok" in verify.stdout
    assert not show.stderr
    assert not transcript.stderr
    assert not verify.stderr
