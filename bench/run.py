"""Run the benchmark suite and write ``bench/RESULTS.md`` and ``bench/results.json``.

Usage (from the repository root, in an environment with the packages and the peers)::

    python -m bench.run            # everything; ~10-15 minutes on 2 cores
    python -m bench.run --quick    # smaller sizes, 3 repetitions; report to a temp dir
    python -m bench.run --only hotpath,load --repeats 7

``nox -s bench`` installs what the suite needs and runs the full suite. Every figure is a
ratio measured side by side in this run; absolute numbers are given for context only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import Figure, Section, Settings, machine

__all__ = ["GROUPS", "main", "render", "run_groups"]

Group = Callable[[Settings], tuple[list[Figure], list[Section]]]


def _group(module: str) -> Group:
    def run(settings: Settings) -> tuple[list[Figure], list[Section]]:
        imported = __import__(f"bench.{module}", fromlist=["run"])
        result: tuple[list[Figure], list[Section]] = imported.run(settings)
        return result

    return run


#: Figure groups in report order: name -> runner.
GROUPS: dict[str, Group] = {
    "hotpath": _group("fig_hotpath"),  # figures 1, 2
    "durable": _group("fig_durable"),  # figures 3, 4
    "load": _group("fig_load"),  # figures 5, 6
    "scaling": _group("fig_scaling"),  # figure 8
    "memory": _group("fig_memory"),  # figure 12: memory per event, peak RSS of a cold load
    "cli": _group("fig_cli"),  # figure 9: the show command, in subprocesses
    "openai-agents": _group("fig_openai_agents"),  # figure 10: the SDK on LedgerSession
    "listing": _group("fig_listing"),  # figure 11: listing, search, prune over many sessions
    "viewer": _group("fig_viewer"),  # figure 13: the viewer's pages on a 1M-event session
    "feed": _group("fig_feed"),  # figure 14: the live feed, followers in other processes
    "peers": _group("fig_peers"),  # figure 7 (after the others: the peers' imports are big)
    "postgres": _group("fig_postgres"),  # PostgreSQL, through bench_postgres.py
}


def run_groups(
    names: Sequence[str], settings: Settings, *, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the named groups; return the machine description, figures, sections, timings
    and failures (a failing group is reported, not fatal)."""
    about = machine()
    figures: list[Figure] = []
    sections: list[Section] = []
    durations: dict[str, float] = {}
    failures: dict[str, str] = {}
    for name in names:
        log(f"[bench] {name} ...")
        start = time.monotonic()
        try:
            found, extra = GROUPS[name](settings)
        except Exception:  # a broken group must not hide the others' results
            failures[name] = traceback.format_exc()
            log(f"[bench] {name} FAILED:\n{failures[name]}")
            found, extra = [], []
        durations[name] = round(time.monotonic() - start, 1)
        figures.extend(found)
        sections.extend(extra)
        for figure in found:
            log(f"[bench]   {_line(figure)}")
    about["load_average_end"] = [round(value, 2) for value in __import__("os").getloadavg()]
    return {
        "machine": about,
        "settings": {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in settings.__dict__.items()
        },
        "figures": figures,
        "sections": sections,
        "durations_s": durations,
        "failures": failures,
    }


def _ratio(figure: Figure) -> str:
    if figure.ratio is None:
        return "-"
    return f"{figure.ratio:.2f}x" if figure.ratio < 100 else f"{figure.ratio:,.0f}x"


def _spread(figure: Figure) -> str:
    if figure.low is None or figure.high is None:
        return "-"
    return f"{figure.low:.2f}-{figure.high:.2f}"


def _verdict(figure: Figure) -> str:
    met = figure.met
    return "context" if met is None else ("met" if met else "**missed**")


def _line(figure: Figure) -> str:
    return (
        f"{figure.key:<16} {_ratio(figure):>9} [{_spread(figure)}] target {figure.target} "
        f"{_verdict(figure)}  {figure.absolute}"
    )


def _accelerator_line(about: dict[str, Any]) -> list[str]:
    """Which form of snapshot's fast path ran; runs before it was recorded say nothing."""
    if "accelerated" not in about:
        return []
    form = "compiled (`sessionledger._freeze`)" if about["accelerated"] else "pure Python"
    return [f"- snapshot's fast path: {form}"]


