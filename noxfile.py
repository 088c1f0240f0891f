"""Project automation: `nox -s tests` (the suite but the tests marked slow),
`slow` (those), `tests_pure` (the core on its pure-Python path), `lint`, `typecheck`,
`sanitize`, `frameworks`, `bench`, `demo`.

Every session installs the packages from this repository into a fresh virtual
environment, so what runs is what a user gets from pip.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
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
    "./packages/viewer",
]
TEST_TOOLS = [
    "pytest>=8",
    "pytest-asyncio>=0.23",
    "hypothesis>=6.100",
    "blockbuster>=1.5",
    "pytest-xdist>=3.5",
    "selenium>=4.20",  # the viewer's browser tests (Debian's chromium and chromedriver)
]
LINT_TOOLS = ["ruff==0.17.6"]
TYPE_TOOLS = [
    "mypy==2.4.1",
    "pytest>=8",
    "hypothesis>=6.100",
    "blockbuster>=1.5",
    "aiosqlite>=0.20",
    "rich>=13",
    "asyncpg-stubs>=0.29",
]
SOURCES = ["packages", "tests", "bench", "examples", "noxfile.py", "conftest.py"]


#: pytest-xdist: one worker process per core, a test file stays on one worker (so its
#: module-level fixtures are built once). ``-- -n 0`` runs in one process.
WORKERS = ["-n", "auto", "--dist", "loadfile"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (every package, the contract kit on every backend) but the
    tests marked ``slow``, which ``slow`` runs (CI runs both)."""
    session.install(*PACKAGES, *TEST_TOOLS)
    session.run(
        "pytest", *WORKERS, "-m", "not slow", *session.posargs, env={"HYPOTHESIS_PROFILE": "ci"}
    )


@nox.session
def slow(session: nox.Session) -> None:
    """Run the tests marked ``slow``, which ``tests`` leaves out: the larger crash,
    cancellation, corruption and hostile-input matrices, the harness self-checks, installs
    from a checkout and the benchmark smoke runs."""
    session.install(*PACKAGES, *TEST_TOOLS)
    session.run(
        "pytest", *WORKERS, "-m", "slow", *session.posargs, env={"HYPOTHESIS_PROFILE": "ci"}
    )


@nox.session
def tests_pure(session: nox.Session) -> None:
    """Run the core's tests again on the pure-Python path (``SESSIONLEDGER_PURE_PYTHON=1``):
    what a ledger accepts must not depend on whether the compiled helpers were built
    (docs/internals.md). The tests that compare both forms in-process run in ``tests``."""
    session.install(*PACKAGES, *TEST_TOOLS)
    session.run(
        "pytest", *WORKERS, "packages/core/tests", *session.posargs,
        env={"HYPOTHESIS_PROFILE": "ci", "SESSIONLEDGER_PURE_PYTHON": "1"},
    )  # fmt: skip


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
    # The cache lives in the session's environment, so a rerun checks only what changed.
    cache = Path(session.virtualenv.location) / "mypy-cache"
    session.run("mypy", "--cache-dir", str(cache), *sources)


#: The tests that run the compiled accelerator (packages/core/src/sessionledger/_freeze.c).
SANITIZED_TESTS = [
    "packages/core/tests/test_freeze.py",
    "packages/core/tests/test_freeze_hostile.py",
    "packages/core/tests/test_chunks.py",
    "packages/core/tests/test_eventlog.py",
    "packages/core/tests/test_session.py",
    "packages/core/tests/test_events.py",
    "packages/core/tests/test_snapshot.py",
    "packages/core/tests/test_decode.py",
    "packages/persistence-jsonl/tests/test_split.py",
]
#: What those tests need besides the core (its `cli` extra, the conftest's plugins).
SANITIZED_PACKAGES = [
    "./packages/persistence-jsonl",
    "./packages/persistence-sqlite",
    "./packages/persistence-postgres",
    "./packages/invariants",
]
SANITIZERS = "-fsanitize=address,undefined -fno-sanitize-recover=all"
#: Proves the module the tests import is the instrumented build (it is optional: a
#: failed build would leave the pure-Python path, and a session that checks nothing).
INSTRUMENTED = (
    "import importlib, pathlib; "
    "assert importlib.import_module('sessionledger._accelerator').ACCELERATED; "
    "from sessionledger import _freeze; "
    "built = pathlib.Path(_freeze.__file__).read_bytes(); "
    "assert b'__asan_report' in built and b'__ubsan_handle' in built, _freeze.__file__"
)


