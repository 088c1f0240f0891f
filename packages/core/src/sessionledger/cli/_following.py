"""``tail``: print a session's acknowledged events, or every session's, and with ``-f``
go on printing them as they are acknowledged, from whichever process writes them
(docs/feed.md).

Each event is written (and flushed) as it arrives: one line ``seq time type preview``,
or with ``--json`` the event's JSON object as ``show --json`` writes it. ``tail --all``
prefixes each line with the session id (``--json``: ``{"session": ID, "event": {...}}``,
and ``{"session": ID, "deleted": true}`` when a session goes), and when it stops
prints to stderr the cursor that ``--after`` resumes from.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator

from sessionledger._errors import QueryError, SessionDeletedError
from sessionledger.cli._preview import event_preview, local_time
from sessionledger.cli._stores import opened_store
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._events import SessionEvent
from sessionledger.storage._feed import StoreFeed


def _line(event: SessionEvent, session_id: str | None = None) -> bytes:
    head = "" if session_id is None else f"{session_id}  "
    text = f"{head}{event.seq:>6}  {local_time(event.time)}  {event.type:<18}  "
    return (text + event_preview(event)).encode("utf-8", "backslashreplace") + b"\n"


def _write(line: bytes) -> None:
    out = sys.stdout.buffer
    out.write(line)
    out.flush()


async def tail(args: argparse.Namespace) -> int:
    """``tail ID [-f] [--after SEQ] [--json]`` and ``tail --all [-f] [--after CURSOR]``."""
    if args.all == (args.id is not None):
        raise QueryError("tail takes a session ID or --all, not both")
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        if args.all:
            return await _tail_all(args, store.follow_all(after=args.after, wait=args.follow))
        try:
            after = -1 if args.after is None else int(args.after)
        except ValueError:
            raise QueryError(f"--after takes a seq for one session, got {args.after!r}") from None
        events = store.follow(args.id, after=after, wait=args.follow)
        return await _tail_one(args, events)


async def _tail_one(args: argparse.Namespace, events: AsyncIterator[SessionEvent]) -> int:
    try:
        async for event in events:
            _write(jsoncodec.dumps(event.to_json()) + b"\n" if args.json else _line(event))
    except SessionDeletedError as error:
        print(f"the session was deleted: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


async def _tail_all(args: argparse.Namespace, feed: StoreFeed) -> int:
    try:
        async for session_id, event in feed:
            if args.json:
                item = (
                    {"session": session_id, "deleted": True}
                    if event is None
                    else {"session": session_id, "event": event.to_json()}
                )
                _write(jsoncodec.dumps(item) + b"\n")
            elif event is None:
                _write(f"{session_id}  deleted\n".encode("utf-8", "backslashreplace"))
            else:
                _write(_line(event, session_id))
    finally:
        print(f"resume with: --after {feed.cursor}", file=sys.stderr, flush=True)
    return 0
