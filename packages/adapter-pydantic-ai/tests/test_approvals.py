"""A run that stops on a tool needing approval is a pause, not a crash (README,
"Deferred tools"): pydantic-ai's real ``Agent`` on a scripted ``FunctionModel``, restarts
and a SIGKILL in real child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from pa_approval import APPROVED, CALL_ID, dump, make_agent
from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import ModelRequest, ToolReturnPart

from sessionledger import Ledger, thaw
from sessionledger.model._repair import (
    TOOL_OUTCOME_UNKNOWN,
    TOOL_OUTCOME_UNKNOWN_TEXT,
    interrupted_turn_closers,
)
from sessionledger_pydantic_ai import LedgerHistory

CHILD = Path(__file__).with_name("pa_approval.py")


def child(*arguments: str) -> str:
    done = subprocess.run(
        [sys.executable, str(CHILD), *arguments],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


async def assert_paused(url: str, session_id: str, recorded: str) -> None:
    """Reopened, the session invents nothing: the call waits, the turn is open."""
    async with Ledger.open(url) as ledger:
        history = LedgerHistory(session_id, ledger)
        assert dump(await history.load()) == recorded
        session = await history.session()
        (pause,) = [event for event in session.events if event.type == "tool/paused"]
        assert pause.data["callId"] == CALL_ID
        assert pause.data["reason"] == {"kind": "approval", "tool": "deploy"}
        assert not [event for event in session.events if event.type == "turn/end"]
        assert interrupted_turn_closers(session.events) == []


async def assert_answered(url: str, session_id: str, recorded: str) -> None:
    """The real result answers the call, paired with it, and nothing says "may have run"."""
    async with Ledger.open(url) as ledger:
        history = LedgerHistory(session_id, ledger)
        assert dump(await history.load()) == recorded
        session = await history.session()
        (result,) = [event for event in session.events if event.type == "tool/result"]
        assert "error" not in result.data
        assert session.event_at(result.source_event_seqs[0]).type == "tool/call"
        for view in (thaw(session.derive_messages()), thaw(session.transcript())):
            assert "may or may not" not in json.dumps(view)
            blocks = [block for message in view for block in message["content"]]
            ids = [block.get("id") or block.get("toolCallId") for block in blocks]
            assert ids.count(CALL_ID) == 2  # the call, then its answer
            assert blocks[ids.index(CALL_ID)]["type"] == "tool-call"
            (answer,) = [block for block in blocks if block["type"] == "tool-result"]
            assert answer["content"] == [{"type": "text", "text": "deployed prod"}]
        (end,) = [event for event in session.events if event.type == "turn/end"]
        assert end.data["reason"] == {"kind": "completed"}


async def test_a_pending_approval_survives_a_clean_close_on_memory() -> None:
    url = "memory:pa-approvals"
    agent = make_agent()
    async with Ledger.open(url) as ledger:
        history = LedgerHistory("paused", ledger)
        first = await agent.run("Deploy to prod.", message_history=await history.load())
        assert isinstance(first.output, DeferredToolRequests)
        await history.record(first.new_messages(), output=first.output)
    await assert_paused(url, "paused", dump(first.all_messages()))
    async with Ledger.open(url) as ledger:
        history = LedgerHistory("paused", ledger)
        assert await history.start_approved(APPROVED) == [CALL_ID]
        assert await history.start_approved(APPROVED) == []  # started already
        second = await agent.run(
            message_history=await history.load(), deferred_tool_results=APPROVED
        )
        assert second.output == "Deployed: deployed prod"
        await history.record(second.new_messages(), output=second.output)
    await assert_answered(url, "paused", dump(second.all_messages()))


async def test_a_pending_approval_survives_a_process_restart(store_url: str) -> None:
    stopped = child("stop", store_url, "paused")
    await assert_paused(store_url, "paused", stopped)
    resumed = child("resume", store_url, "paused")
    assert json.loads(resumed)[: len(json.loads(stopped))] == json.loads(stopped)
    await assert_answered(store_url, "paused", resumed)


async def test_a_crash_while_the_approved_tool_runs_is_still_repaired(store_url: str) -> None:
    url = store_url
    stopped = child("stop", url, "crashy")
    process = subprocess.Popen(
        [sys.executable, str(CHILD), "crash", url, "crashy"], stdout=subprocess.PIPE, text=True
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
    async with Ledger.open(url) as ledger:
        history = LedgerHistory("crashy", ledger)
        loaded = await history.load()
        assert dump(loaded[:-1]) == stopped
        last = loaded[-1]
        assert isinstance(last, ModelRequest)
        (unknown,) = last.parts
        assert isinstance(unknown, ToolReturnPart)
        assert (unknown.tool_call_id, unknown.outcome) == (CALL_ID, "interrupted")
        assert unknown.content == TOOL_OUTCOME_UNKNOWN_TEXT
        session = await history.session()
        closer = next(e for e in session.events if e.type == "tool/result")
        assert closer.data["error"]["code"] == TOOL_OUTCOME_UNKNOWN
        started = [e.seq for e in session.events if e.type == "tool/call"]
        assert len(started) == 2  # requested, then started after the approval
        assert closer.source_event_seqs == (started[-1],)
