"""``reindex``: rebuild the summaries and search texts of stored sessions from their logs.

Summaries and search texts are derived from the log, written beside it in the same
write; ``reindex`` rebuilds them after an index was lost, or fills one a store gained
later (docs/listing.md). A log that cannot be read keeps what it had and is named, with
exit status 1, as ``verify`` does for a problem it finds.
"""

from __future__ import annotations

import argparse
from typing import Final

from rich.text import Text

from sessionledger.cli._render import make_console, write_json
from sessionledger.cli._stores import opened_store
from sessionledger.cli._words import plural

#: Exit status when a log could not be read to rebuild its index.
EXIT_UNREADABLE: Final = 1


async def reindex(args: argparse.Namespace) -> int:
    """``reindex [ID]``: every session, or one; exit 1 if a log could not be read."""
    async with opened_store(args.store_url, plugins=args.plugins) as store:
        report = await store.reindex(args.id)
    code = EXIT_UNREADABLE if report.unreadable else 0
    if args.json:
        write_json(
            {
                "reindexed": report.reindexed,
                "unreadable": [{"id": sid, "problem": why} for sid, why in report.unreadable],
            }
        )
        return code
    console = make_console()
    console.print(
        f"reindexed {plural(report.reindexed, 'session')} in {args.store_url}", markup=False
    )
    for session_id, problem in report.unreadable:
        console.print(Text(f"✗ {session_id}: unreadable: {problem}", style="bold red"))
    if report.unreadable:
        console.print(
            f"{plural(len(report.unreadable), 'session')} kept the index it had: "
            "'sessionledger verify ID' says why, 'sessionledger repair --salvage ID' cuts "
            "a damaged log back to its intact prefix",
            markup=False,
        )
    return code
