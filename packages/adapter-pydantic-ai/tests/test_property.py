"""Property: any list of pydantic-ai messages, recorded in any batches, loads back as the
same JSON, and every event it wrote passes the invariants plugin (on in every test)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from sessionledger import Ledger
from sessionledger_invariants import check_log
from sessionledger_pydantic_ai import LedgerHistory

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
names = st.sampled_from(["read", "write", "search"])
call_ids = st.sampled_from([f"call-{n}" for n in range(6)])
times = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
)
scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | text
arguments = st.dictionaries(text, scalars, max_size=3) | text.map(lambda s: f'{{"q": "{s}"}}')

request_parts = st.one_of(
    st.builds(UserPromptPart, text, timestamp=times),
    st.builds(SystemPromptPart, text, timestamp=times),
    st.builds(
        ToolReturnPart,
        names,
        scalars,
        call_ids,
        timestamp=times,
        outcome=st.sampled_from(["success", "failed", "denied"]),
    ),
)
response_parts = st.one_of(
    st.builds(TextPart, text),
    st.builds(ThinkingPart, text),
    st.builds(ToolCallPart, names, arguments, call_ids),
)
requests = st.builds(
    ModelRequest,
    st.lists(request_parts, max_size=4),
    timestamp=times,
    instructions=st.none() | text,
)
responses = st.builds(
    ModelResponse,
    st.lists(response_parts, max_size=4),
    usage=st.builds(RequestUsage, input_tokens=st.integers(0, 10**6)),
    model_name=st.none() | st.just("m"),
    provider_name=st.none() | st.just("acme"),
    timestamp=times,
)
conversations = st.lists(st.one_of(requests, responses), max_size=10)


def dump(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


async def round_trip(messages: list[ModelMessage], cuts: list[int]) -> tuple[Any, ...]:
    async with Ledger.open("memory:") as ledger:
        history = LedgerHistory("prop", ledger)
        start = 0
        for cut in [*sorted(cuts), len(messages)]:
            await history.record(messages[start:cut])
            start = max(start, cut)
        loaded = await history.load()
        session = await history.session()
        return loaded, check_log(session.events)


@given(conversations, st.lists(st.integers(0, 10), max_size=3))
def test_any_messages_round_trip(messages: list[ModelMessage], cuts: list[int]) -> None:
    cuts = [min(cut, len(messages)) for cut in cuts]
    loaded, problems = asyncio.run(round_trip(messages, cuts))
    assert dump(loaded) == dump(messages)
    assert not problems
