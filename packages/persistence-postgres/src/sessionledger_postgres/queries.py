"""The PostgreSQL store's listing and search queries, built from a core query.

A listing (``listing.SessionQuery``) is answered in SQL as far as SQL answers it exactly:
the order and cursor over the listing indexes, the time bounds on ``last_activity`` and the
title filter with ASCII letters folded by ``translate`` (never the locale's ``lower``, so
``É`` and ``é`` stay distinct). A ``meta`` filter narrows rows to those whose JSON text
holds ``"key":value`` as ``jsoncodec`` writes it; the store then checks each row with the
core's own ``matches_query``, which settles JSON types exactly (JSON holding U+0000 or not
parsing cannot even be cast in SQL), and skips a header this build cannot read before the
page is counted, as the policy would (docs/formats.md, "PostgreSQL").

A search (``searching.TextQuery``) matches a row when PostgreSQL's ``simple`` parser finds
every query word in its text: the core's word rule for plain words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import asyncpg

from sessionledger._errors import CorruptLogError, FormatUnsupportedError, HeaderError, LedgerError
from sessionledger.storage._committed import check_version, stored_header
from sessionledger.storage._listing import SessionInfo, SessionQuery, StoredSummary, matches_query
from sessionledger.views._searching import TextQuery
from sessionledger.views._summaries import SessionSummary
from sessionledger_postgres import rows

__all__ = ["listable", "listing", "search", "stored_summary"]

_ASCII_FOLD: Final = "translate({}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"


def listing(select: str, query: SessionQuery) -> tuple[str, list[Any]] | None:
    """Return the SQL (*select* plus its conditions and order) and arguments that list
    *query*'s candidate rows, best first; None when a value cannot be a SQL parameter
    (U+0000 or a lone surrogate: the policy answers such a query)."""
    clauses: list[str] = []
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    key = "last_activity" if query.order == "last_activity" else "created_at"
    if query.title is not None:
        if rows.text_flaw(query.title) is not None:
            return None
        folded = _ASCII_FOLD.format(arg(query.title))
        clauses.append(f"strpos({_ASCII_FOLD.format('title')}, {folded}) > 0")
    for name, value in query.meta:
        try:
            needle = f"{rows.json_text(name)}:{rows.json_text(value)}"
        except LedgerError:
            return None
        clauses.append(f"strpos(meta, {arg(needle)}) > 0")
    if query.since is not None:
        clauses.append(f"last_activity >= {arg(query.since)}")
    if query.until is not None:
        clauses.append(f"last_activity < {arg(query.until)}")
    if query.after is not None:
        after_key, after_id = query.after
        if rows.text_flaw(after_id) is not None:
            return None
        at = arg(after_key)
        # The first bound is one the index can seek to; the second settles ties by id.
        clauses.append(f"{key} <= {at} AND ({key} < {at} OR id > {arg(after_id)})")
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    return f"{select}{where} ORDER BY {key} DESC, id", args


def stored_summary(row: asyncpg.Record | Sequence[Any]) -> StoredSummary:
    """A listing row from a ``sessions`` row (header, incarnation, revision, summary)."""
    return StoredSummary(
        rows.header_json(row),
        rows.revision_string(row[9], row[10]),
        rows.summary_from_columns(row[11], row[12], row[13], row[14]),
    )


def listable(stored: StoredSummary, query: SessionQuery) -> bool:
    """Whether the policy lists *stored* for *query*: a header this build reads (else it
    is skipped, as ``list_sessions`` skips it), passing the core's filters."""
    try:
        check_version(stored.header, None)
        header = stored_header(stored.header, None, None)
    except (FormatUnsupportedError, HeaderError, CorruptLogError):
        return False
    info = SessionInfo(header, stored.revision, stored.summary or SessionSummary())
    return matches_query(info, query)


def search(select: str, query: TextQuery) -> tuple[str, list[Any]]:
    """Return the SQL (*select*, whose ``$1`` is the words, plus the filters, order and
    limit) and arguments of *query*. The words are the core's, already normalized;
    ``plainto_tsquery`` joins them with AND and reads no operator in them."""
    sql = select
    args: list[Any] = [" ".join(query.words)]
    if query.session is not None:
        args.append(query.session)
        sql += f" AND session_id = ${len(args)}"
    if query.types is not None:
        args.append(sorted(query.types))
        sql += f" AND type = ANY(${len(args)}::text[])"
    args.append(query.limit)
    sql += f" ORDER BY time DESC, session_id, seq DESC LIMIT ${len(args)}"
    return sql, args
