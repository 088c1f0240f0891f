"""Importing provider histories (docs/reading.md, "importing a history").

The oracle is the round trip: exporting an imported history with the matching
``to_*_messages`` gives the input back exactly, for every history the generators draw;
the imported log passes the data shapes (every event is appended) and the invariants.
Bad input is one line on stderr and exit status 2, and leaves the store as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger import HistoryFormatError, Session, SessionHeader
from sessionledger.views._formats import to_anthropic_messages, to_openai_messages
from sessionledger.views._importing import from_anthropic_messages, from_openai_messages
from sessionledger_invariants import check_log

TEXT = st.text(min_size=1, max_size=12).filter(lambda text: text.strip() == text and text)
IDS = st.uuids().map(lambda value: f"call_{value.hex[:10]}")
ARGUMENTS = st.dictionaries(st.text(min_size=1, max_size=5), st.integers(-5, 5) | TEXT, max_size=3)


def replay(envelopes: list[dict[str, Any]]) -> Session:
    """Append every imported event to a fresh session (all append-time checks run)."""
    session = Session.create(header=SessionHeader(id="imported", created_at=0))
    for envelope in envelopes:
        session.append(
            envelope["type"],
            envelope["data"],
            surface_op=envelope.get("surfaceOp"),
            source_event_seqs=envelope.get("sourceEventSeqs"),
        )
    assert check_log(session.events) == []
    return session


def system_of(session: Session) -> str | None:
    header = session.request_header()
    return None if header is None else header.get("system")


# -- OpenAI chat completions -------------------------------------------------------------


@st.composite
def openai_histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    if draw(st.booleans()):
        history.append({"role": "system", "content": draw(TEXT)})
    for _ in range(draw(st.integers(1, 3))):
        history.append({"role": "user", "content": draw(TEXT)})
        for _step in range(draw(st.integers(1, 3))):
            calls = [
                {
                    "id": draw(IDS),
                    "type": "function",
                    "function": {"name": draw(TEXT), "arguments": json.dumps(draw(ARGUMENTS))},
                }
                for _ in range(draw(st.integers(0, 2)))
            ]
            if not calls:
                history.append({"role": "assistant", "content": draw(TEXT)})
                break
            content = draw(st.none() | TEXT)
            history.append({"role": "assistant", "content": content, "tool_calls": calls})
            history.extend(
                {"role": "tool", "tool_call_id": call["id"], "content": draw(TEXT)}
                for call in calls
            )
    return history


@settings(max_examples=150)
@given(openai_histories())
def test_an_imported_openai_history_exports_back_exactly(history: list[dict[str, Any]]) -> None:
    session = replay(from_openai_messages(history, at=0))
    exported = to_openai_messages(session.derive_messages(), system=system_of(session))
    assert exported == history


# -- Anthropic messages API --------------------------------------------------------------


@st.composite
def anthropic_histories(draw: st.DrawFn) -> dict[str, Any]:
    """Alternating user and assistant messages, as the API requires: the results of a
    turn's last tool calls open the next user message, before the next prompt's text."""
    messages: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # tool results waiting for the next user message
    for _ in range(draw(st.integers(1, 3))):
        messages.append(
            {"role": "user", "content": [*pending, {"type": "text", "text": draw(TEXT)}]}
        )
        pending = []
        steps = draw(st.integers(1, 3))
        for step in range(steps):
            blocks: list[dict[str, Any]] = []
            if draw(st.booleans()):
                blocks.append({"type": "thinking", "thinking": draw(TEXT), "signature": "sig"})
            if draw(st.booleans()):
                blocks.append({"type": "text", "text": draw(TEXT)})
            uses = [
                {"type": "tool_use", "id": draw(IDS), "name": draw(TEXT), "input": draw(ARGUMENTS)}
                for _ in range(draw(st.integers(0, 2)))
            ]
            if not blocks and not uses:
                blocks.append({"type": "text", "text": draw(TEXT)})
            messages.append({"role": "assistant", "content": blocks + uses})
            if not uses:
                break
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": use["id"],
                    "content": [{"type": "text", "text": draw(TEXT)}],
                    "is_error": draw(st.booleans()),
                }
                for use in uses
            ]
            if step == steps - 1:
                pending = results
            else:
                messages.append({"role": "user", "content": results})
    if pending:
        messages.append({"role": "user", "content": pending})
    request: dict[str, Any] = {"messages": messages}
    if draw(st.booleans()):
        request["system"] = [{"type": "text", "text": draw(TEXT)}]
    return request


@settings(max_examples=150)
@given(anthropic_histories())
def test_an_imported_anthropic_history_exports_back_exactly(request: dict[str, Any]) -> None:
    system = request.get("system")
    envelopes = from_anthropic_messages(request["messages"], system=system, at=0)
    session = replay(envelopes)
    exported = to_anthropic_messages(
        session.derive_messages(), include_reasoning=True, system=system_of(session)
    )
    assert dict(exported) == request


# -- what an importer refuses ------------------------------------------------------------

REFUSED_OPENAI = [
    ("not a list", {"role": "user"}, None),
    ("not an object", ["hello"], 0),
    ("unknown role", [{"role": "robot", "content": "x"}], 0),
    ("result without a call", [{"role": "tool", "tool_call_id": "c", "content": "x"}], 0),
    (
        "late system prompt",
        [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}],
        1,
    ),
    ("unknown part", [{"role": "user", "content": [{"type": "audio"}]}], 0),
    (
        "call without a name",
        [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": ""}}]}],
        0,
    ),
]


@pytest.mark.parametrize(("case", "history", "index"), REFUSED_OPENAI)
def test_the_openai_importer_names_the_message_it_cannot_read(
    case: str, history: Any, index: int | None
) -> None:
    with pytest.raises(HistoryFormatError) as caught:
        from_openai_messages(history)
    assert caught.value.code == "BAD_HISTORY"
    assert caught.value.index == index, case


def test_the_anthropic_importer_refuses_a_result_for_a_call_nobody_made() -> None:
    history = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]
    with pytest.raises(HistoryFormatError, match="answers no tool call") as caught:
        from_anthropic_messages(history)
    assert caught.value.index == 0


# -- the command line ----------------------------------------------------------------------

OPENAI_FILE = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "How long is notes.txt?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "count_lines", "arguments": '{"path": "notes.txt"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "42 lines"},
    {"role": "assistant", "content": "notes.txt has 42 lines."},
]

ANTHROPIC_FILE = {
    "system": [{"type": "text", "text": "You are terse."}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "How long is notes.txt?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "count_lines", "input": {"path": "n"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "42 lines"}],
                    "is_error": False,
                }
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "42 lines."}]},
    ],
}


def cli(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionledger", "--store", store, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "120"},
    )


@pytest.mark.parametrize(
    ("kind", "content"), [("openai", OPENAI_FILE), ("anthropic", ANTHROPIC_FILE)]
)
@pytest.mark.parametrize("scheme", ["sqlite", "jsonl"])
def test_import_then_messages_gives_the_file_back(
    tmp_path: Path, kind: str, content: Any, scheme: str
) -> None:
    store = f"sqlite:{tmp_path / 'ledger.db'}" if scheme == "sqlite" else f"jsonl:{tmp_path / 's'}"
    history = tmp_path / "history.json"
    history.write_text(json.dumps(content))
    done = cli(store, "import", "--format", kind, str(history), "--id", "chat")
    assert done.returncode == 0, done.stderr
    count = len(content) if kind == "openai" else len(content["messages"])
    assert done.stdout.startswith(f"imported {count} messages into session chat")
    exported = cli(store, "messages", "chat", "--format", kind)
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout) == content
    assert cli(store, "verify", "chat").returncode == 0
    # the same id again: refused, one line, the stored session unchanged
    before = cli(store, "show", "chat", "--json").stdout
    again = cli(store, "import", "--format", kind, str(history), "--id", "chat")
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1
    assert "SESSION_ALREADY_EXISTS" in again.stderr
    assert cli(store, "show", "chat", "--json").stdout == before


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json", "the file is not JSON"),
        ('{"messages": 3}', "a history file holds a JSON list of messages"),
        ('[{"role": "tool", "tool_call_id": "x", "content": "a"}]', "answers no tool call"),
        ('[{"role": "user", "content": "a"}, {"role": "robot"}]', "role 'robot' is not read"),
    ],
)
def test_bad_history_files_are_one_line_and_write_nothing(
    tmp_path: Path, content: str, says: str
) -> None:
    store = f"sqlite:{tmp_path / 'ledger.db'}"
    history = tmp_path / "history.json"
    history.write_text(content)
    done = cli(store, "import", "--format", "openai", str(history))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("error: BAD_HISTORY: ")
    assert done.stderr.count("\n") == 1
    assert says in done.stderr
    assert not (tmp_path / "ledger.db").exists() or "no sessions" in cli(store, "ls").stdout
