"""RawRecord: a record a store hands over parsed, or unparsed for the decode to parse."""

from __future__ import annotations

from typing import Any

from sessionledger.storage._logstore import UNPARSABLE, RawRecord, parse_json


def test_a_parsed_record_gives_its_value() -> None:
    record = RawRecord({"type": "x", "seq": 0}, 7, "line 2", 2)
    assert record.value == {"type": "x", "seq": 0}
    assert (record.position, record.label, record.line) == (7, "line 2", 2)


def test_a_record_of_text_is_parsed_each_time_it_is_read() -> None:
    data = b'xx{"type":"x","seq":0,"data":[1,2]}yy'
    record = RawRecord.of_text(memoryview(data)[2:-2], 2, "line 2", 2)
    first, second = record.value, record.value
    assert first == second == {"type": "x", "seq": 0, "data": [1, 2]}
    assert first is not second  # nothing parsed is kept: a cold load drops it once read
    assert (record.position, record.label, record.line) == (2, "line 2", 2)


def test_text_that_is_not_json_is_unparsable() -> None:
    for text in (b"", b"{", b'{"a":1} x', b"\xff"):
        assert RawRecord.of_text(text, 0, "line 2").value is UNPARSABLE


def test_text_nested_deeper_than_orjson_reads_still_parses() -> None:
    depth = 2_000
    text = b"[" * depth + b"]" * depth
    value: Any = parse_json(text)
    for _ in range(depth - 1):
        (value,) = value
    assert value == []


def test_a_deferred_record_builds_its_value_when_read() -> None:
    calls: list[tuple[int, str]] = []

    def build(seq: int, kind: str) -> dict[str, Any]:
        calls.append((seq, kind))
        return {"type": kind, "seq": seq}

    record = RawRecord.deferred(build, (3, "x"), 3, "row seq 3")
    assert calls == []
    assert record.value == {"type": "x", "seq": 3}
    assert calls == [(3, "x")]
    assert record.line is None
