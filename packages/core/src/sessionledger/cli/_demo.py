"""``sessionledger demo``: a scripted two-turn agent session, a real crash, and its repair.

1. Turn 1 (this process): the user asks for a summary of ``package.json``; step 1
   streams reasoning and a ``read_file`` call, the tool result is recorded, step 2
   streams the answer.
2. Turn 2 runs in a child process (``sessionledger.cli._demo_child``) that flushes its
   ``tool/call`` and is then killed with SIGKILL while the tool "runs".
3. This process resumes the session: the cold load appends a ``TOOL_OUTCOME_UNKNOWN``
   result, ``step/end`` and ``turn/end interrupted``. Then turn 1 is compacted with a
   ``Replace`` summary that cites the nodes it shadows.
4. It prints the event log, the surface before and after the compaction, the derived
   messages, the transcript and the provenance of every surface node, and suggests
   commands to try on the store it wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import orjson
from rich.console import Console
from rich.text import Text

from sessionledger._errors import ConfigError, SessionExistsError, SessionNotFoundError
from sessionledger.cli._app import CommandError
from sessionledger.cli._demo_agent import (
    PACKAGE_JSON,
    TURN_1_PROMPT,
    TURN_1_STEP_1,
    DemoHarness,
    ScriptedModel,
    turn_1_answer,
)
from sessionledger.cli._demo_child import READY_MARKER
from sessionledger.cli._plugins import offered_validators
from sessionledger.cli._preview import surface_op_text
from sessionledger.cli._render import (
    PIPE_WIDTH,
    event_table,
    make_console,
    message_table,
    provenance_table,
    surface_table,
)
from sessionledger.cli._stores import opened_ledger
from sessionledger.cli._words import plural
from sessionledger.model._events import Replace, SessionEvent
from sessionledger.model._session import Session
from sessionledger.model._vocabulary import TURN_END, TURN_START, user_message
from sessionledger.runtime._ledger import Ledger
from sessionledger.storage._cancellation import in_thread

#: Longest wait for the child process to reach its tool (it normally takes well under 1 s).
CHILD_TIMEOUT_S: Final = 60.0


#: Longest message text the demo prints (``transcript`` shows them whole).
CLIP: Final = 240


class DemoError(CommandError):
    """The demo could not play its script (its child process failed)."""

    code = "DEMO"


async def _check_unused(ledger: Ledger, session_id: str) -> None:
    # A stored id would only be refused at the first flush, after turn 1 has started.
    assert ledger.persistence is not None
    try:
        await ledger.persistence.read_from(session_id, 0)
    except SessionNotFoundError:
        return
    raise SessionExistsError("the store already has this session", session_id=session_id)


def _read_file(workdir: Path) -> Any:
    async def read_file(arguments: Mapping[str, Any]) -> str:
        path = workdir / str(arguments.get("path", ""))
        return await asyncio.to_thread(path.read_text, encoding="utf-8")

    return read_file


def _turn_nodes(session: Session, turn: int) -> list[int]:
    """Return the surface nodes appended during *turn*, in surface order."""
    start = end = None
    for event in session.events:
        if event.type in (TURN_START, TURN_END) and event.data.get("turn") == turn:
            if event.type == TURN_START:
                start = event.seq
            else:
                end = event.seq
    if start is None or end is None:
        raise DemoError(f"turn {turn} is not a closed turn of {session.id!r}")
    return [seq for seq in session.surface.nodes if start < seq < end]


def compact_turn(session: Session, turn: int, summary: str) -> SessionEvent:
    """Replace the surface nodes of *turn* with one summary message citing all of them."""
    nodes = _turn_nodes(session, turn)
    return session.append(
        "user/message",
        user_message(
            summary, id=f"summary-turn-{turn}", source={"kind": "plugin", "plugin": "compaction"}
        ),
        surface_op=Replace(nodes[0], nodes[-1]),
        source_event_seqs=nodes,
    )


async def _play_turn_1(ledger: Ledger, session: Session, seed: int, workdir: Path, say: Any) -> str:
    harness = DemoHarness(
        ledger, session, ScriptedModel(seed + 1), {"read_file": _read_file(workdir)}, say
    )
    harness.start_turn(1, TURN_1_PROMPT, reason="initial")
    await harness.model_step(1, 1, TURN_1_STEP_1)
    output = ""
    for call in TURN_1_STEP_1.tool_calls:
        result = await harness.run_tool(1, 1, call)
        output = result.data["message"]["content"][0]["content"][0]["text"]
    harness.end_step(1, 1)
    await harness.model_step(1, 2, turn_1_answer(output))
    harness.end_step(1, 2)
    await harness.end_turn(1)
    return output


async def _crash_turn_2(url: str, session_id: str, seed: int, say: Any) -> None:
    """Run turn 2 in a child process and SIGKILL it once its tool is running."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sessionledger.cli._demo_child",
        "--store",
        url,
        "--session",
        session_id,
        "--seed",
        str(seed),
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    say(f"turn 2: running in a child process (pid {child.pid})")
    try:
        while True:
            line = await asyncio.wait_for(child.stdout.readline(), CHILD_TIMEOUT_S)
            if not line:
                status = await child.wait()
                raise DemoError(
                    f"the turn-2 process exited with status {status} before its tool started"
                )
            text = line.decode("utf-8", "replace").rstrip("\n")
            if text == READY_MARKER:
                break
            say(f"  child │ {text}")
        os.kill(child.pid, signal.SIGKILL)
        status = await child.wait()
        say(f"  killed pid {child.pid} with SIGKILL while its tool was running (status {status})")
    except TimeoutError as error:
        raise DemoError("the turn-2 process did not reach its tool within a minute") from error
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


