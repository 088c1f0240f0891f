"""The relational row layout shared by the SQL backends (``sessionledger.storage._rows``)."""

from __future__ import annotations

from hypothesis import given

from sessionledger import SessionHeader
from sessionledger.model._jsoncodec import dumps
from sessionledger.storage._chunks import pack_chunk_runs
from sessionledger.storage._logstore import UNPARSABLE
from sessionledger.storage._rows import (
    event_columns,
    header_columns,
    header_json,
    member_count,
    record_from_columns,
    row_end,
)
from sessionledger.testing.strategies import chunk_event_batches


@given(chunk_event_batches(form="events"))
def test_records_survive_the_trip_through_columns(batch: list) -> None:
    for record in pack_chunk_runs(batch):
        columns = event_columns(record)
        assert dumps(record_from_columns(*columns)) == dumps(record)
        seq, _, _, data, _, _, ignorable = columns
        assert row_end(seq, ignorable, data) == columns[0] + member_count(record)


def test_rows_whose_columns_do_not_make_a_record_are_unparsable() -> None:
    good = (3, "x/note", 1, "{}", None, None, None)
    assert record_from_columns(*good) == {"type": "x/note", "seq": 3, "time": 1, "data": {}}
    for position, bad in ((0, "3"), (1, None), (2, 1.5), (3, "{"), (3, b"{}"), (6, 2)):
        columns = list(good)
        columns[position] = bad
        assert record_from_columns(*columns) is UNPARSABLE
    assert row_end(7, 0, "not json") == 8  # a damaged last row still ends the log there


def test_headers_survive_the_trip_through_columns() -> None:
    full = SessionHeader(
        id="h",
        created_at=5,
        cwd="/srv",
        parent_session="p",
        seed_length=3,
        delegation_depth=2,
        title="t",
        meta={"k": [1, "é"]},
    )
    for header in (full, SessionHeader(id="bare", created_at=0)):
        assert SessionHeader.from_json(header_json(header_columns(header))) == header
    damaged = list(header_columns(full))
    damaged[8] = "{not json"
    assert header_json(damaged)["meta"] is UNPARSABLE
