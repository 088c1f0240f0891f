"""Read-only commands: ``ls``, ``show``, ``messages``, ``transcript``, ``stats``, ``catalog``.

None of them writes to the store: they read through ``list_sessions`` (summaries, no
events), ``list_snapshots``, ``read_from`` (the log as stored) and ``inspect`` (the
repaired view, repair kept in memory), never ``load``. ``show`` and ``stats`` describe
the stored log; ``messages`` and ``transcript`` describe what a resume would give the
model and the user (the repaired view).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import datetime
import importlib.metadata
import shlex
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from sessionledger._errors import ConfigError, SessionNotFoundError
from sessionledger.cli._eventlog import write_event_log
from sessionledger.cli._render import (
    local_datetime,
    make_console,
    plain_messages,
    print_messages,
    write_json,
    write_jsonl,
)
from sessionledger.cli._stores import opened_store, store_is_missing
from sessionledger.cli._words import plural
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._derive import RequestFolds, messages_at, transcript
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._repair import interrupted_turn_closers, paused_calls
from sessionledger.model._surface import fold_surface
from sessionledger.model._vocabulary import TURN_END, TURN_START
from sessionledger.runtime._ledger import Ledger
from sessionledger.storage._cancellation import in_thread
from sessionledger.storage._chunks import pack_chunk_runs
from sessionledger.storage._listing import (
    SessionInfo,
    SessionPage,
    SessionQuery,
    make_query,
    parse_meta_filter,
    parse_when,
)
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.views._formats import to_anthropic_messages, to_openai_messages

#: ``ls`` shows the creation time only when the title keeps at least this much room.
TITLE_ROOM_FOR_CREATED = 20

#: The title column is never narrower than this; with less room it is left out.
TITLE_MIN = 8


def open_turn(events: Sequence[SessionEvent]) -> int | None:
    """Return the number of the turn the log leaves open, or None."""
    for event in reversed(events):
        if event.type == TURN_END:
            return None
        if event.type == TURN_START:
            turn = event.data.get("turn") if hasattr(event.data, "get") else None
            return turn if type(turn) is int else -1
    return None


def paused_note(turn: int, calls: Sequence[str]) -> str:
    """Say that an open turn waits on purpose (docs/reading.md, "Pausing is not crashing")."""
    named = ", ".join(repr(call) for call in calls)
    return (
        f"turn {turn} is paused: {plural(len(calls), 'call')} ({named}) "
        f"{'waits' if len(calls) == 1 else 'wait'} on purpose (tool/paused), and repair "
        "leaves the turn open for the harness to answer"
    )


async def list_sessions(args: argparse.Namespace) -> int:
    """``ls``: one page of the stored sessions, from their summaries alone.

    It never reads an event (``list_sessions``): a store that keeps summaries answers
    from them, so a long log costs no more to list than a short one. The query is checked
    before the store is opened, so a bad cursor, time or filter changes nothing.
    """
    url: str = args.store_url
    query = listing_query(args)
    page = SessionPage((), None)
    if not await in_thread(store_is_missing, url):
        async with opened_store(url, plugins=args.plugins) as store:
            page = await store.list_sessions(query)
    if args.json:
        write_json(page.to_json())
        return 0
    console = make_console()
    rows = [_ls_row(info) for info in page.sessions]
    if not rows:
        filtered = args.title or args.meta or args.since or args.until or args.after
        console.print(f"no {'matching ' if filtered else ''}sessions in {url}", markup=False)
        return 0
    table, left_out = _ls_table(rows, console.width)
    where = f"on this page of {url}" if page.next else f"in {url}"
    caption = f"{plural(len(rows), 'session')} {where}"
    if left_out:
        caption += f" ({left_out} left out: the terminal is too narrow; --json has them)"
    # Above the table, not its title: a title wraps at the table's width, cutting the URL.
    console.print(Text(caption, style="italic"))
    console.print(table)
    broken = [f"{row['id']} ({row['problem'].split(':')[0]})" for row in rows if row["problem"]]
    if broken:
        console.print(
            f"unreadable: {', '.join(broken)}; 'sessionledger verify ID' says why", markup=False
        )
    stale = sum(1 for info in page.sessions if info.stale and not info.problem)
    if stale:
        console.print(stale_hint(args, stale), markup=False, soft_wrap=True)
    if page.next is not None:
        # Soft-wrapped: a terminal folds it without line breaks, so it copies whole.
        more = f"more: {next_page_command(args, query, page.next)}"
        console.print(more, markup=False, soft_wrap=True)
    return 0


def stale_hint(args: argparse.Namespace, count: int) -> str:
    """Say that *count* listed summaries were computed from their logs (the store's were
    missing or out of date; ``ls`` writes nothing), and which command stores them."""
    words = ["sessionledger", "--store", args.store_url]
    for spec in args.plugin_specs:
        words += ["--plugin", spec]
    one = count == 1
    return (
        f"{plural(count, 'session')} listed from {'its log' if one else 'their logs'}: "
        f"the store's {'summary' if one else 'summaries'} of {'it is' if one else 'them are'} "
        f"missing or out of date (listing writes nothing); "
        f"'{shlex.join([*words, 'reindex'])}' stores {'it' if one else 'them'}"
    )


def listing_query(args: argparse.Namespace) -> SessionQuery:
    """Return the checked query of ``ls``'s options (``QueryError`` for a bad one)."""
    now = int(time.time() * 1000)
    since = None if args.since is None else parse_when(args.since, "--since", now=now)
    until = None if args.until is None else parse_when(args.until, "--until", now=now)
    return make_query(
        order=args.order,
        limit=args.limit,
        after=args.after,
        title=args.title,
        meta=parse_meta_filter(args.meta) or None,
        since=since,
        until=until,
    )


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _iso_utc(ms: int) -> str:
    """Epoch ms as an ISO time that ``parse_when`` reads back to the same ms (exact
    arithmetic: no float on the way)."""
    moment = _EPOCH + datetime.timedelta(milliseconds=ms)
    return moment.isoformat(timespec="milliseconds")