def _describe_closer(event: SessionEvent) -> str:
    if event.type == "tool/result":
        code = event.data.get("error", {}).get("code")
        cited = ", ".join(str(seq) for seq in event.source_event_seqs or ())
        return f"seq {event.seq} tool/result [{code}], citing tool/call seq {cited}"
    if event.type == TURN_END:
        return f"seq {event.seq} turn/end ({event.data['reason']['kind']})"
    return f"seq {event.seq} {event.type}"


def command_prefix() -> str:
    """Return how the user can run this command line again, in their own shell, from the
    current directory.

    ``sessionledger`` when that is what their shell finds; otherwise the console script
    of this interpreter's environment. Under nox (``nox -s demo``) the environment's
    ``bin`` is on ``PATH`` only for the session, never in the user's shell, so the
    script is named by its path (``.nox/demo/bin/sessionledger``).
    """
    script = Path(sys.executable).parent / "sessionledger"
    found = None if os.environ.get("NOX_CURRENT_SESSION") else shutil.which("sessionledger")
    if found is not None and (not script.exists() or Path(found).resolve() == script.resolve()):
        return "sessionledger"
    if script.exists():
        try:
            return shlex.quote(str(script.relative_to(Path.cwd())))
        except ValueError:
            return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m sessionledger"


def _next_commands(
    console: Console, args: argparse.Namespace, session: Session, at: int, prefix: str
) -> None:
    if args.store is not None:
        prefix += f" --store {shlex.quote(args.store)}"
    sid = shlex.quote(session.id)
    suggestions = [
        (f"{prefix} ls", "every session in the store"),
        (f"{prefix} show {sid}", "the log as stored, one row per event"),
        (f"{prefix} messages {sid} --format anthropic", "the history as an API request"),
        (f"{prefix} messages {sid} --at {at}", "time travel: the model's view before compaction"),
        (f"{prefix} transcript {sid}", "what the user saw"),
        (f"{prefix} verify {sid}", "envelopes, surface and invariants"),
        (f"{prefix} stats {sid}", "bytes, and what chunk packing saves"),
        (f"{prefix} catalog", "the event types the installed plugins register"),
        (f"{prefix} view {sid}", "the log and the surface side by side in a browser"),
    ]
    console.rule("Try next")
    for command, what in suggestions:
        console.print(Text("  " + command, style="bold"), Text(f"  # {what}", style="dim"))