@nox.session
def sanitize(session: nox.Session) -> None:
    """Build the compiled accelerator with AddressSanitizer and UndefinedBehaviorSanitizer
    and run the tests that exercise it (hypothesis profile ``sanitize``): any report (a
    read of freed memory, an overflow) stops the run and fails the session. Needs gcc."""
    runtime = (
        shutil.which("gcc")
        and subprocess.run(
            ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=False
        ).stdout.strip()
    )
    if not runtime or not Path(runtime).is_absolute():
        session.error("the sanitize session needs gcc and its libasan (Debian: gcc)")
    # A copy without build/: setuptools would reuse an object an ordinary build left there.
    core = Path(session.create_tmp()) / "core"
    shutil.rmtree(core, ignore_errors=True)
    shutil.copytree(
        "packages/core", core, ignore=shutil.ignore_patterns("build", "*.so", "*.egg-info")
    )
    flags = f"{SANITIZERS} -fno-omit-frame-pointer -fno-wrapv -O1 -g"
    session.install(
        f"{core}[cli,testing]",
        *SANITIZED_PACKAGES,
        *TEST_TOOLS,
        env={"CC": "gcc", "CFLAGS": flags, "LDFLAGS": SANITIZERS},
    )
    env = {
        "LD_PRELOAD": runtime,  # the interpreter is not instrumented: ASan must load first
        "PYTHONMALLOC": "malloc",  # every object through ASan's allocator
        # Freed memory is filled, so a read of it through the interpreter (which is not
        # instrumented) goes wrong at once too, rather than finding the old bytes there.
        "ASAN_OPTIONS": "detect_leaks=0:max_free_fill_size=4096",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "HYPOTHESIS_PROFILE": "sanitize",
        "SESSIONLEDGER_PURE_PYTHON": "",
    }
    session.run("python", "-c", INSTRUMENTED, env=env)
    # The sanitizers write their report to the process's stderr and stop it: pytest must
    # not hold that in a capture file that dies with it (--capture=sys), nor answer a
    # segmentation fault with Python's stack alone (faulthandler) where ASan gives its own.
    session.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:faulthandler",
        "--capture=sys", *SANITIZED_TESTS, *session.posargs, env=env,
    )  # fmt: skip


#: The frameworks whose own session/history tests run on the adapters (``frameworks``):
#: pinned versions (inside the adapters' dependency ranges), the plugin that swaps the
#: framework's store for ours (tests/frameworks/), and the framework's test files. Their
#: source distributions come from the package index. pydantic-ai publishes no tests in
#: any of its source distributions (pydantic-ai-slim, pydantic-ai): the adapter is covered
#: by its own tests and their restarts only.
FRAMEWORK_SUITES = {
    "openai-agents==0.24.0": (
        "openai_agents_plugin",
        [
            "tests/memory/test_session.py",
            "tests/memory/test_session_limit.py",
            "tests/memory/test_session_persistence_sanitize.py",
            "tests/test_hitl_session_scenario.py",
            "tests/deferred_session_writes",
        ],
    ),
    "langchain-core==1.8.3": (
        "langchain_plugin",
        ["tests/unit_tests/runnables/test_history.py", "tests/unit_tests/chat_history"],
    ),
}
#: What those test files import or configure besides the framework (their dev groups).
FRAMEWORK_TEST_TOOLS = [
    "pytest>=9.0.3,<10",
    "pytest-asyncio>=1.3,<2",
    "pytest-mock>=3.14,<4",
    "pytest-timeout>=2.3,<3",
    "inline-snapshot>=0.20.7",
    "syrupy>=5,<6",
    "blockbuster>=1.5.18,<1.6",
]
FRAMEWORK_BACKENDS = ["memory", "jsonl", "sqlite"]


@nox.session
def frameworks(session: nox.Session) -> None:
    """Run each pinned framework's own session/history tests, from its source
    distribution, with its store swapped for the adapter, on every backend the
    ``FRAMEWORK_BACKENDS`` list names; every assertion is the framework's
    (tests/frameworks/ lists the few skips, each with its reason)."""
    # --tb=native: a failure whose traceback runs through threads (the ledger's own loop
    # thread, the tests' worker threads) can break pytest's source-range parsing on
    # Python 3.11 (an INTERNALERROR instead of the failure).
    pins = list(FRAMEWORK_SUITES)
    session.install(*PACKAGES, *pins, *FRAMEWORK_TEST_TOOLS)
    work = Path(session.create_tmp()) / "frameworks"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    session.run(
        "python", "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
        "--dest", str(work), *pins,
    )  # fmt: skip
    plugins = str(Path("tests/frameworks").resolve())
    for pin, (plugin, paths) in FRAMEWORK_SUITES.items():
        name, _, version = pin.partition("==")
        stem = f"{name.replace('-', '_')}-{version}"
        with tarfile.open(work / f"{stem}.tar.gz") as archive:
            archive.extractall(work, filter="data")
        with session.chdir(work / stem):
            for backend in FRAMEWORK_BACKENDS:
                session.log(f"{pin}: its own tests on the {backend} backend")
                session.run(
                    "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-p", "ledger_pool", "-p", plugin, "--timeout", "120", "--tb=native",
                    *paths, *session.posargs,
                    env={"PYTHONPATH": plugins, "SESSIONLEDGER_FRAMEWORK_BACKEND": backend},
                )  # fmt: skip


#: What the demo and the commands it prints need: the core with its command, the stores
#: and the invariants (not the adapters and their frameworks).
DEMO_PACKAGES = [
    "./packages/core[cli]",
    "./packages/persistence-jsonl",
    "./packages/persistence-sqlite",
    "./packages/persistence-postgres",
    "./packages/invariants",
    "./packages/viewer",
]


@nox.session(reuse_venv=True)
def demo(session: nox.Session) -> None:
    """Run the demo: a scripted two-turn agent session with a real crash, written to the
    default store (pass e.g. ``-- --store jsonl:./sessions`` to choose another). A rerun
    reuses its environment (the packages are installed again, which pip finds done)."""
    session.install(*DEMO_PACKAGES)
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