def next_page_command(args: argparse.Namespace, query: SessionQuery, cursor: str) -> str:
    """Return the command that lists the page after this one: the same store, plugins and
    filters, with ``--since``/``--until`` as the times they named (a cursor only fits
    its own query, and ``2d`` means another time once a moment has passed)."""
    words = ["sessionledger", "--store", args.store_url]
    for spec in args.plugin_specs:
        words += ["--plugin", spec]
    words.append("ls")
    if args.limit is not None:
        words += ["--limit", str(args.limit)]
    words += ["--after", cursor]
    if args.title is not None:
        words += ["--title", args.title]
    for item in args.meta:
        words += ["--meta", item]
    for option, moment in (("--since", query.since), ("--until", query.until)):
        if moment is not None:
            words += [option, _iso_utc(moment)]
    if query.order != "last_activity":
        words += ["--order", query.order]
    return shlex.join(words)


def _ls_row(info: SessionInfo) -> dict[str, Any]:
    """The cells of one ``ls`` row: a damaged log's count is unknown, not 0."""
    return {
        "id": info.id,
        "createdAt": info.header.created_at,
        "title": info.header.title,
        "events": None if info.problem else info.events,
        "lastActivity": info.summary.last_activity,
        "openTurn": info.open_turn,
        "problem": info.problem,
    }


def _ls_state(row: dict[str, Any]) -> Text:
    if row["problem"] is not None:
        return Text("unreadable", style="red")  # the code is named under the table
    if row["openTurn"] is not None:
        return Text(f"turn {row['openTurn']} open", style="yellow")
    return Text("closed")


@dataclasses.dataclass(frozen=True, slots=True)
class _LsLayout:
    """Which of ``ls``'s optional parts fit: creation time, title, last activity."""

    created: bool
    title: int  # the title column's width; 0 leaves it out
    short_times: bool  # the last activity without its year
    last: bool = True  # the last activity column at all


#: Width of a creation or last-activity time, and without the year.
TIME_CELLS, SHORT_TIME_CELLS = 16, 11