def render(results: dict[str, Any], notes: str = "") -> str:
    """Return the Markdown report."""
    about = results["machine"]
    settings = results["settings"]
    packages = ", ".join(
        f"{name} {version}" for name, version in about["packages"].items() if version
    )
    quick = " (QUICK run: smaller sizes, not the reference numbers)" if settings["quick"] else ""
    out = [
        f"# sessionledger benchmark results{quick}",
        "",
        "Produced by `nox -s bench` (= `python -m bench.run` in the bench environment); "
        "do not edit by hand. Every ratio compares contenders measured side by side in this "
        "run, interleaved repetition by repetition with the order rotated; the ratio is the "
        "median of the per-repetition ratios and the spread their min-max. Absolute numbers "
        "are for context: this machine is shared and noisy.",
        "",
        f"- date: {about['date']}; command: `{about['command']}`",
        f"- machine: {about['cpu']}, {about['cores']} cores, {about['memory']}; "
        f"{about['platform']}; load average at start {about['load_average']}, "
        f"at end {about.get('load_average_end')}",
        f"- {about['python']}; SQLite {about['sqlite']}; git {about['git_commit']}"
        f"{' (with uncommitted changes)' if about['git_dirty'] else ''}",
        f"- packages: {packages}",
        *_accelerator_line(about),
        f"- repetitions: {settings['repeats']} (+1 warm-up) unless a row says otherwise; "
        f"group durations (s): {results['durations_s']}",
        "",
        "## Results",
        "",
        "| # | figure | target | ratio (median) | spread (min-max) | verdict | absolute numbers "
        "| notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    out.extend(
        f"| {figure.key} | {figure.title} | {figure.target} | {_ratio(figure)} | "
        f"{_spread(figure)} | {_verdict(figure)} | {figure.absolute} | {figure.note} |"
        for figure in results["figures"]
    )
    if results["failures"]:
        out += ["", "## Groups that failed", ""]
        for name, trace in results["failures"].items():
            out += [f"### {name}", "", "```", trace.rstrip(), "```", ""]
    for section in results["sections"]:
        out += ["", f"## {section.title}", "", section.body]
    if notes:
        out += ["", notes.rstrip()]
    return "\n".join(out) + "\n"


def to_json(results: dict[str, Any]) -> dict[str, Any]:
    """Return the machine-readable form of *results*."""
    return {
        **{key: value for key, value in results.items() if key not in ("figures", "sections")},
        "figures": [figure.to_json() for figure in results["figures"]],
        "sections": [
            {"title": section.title, "body": section.body, "data": section.data}
            for section in results["sections"]
        ],
    }


def from_json(data: dict[str, Any]) -> dict[str, Any]:
    """Rebuild *results* from their machine-readable form (``--rerender``)."""
    figures = []
    for item in data["figures"]:
        fields = {key: value for key, value in item.items() if key != "met"}
        if fields.get("goal") is not None:
            fields["goal"] = tuple(fields["goal"])
        figures.append(Figure(**fields))
    sections = [Section(item["title"], item["body"], item["data"]) for item in data["sections"]]
    return {**data, "figures": figures, "sections": sections}


NOTES_FILE = Path(__file__).with_name("ANALYSIS.md")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run the groups and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 repetitions")
    parser.add_argument("--repeats", type=int, default=None, help="repetitions per figure")
    parser.add_argument(
        "--only",
        default=",".join(GROUPS),
        help=f"comma-separated groups to run (default: all of {', '.join(GROUPS)})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for RESULTS.md and results.json (default: bench/ for a full run of "
        "every group, else a temporary directory)",
    )
    parser.add_argument(
        "--rerender",
        type=Path,
        default=None,
        help="only rewrite RESULTS.md from this results.json (after editing ANALYSIS.md)",
    )
    args = parser.parse_args(argv)
    if args.rerender is not None:
        results = from_json(json.loads(args.rerender.read_text()))
        notes = NOTES_FILE.read_text() if NOTES_FILE.exists() else ""
        target = args.rerender.with_name("RESULTS.md")
        target.write_text(render(results, notes))
        print(f"[bench] rewrote {target}")
        return 0
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        parser.error(f"unknown groups {unknown}; choose from {list(GROUPS)}")
    settings = Settings.for_run(args.quick, args.repeats)
    out = args.out
    if out is None:
        # Only a full run of every group may replace the committed reference results.
        complete = not args.quick and names == list(GROUPS)
        out = Path(__file__).parent if complete else Path(tempfile.mkdtemp(prefix="bench-"))
    results = run_groups(names, settings)
    notes = NOTES_FILE.read_text() if NOTES_FILE.exists() and not args.quick else ""
    out.mkdir(parents=True, exist_ok=True)
    (out / "RESULTS.md").write_text(render(results, notes))
    (out / "results.json").write_text(json.dumps(to_json(results), indent=2) + "\n")
    print(f"[bench] wrote {out / 'RESULTS.md'} and {out / 'results.json'}")
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
