"""Commands that check and mend stored logs: ``verify`` and ``repair``.

``verify`` never writes. For each session it reads the log as stored (``read_from``),
validates it the way a resume would (``inspect``: envelopes, message shapes, the
surface rules), checks the data shapes an append would check (``sessionledger.model._shapes``)
and runs the invariants' ``check_log`` over the stored events. Anything
found is a problem and the command exits 1. A turn left open is only a note: it is what
a crash (or a session still running) leaves, and a resume closes it. So are events of
types no loaded plugin declares: they are read as stored and not checked.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.text import Text

from sessionledger._errors import ConfigError, EventDataError, LedgerError, SessionNotFoundError
from sessionledger.cli._inspecting import open_turn, paused_note
from sessionledger.cli._missing import install_hint
from sessionledger.cli._preview import seq_ranges
from sessionledger.cli._render import event_table, make_console, write_json
from sessionledger.cli._stores import opened_store
from sessionledger.cli._words import plural
from sessionledger.model._events import SessionEvent
from sessionledger.model._repair import paused_calls
from sessionledger.model._shapes import data_shape_problem
from sessionledger.storage._committed import TornTail
from sessionledger.storage._persistence import SessionPersistence

#: Exit status of ``verify`` when it found problems (2 stays reserved for user mistakes).
EXIT_PROBLEMS = 1

CheckLog = Callable[[Sequence[SessionEvent]], Sequence[Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a stored session: where, which rule or code, and what."""

    seq: int | None
    rule: str
    message: str

    def to_json(self) -> dict[str, Any]:
        """Return the problem as a JSON object (stable keys)."""
        return {"seq": self.seq, "rule": self.rule, "message": self.message}