def _ls_layout(rows: list[dict[str, Any]], widths: dict[str, int], width: int) -> _LsLayout:
    """Pick the richest layout that fits *width*: ids, counts and states are never cut;
    the creation time goes first, then the year of the times, then the title, then the
    last activity. Without borders a 36-character UUID leaves a title of 8 or more in 80
    columns, and fits with its count and state in 60."""
    longest = max(5, *(len(row["title"] or "") for row in rows))
    fixed = widths["id"] + widths["events"] + widths["state"]
    for created, short_times in ((True, False), (False, False), (False, True)):
        used = fixed + (widths["created"] if created else 0)
        used += widths["short"] if short_times else widths["last"]
        columns = 5 + created  # id, title, events, last activity, state (+ created)
        room = width - used - 2 * (columns - 1)  # no borders: two spaces between columns
        if room >= (TITLE_ROOM_FOR_CREATED if created else TITLE_MIN):
            return _LsLayout(created, min(longest, room), short_times)
    # Without the title: id, events, last activity, state.
    last = fixed + widths["short"] + 2 * 3 <= width
    return _LsLayout(False, 0, True, last)


def _both(ms: int) -> tuple[str, str]:
    """A last activity with and without its year."""
    return local_datetime(ms, seconds=False), local_datetime(ms, seconds=False, year=False)


def _ls_table(rows: list[dict[str, Any]], width: int) -> tuple[Table, str]:
    """Lay ``ls`` out in *width* columns (see ``_ls_layout``); a title that does not fit
    is cut with an ellipsis. Return the table and what it leaves out ("" for nothing)."""
    states = [_ls_state(row) for row in rows]
    counts = ["?" if row["events"] is None else str(row["events"]) for row in rows]
    created = [local_datetime(row["createdAt"], seconds=False) for row in rows]
    # A time beyond what a date shows is its epoch ms, which may be wider: never cut.
    lasts = [
        (None, None) if row["lastActivity"] is None else _both(row["lastActivity"]) for row in rows
    ]
    widths = {
        "id": max(2, *(len(row["id"]) for row in rows)),
        "events": max(6, *(len(count) for count in counts)),
        "state": max(5, *(len(state.plain) for state in states)),
        "created": max(TIME_CELLS, *(len(text) for text in created)),
        "last": max(TIME_CELLS, *(len(long or "") for long, _ in lasts)),
        "short": max(SHORT_TIME_CELLS, *(len(short or "") for _, short in lasts)),
    }
    layout = _ls_layout(rows, widths, width)
    left_out = "" if layout.title else "titles" if layout.last else "titles and last activity"
    table = Table(expand=False, box=None, pad_edge=False, header_style="bold underline")
    # Folded, not cut, should an id alone be wider than the terminal.
    table.add_column("id", no_wrap=False, overflow="fold", min_width=min(widths["id"], width))
    if layout.created:
        table.add_column("created", no_wrap=True, width=widths["created"])
    if layout.title:
        table.add_column("title", no_wrap=True, overflow="ellipsis", width=layout.title)
    table.add_column("events", justify="right", no_wrap=True, min_width=widths["events"])
    if layout.last:
        # Month and day without the year: 11 characters, the header too.
        table.add_column(
            "last active" if layout.short_times else "last activity",
            no_wrap=True,
            min_width=widths["short"] if layout.short_times else widths["last"],
        )
    table.add_column("state", no_wrap=True, min_width=widths["state"])
    for row, state, count, made, (long, short) in zip(
        rows, states, counts, created, lasts, strict=True
    ):
        when = (short if layout.short_times else long) or ""
        cells: list[Any] = [Text(row["id"])]
        if layout.created:
            cells.append(made)
        if layout.title:
            cells.append(Text(row["title"] or "", no_wrap=True, overflow="ellipsis"))
        cells.append(count)
        if layout.last:
            cells.append(when)
        cells.append(state)
        table.add_row(*cells)
    return table, left_out


def _selected(
    events: Sequence[SessionEvent], start: int, limit: int | None
) -> Sequence[SessionEvent]:
    """Return the events from seq *start* on, at most *limit* of them."""
    index = bisect.bisect_left(events, start, key=lambda event: event.seq)
    return events[index : None if limit is None else index + limit]


