"""The command line's building blocks, in process: parser, store selection, rendering
helpers, and the demo's scripted model and harness."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from sessionledger import Ledger, user_message
from sessionledger.cli import _app as app
from sessionledger.cli._demo import command_prefix, compact_turn
from sessionledger.cli._demo_agent import (
    PACKAGE_JSON,
    TURN_1_PROMPT,
    TURN_1_STEP_1,
    DemoHarness,
    ScriptedModel,
    StepScript,
    ToolCallPlan,
    summarise_package,
    turn_1_answer,
)
from sessionledger.cli._eventlog import WHOLE_WIDTH, EventLog, plan_layout
from sessionledger.cli._preview import event_preview, seq_ranges
from sessionledger.cli._render import describe_sources
from sessionledger.cli._stores import default_store_path, default_store_url, store_is_missing
from sessionledger_invariants import InvariantsPlugin, check_log


def test_store_option_parses_before_or_after_the_command() -> None:
    before = app.parse(["--store", "jsonl:a", "show", "x"])
    after = app.parse(["show", "x", "--store", "jsonl:a"])
    neither = app.parse(["show", "x"])
    assert before.store == after.store == "jsonl:a"
    assert neither.store is None
    with pytest.raises(app.UsageError, match="unrecognized arguments"):
        app.parse(["ls", "--nope"])
    with pytest.raises(app.UsageError):
        app.parse(["messages", "x", "--format", "xml"])


def test_default_store_follows_xdg_and_the_environment(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path)}
    assert default_store_path(env) == tmp_path / "sessionledger" / "ledger.db"
    assert default_store_url(env) == f"sqlite:{tmp_path / 'sessionledger' / 'ledger.db'}"
    relative = default_store_path({"XDG_DATA_HOME": "relative/dir"})
    assert relative == Path.home() / ".local" / "share" / "sessionledger" / "ledger.db"
    assert default_store_url({**env, "SESSIONLEDGER_STORE": "jsonl:/srv/s"}) == "jsonl:/srv/s"
    assert store_is_missing(f"sqlite:{tmp_path / 'none.db'}")
    assert not store_is_missing(f"jsonl:{tmp_path}")
    assert not store_is_missing("memory:x")
    assert not store_is_missing("sqlite::memory:")


def test_seq_ranges_collapse_consecutive_runs() -> None:
    assert seq_ranges([]) == ""
    assert seq_ranges([4]) == "4"
    assert seq_ranges([4, 5]) == "4, 5"
    assert seq_ranges([1, 2, 3, 7, 9, 10, 11]) == "1-3, 7, 9-11"


@given(st.text(max_size=200), st.integers(0, 2**32))
def test_scripted_tokens_concatenate_to_the_text(text: str, seed: int) -> None:
    pieces = ScriptedModel(seed).tokens(text)
    assert "".join(pieces) == text
    assert all(pieces)
    assert pieces == ScriptedModel(seed).tokens(text)


async def _stream(seed: int, script: StepScript) -> list[dict[str, Any]]:
    model = ScriptedModel(seed, min_gap_ms=0, max_gap_ms=0)
    return [chunk async for chunk in model.stream(script)]


async def test_scripted_model_streams_the_script_deterministically() -> None:
    chunks = await _stream(3, TURN_1_STEP_1)
    assert chunks == await _stream(3, TURN_1_STEP_1)
    reasoning = "".join(c["text"] for c in chunks if c["type"] == "reasoning-delta")
    assert reasoning == TURN_1_STEP_1.reasoning
    call = TURN_1_STEP_1.tool_calls[0]
    deltas = [c for c in chunks if c["type"] == "tool-call-delta"]
    assert "".join(c["argumentsDelta"] for c in deltas) == call.arguments
    assert [("name" in c) for c in deltas] == [True] + [False] * (len(deltas) - 1)
    ends = [c["block"] for c in chunks if c["type"] == "block-end"]
    assert ends[-1] == {
        "type": "tool-call",
        "id": call.id,
        "name": call.name,
        "arguments": call.arguments,
    }
    assert chunks[-1] == {"type": "finish", "reason": "tool-calls"}
    assert chunks[-2]["usage"]["outputTokens"] == len(
        [c for c in chunks if c["type"].endswith("-delta")]
    )


def test_summary_names_the_package_and_survives_bad_input() -> None:
    import orjson

    summary = summarise_package(orjson.dumps(PACKAGE_JSON).decode())
    assert summary.startswith("tiny-weather 1.2.0: ")
    assert "vitest" in summary
    assert "not valid JSON" in summarise_package("{")
    assert "JSON object" in summarise_package("[1]")


async def test_demo_harness_records_provenance_that_passes_the_invariants() -> None:
    async def read_file(arguments: Any) -> str:
        assert arguments == {"path": "package.json"}
        import orjson

        return orjson.dumps(PACKAGE_JSON).decode()

    lines: list[str] = []
    async with Ledger.open("memory:", plugins=[InvariantsPlugin()], write_delay_ms=0) as ledger:
        session = ledger.create("harness")
        model = ScriptedModel(1, min_gap_ms=0, max_gap_ms=0)
        harness = DemoHarness(ledger, session, model, {"read_file": read_file}, lines.append)
        harness.start_turn(1, TURN_1_PROMPT, reason="initial")
        first = await harness.model_step(1, 1, TURN_1_STEP_1)
        result = await harness.run_tool(1, 1, TURN_1_STEP_1.tool_calls[0])
        harness.end_step(1, 1)
        output = result.data["message"]["content"][0]["content"][0]["text"]
        answer = await harness.model_step(1, 2, turn_1_answer(output))
        harness.end_step(1, 2)
        await harness.end_turn(1)
        events = session.events
        assert check_log(events) == []
        for message in (first, answer):
            assert {events[s].type for s in message.source_event_seqs or ()} == {"assistant/chunk"}
        assert events[result.source_event_seqs[0]].type == "tool/call"  # type: ignore[index]
        assert "answers tool/call" in describe_sources(events, result)

        summary = compact_turn(session, 1, "turn 1 in one line")
        assert summary.source_event_seqs == (2, first.seq, result.seq, answer.seq)
        assert [m["id"] for m in session.derive_messages()] == ["summary-turn-1"]
        assert "summarises (shadows) seq 2, " in describe_sources(session.events, summary)
        assert event_preview(summary).startswith("(plugin compaction) turn 1 in one line")
    assert any("completed and flushed" in line for line in lines)


def test_tool_call_plan_arguments_are_json_text() -> None:
    import orjson

    for plan in (*TURN_1_STEP_1.tool_calls, ToolCallPlan("c", "n", "{}")):
        assert isinstance(orjson.loads(plan.arguments), dict)


def test_first_difference_finds_header_length_and_event_changes() -> None:
    from sessionledger import Session, SessionEvent, SessionHeader
    from sessionledger.model import _jsoncodec as jsoncodec
    from sessionledger.storage._logstore import RawLog, RawRecord
    from sessionledger.storage._publishing import first_difference
    from sessionledger.testing.builders import closed_turn

    def read_back(header: SessionHeader, events: Any) -> RawLog:
        """The log as a store would read it back: parsed JSON, record by record."""
        records = [
            RawRecord(jsoncodec.loads(jsoncodec.dumps(event.to_json())), index, f"record {index}")
            for index, event in enumerate(events)
        ]
        return RawLog(jsoncodec.loads(jsoncodec.dumps(header.to_json())), records, "r1")

    deep: Any = "bottom"
    for _ in range(1_500):  # 3,000 levels: deeper than == can recurse
        deep = {"k": [deep]}
    header = SessionHeader(id="copied", created_at=1_000, meta={"deep": deep})
    session = Session.create("copied", header=header, clock=lambda: 1_000)
    closed_turn(session, 1)
    session.append("note/deep", {"v": deep}, ignorable=True)
    events = list(session.events)
    assert first_difference(header, events, read_back(header, events)) is None
    renamed = SessionHeader(id="copied", created_at=1_000, meta={"deep": deep}, title="changed")
    assert first_difference(header, events, read_back(renamed, events)) == (
        "the header differs",
        None,
    )
    shorter = read_back(header, events[:-1])
    assert first_difference(header, events, shorter) == (
        f"{len(events) - 1} events read back, {len(events)} written",
        events[-1].seq,
    )
    edited = Session.create("copied", header=header, clock=lambda: 1_000)
    closed_turn(edited, 1, prompt="something else")
    edited.append("note/deep", {"v": deep}, ignorable=True)
    assert first_difference(header, events, read_back(header, edited.events)) == (
        "event seq 1 differs",
        1,
    )
    last = events[-1]
    changed = SessionEvent(last.type, last.seq, last.time, {"v": [deep]}, ignorable=True)
    assert first_difference(header, events, read_back(header, [*events[:-1], changed])) == (
        f"event seq {last.seq} differs",
        last.seq,
    )


def test_the_demo_names_a_command_the_users_own_shell_can_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script = Path(sys.executable).parent / "sessionledger"
    assert script.exists()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(script.parent))
    monkeypatch.delenv("NOX_CURRENT_SESSION", raising=False)
    assert command_prefix() == "sessionledger"  # the user's shell finds this very script
    # Under nox the environment is on PATH for the session only: name the script itself.
    monkeypatch.setenv("NOX_CURRENT_SESSION", "demo")
    assert command_prefix() == str(script)
    monkeypatch.chdir(script.parent.parent)
    assert command_prefix() == str(Path("bin") / "sessionledger")
    monkeypatch.setenv("PATH", str(tmp_path))  # a shell that finds no sessionledger at all
    monkeypatch.delenv("NOX_CURRENT_SESSION")
    assert command_prefix() == str(Path("bin") / "sessionledger")


def _printed(events: Any, width: int, *, collapse: bool = True) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=width < 1000)
    console.print(EventLog(events, collapse_chunks=collapse))
    return out.getvalue().splitlines()


def _cited_session() -> Any:
    from sessionledger import Session
    from sessionledger.testing.builders import closed_turn

    session = Session.create("cited", clock=lambda: 1_000)
    for turn in range(1, 5):
        closed_turn(session, turn, prompt="x" * 200)
    # A summary citing every other event: a long sources cell.
    cited = list(range(0, session.seq, 2))
    session.append(
        "user/message", user_message("sum"), surface_op="append", source_event_seqs=cited
    )
    return session.events, cited


@pytest.mark.parametrize("width", [50, 60, 80, 120])
def test_event_log_fits_the_width_and_wraps_long_sources(width: int) -> None:
    events, cited = _cited_session()
    lines = _printed(events, width)
    assert max(cell_len(line) for line in lines) <= width
    layout = plan_layout(events, width=width)
    assert layout.stacked is (width < 80)
    # The sources of the last row, its column line by line, read back as its seq ranges.
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [str(events[-1].seq)])
    column = lines[start].index("0, 2")
    cells = [line[column : column + layout.sources] for line in lines[start:]]
    cells = [cell for cell in cells if cell.strip()]
    assert len(cells) > 1  # wrapped
    assert all(len(cell.rstrip()) <= layout.sources for cell in cells)
    assert " ".join(" ".join(cells).split()) == seq_ranges(cited)


def test_event_log_on_a_console_of_unlimited_width_is_whole() -> None:
    events, cited = _cited_session()
    lines = _printed(events, WHOLE_WIDTH, collapse=False)
    assert not any("…" in line for line in lines)
    assert any(f"(user) {'x' * 200}" in line for line in lines)
    assert any(seq_ranges(cited) in line for line in lines)
    assert plan_layout(events, width=WHOLE_WIDTH).data is None


def test_previews_escape_control_characters() -> None:
    from sessionledger import Session

    session = Session.create("hostile", clock=lambda: 1_000)
    message = user_message("red \x1b[31mtext\x1b[0m\x07 bell\ttab")
    event = session.append("user/message", message, surface_op="append")
    preview = event_preview(event, None)
    assert preview == "(user) red \\x1b[31mtext\\x1b[0m\\x07 bell tab"
    assert not any(line for line in _printed([event], 80) if "\x1b" in line or "\x07" in line)


def test_audit_records_pair_by_id_and_a_lone_beginning_is_interrupted() -> None:
    from sessionledger.cli._retaining import paired

    begin = {"id": "a", "phase": "begin"}
    lone = {"id": "b", "phase": "begin"}
    end = {"id": "a", "phase": "end"}
    stray = {"id": "c", "phase": "end"}
    assert paired([begin, lone, end, stray]) == [(begin, end), (lone, None), (None, stray)]


def test_durations_are_written_as_prune_reads_them() -> None:
    from sessionledger.cli._retaining import describe_criteria, duration_text
    from sessionledger.storage._listing import parse_duration

    for text in ("30d", "2w", "12h", "90m", "45s", "1500ms", "0s"):
        assert duration_text(parse_duration(text, "x")) == text
    criteria = {"olderThan": 86_400_000, "keepLast": 3, "title": "t", "meta": {"n": 1, "b": True}}
    assert describe_criteria(criteria) == (
        "last activity older than 1d, keeping the 3 most recently active, "
        "title holding 't', meta n=1, meta b=true"
    )


def test_search_highlights_whole_words_only() -> None:
    from sessionledger.cli._searching import highlighted

    text = highlighted("Apples, pineapples and apple_pie", ("apples", "apple"))
    marked = [text.plain[span.start : span.end] for span in text.spans]
    assert marked == ["Apples", "apple"]


def test_the_next_page_command_names_absolute_times() -> None:
    from sessionledger.cli._inspecting import listing_query, next_page_command
    from sessionledger.storage._listing import parse_when

    args = app.parse(["--store", "sqlite:a b.db", "ls", "--limit", "2", "--since", "2d"])
    args.plugin_specs, args.store_url = ["p:P"], args.store
    query = listing_query(args)
    command = next_page_command(args, query, "CUR")
    assert command.startswith("sessionledger --store 'sqlite:a b.db' --plugin p:P ls --limit 2 ")
    since = command.split("--since ")[1]
    assert parse_when(since, "since", now=0) == query.since
