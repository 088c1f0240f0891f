"""Retention on the command line: ``prune`` and the ``audit`` log it writes.

``prune`` never deletes without being told twice: without ``--yes`` it prints the plan
(what would go, how big) and says that nothing was deleted; with ``--yes`` the library
records the prune in the store's audit log before its first deletion and after its last
(docs/listing.md, "retention"). ``audit`` shows those records paired by their id; a
beginning without an end is a prune that was interrupted.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from rich.table import Table
from rich.text import Text

from sessionledger._errors import QueryError
from sessionledger.cli._render import local_datetime, make_console, write_json
from sessionledger.cli._stores import opened_store, store_is_missing
from sessionledger.cli._words import plural
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.storage._cancellation import in_thread
from sessionledger.storage._listing import parse_meta_filter
from sessionledger.storage._retention import PruneCandidate

#: Units a duration is written in, largest first (as ``parse_duration`` reads them).
_UNITS: Final = (("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000))


def duration_text(ms: int) -> str:
    """Return *ms* in the largest unit that divides it exactly: ``30d``, ``90m``, ``1500ms``."""
    for unit, size in _UNITS:
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def size_text(size: int | None) -> str:
    """Return a byte count as ``12,345 bytes`` (``?`` when the store cannot tell)."""
    return "?" if size is None else f"{size:,} bytes"


def describe_criteria(criteria: Mapping[str, Any]) -> str:
    """Return a prune's criteria in words, as given on the command line."""
    parts: list[str] = []
    older = criteria.get("olderThan")
    if type(older) is int:
        parts.append(f"last activity older than {duration_text(older)}")
    keep = criteria.get("keepLast")
    if type(keep) is int:
        parts.append(f"keeping the {keep} most recently active")
    if criteria.get("title") is not None:
        parts.append(f"title holding {criteria['title']!r}")
    meta = criteria.get("meta")
    if isinstance(meta, Mapping):
        parts += [f"meta {key}={_json_text(value)}" for key, value in meta.items()]
    return ", ".join(parts) or "none"


def _json_text(value: object) -> str:
    """A meta value as ``--meta KEY=VALUE`` takes it: text bare, anything else as JSON."""
    return value if isinstance(value, str) else jsoncodec.dumps(value).decode()


async def prune(args: argparse.Namespace) -> int:
    """``prune --older-than DURATION | --keep-last N [--title T] [--meta K=V] [--yes]``:
    print the plan, or with ``--yes`` carry it out and print what was deleted."""
    if args.older_than is None and args.keep_last is None:
        raise QueryError(
            "prune needs --older-than DURATION or --keep-last N: it never deletes every "
            "session by default"
        )
    meta = parse_meta_filter(args.meta) or None
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        plan = await store.prune(
            older_than=args.older_than,
            keep_last=args.keep_last,
            title=args.title,
            meta=meta,
            dry_run=not args.yes,
        )
    if args.json:
        write_json(plan.to_json())
        return 0
    console = make_console()
    url = args.store_url
    criteria = describe_criteria(plan.criteria)
    if not plan.sessions and not plan.skipped:
        console.print(f"nothing to prune in {url}: no session matches ({criteria})", markup=False)
        return 0
    if not plan.executed:
        caption = f"prune plan for {url} ({criteria}): {plural(len(plan.sessions), 'session')}"
        console.print(Text(caption, style="italic"))
        if plan.sessions:
            console.print(_plan_table(plan.sessions, outcomes=None))
        _print_skipped(console, plan.skipped)
        console.print(f"total: {_total(plan.sessions)}", markup=False)
        count = len(plan.sessions)
        these = "this session" if count == 1 else f"these {count} sessions"
        console.print(Text(f"nothing deleted: add --yes to delete {these}", style="bold yellow"))
        return 0
    gone = set(plan.deleted)
    outcomes = {
        item.info.id: "deleted" if item.info.id in gone else "skipped" for item in plan.sessions
    }
    caption = (
        f"deleted {plural(len(plan.deleted), 'session')} from {url} ({criteria}): "
        f"{plan.bytes_freed:,} bytes freed"
    )
    console.print(Text(caption, style="bold"))
    if plan.sessions:
        console.print(_plan_table(plan.sessions, outcomes=outcomes))
    _print_skipped(console, plan.skipped)
    console.print(
        f"recorded in the audit log as {plan.audit_id} ('sessionledger audit')", markup=False
    )
    return 0