async def show(args: argparse.Namespace) -> int:
    """``show ID``: the stored log exactly as stored (no repair), as a table or JSONL.

    ``--from SEQ`` and ``--limit N`` pick the events shown (from that seq on, at most N).
    The table is written row by row as it is made, so a long log starts printing at once
    and costs no more memory than the events read.
    """
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        if args.json:
            events = await store.read_from(args.id, args.start)
            write_jsonl(event.to_json() for event in _selected(events, args.start, args.limit))
            return 0
        events = await store.read_from(args.id, 0)
        header = await stored_header(store, args.id)
    console = make_console()
    details = [f"created {local_datetime(header.created_at)}"]
    if header.cwd:
        details.append(f"cwd {header.cwd}")
    if header.title:
        details.append(f"title {header.title!r}")
    if header.parent_session:
        details.append(f"forked from {header.parent_session} ({header.seed_length} events)")
    console.print(Text(f"session {header.id}", style="bold"), Text(" · ".join(details)))
    shown = _selected(events, args.start, args.limit)
    if shown:
        write_event_log(console, shown, collapse_chunks=not args.chunks)
    if len(shown) < len(events):
        what = f"seq {shown[0].seq}-{shown[-1].seq}" if shown else f"none from seq {args.start}"
        console.print(
            f"{len(shown)} of {plural(len(events), 'event')} shown ({what})", markup=False
        )
    turn = open_turn(events)
    waiting = paused_calls(events)
    if turn is not None and waiting:
        closers = interrupted_turn_closers(events)
        note = paused_note(turn, waiting)
        if closers:
            note += f"; 'sessionledger repair {header.id}' answers the calls that are not paused"
        console.print(Text(note + ".", style="yellow"))
    elif turn is not None:
        closers = interrupted_turn_closers(events)
        console.print(
            Text(
                f"turn {turn} is open: the session is still running, or it was interrupted. "
                f"'sessionledger repair {header.id}' closes it ({plural(len(closers), 'event')}).",
                style="yellow",
            )
        )
    return 0


async def stored_header(store: SessionPersistence, session_id: str) -> SessionHeader:
    """Return the stored header of *session_id* without validating its events.

    ``show`` must work on a log that fails validation (that is when it is most useful),
    so the header comes from the header listing, not from ``inspect``.
    """
    for info in await store.list_snapshots():
        if info.header.id == session_id:
            return info.header
    raise SessionNotFoundError("session not found", session_id=session_id)


def _seq_in_range(at: int, events: Sequence[SessionEvent], session_id: str) -> None:
    if not 0 <= at < len(events):
        raise ConfigError(
            f"--at {at} is not a seq of session {session_id!r} (seqs 0-{len(events) - 1})"
        )


def _system_prompt_at(events: Sequence[SessionEvent], at: int) -> str | None:
    """Return the system prompt of the request header in force at *at* (the same fold
    as ``Session.request_header``)."""
    header = RequestFolds(events[: at + 1]).header()
    return None if header is None else header.get("system")


def provider_request(kind: str, events: Sequence[SessionEvent], at: int) -> Any:
    """The messages the model sees after *at* as a request body of provider *kind*
    (``openai`` or ``anthropic``), with the system prompt of the request header in force
    then: what ``messages --format`` prints and ``export`` writes (an empty history for
    a log with no event)."""
    history = messages_at(events, at) if events else []
    system = _system_prompt_at(events, at) if events else None
    if kind == "openai":
        return to_openai_messages(history, system=system)
    return dict(to_anthropic_messages(history, system=system))


async def messages(args: argparse.Namespace) -> int:
    """``messages ID``: the model's history (repaired view), plain or in a provider format."""
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        stored = await store.inspect(args.id)
    events = stored.events
    at = len(events) - 1 if args.at is None else args.at
    _seq_in_range(at, events, args.id)
    if args.format in ("openai", "anthropic"):
        write_json(provider_request(args.format, events, at))
        return 0
    history = messages_at(events, at)
    if args.json:
        write_json(plain_messages(history))
        return 0
    title = f"{plural(len(history), 'message')} the model sees after seq {at} of {args.id}"
    print_messages(history, title=title)
    return 0


async def transcript_command(args: argparse.Namespace) -> int:
    """``transcript ID``: what the user saw, in log order, compacted history included."""
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        stored = await store.inspect(args.id)
    seen = transcript(stored.events)
    if args.json:
        write_json(plain_messages(seen))
        return 0
    print_messages(seen, title=f"transcript of {args.id} ({plural(len(seen), 'message')})")
    return 0


def _line_bytes(records: list[Any]) -> int:
    return sum(len(jsoncodec.dumps(record)) + 1 for record in records)


