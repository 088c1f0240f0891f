"""A run stopped for an approval is a pause, not a crash (README, "Approvals").

The SDK's real ``Runner`` with a ``needs_approval`` tool and the scripted fake model; the
restarts are real processes. Oracle: the SDK's own ``SQLiteSession`` fed the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Runner, RunState, SQLiteSession
from openai_agents_fakes import MODEL_NAME, ScriptedModel, agent, approved_deploy, call, say

from sessionledger import Ledger, thaw
from sessionledger.model._repair import TOOL_OUTCOME_UNKNOWN_TEXT, interrupted_turn_closers
from sessionledger_openai_agents import LedgerRunHooks, LedgerSession

CHILD = Path(__file__).with_name("openai_agents_child.py")
SCRIPT = [[call("deploy", {"target": "prod"}, "call_deploy")], [say("Deployed.", "m")]]


def child(*args: str) -> list[Any]:
    done = subprocess.run(
        [sys.executable, str(CHILD), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    items: list[Any] = json.loads(done.stdout)
    return items


async def stop_for_approval(session: Any) -> str:
    """Run until the SDK stops for the approval; return the serialised RunState."""
    bot = agent(ScriptedModel(SCRIPT[:1]), [approved_deploy])
    first = await Runner.run(bot, "Deploy to prod.", session=session)
    assert [item.raw_item.call_id for item in first.interruptions] == ["call_deploy"]
    return first.to_state().to_string()


async def approve_and_resume(session: Any, saved: str, hooks: Any = None) -> None:
    bot = agent(ScriptedModel(SCRIPT[1:]), [approved_deploy])
    state = await RunState.from_string(bot, saved)
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(bot, state, session=session, hooks=hooks)
    assert result.final_output == "Deployed."


@pytest.fixture
async def reference() -> tuple[list[Any], list[Any]]:
    """The SDK's own store: the items at the pause and after the approved run."""
    own = SQLiteSession("reference")
    saved = await stop_for_approval(own)
    paused = await own.get_items()
    await approve_and_resume(own, saved)
    done = await own.get_items()
    own.close()
    return paused, done


async def assert_paused_on_reopen(url: str, session_id: str, expected: list[Any]) -> None:
    async with Ledger.open(url) as ledger:
        session = LedgerSession(session_id, ledger, model=MODEL_NAME)
        assert await session.get_items() == expected  # nothing invented
        live = await session.session()
        paused = [event for event in live.events if event.type == "tool/paused"]
        assert [event.data["callId"] for event in paused] == ["call_deploy"]
        assert paused[0].data["reason"]["kind"] == "approval"
        assert [event.type for event in live.events[-2:]] == ["tool/paused", "session/end-seed"]
        assert interrupted_turn_closers(live.events) == []


async def assert_answered(url: str, session_id: str, expected: list[Any]) -> None:
    async with Ledger.open(url) as ledger:
        session = LedgerSession(session_id, ledger, model=MODEL_NAME)
        assert await session.get_items() == expected
        live = await session.session()
        kinds = [event.type for event in live.events]
        result = live.events[kinds.index("tool/result")]
        assert live.event_at(result.source_event_seqs[0]).type == "tool/call"
        assert result.data["message"]["source"] == {"kind": "tool", "callId": "call_deploy"}
        assert not any(
            event.data.get("source", {}).get("kind") == "plugin"
            for event in live.events
            if event.type == "user/message"
        )
        (end,) = [event for event in live.events if event.type == "turn/end"]
        assert end.data["reason"] == {"kind": "completed"}
        for view in (thaw(live.derive_messages()), thaw(live.transcript())):
            text = json.dumps(view)
            assert "may or may not" not in text
            assert TOOL_OUTCOME_UNKNOWN_TEXT not in text
            blocks = [block for message in view for block in message["content"]]
            (answer,) = [block for block in blocks if block["type"] == "tool-result"]
            assert answer["toolCallId"] == "call_deploy"
            assert answer["content"] == [{"type": "text", "text": "deployed prod"}]
            calls = [block["id"] for block in blocks if block["type"] == "tool-call"]
            assert calls == ["call_deploy"]
            assert blocks.index(answer) > [b.get("id") for b in blocks].index("call_deploy")


async def test_a_pending_approval_survives_a_clean_close_on_memory(
    reference: tuple[list[Any], list[Any]],
) -> None:
    url = "memory:approvals"
    async with Ledger.open(url) as ledger:
        saved = await stop_for_approval(LedgerSession("paused", ledger, model=MODEL_NAME))
    await assert_paused_on_reopen(url, "paused", reference[0])
    async with Ledger.open(url) as ledger:
        session = LedgerSession("paused", ledger, model=MODEL_NAME)
        await approve_and_resume(session, saved, LedgerRunHooks(session))
    await assert_answered(url, "paused", reference[1])


@pytest.mark.slow
async def test_a_pending_approval_survives_a_process_restart(
    store_url: str, tmp_path: Path, reference: tuple[list[Any], list[Any]]
) -> None:
    state = str(tmp_path / "run-state.json")
    assert child("approval-stop", store_url, "paused", state) == reference[0]
    await assert_paused_on_reopen(store_url, "paused", reference[0])
    assert child("approval-resume", store_url, "paused", state) == reference[1]
    await assert_answered(store_url, "paused", reference[1])
    verify = subprocess.run(
        [sys.executable, "-m", "sessionledger", "verify", "paused", "--store", store_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
