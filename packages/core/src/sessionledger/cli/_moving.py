"""Commands that move sessions between stores, bring them in or remove them: ``copy``,
``import`` and ``delete``."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from sessionledger._errors import (
    ConfigError,
    HistoryFormatError,
    ReadBackMismatchError,
    SessionExistsError,
    SessionNotFoundError,
)
from sessionledger.cli._checking import load_check_log
from sessionledger.cli._render import make_console, write_json
from sessionledger.cli._stores import opened_ledger, opened_store
from sessionledger.cli._words import plural
from sessionledger.model._events import SessionEvent, SessionHeader
from sessionledger.model._session import Session
from sessionledger.storage._cancellation import in_thread
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.views._importing import (
    from_anthropic_messages,
    from_openai_messages,
    load_history_file,
)

#: Exit status when a copied session does not read back identical.
EXIT_MISMATCH: Final = 1


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=make_console(stderr=True),
    )


async def _copy_session(
    source: SessionPersistence, target: SessionPersistence, session_id: str
) -> tuple[int, ReadBackMismatchError | None]:
    """Copy one session whole (``publish``: read back and compared before it is
    published); return its event count and, when the copy differed, the error."""
    stored = await source.inspect(session_id)
    try:
        await target.publish(stored.header, stored.events)
    except ReadBackMismatchError as error:
        return len(stored.events), error
    await target.release(session_id)  # written: the copy needs no hold on it
    return len(stored.events), None


async def copy(args: argparse.Namespace) -> int:
    """``copy --from URL --to URL [ID ...]``: copy sessions (all by default), each
    compared event for event (``to_json()``) with what was read.

    Each session is copied as a resume would see it (``inspect``: a torn tail dropped, an
    interrupted turn closed), so the copy is a clean, closed log. It is published whole
    (``SessionPersistence.publish``): the destination shows it only once it is written
    and read back identical, so a copy killed part-way leaves no partial session, and
    ``--skip-existing`` finishes it (docs/durability.md, "copying sessions"). An id that
    already exists in the destination stops the command before anything is written,
    unless ``--skip-existing`` leaves those sessions out (as they are, not compared). A
    source session that cannot be read stops the command (exit 2) with the sessions
    before it copied and verified.
    """
    if args.source == args.target:
        raise ConfigError("--from and --to name the same store")
    async with (
        opened_store(args.source, plugins=args.plugins) as source,
        opened_store(args.target, must_exist=False, plugins=args.plugins) as target,
    ):
        available = [info.header.id for info in await source.list_snapshots()]
        ids: list[str] = list(dict.fromkeys(args.ids)) if args.ids else available
        for session_id in ids:
            if session_id not in available:
                raise SessionNotFoundError(
                    f"session not found in {args.source}", session_id=session_id
                )
        existing = {info.header.id for info in await target.list_snapshots()}
        clashes = [session_id for session_id in ids if session_id in existing]
        if clashes and not args.skip_existing:
            raise SessionExistsError(
                f"already in {args.target}: {plural(len(clashes), 'session')} of those to "
                "copy; nothing was copied (--skip-existing copies the others)",
                session_id=clashes[0],
            )
        todo = [session_id for session_id in ids if session_id not in existing]
        copied_events = 0
        mismatches: list[tuple[str, ReadBackMismatchError]] = []
        with _progress() as progress:
            task = progress.add_task("copying", total=len(todo))
            for session_id in todo:
                # Each session is verified before it is published, so a failure later on
                # leaves only verified copies behind.
                progress.update(task, description=f"copying {session_id}")
                count, mismatch = await _copy_session(source, target, session_id)
                if mismatch is not None:
                    mismatches.append((session_id, mismatch))
                if mismatch is None or mismatch.published:
                    copied_events += count
                progress.advance(task)
            progress.update(task, description="copied and verified")
    unpublished = {sid for sid, error in mismatches if not error.published}
    if args.json:
        write_json(
            {
                "from": args.source,
                "to": args.target,
                "copied": [sid for sid in todo if sid not in unpublished],
                "skipped": clashes,
                "events": copied_events,
                "verified": not mismatches,
                "mismatches": [
                    {"id": sid, "difference": error.difference, "published": error.published}
                    for sid, error in mismatches
                ],
            }
        )
        return EXIT_MISMATCH if mismatches else 0
    console = make_console()
    console.print(
        f"copied {plural(len(todo) - len(unpublished), 'session')} "
        f"({plural(copied_events, 'event')}) "
        f"from {args.source} to {args.target}",
        markup=False,
    )
    if clashes:
        console.print(
            f"skipped {len(clashes)} already in the destination (left as they are, not compared)",
            markup=False,
        )
    for session_id, error in mismatches:
        left = "left in the destination" if error.published else "nothing was published"
        problem = f"✗ {session_id}: the copy differs: {error.difference} ({left})"
        console.print(Text(problem, style="bold red"))
    if mismatches:
        return EXIT_MISMATCH
    if todo:
        verified = f"verified {plural(len(todo), 'session')} event-for-event: identical"
        console.print(Text(verified, style="green"))
    return 0


async def delete(args: argparse.Namespace) -> int:
    """``delete ID``: remove a stored session and everything stored for it."""
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        await store.delete(args.id)
    if args.json:
        write_json({"deleted": args.id})
    else:
        make_console().print(f"deleted {args.id} from {args.store_url}", markup=False)
    return 0


async def import_history(args: argparse.Namespace) -> int:
    """``import --format openai|anthropic FILE [--id ID]``: create a session from a JSON
    file of provider messages (a list, or an object with ``messages`` and ``system``).

    The history is first appended to a detached session (every envelope, data, message
    and surface check) and run through the invariants when they are installed; only a
    history that passes them all is appended through a ledger and flushed, so a bad file
    leaves nothing in the store.
    """
    messages, system = load_history_file(await in_thread(Path(args.file).read_bytes))
    if args.format == "openai":
        if system is not None:
            messages = [{"role": "system", "content": system}, *messages]
        envelopes = from_openai_messages(messages)
    else:
        envelopes = from_anthropic_messages(messages, system=system)
    _append_all(Session.create(header=SessionHeader(id="import", created_at=0)), envelopes)
    check_log = load_check_log()
    violations = [] if check_log is None else list(check_log(envelopes_as_events(envelopes)))
    if violations:
        first = violations[0]
        raise HistoryFormatError(
            f"the history breaks the turn/step/tool invariants at seq {first.seq}: {first.message}"
        )
    async with opened_ledger(args.store_url, plugins=args.plugins) as ledger:
        session = ledger.create(args.id)
        _append_all(session, envelopes)
        await ledger.flush(session)
    if args.json:
        write_json({"id": session.id, "messages": len(messages), "events": session.seq})
    else:
        make_console().print(
            f"imported {plural(len(messages), 'message')} into session {session.id} "
            f"({plural(session.seq, 'event')})"
        )
    return 0


def _append_all(session: Session, envelopes: Sequence[Mapping[str, Any]]) -> None:
    for envelope in envelopes:
        session.append(
            envelope["type"],
            envelope["data"],
            surface_op=envelope.get("surfaceOp"),
            source_event_seqs=envelope.get("sourceEventSeqs"),
        )


def envelopes_as_events(envelopes: Sequence[Mapping[str, Any]]) -> list[SessionEvent]:
    """Return envelope dicts as frozen events (what the invariants' ``check_log`` reads)."""
    return [SessionEvent.from_json(envelope) for envelope in envelopes]