async def stats(args: argparse.Namespace) -> int:
    """``stats ID``: events by type, surface size, bytes and the chunk-packing ratio."""
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        events = await store.read_from(args.id, 0)
    envelopes = [event.to_json() for event in events]
    plain = _line_bytes(envelopes)
    packed_records = pack_chunk_runs(events)
    packed = _line_bytes(packed_records)
    fold = fold_surface(events)
    by_type = Counter(event.type for event in events)
    report: dict[str, Any] = {
        "id": args.id,
        "events": len(events),
        "eventsByType": dict(sorted(by_type.items())),
        "surfaceNodes": len(fold.nodes),
        "replacements": len(fold.replacements),
        "openTurn": open_turn(events),
        "firstTime": events[0].time if events else None,
        "lastTime": events[-1].time if events else None,
        "jsonlBytes": plain,
        "packedBytes": packed,
        "packedRecords": len(packed_records),
        "packingRatio": round(plain / packed, 3) if packed else None,
    }
    if args.json:
        write_json(report)
        return 0
    console = make_console()
    # Above the table, not its title: the narrow table would fold the id.
    console.print(Text(f"events of {args.id} by type", style="italic"))
    table = Table(expand=False)
    table.add_column("type")
    table.add_column("count", justify="right")
    for kind, count in by_type.most_common():
        table.add_row(kind, str(count))
    table.add_row(Text("total", style="bold"), Text(str(len(events)), style="bold"))
    console.print(table)
    span = (events[-1].time - events[0].time) / 1000 if events else 0.0
    lines = [
        f"surface: {plural(len(fold.nodes), 'node')}, "
        f"{plural(len(fold.replacements), 'replacement')}",
        f"span: {span:.3f} s",
        f"stored as one envelope per line: {plain:,} bytes",
        f"with chunk runs packed into rows: {packed:,} bytes in "
        f"{plural(len(packed_records), 'record')}",
        f"packing ratio: {report['packingRatio']}x",
    ]
    for line in lines:
        console.print(line, markup=False)
    return 0


def _distributions(ledger: Ledger) -> dict[str, str]:
    """Map plugin name → ``distribution version`` for the catalog."""
    pm = ledger.plugins.pm
    names: dict[str, str] = {}
    for plugin, dist in pm.list_plugin_distinfo():
        name = pm.get_name(plugin)
        if name is not None:
            names[name] = f"{dist.project_name} {dist.version}"
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        names.setdefault(
            "sessionledger", f"sessionledger {importlib.metadata.version('sessionledger')}"
        )
    return names


async def catalog(args: argparse.Namespace) -> int:
    """``catalog``: the registered event types, who registered them, and store schemes."""
    # Finding plugins and their distributions reads package metadata: not on the loop.
    ledger = await in_thread(Ledger, plugins=args.plugins)
    try:
        registry = ledger.plugins.event_types
        schemes = sorted(ledger.plugins.backends())
        dists = await in_thread(_distributions, ledger)
    finally:
        await ledger.close()
    rows: list[dict[str, Any]] = [
        {
            "type": event_type.name,
            "plugin": registry.plugin_of(event_type.name),
            "distribution": dists.get(registry.plugin_of(event_type.name) or ""),
            "surface": event_type.surface,
            "ignorable": event_type.ignorable,
            "validated": event_type.validate is not None,
        }
        for event_type in registry
    ]
    if args.json:
        write_json({"eventTypes": rows, "storeSchemes": schemes})
        return 0
    console = make_console()
    table = Table(title="registered event types", title_justify="left", expand=False)
    for name in ("type", "plugin", "surface", "ignorable", "validated"):
        table.add_column(name, no_wrap=True)
    for row in rows:
        plugin = row["plugin"] or "?"
        if row["distribution"] and row["distribution"].split()[0] != plugin:
            plugin = f"{plugin} ({row['distribution']})"
        table.add_row(
            row["type"],
            plugin,
            "yes" if row["surface"] else "",
            "yes" if row["ignorable"] else "",
            "yes" if row["validated"] else "",
        )
    console.print(table)
    console.print("store schemes: " + ", ".join(f"{scheme}:" for scheme in schemes), markup=False)
    return 0
