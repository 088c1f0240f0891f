"""LedgerChatMessageHistory under a real RunnableWithMessageHistory with a fake chat model,
on SQLite and JSONL, with real child processes for restarts, SIGKILL and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from lc_scenarios import (
    ANSWER,
    CALL_ID,
    TOOL_CALL,
    TOOL_OUTPUT,
    WELCOME,
    Chain,
    two_turns,
    two_turns_sync,
)

from sessionledger import Ledger, assistant_message, tool_call_block, tool_result, user_message
from sessionledger.model._repair import TOOL_OUTCOME_UNKNOWN, TOOL_OUTCOME_UNKNOWN_TEXT
from sessionledger_invariants import check_log
from sessionledger_langchain import (
    LedgerChatMessageHistory,
    LedgerThread,
    UnpairedToolMessageError,
    UnsupportedMessageError,
)

SCENARIOS = str(Path(__file__).parent / "lc_scenarios.py")


def run_child(mode: str, url: str, session_id: str) -> list[BaseMessage]:
    done = subprocess.run(
        [sys.executable, SCENARIOS, mode, url, session_id],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return messages_from_dict(json.loads(done.stdout.splitlines()[-1]))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionledger", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def types(ledger: Ledger, session_id: str) -> list[str]:
    session = ledger.get(session_id)
    assert session is not None
    return [event.type for event in session.events]


async def test_two_turns_round_trip_onto_the_core_vocabulary(store_url: str) -> None:
    async with Ledger.open(store_url) as ledger:
        history = LedgerChatMessageHistory("chat", ledger)
        assert isinstance(history, BaseChatMessageHistory)
        chain = Chain(history, [TOOL_CALL, ANSWER, WELCOME])
        added = await two_turns(chain)
        assert await history.aget_messages() == added  # exactly what was added, in order
        assert chain.seen[1][-2:] == [added[1], TOOL_OUTPUT]  # the model saw the result
        assert types(ledger, "chat") == [
            "turn/start", "user/message",
            "step/start", "assistant/message", "tool/call", "tool/result", "step/end",
            "step/start", "assistant/message", "step/end", "turn/end",
            "turn/start", "user/message",
            "step/start", "assistant/message", "step/end", "turn/end",
        ]  # fmt: skip
        session = ledger.get("chat")
        assert session is not None
        events = session.events
        call, result = events[4], events[5]
        assert call.data["callId"] == CALL_ID
        assert call.data["name"] == "add"
        assert json.loads(call.data["arguments"]) == {"a": 2, "b": 3}
        assert result.source_event_seqs == (4,)  # the result cites its tool/call
        reply = events[3].data
        assert reply["message"]["source"] == {"kind": "model", "provider": "fake",
                                              "model": "fake-1"}  # fmt: skip
        assert reply["usage"]["total_tokens"] == 19
        assert events[8].data["message"]["source"]["provider"] == "langchain"
        assert events[8].data["message"]["source"]["model"] == "unknown"
        assert events[10].data["reason"] == {"kind": "completed"}
        assert [m["role"] for m in session.derive_messages()] == [
            "user", "assistant", "user", "assistant", "user", "assistant"
        ]  # fmt: skip
        assert check_log(events) == []


async def test_restart_in_new_processes_gives_the_same_messages(store_url: str) -> None:
    written = run_child("write", store_url, "restart")
    assert [type(m) for m in written] == [
        HumanMessage, AIMessage, ToolMessage, AIMessage, HumanMessage, AIMessage
    ]  # fmt: skip
    assert written[1].tool_calls[0]["id"] == CALL_ID  # type: ignore[attr-defined]
    assert run_child("read", store_url, "restart") == written
    async with Ledger.open(store_url) as ledger:
        assert await LedgerChatMessageHistory("restart", ledger).aget_messages() == written


async def test_sigkill_between_tool_call_and_result_then_the_chain_carries_on(
    store_url: str,
) -> None:
    child = subprocess.Popen(
        [sys.executable, SCENARIOS, "crash", store_url, "crashed"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 120)
        assert line.strip() == "READY", child.stderr.read() if child.stderr else ""
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
        if child.stderr is not None:
            child.stderr.close()
    assert child.returncode == -signal.SIGKILL

    async with Ledger.open(store_url) as ledger:
        history = LedgerChatMessageHistory("crashed", ledger)
        before = await history.aget_messages()
        assert [type(m) for m in before] == [HumanMessage, AIMessage, ToolMessage]
        closer = before[-1]
        assert isinstance(closer, ToolMessage)
        assert closer.tool_call_id == CALL_ID
        assert closer.status == "error"
        assert closer.content == TOOL_OUTCOME_UNKNOWN_TEXT  # says the outcome is unknown
        error = closer.response_metadata["sessionledger"]["error"]
        assert error["code"] == TOOL_OUTCOME_UNKNOWN

        chain = Chain(history, [AIMessage(content="The add may not have run; I'll check.")])
        reply = await chain.ask("Did it work?")
        assert chain.seen[0][:3] == before  # the model read the outcome-unknown result
        after = await history.aget_messages()
        assert after == [*before, HumanMessage(content="Did it work?"), reply]
        session = ledger.get("crashed")
        assert session is not None
        assert check_log(session.events) == []
        reasons = [e.data["reason"]["kind"] for e in session.events if e.type == "turn/end"]
        assert reasons == ["interrupted", "completed"]


async def test_cli_show_transcript_and_verify_are_clean(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'cli.db'}"
    async with Ledger.open(url) as ledger:
        history = LedgerChatMessageHistory("cli", ledger)
        await history.aadd_messages([SystemMessage(content="You add numbers.")])
        await two_turns(Chain(history, [TOOL_CALL, ANSWER, WELCOME]))
        await history.aclear()
        await history.aadd_messages([HumanMessage(content="Fresh start")])
    shown = cli("show", "cli", "--store", url)
    assert shown.returncode == 0, shown.stderr
    assert "tool/call" in shown.stdout
    assert "request/header" in shown.stdout
    said = cli("transcript", "cli", "--store", url)
    assert said.returncode == 0, said.stderr
    for text in ["What is 2 + 3?", "2 + 3 is 5.", "You're welcome.", "Fresh start"]:
        assert text in said.stdout
    checked = cli("verify", "cli", "--store", url)
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_clear_shadows_the_history_and_keeps_the_transcript(store_url: str) -> None:
    async with Ledger.open(store_url) as ledger:
        history = LedgerChatMessageHistory("cleared", ledger)
        system = SystemMessage(content="Be brief.")
        await history.aadd_messages([system])
        added = await two_turns(Chain(history, [TOOL_CALL, ANSWER, WELCOME]))
        assert await history.aget_messages() == [system, *added]
        session = ledger.get("cleared")
        assert session is not None
        logged = session.seq
        await history.aclear()
        assert await history.aget_messages() == []
        assert session.events[logged - 1].type == "turn/end"  # nothing was removed
        assert len(session.transcript()) == 6  # the user still sees all six messages
        await history.aclear()  # clearing an empty history writes nothing
        assert session.seq == logged + 1
        again = Chain(history, [AIMessage(content="Hello again.")])
        reply = await again.ask("Hi")
        assert await history.aget_messages() == [HumanMessage(content="Hi"), reply]
        assert again.seen[0] == [HumanMessage(content="Hi")]  # the model saw no old history
        assert check_log(session.events) == []
    async with Ledger.open(store_url) as ledger:  # and it stays cleared after a restart
        history = LedgerChatMessageHistory("cleared", ledger)
        assert await history.aget_messages() == [HumanMessage(content="Hi"), reply]


def test_sync_api_from_plain_sync_code(store_url: str) -> None:
    with LedgerThread(store_url) as ledger_thread:
        history = ledger_thread.history("sync")
        added = two_turns_sync(Chain(history, [TOOL_CALL, ANSWER, WELCOME]))
        assert history.messages == added
        history.add_messages([HumanMessage(content="One more")])
        assert history.messages == [*added, HumanMessage(content="One more")]
        # The async methods reach the thread's ledger from another event loop too.
        assert asyncio.run(history.aget_messages()) == history.messages
        history.clear()
        assert history.messages == []
    with LedgerThread(store_url) as ledger_thread:  # durable: a new ledger reads the same
        assert ledger_thread.history("sync").messages == []
        assert ledger_thread.history("other").messages == []


def test_sync_api_in_a_child_process_then_async_reader(store_url: str) -> None:
    written = run_child("sync", store_url, "sync-child")
    assert len(written) == 6
    assert run_child("read", store_url, "sync-child") == written


def test_sync_methods_without_a_loop_thread_say_what_to_do() -> None:
    history = LedgerChatMessageHistory("nowhere", Ledger())
    with pytest.raises(RuntimeError, match="LedgerThread"):
        history.messages  # noqa: B018


async def test_sync_methods_on_the_ledgers_own_loop_are_refused() -> None:
    async with Ledger.open("memory:own-loop") as ledger:
        history = LedgerChatMessageHistory("own", ledger)
        with pytest.raises(RuntimeError, match="async methods"):
            history.add_messages([HumanMessage(content="hi")])


async def test_refused_batches_append_nothing() -> None:
    async with Ledger.open("memory:refused") as ledger:
        history = LedgerChatMessageHistory("refused", ledger)
        await history.aadd_messages([HumanMessage(content="hi")])
        session = ledger.get("refused")
        assert session is not None
        length = session.seq
        orphan = ToolMessage(content="5", tool_call_id="no-such-call")
        with pytest.raises(UnpairedToolMessageError, match="no-such-call"):
            await history.aadd_messages([TOOL_CALL, TOOL_OUTPUT, orphan])
        with pytest.raises(UnsupportedMessageError, match="ChatMessage"):
            await history.aadd_messages([ChatMessage(content="x", role="critic")])
        assert session.seq == length
        bad: Any = HumanMessage(content="x", additional_kwargs={"when": {1, 2}})
        with pytest.raises(TypeError):  # not JSON: refused before any append
            await history.aadd_messages([AIMessage(content="ok"), bad])
        assert session.seq == length
        assert await history.aget_messages() == [HumanMessage(content="hi")]


async def test_a_prompt_template_with_a_history_placeholder(store_url: str) -> None:
    async with Ledger.open(store_url) as ledger:
        history = LedgerChatMessageHistory("templated", ledger)
        prompt = ChatPromptTemplate.from_messages(
            [("system", "You are terse."), MessagesPlaceholder("history"), ("human", "{question}")]
        )
        replies = iter([AIMessage(content="Paris."), AIMessage(content="About 2.1 million.")])
        model = GenericFakeChatModel(messages=replies)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            chain = RunnableWithMessageHistory(
                prompt | model,
                lambda session_id: history,
                input_messages_key="question",
                history_messages_key="history",
            )
        config: Any = {"configurable": {"session_id": "templated"}}
        first = await chain.ainvoke({"question": "Capital of France?"}, config)
        second = await chain.ainvoke({"question": "Its population?"}, config)
        assert await history.aget_messages() == [
            HumanMessage(content="Capital of France?"),
            first,
            HumanMessage(content="Its population?"),
            second,
        ]
        assert second.content == "About 2.1 million."


async def test_a_session_written_without_langchain_reads_as_langchain_messages() -> None:
    async with Ledger.open("memory:foreign") as ledger:
        s = ledger.create("foreign")
        s.append("turn/start", {"turn": 1})
        s.append("user/message", user_message("Bump the version"), surface_op="append")
        s.append("step/start", {"turn": 1, "step": 1})
        call = tool_call_block("c1", "run", '{"cmd": "npm version minor"}')
        reply = assistant_message([{"type": "text", "text": "On it."}, call],
                                  provider="acme", model="large")  # fmt: skip
        s.append("assistant/message", {"turn": 1, "step": 1, "message": reply},
                 surface_op="append")  # fmt: skip
        s.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "run",
                               "arguments": '{"cmd": "npm version minor"}'})  # fmt: skip
        s.append("tool/result", {"turn": 1, "step": 1, "message": tool_result("c1", "v1.1.0")},
                 surface_op="append", source_event_seqs=[4])  # fmt: skip
        s.append("step/end", {"turn": 1, "step": 1})
        history = LedgerChatMessageHistory("foreign", ledger)
        human, ai, tool = await history.aget_messages()
        assert isinstance(human, HumanMessage)
        assert human.content == "Bump the version"
        assert isinstance(ai, AIMessage)
        assert ai.content == "On it."
        assert ai.tool_calls[0]["id"] == "c1"
        assert ai.tool_calls[0]["args"] == {"cmd": "npm version minor"}
        assert ai.response_metadata == {"model_provider": "acme", "model_name": "large"}
        assert isinstance(tool, ToolMessage)
        assert (tool.content, tool.tool_call_id, tool.status) == ("v1.1.0", "c1", "success")
        # LangChain carries on inside the open turn: the next step, then a new turn.
        await history.aadd_messages([AIMessage(content="Bumped to 1.1.0."), HumanMessage("ok")])
        assert len(await history.aget_messages()) == 5
        assert check_log(s.events) == []


async def test_a_kill_mid_stream_keeps_every_finished_turn(store_url: str) -> None:
    # RunnableWithMessageHistory saves a turn when it ends: a kill while the answer streams
    # leaves the finished turns exactly, and the chain carries on.
    written = run_child("write", store_url, "streamed")
    process = subprocess.Popen(
        [sys.executable, SCENARIOS, "crash-stream", store_url, "streamed"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "STREAMING"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
        assert process.stdout is not None
        process.stdout.close()
    assert process.returncode == -signal.SIGKILL
    assert run_child("read", store_url, "streamed") == written
    async with Ledger.open(store_url) as ledger:
        history = LedgerChatMessageHistory("streamed", ledger)
        chain = Chain(history, [WELCOME])
        assert await chain.ask("Again?") == WELCOME
        again = [HumanMessage(content="Again?"), WELCOME]
        assert await history.aget_messages() == [*written, *again]
        assert chain.seen == [[*written, again[0]]]  # the model saw exactly that