async def demo(args: argparse.Namespace) -> int:
    """``demo``: play the scripted session against the store and print what it left."""
    url: str = args.store_url
    if url.partition(":")[0] == "memory":
        raise ConfigError(
            "the demo's second turn runs in another process, which cannot see a memory: "
            "store; use sqlite:PATH or jsonl:DIR"
        )
    # A fixed width even when piped: the rules between the parts span the console.
    console = make_console(pipe_width=PIPE_WIDTH)
    session_id: str = args.session or f"demo-{uuid.uuid4().hex[:8]}"

    def say(line: str) -> None:
        console.print(Text(line))

    console.rule("sessionledger demo")
    say(f"store {url}, session {session_id}; a scripted model, no network")
    # The demo's files are made and removed in a worker thread, never on the event loop
    # (docs/backends.md, "no blocking call on the event loop").
    workdir = await in_thread(_make_workdir)
    try:
        # The validators installed plugins offer (the invariants), fresh for each ledger.
        validators = await in_thread(offered_validators)
        async with opened_ledger(url, plugins=validators) as ledger:
            await _check_unused(ledger, session_id)
            session = ledger.create(
                session_id, cwd=str(workdir), title="demo: summarise package.json"
            )
            output = await _play_turn_1(ledger, session, args.seed, workdir, say)
        await _crash_turn_2(url, session_id, args.seed, say)
        validators = await in_thread(offered_validators)
        async with opened_ledger(url, plugins=validators) as ledger:
            assert ledger.persistence is not None
            stored = len(await ledger.persistence.read_from(session_id, 0))
            session = await ledger.resume(session_id)
            closers = [e for e in session.events[stored:] if e.type != "session/end-seed"]
            closed = plural(len(closers), "event")
            say(f"resumed {session_id}: the cold load closed turn 2 with {closed}")
            for event in closers:
                say(f"  {_describe_closer(event)}")
            before = tuple(session.surface.nodes)
            first_line = output and turn_1_answer(output).text.splitlines()[1]
            summary = compact_turn(
                session,
                1,
                "Summary of turn 1: the user asked for a summary of package.json; the agent "
                f"read it with read_file and reported: {first_line}",
            )
            await ledger.flush(session)
            say(
                f"compacted turn 1: seq {summary.seq} {surface_op_text(summary.surface_op)} "
                f"cites {list(summary.source_event_seqs or ())}"
            )
            events = session.events
            console.rule("The event log")
            console.print(event_table(events, width=console.width))
            console.rule("The surface")
            console.print(surface_table(events, before, title="before the compaction"))
            console.print(surface_table(events, session.surface.nodes, title="after"))
            console.rule("Derived messages (what the model sees next)")
            console.print(message_table(session.derive_messages(), clip=CLIP))
            console.rule("Transcript (what the user saw)")
            console.print(message_table(session.transcript(), clip=CLIP))
            console.rule("Provenance of each surface node")
            console.print(provenance_table(events, session.surface.nodes))
            _next_commands(console, args, session, summary.seq - 1, await in_thread(command_prefix))
    finally:
        await in_thread(shutil.rmtree, workdir, ignore_errors=True)
    return 0


def _make_workdir() -> Path:
    """A new directory holding the ``package.json`` the demo's agent reads (its path
    resolved: the session's working directory)."""
    workdir = Path(tempfile.mkdtemp(prefix="sessionledger-demo-")).resolve()
    (workdir / "package.json").write_bytes(orjson.dumps(PACKAGE_JSON, option=orjson.OPT_INDENT_2))
    return workdir
