"""The SDK's real ``Runner`` stopped where a real application stops, then a new process
goes on: at a pending approval (a clean stop, the ledger closed normally) and in the
middle of a streamed answer (SIGKILL). Oracle: the items the SDK saw stored before the
stop read back exactly (plus, after the kill, crash repair's documented outcome), and the
conversation carries on. Restarts after a completed turn: test_runner.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agents import Runner
from openai_agents_fakes import MODEL_NAME, ScriptedModel, add, agent, say

from sessionledger import Ledger
from sessionledger_openai_agents import LedgerSession

CHILD = Path(__file__).with_name("openai_agents_stops.py")


def child(*args: str) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, str(CHILD), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    items: list[dict[str, object]] = json.loads(done.stdout)
    return items


def kill_when(marker: Path, *args: str) -> None:
    """Start the child, SIGKILL it as soon as it writes *marker*."""
    process = subprocess.Popen(
        [sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if process.poll() is not None:
                pytest.fail(f"the child ended before the stop point: {process.stderr}")
            assert time.monotonic() < deadline, "the child never reached the stop point"
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


async def test_a_clean_stop_at_a_pending_approval_reads_back_as_it_was(
    store_url: str, tmp_path: Path
) -> None:
    state = tmp_path / "run-state.json"
    paused = child("pause", store_url, "approval", str(state))
    assert [item.get("type") for item in paused] == [None, "function_call"]

    assert child("read", store_url, "approval") == paused  # a new process: the same items
    approved = child("approve", store_url, "approval", str(state))
    assert approved == [
        *paused,
        {"type": "function_call_output", "call_id": "call_deploy", "output": "deployed to prod"},
        approved[-1],
    ]
    assert approved[-1]["content"][0]["text"] == "Deployed to prod."  # type: ignore[index]


@pytest.mark.slow
async def test_a_kill_mid_stream_keeps_the_input_and_the_run_carries_on(
    store_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "streaming"
    kill_when(marker, "crash-stream", store_url, "streamed", str(marker))

    # The SDK saved the input before the model streamed; nothing of the answer was saved.
    user = {"role": "user", "content": "Tell me a story."}
    assert child("read", store_url, "streamed") == [user]
    async with Ledger.open(store_url) as ledger:
        session = LedgerSession("streamed", ledger, model=MODEL_NAME)
        assert await session.get_items() == [user]
        live = await session.session()
        assert live.events[-2].data["reason"] == {"kind": "interrupted"}  # crash repair
        model = ScriptedModel([[say("Once upon a time, a ledger.", "msg_story")]])
        result = await Runner.run(agent(model, [add]), "Go on.", session=session)
        assert result.final_output == "Once upon a time, a ledger."
        assert model.inputs[0] == [user, {"role": "user", "content": "Go on."}]
        items = await session.get_items()
    assert child("read", store_url, "streamed") == items
    assert len(items) == 3
