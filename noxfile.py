"""Project automation: `nox -s tests` (whole suite), `lint`, `typecheck`, `bench`, `demo`.

Every session installs the packages from this repository into a fresh virtual
environment, so what runs is what a user gets from pip.
"""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.default_venv_backend = "venv"

#: The distributions of the monorepo, installed together so their mutual
#: dependencies resolve to these sources.
PACKAGES = [
    "./packages/core[cli,testing]",
    "./packages/persistence-jsonl",
    "./packages/persistence-sqlite",
    "./packages/persistence-postgres",
    "./packages/invariants",
    "./packages/adapter-openai-agents",
    "./packages/adapter-langchain",
    "./packages/adapter-pydantic-ai",
]
TEST_TOOLS = ["pytest>=8", "pytest-asyncio>=0.23", "hypothesis>=6.100"]
LINT_TOOLS = ["ruff==0.17.6"]
TYPE_TOOLS = [
    "mypy==2.4.1",
    "pytest>=8",
    "hypothesis>=6.100",
    "aiosqlite>=0.20",
    "rich>=13",
    "asyncpg-stubs>=0.29",
]
SOURCES = ["packages", "tests", "bench", "examples", "noxfile.py", "conftest.py"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the whole test suite (every package, the contract kit on every backend)."""
    session.install(*PACKAGES, *TEST_TOOLS)
    session.run("pytest", *session.posargs, env={"HYPOTHESIS_PROFILE": "ci"})


@nox.session
def lint(session: nox.Session) -> None:
    """Check style and formatting with ruff."""
    session.install(*LINT_TOOLS)
    session.run("ruff", "check", *SOURCES)
    session.run("ruff", "format", "--check", *SOURCES)


@nox.session
def typecheck(session: nox.Session) -> None:
    """Type-check the packages' sources with mypy in strict mode."""
    session.install(*PACKAGES, *TYPE_TOOLS)
    sources = sorted(str(init.parent) for init in Path("packages").glob("*/src/*/__init__.py"))
    session.run("mypy", *sources)


@nox.session
def demo(session: nox.Session) -> None:
    """Run the demo: a scripted two-turn agent session with a real crash, written to the
    default store (pass e.g. ``-- --store jsonl:./sessions`` to choose another)."""
    session.install(*PACKAGES)
    session.run("sessionledger", "demo", *session.posargs)


#: The peers figure 7 compares against, installed only into the bench environment (the
#: versions the published bench/RESULTS.md was measured with).
BENCH_PEERS = [
    "openai-agents==0.24.0",
    "langgraph==1.2.22",
    "langgraph-checkpoint-sqlite==3.1.2",
]


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmark suite and write bench/RESULTS.md and bench/results.json: every
    figure is a ratio to a raw floor or a peer measured in the same run (``-- --quick``
    for small sizes, ``-- --only hotpath,load`` for some groups)."""
    session.install(*PACKAGES, *BENCH_PEERS)
    session.run("python", "-m", "bench.run", *session.posargs)