@dataclasses.dataclass(slots=True)
class SessionReport:
    """What ``verify`` found in one session."""

    session_id: str
    events: int | None = None
    problems: list[Problem] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return the report as a JSON object (stable keys)."""
        return {
            "id": self.session_id,
            "ok": not self.problems,
            "events": self.events,
            "problems": [problem.to_json() for problem in self.problems],
            "notes": list(self.notes),
        }


def load_check_log() -> CheckLog | None:
    """Return ``sessionledger_invariants.check_log``, or None when it is not installed."""
    try:
        from sessionledger_invariants import check_log
    except ImportError:
        return None
    return check_log


def _problem(error: LedgerError) -> Problem:
    # A stored log that fails validation is reported as CORRUPT wrapping the real cause
    # (a SeedError wrapping e.g. a SurfaceError); the innermost code says more.
    code = error.code
    cause = error.__cause__
    while isinstance(cause, LedgerError):
        code = cause.code
        cause = cause.__cause__
    seq = error.seq
    if seq is None and isinstance(error.__cause__, LedgerError):
        seq = getattr(error.__cause__, "index", None)
    return Problem(seq, code, str(error))


async def verify_session(
    store: SessionPersistence, session_id: str, check_log: CheckLog | None
) -> SessionReport:
    """Check one stored session without writing anything; see the module docstring."""
    report = SessionReport(session_id)
    try:
        stored = await store.read_from(session_id, 0)
    except SessionNotFoundError:
        raise
    except LedgerError as error:
        report.problems.append(_problem(error))
        return report
    report.events = len(stored)
    unknown = _unknown_types_note(store, stored)
    if unknown is not None:
        report.notes.append(unknown)
    try:
        view = await store.inspect(session_id)
    except LedgerError as error:
        report.problems.append(_problem(error))
    else:
        repaired = len(view.events) - len(stored)
        if view.torn_tail is not None and view.torn_tail.starts_at is not None:
            report.notes.append(
                f"the log ends with a torn tail ({torn_text(view.torn_tail)}) after its last "
                "intact batch, a write cut short; a resume or 'repair' moves it into a "
                "quarantine file ('repair --dry-run' shows what)"
            )
        turn = open_turn(stored)
        waiting = paused_calls(stored)
        if turn is not None and waiting:
            report.notes.append(paused_note(turn, waiting))
        elif turn is not None:
            report.notes.append(
                f"turn {turn} is open (interrupted, or still running); a resume or "
                f"'repair' appends {plural(repaired, 'closing event')}"
            )
    for event in stored:
        # What an append refuses today, a log written earlier (or by another tool) may
        # hold: loading accepts it, verify reports it (docs/events.md).
        shape = data_shape_problem(event.type, event.data)
        if shape is not None:
            report.problems.append(Problem(event.seq, EventDataError.code, shape))
    if check_log is not None:
        for violation in check_log(stored):
            report.problems.append(
                Problem(violation.seq, str(violation.rule), str(violation.message))
            )
    return report


def _unknown_types_note(store: SessionPersistence, events: Sequence[SessionEvent]) -> str | None:
    """Say which events are of types no loaded plugin declares: kept as stored, read
    uninterpreted, and not checked; a resume refuses the non-ignorable ones."""
    known = store.event_types.declarations
    unknown: dict[str, list[int]] = {}
    for event in events:
        if event.type not in known:
            unknown.setdefault(event.type, []).append(event.seq)
    if not unknown:
        return None
    count = sum(len(seqs) for seqs in unknown.values())
    listed = ", ".join(
        f"{name} (seq {seqs[0]}{f' and {len(seqs) - 1} more' if len(seqs) > 1 else ''})"
        for name, seqs in sorted(unknown.items())
    )
    return (
        f"{plural(count, 'event')} of a type no loaded plugin declares, not checked: "
        f"{listed}; load the plugin that declares it (an entry point, or --plugin "
        "module:attribute) to check it, and to resume the session"
    )


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _collected_warnings() -> Iterator[list[str]]:
    """Collect the library's warnings instead of printing them (``list_snapshots`` logs
    and skips sessions in another format version; ``verify --all`` reports them)."""
    logger = logging.getLogger("sessionledger")
    handler = _Collect()
    logger.addHandler(handler)
    propagate = logger.propagate
    logger.propagate = False
    try:
        yield handler.messages
    finally:
        logger.propagate = propagate
        logger.removeHandler(handler)


async def verify(args: argparse.Namespace) -> int:
    """``verify [ID ...|--all]``: check envelopes, surface and invariants; exit 1 on problems.

    Without ids every session is checked, as with ``--all``.
    """
    if args.all and args.ids:
        raise ConfigError("verify takes session ids or --all, not both")
    check_log = load_check_log()
    reports: list[SessionReport] = []
    skipped: list[str] = []
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        ids: list[str] = list(args.ids)
        if not ids:
            with _collected_warnings() as skipped:
                ids = [info.header.id for info in await store.list_snapshots()]
        reports.extend([await verify_session(store, session_id, check_log) for session_id in ids])
    failed = [report for report in reports if report.problems]
    if args.json:
        write_json(
            {
                "ok": not failed and not skipped,
                "invariantsChecked": check_log is not None,
                "sessions": [report.to_json() for report in reports],
                "unreadable": skipped,
            }
        )
        return EXIT_PROBLEMS if failed or skipped else 0
    console = make_console()
    if check_log is None:
        console.print(
            Text(
                f"note: invariants not checked; {install_hint('sessionledger-invariants')}",
                style="yellow",
            )
        )
    for report in reports:
        count = "? events" if report.events is None else plural(report.events, "event")
        if report.problems:
            console.print(Text(f"✗ {report.session_id}  {count}", style="bold red"))
            for problem in report.problems:
                where = f"seq {problem.seq}" if problem.seq is not None else "store"
                console.print(Text(f"    {where}  {problem.rule}  {problem.message}"))
        else:
            console.print(Text(f"✓ {report.session_id}  {count}  ok", style="green"))
        for note in report.notes:
            console.print(Text(f"    note: {note}", style="yellow"))
    for message in skipped:
        console.print(Text(f"✗ unreadable session: {message}", style="bold red"))
    summary = f"verified {plural(len(reports), 'session')}: {len(reports) - len(failed)} ok"
    if failed:
        summary += f", {len(failed)} with problems"
    if skipped:
        summary += f", {len(skipped)} unreadable"
    console.print(Text(summary, style="bold"))
    return EXIT_PROBLEMS if failed or skipped else 0


def torn_text(torn: TornTail) -> str:
    """Describe a torn tail: where it starts, its batches and records, its seqs."""
    seqs = f"seqs {torn.seqs[0]}-{torn.seqs[1]}" if torn.seqs else "no readable seq"
    return (
        f"starting at {torn.starts_at}: {plural(torn.batches, 'batch')}, "
        f"{plural(torn.records, 'record')}, {seqs}"
    )


def _torn_action(session_id: str, torn: TornTail, end: int, *, done: bool) -> str:
    """Say what cutting *torn* off does (*done*) or would do; *end* is the seq it cuts at."""
    if torn.starts_at is None:  # the store found the cut itself: its count, no records
        verb = "rewrote" if done else "would rewrite"
        return (
            f"{session_id}: {verb} the log's stored end at seq {end} (the store's count "
            "disagrees with its records; nothing to move)"
        )
    if not done:
        return (
            f"{session_id}: would move the torn tail ({torn_text(torn)}) into a quarantine "
            "file beside the log"
        )
    where = f" to {torn.quarantine}" if torn.quarantine else ""
    return (
        f"{session_id}: moved the torn tail ({torn_text(torn)}; "
        f"{plural(torn.moved_bytes, 'byte')}){where}"
    )


def _torn_json(torn: TornTail | None) -> dict[str, Any] | None:
    if torn is None:
        return None
    return {
        "startsAt": torn.starts_at,
        "batches": torn.batches,
        "records": torn.records,
        "seqs": list(torn.seqs) if torn.seqs else None,
        "quarantine": torn.quarantine,
        "movedBytes": torn.moved_bytes,
    }


async def repair(args: argparse.Namespace) -> int:
    """``repair ID [--dry-run] [--salvage]``: cut a torn tail off into quarantine and close
    an interrupted turn, durably (``load``), or show exactly that without writing
    (``inspect``). ``--salvage`` cuts a damaged log back to its longest intact prefix
    instead, moving the rest aside."""
    if args.salvage:
        return await _salvage(args)
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        before = await store.read_from(args.id, 0)
        stored = await store.inspect(args.id)
        if not args.dry_run:
            stored = await store.load(args.id)
    appended = list(stored.events[len(before) :])
    torn = stored.torn_tail
    waiting = paused_calls(stored.events)
    if args.json:
        write_json(
            {
                "id": args.id,
                "dryRun": bool(args.dry_run),
                "tornTail": _torn_json(torn),
                "appended": [event.to_json() for event in appended],
                "paused": waiting,
            }
        )
        return 0
    console = make_console()
    turn = open_turn(stored.events)
    if waiting and turn is not None:
        console.print(f"{args.id}: {paused_note(turn, waiting)}", markup=False)
    if torn is None and not appended:
        what = "no torn tail, no turn to close" if waiting else "no torn tail, no open turn"
        console.print(f"{args.id}: nothing to repair ({what})", markup=False)
        return 0
    if torn is not None:
        action = _torn_action(args.id, torn, len(before), done=not args.dry_run)
        console.print(Text(action, style="bold"))
    if appended:
        verb = "would append" if args.dry_run else "appended"
        seqs = seq_ranges([event.seq for event in appended])
        what = plural(len(appended), "closing event")
        console.print(Text(f"{args.id}: {verb} {what} (seq {seqs})", style="bold"))
        console.print(event_table(appended, width=console.width))
    if args.dry_run:
        console.print(f"run 'sessionledger repair {args.id}' to do it", markup=False)
    return 0


async def _salvage(args: argparse.Namespace) -> int:
    """``repair --salvage ID``: the one way past corruption, and only on request."""
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        report = await store.salvage(args.id, dry_run=args.dry_run)
    if args.json:
        write_json(
            {
                "id": report.session_id,
                "dryRun": bool(args.dry_run),
                "keptEvents": report.kept_events,
                "movedBatches": report.moved_batches,
                "movedRecords": report.moved_records,
                "movedSeqs": list(report.moved_seqs) if report.moved_seqs else None,
                "movedBytes": report.moved_bytes,
                "quarantine": report.quarantine,
                "closers": report.closers,
            }
        )
        return 0
    console = make_console()
    if not report.moved:
        console.print(f"{args.id}: nothing to salvage: every stored batch is intact", markup=False)
        return 0
    seqs = (
        f"seqs {report.moved_seqs[0]}-{report.moved_seqs[1]} among them"
        if report.moved_seqs
        else "no readable seq among them"
    )
    lines = [
        f"{args.id}: keeping the first {plural(report.kept_events, 'event')} "
        f"(the longest intact prefix)",
        f"  {'would move' if args.dry_run else 'moved'} "
        f"{plural(report.moved_batches, 'batch')}, {plural(report.moved_records, 'record')} "
        f"({seqs})"
        + ("" if args.dry_run else f", {report.moved_bytes:,} bytes, to {report.quarantine}"),
    ]
    if args.dry_run:
        lines.append(f"run 'sessionledger repair --salvage {args.id}' to move them")
    else:
        lines.append(f"  appended {plural(report.closers, 'closing event')}")
    for line in lines:
        console.print(line, markup=False)
    return 0