def _total(sessions: Sequence[PruneCandidate]) -> str:
    known = sum(item.bytes or 0 for item in sessions)
    unknown = sum(1 for item in sessions if item.bytes is None)
    if unknown == len(sessions):
        return "unknown (this store cannot tell the size of a session)"
    text = f"{known:,} bytes"
    if unknown:
        text += f" (and {plural(unknown, 'session')} of a size the store cannot tell)"
    return text


def _plan_table(sessions: Sequence[PruneCandidate], *, outcomes: Mapping[str, str] | None) -> Table:
    table = Table(expand=False, box=None, pad_edge=False, header_style="bold underline")
    table.add_column("id", overflow="fold")
    table.add_column("last activity", no_wrap=True)
    table.add_column("events", justify="right", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    if outcomes is not None:
        table.add_column("outcome", no_wrap=True)
    for item in sessions:
        info = item.info
        cells: list[Any] = [
            Text(info.id),
            local_datetime(info.last_activity, seconds=False),
            "?" if info.problem else str(info.events),
            size_text(item.bytes),
        ]
        if outcomes is not None:
            outcome = outcomes[info.id]
            cells.append(Text(outcome, style="green" if outcome == "deleted" else "yellow"))
        table.add_row(*cells)
    return table


def _print_skipped(console: Any, skipped: Iterable[tuple[str, str]]) -> None:
    for session_id, reason in skipped:
        console.print(Text(f"skipped {session_id}: {reason}", style="yellow"))


async def audit(args: argparse.Namespace) -> int:
    """``audit``: the store's audit log, one row per prune (begin and end paired)."""
    records: list[Mapping[str, Any]] = []
    if not await in_thread(store_is_missing, args.store_url):
        async with opened_store(args.store_url, plugins=args.plugins) as store:
            records = list(await store.audit())
    if args.json:
        write_json([dict(record) for record in records])
        return 0
    console = make_console()
    if not records:
        console.print(f"no audit records in {args.store_url}", markup=False)
        return 0
    entries = paired(records)
    count = f"{len(entries)} audit {'entry' if len(entries) == 1 else 'entries'}"
    console.print(Text(f"{count} in {args.store_url}", style="italic"))
    table = Table(expand=False, box=None, pad_edge=False, header_style="bold underline")
    for name in ("time", "action", "host", "user", "criteria", "sessions", "freed", "state"):
        table.add_column(name, overflow="fold", justify="right" if name == "freed" else "left")
    for begin, end in entries:
        first = begin or end or {}
        when = first.get("time")
        if end is None:
            state = Text("interrupted", style="bold red")
        elif begin is None:
            state = Text("end only", style="yellow")
        else:
            state = Text("done", style="green")
        table.add_row(
            local_datetime(when) if type(when) is int else "?",
            Text(str(first.get("action", "?"))),
            Text(str(first.get("host", "?"))),
            Text(str(first.get("user", "?"))),
            Text(describe_criteria(first.get("criteria") or {})),
            _sessions_cell(begin, end),
            _freed_cell(end),
            state,
        )
    console.print(table)
    return 0


def paired(
    records: Iterable[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]]:
    """Pair each ``begin`` record with the ``end`` of the same id, in the order the
    entries began; a record of another phase (or no id) stands alone as a beginning."""
    entries: list[list[Mapping[str, Any] | None]] = []
    open_by_id: dict[object, list[Mapping[str, Any] | None]] = {}
    for record in records:
        key = record.get("id")
        if record.get("phase") == "end":
            entry = open_by_id.pop(key, None) if key is not None else None
            if entry is not None:
                entry[1] = record
            else:
                entries.append([None, record])
            continue
        entry = [record, None]
        entries.append(entry)
        if key is not None and record.get("phase") == "begin":
            open_by_id[key] = entry
    return [(begin, end) for begin, end in entries]


def _sessions_cell(begin: Mapping[str, Any] | None, end: Mapping[str, Any] | None) -> str:
    planned = begin.get("sessions") if begin is not None else None
    deleted = end.get("deleted") if end is not None else None
    if isinstance(deleted, list):
        text = f"{len(deleted)} deleted"
        if isinstance(planned, list):
            text += f" of {len(planned)}"
        return text
    return f"{len(planned)} planned" if isinstance(planned, list) else "?"


def _freed_cell(end: Mapping[str, Any] | None) -> str:
    freed = end.get("bytesFreed") if end is not None else None
    return size_text(freed) if type(freed) is int else "?"
