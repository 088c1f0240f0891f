"""Keep the benchmark suite from rotting: run its figure groups at tiny sizes.

Nothing here looks at a timing (speed is what ``nox -s bench`` reports); these tests only
check that every group still runs against the current API and yields a well-formed
report. The peers group needs the bench environment's extra packages and is skipped
without them.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import fig_openai_agents, fig_peers, run
from bench.harness import Settings
from bench.workloads import agent_session, chat_ops, chat_texts, delta_share

# The suite measures ledgers as users build them: without the test suite's invariants.
pytestmark = pytest.mark.invariants_off

TINY = dataclasses.replace(
    Settings.for_run(quick=True),
    repeats=1,
    events=400,
    small_events=150,
    per_append_events=4,
    chat_messages=6,
    chat_marks=(2, 6),
    derive_samples=3,
    derive_large=1_500,
    scaling_sizes=(200,),
    listing_sizes=(60, 240),
    prune_sessions=40,
)


def test_agent_workload_is_stream_heavy_and_deterministic() -> None:
    ops = agent_session(500)
    assert len(ops) >= 500
    assert delta_share(ops) >= 0.9
    assert ops == agent_session(500)
    assert ops[-1].type == "turn/end"  # whole turns: a cold load repairs nothing


def test_chat_workload_alternates_roles() -> None:
    ops = chat_ops(chat_texts(4))
    assert [op.type for op in ops] == ["user/message", "assistant/message"] * 2
    assert all(400 <= len(text) <= 500 for text in chat_texts(4))


@pytest.mark.slow
def test_core_groups_run_and_render(tmp_path: Path) -> None:
    results = run.run_groups(["hotpath", "durable", "load"], TINY, log=lambda line: None)
    assert results["failures"] == {}
    keys = {figure.key for figure in results["figures"]}
    assert {"1a", "1b", "1c", "2", "3-memory", "3-jsonl", "3-sqlite", "4-sqlite"} <= keys
    assert {"5-memory", "5-jsonl", "5-sqlite"} <= keys
    assert all(figure.ratio is not None and figure.ratio > 0 for figure in results["figures"])
    report = run.render(results)
    assert "| 1a |" in report
    assert "## Figure 5 detail" in report
    encoded = json.loads(json.dumps(run.to_json(results)))
    assert len(encoded["figures"]) == len(results["figures"])


def test_scaling_and_memory_groups_run() -> None:
    results = run.run_groups(["scaling", "memory"], TINY, log=lambda line: None)
    assert results["failures"] == {}
    figures = {figure.key: figure for figure in results["figures"]}
    assert {"8-append", "8-append-gc", "8-load", "8-load-raw", "12-resident", "12-rss"} <= set(
        figures
    )
    # Figure 12's two numbers are a size per event and a peak RSS, not timings.
    assert 0 < figures["12-resident"].ratio < 10_000  # type: ignore[operator]
    assert 1 < figures["12-rss"].ratio < 10_000  # type: ignore[operator]
    assert "## Figure 12 detail" in run.render(results)


@pytest.mark.skipif(fig_peers.available() is not None, reason="peers not installed")
def test_peers_group_runs() -> None:
    results = run.run_groups(["peers"], TINY, log=lambda line: None)
    assert results["failures"] == {}
    assert {figure.key for figure in results["figures"]} >= {
        "7-size-lg",
        "7-speed-lg-sl",
        "7-speed-oa-sl",
        "7-speed-raw-sl",
    }


def test_cli_group_runs_the_real_command() -> None:
    results = run.run_groups(["cli"], TINY, log=lambda line: None)
    assert results["failures"] == {}
    keys = [figure.key for figure in results["figures"]]
    assert keys == ["9-table", "9-chunks", "9-chunks-tty", "9-rss"]
    assert all(figure.ratio is not None and figure.ratio > 0 for figure in results["figures"])
    (section,) = results["sections"]
    assert section.data["chunks-tty"][0]["bytes"] > 0  # the terminal got the rows
    assert "| `show ID --chunks` (pty, 120 columns) |" in run.render(results)


@pytest.mark.skipif(fig_openai_agents.available() is not None, reason="adapter not installed")
def test_openai_agents_group_runs() -> None:
    results = run.run_groups(["openai-agents"], TINY, log=lambda line: None)
    assert results["failures"] == {}
    keys = [figure.key for figure in results["figures"]]
    assert keys == ["10-oa-runner", "10-oa-session"]
    assert all(figure.ratio is not None and figure.ratio > 0 for figure in results["figures"])
    assert "## Figure 10 detail" in run.render(results)


def test_listing_group_runs() -> None:
    results = run.run_groups(["listing"], TINY, log=lambda line: None)
    assert results["failures"] == {}
    keys = [figure.key for figure in results["figures"]]
    assert keys == ["11-page", "11-full", "11-search", "11-prune"]
    assert all(figure.ratio is not None and figure.ratio > 0 for figure in results["figures"])
    assert "## Figure 11 detail" in run.render(results)


@pytest.mark.slow
def test_the_collector_figure_pairs_its_two_sizes() -> None:
    # 8-append-gc divides two sizes' costs: each repetition at the largest size is timed
    # beside appends of the smallest, and the figure is the median of those pairs.
    two_sizes = dataclasses.replace(TINY, repeats=2, scaling_sizes=(100, 300))
    results = run.run_groups(["scaling"], two_sizes, log=lambda line: None)
    assert results["failures"] == {}
    figure = next(f for f in results["figures"] if f.key == "8-append-gc")
    assert figure.low is not None
    assert figure.high is not None
    assert figure.ratio is not None
    assert figure.low <= figure.ratio <= figure.high
    assert "beside it" in figure.absolute
    assert "2 paired ratios" in figure.note


@pytest.mark.slow
def test_viewer_group_runs() -> None:
    results = run.run_groups(["viewer"], TINY, log=lambda line: None)
    assert results["failures"] == {}
    figures = {figure.key: figure for figure in results["figures"]}
    assert {"13-viewer-first", "13-viewer-later"} <= set(figures)
    assert all(figure.ratio is not None and figure.ratio > 0 for figure in figures.values())


@pytest.mark.slow
def test_feed_group_runs() -> None:
    results = run.run_groups(["feed"], TINY, log=lambda line: None)
    assert results["failures"] == {}
    figures = {figure.key: figure for figure in results["figures"]}
    rows = ("p95", "p95-long", "writer", "idle")
    kinds = ("memory", "jsonl", "sqlite", "postgres")
    assert set(figures) == {f"14-feed-{row}-{kind}" for row in rows for kind in kinds}
    for key, figure in figures.items():
        if figure.note.startswith("skipped"):  # no PostgreSQL server here
            assert key.endswith("-postgres")
            continue
        assert figure.ratio is not None, key
        assert figure.ratio > 0 or "-idle-" in key, key
    assert "## Figure 14 detail" in run.render(results)
