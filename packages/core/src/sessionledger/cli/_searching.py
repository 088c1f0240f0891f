"""``search``: find the messages that hold every word of a text, newest first.

The store answers from its text index where it keeps one, else the library reads every
log (docs/listing.md, "search"); either way the hits are the same. On a terminal the
matched words are highlighted; ``--json`` prints each hit's ``SearchHit.to_json()``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from sessionledger._errors import SessionNotFoundError
from sessionledger.cli._render import local_datetime, make_console, write_json
from sessionledger.cli._stores import opened_store, store_is_missing
from sessionledger.cli._words import plural
from sessionledger.storage._cancellation import in_thread
from sessionledger.views._searching import SearchHit, words


async def search(args: argparse.Namespace) -> int:
    """``search TEXT [--session ID] [--limit N] [--type TYPE ...]``."""
    hits: list[SearchHit] = []
    if await in_thread(store_is_missing, args.store_url):
        if args.session is not None:
            raise SessionNotFoundError("session not found", session_id=args.session)
    else:
        async with opened_store(args.store_url, plugins=args.plugins) as store:
            hits = await store.search(
                args.text, limit=args.limit, session=args.session, types=args.types
            )
    if args.json:
        write_json([hit.to_json() for hit in hits])
        return 0
    console = make_console()
    query = words(args.text)
    if not hits:
        console.print(f"no message in {args.store_url} holds {' '.join(query)}", markup=False)
        return 0
    caption = f"{plural(len(hits), 'hit')} for {' '.join(query)} in {args.store_url}, newest first"
    console.print(Text(caption, style="italic"))
    table = Table(expand=False, box=None, pad_edge=False, header_style="bold underline")
    table.add_column("session", overflow="fold")
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("snippet", overflow="fold")
    for hit in hits:
        table.add_row(
            Text(hit.session_id),
            str(hit.seq),
            hit.type,
            local_datetime(hit.time),
            highlighted(hit.snippet, query),
        )
    console.print(table)
    return 0


def highlighted(snippet: str, query: Sequence[str]) -> Text:
    """Return *snippet* with each whole word of *query* styled (only a terminal shows it)."""
    text = Text(snippet)
    for word in query:
        text.highlight_regex(
            re.compile(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", re.IGNORECASE),
            "bold reverse",
        )
    return text
