"""Rows <-> storage records (``sessionledger_postgres.rows``), without a server."""

from __future__ import annotations

from typing import Any

import pytest

from sessionledger._errors import JsonValueError
from sessionledger.storage._chunks import pack_chunk_runs, unpack_record
from sessionledger.storage._logstore import UNPARSABLE
from sessionledger_postgres.rows import batch_columns, plain_text, row_end, storage_record


def delta(seq: int, text: str) -> dict[str, Any]:
    chunk = {"type": "text-delta", "index": 0, "text": text}
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": seq,
        "data": {"turn": 1, "step": 1, "chunk": chunk},
    }


def test_columns_and_records_round_trip_events_and_packed_rows() -> None:
    events = [
        {"type": "user/note", "seq": 0, "time": 5, "data": {"b": 1, "a": [1.5]}, "ignorable": True},
        *(delta(seq, f"t{seq}") for seq in range(1, 5)),
        {
            "type": "tool/result",
            "seq": 5,
            "time": 9,
            "data": {},
            "surfaceOp": {"op": "replace", "start": 0, "end": 1},
            "sourceEventSeqs": [0],
        },
    ]
    records = pack_chunk_runs(events)
    columns = batch_columns("s", records)
    assert columns[0] == [0, 1, 5]  # seq; the packed row sits at its seq0
    assert columns[6] == [1, 0, None]  # ignorable: 1 marker, 0 packed row, NULL event
    rebuilt = [storage_record(row) for row in zip(*columns, strict=True)]
    assert [event for record in rebuilt for event in unpack_record(record)] == events
    assert row_end((1, 0, columns[3][1])) == 5
    assert row_end((5, None, columns[3][2])) == 6
    assert row_end(None) == 0


@pytest.mark.parametrize(
    "row",
    [
        (0, "x/y", 0, '{"a":', None, None, None),
        (0, "x/y", 0, "{}", "[1", None, None),
        (0, "x/y", 0, None, None, None, None),
    ],
)
def test_a_row_that_does_not_parse_is_unparsable(row: tuple[Any, ...]) -> None:
    assert storage_record(row) is UNPARSABLE


def test_a_malformed_packed_row_still_ends_the_stored_log_at_its_seq() -> None:
    assert row_end((7, 0, "not json")) == 8


@pytest.mark.parametrize("text", ["a\0b", "lone \ud800"])
def test_plain_columns_refuse_what_postgres_text_cannot_hold(text: str) -> None:
    with pytest.raises(JsonValueError):
        plain_text(text, "title", "s")
    assert plain_text("fine é", "title", "s") == "fine é"
