"""``split_batches`` takes the record lines of a log in runs (``LineRecords.take_lines``);
it must split any bytes, damaged or not, exactly as a walk of the file line by line does,
and ``LineRecords`` must give the records ``RawRecord.of_text`` would make of each line."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from hypothesis import given, strategies as st

from sessionledger import SessionHeader
from sessionledger._errors import LedgerError
from sessionledger.storage._chunks import pack_chunk_runs
from sessionledger.storage._committed import scan_log
from sessionledger.storage._lines import LineRecords, pure_line_starts
from sessionledger.storage._logstore import UNPARSABLE, RawLog, RawRecord
from sessionledger.testing.strategies import session_logs
from sessionledger_jsonl._format import (
    _RECORD_START,
    _Split,
    continuation,
    continued_parts,
    frame_batch,
    header_line,
    log_parts,
    parse_header,
    split_batches,
)

logstore = importlib.import_module("sessionledger.storage._logstore")
lines_module = importlib.import_module("sessionledger.storage._lines")


def line_by_line(data: bytes, body: int) -> tuple[LineRecords, list[Any]]:
    """The split as the format describes it: each line in turn, a record line kept as
    text, any other parsed (a commit record, or damage)."""
    split = _Split(data, body)
    limit = max(data.rfind(b"\n") + 1, body)
    position, number = body, 2
    while position < limit:
        end_at = data.find(b"\n", position)
        if data.startswith(_RECORD_START, position, end_at):
            assert split.records.take_lines(position, end_at + 1, number) == end_at + 1
        else:
            split.line(position, end_at, number)
        position, number = end_at + 1, number + 1
    return split.finish(limit, number)


def seen(records: Sequence[RawRecord]) -> list[tuple[Any, ...]]:
    """Everything a reader can see of *records*."""
    return [
        (
            record.position,
            record.label,
            record.line,
            None if record.text is None else bytes(record.text),
            orjson.dumps(record.value, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
            if record.value is not logstore.UNPARSABLE
            else "unparsable",
        )
        for record in records
    ]


def assert_splits_alike(data: bytes) -> None:
    body = data.index(b"\n") + 1
    records, batches = split_batches(data, body)
    walked_records, walked_batches = line_by_line(data, body)
    assert seen(records) == seen(walked_records)
    assert batches == walked_batches
    compiled = lines_module._line_starts
    if compiled is not pure_line_starts:  # and the pure scan of lines alike
        lines_module._line_starts = pure_line_starts
        try:
            pure_records, pure_batches = split_batches(data, body)
        finally:
            lines_module._line_starts = compiled
        assert seen(pure_records) == seen(records)
        assert pure_batches == batches


def written_log(log: list[dict[str, Any]], batch_size: int) -> bytes:
    """The bytes a writer writes for *log*, in batches of *batch_size* events."""
    first = header_line(SessionHeader(id="s", created_at=0), "token")
    data = first
    for start in range(0, len(log), batch_size):
        events = log[start : start + batch_size]
        records = pack_chunk_runs(events, 5, None)
        covered = first if start == 0 else b""
        data += frame_batch(records, start, start + len(events), covered=covered)
    return data


fragments = st.sampled_from(
    [b"\n", b'{"type":', b'{"commit":', b'{"commit":{"first":0}}', b"{", b"}", b" ", b"x",
     b'\n{"type":"x/note","seq":0,"time":0,"data":{}}\n', b'{"type"', b"\r\n", b"\x00"]
)  # fmt: skip


@st.composite
def damaged_logs(draw: st.DrawFn) -> bytes:
    """A written log, then cut, spliced, duplicated or overwritten in a few places."""
    data = written_log(draw(session_logs()), draw(st.integers(1, 12)))
    body = data.index(b"\n") + 1
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(body, len(data)))
        how = draw(st.sampled_from(["insert", "delete", "cut", "duplicate", "overwrite"]))
        if how == "insert":
            data = data[:at] + draw(fragments) + data[at:]
        elif how == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 40)) :]
        elif how == "cut":
            data = data[:at]
        elif how == "duplicate":
            end = data.find(b"\n", at) + 1 or len(data)
            data = data[:end] + data[at:end] + data[end:]
        else:
            piece = draw(fragments)
            data = data[:at] + piece + data[at + len(piece) :]
    return data


@given(damaged_logs())
def test_a_log_splits_as_a_walk_line_by_line_splits_it(data: bytes) -> None:
    assert_splits_alike(data)


@given(session_logs(), st.integers(1, 12))
def test_a_written_log_splits_into_intact_batches_of_text_records(
    log: list[dict[str, Any]], batch_size: int
) -> None:
    data = written_log(log, batch_size)
    assert_splits_alike(data)
    records, batches = split_batches(data, data.index(b"\n") + 1)
    assert all(batch.problem is None for batch in batches)
    assert all(record.text is not None for record in records)


@pytest.mark.parametrize(
    "tail",
    [b"", b"\n", b"\n\n", b'{"type":', b'{"type":"x"}\n', b'{"commit":{}}\n', b"{}\n{}",
     b'\n{"type":"x/note"}\n{"commit":', b' {"type":"x"}\n', b"{\"type\":\n"]
)  # fmt: skip
def test_the_edges_of_a_run_of_record_lines_split_alike(tail: bytes) -> None:
    # Empty lines, a record start cut short, a commit record alone, a torn last line.
    log = [{"type": "x/note", "seq": seq, "time": 0, "data": {}} for seq in range(4)]
    data = written_log(log, 2)
    assert_splits_alike(data + tail)
    assert_splits_alike(data[: data.index(b"\n") + 1] + tail)


def scans() -> list[Any]:
    """The line scans to test: the pure one, and the compiled one where it runs."""
    return list({id(scan): scan for scan in (pure_line_starts, lines_module._line_starts)}.values())


def test_take_lines_stops_at_the_first_line_that_begins_otherwise() -> None:
    data = b'{"type":1}\n{"type":2}\n{"commit":3}\n{"type":4}\n'
    for scan in scans():
        saved = lines_module._line_starts
        lines_module._line_starts = scan
        try:
            records = LineRecords(data)
            assert records.take_lines(0, len(data), 2, b'{"type":') == 22
            assert [(r.position, r.label, r.line, r.value) for r in records] == [
                (0, "line 2", 2, {"type": 1}),
                (11, "line 3", 3, {"type": 2}),
            ]
            assert records.take_lines(22, 22, 9) == 22  # nothing to take
            assert len(records) == 2
            everything = LineRecords(data)
            assert everything.take_lines(0, len(data), 7) == len(data)  # no prefix: all
            assert [r.line for r in everything] == [7, 8, 9, 10]
            for start, stop, line in ((0, 5, 2), (-1, 11, 2), (0, len(data) + 1, 2),
                                      (11, 0, 2), (0, 11, -1)):  # fmt: skip
                with pytest.raises(ValueError):
                    LineRecords(data).take_lines(start, stop, line)
        finally:
            lines_module._line_starts = saved


@st.composite
def line_plans(draw: st.DrawFn) -> tuple[bytes, list[tuple[str, int]]]:
    """Lines of text, and a plan: take a few lines at a time (some beginning otherwise),
    or add a record of its own."""
    texts = draw(st.lists(st.sampled_from([b"", b"a", b'{"type":1}', b"\xc3\xa9 x", b"{"]),
                          max_size=12))  # fmt: skip
    data = b"".join(text + b"\n" for text in texts)
    plan = draw(st.lists(st.tuples(st.sampled_from(["take", "prefix", "add"]),
                                   st.integers(0, 4)), max_size=10))  # fmt: skip
    return data, plan


@given(line_plans())
def test_line_records_are_the_records_of_text_each_line_would_make(
    case: tuple[bytes, list[tuple[str, int]]],
) -> None:
    data, plan = case
    for scan in scans():
        saved = lines_module._line_starts
        lines_module._line_starts = scan
        try:
            records, expected = LineRecords(data), []
            position, number = 0, 3
            for how, count in plan:
                if how == "add":
                    own = RawRecord(UNPARSABLE, ("own", count), f"row {count}", None)
                    records.add(own)
                    expected.append(own)
                    continue
                stop = position
                for _ in range(count):
                    stop = data.find(b"\n", stop) + 1 or stop
                begins = b"{" if how == "prefix" else b""
                end = records.take_lines(position, stop, number, begins)
                while position < end:
                    line_end = data.index(b"\n", position)
                    assert data.startswith(begins, position, line_end)
                    text = memoryview(data)[position:line_end]
                    expected.append(RawRecord.of_text(text, position, f"line {number}", number))
                    position, number = line_end + 1, number + 1
                assert end == stop or not data.startswith(begins, end, data.index(b"\n", end))
            assert seen(records) == seen(expected)
            assert seen(records[1:-1]) == seen(expected[1:-1])
            assert len(records) == len(expected)
            for index in range(-len(expected), len(expected)):
                assert records.position(index) == expected[index].position
                assert records.line(index) == expected[index].line
                assert records[index].label == expected[index].label
            for outside in (len(expected), -len(expected) - 1):
                with pytest.raises(IndexError):
                    records[outside]
        finally:
            lines_module._line_starts = saved


committed_module = importlib.import_module("sessionledger.storage._committed")


def _rules_alone(*args: Any) -> tuple[int, int]:
    """A decode loop that takes nothing: where it was asked to start, the seq expected."""
    return (args[2], args[4]) if len(args) == 6 else (args[1], args[3])


def _no_batches(*args: Any) -> tuple[int, int]:
    return 0, args[3]


def scanned(data: bytes, *, compiled: bool) -> Any:
    """What a load's scan makes of a log's bytes, with or without the fast decode loops
    (sessionledger.storage._decode): the events and the torn tail, or the error."""
    names = ("decode_records", "decode_lines", "decode_batches")
    saved = [getattr(committed_module, name) for name in names]
    if not compiled:
        for name, alone in zip(names, (_rules_alone, _rules_alone, _no_batches), strict=True):
            setattr(committed_module, name, alone)
    try:
        body = data.index(b"\n") + 1
        records, batches = split_batches(data, body)
        header, _ = parse_header(data[: body - 1], "p", "s")
        raw = RawLog(header, records, "r", batches=batches)
        scan = scan_log("s", raw, contiguous_from=0)
    except LedgerError as error:
        return f"{type(error).__name__}: {error}"
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(committed_module, name, value)
    return [orjson.dumps(e.to_json()) for e in scan.events], scan.torn_at, scan.torn_batches


@given(damaged_logs())
def test_a_framed_log_scans_alike_with_and_without_the_fast_decode(data: bytes) -> None:
    if b"\n" not in data:
        return
    assert scanned(data, compiled=True) == scanned(data, compiled=False)


@given(session_logs(), st.integers(1, 12))
def test_a_written_log_scans_to_its_events(log: list[dict[str, Any]], batch_size: int) -> None:
    data = written_log(log, batch_size)
    events, torn_at, torn_batches = scanned(data, compiled=True)
    assert events == [orjson.dumps(envelope) for envelope in log]
    assert (torn_at, torn_batches) == (None, 0)


@given(session_logs(), st.integers(1, 12), st.integers(0, 50), st.sampled_from([-1, 1]))
def test_a_commit_record_stating_other_seqs_scans_alike(
    log: list[dict[str, Any]], batch_size: int, which: int, by: int
) -> None:
    # Its checksum covers the batch's lines, not its own numbers: a commit record that
    # states another first or next seq is intact, and the rules must name what is wrong.
    data = written_log(log, batch_size)
    lines = data.split(b"\n")
    commits = [index for index, line in enumerate(lines) if line.startswith(b'{"commit"')]
    at = commits[which % len(commits)]
    fields = orjson.loads(lines[at])["commit"]
    key = "first" if which % 2 else "next"
    fields[key] += by
    lines[at] = orjson.dumps({"commit": fields})
    damaged = b"\n".join(lines)
    outcome = scanned(damaged, compiled=True)
    assert outcome == scanned(damaged, compiled=False)
    assert type(outcome) is str or outcome[2] > 0  # refused, or a torn tail


#: Seqs a commit record may state at and past what 64 bits hold, and the safe range's edge.
WIDE_SEQS = [2**53 - 1, 2**53, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, 10**30,
             -(2**63) - 1, -(2**64)]  # fmt: skip


@pytest.mark.parametrize("stated", WIDE_SEQS)
def test_a_commit_record_stating_a_seq_past_64_bits_scans_alike(stated: int) -> None:
    # The compiled loop takes batches by the seqs their commit records state: one it
    # cannot hold is the rules' to name (CORRUPT, or a torn last batch), never an
    # OverflowError from the load. Each field of each batch's commit record in turn.
    log = [{"type": "x/note", "seq": seq, "time": seq, "data": {}} for seq in range(6)]
    data = written_log(log, 2)
    lines = data.split(b"\n")
    commits = [index for index, line in enumerate(lines) if line.startswith(b'{"commit"')]
    for at in commits:
        for key in (b'"first":', b'"next":'):
            line = lines[at]
            start = line.index(key) + len(key)
            end = line.index(b",", start)
            damaged = b"\n".join([*lines[:at], line[:start] + b"%d" % stated + line[end:],
                                  *lines[at + 1 :]])  # fmt: skip
            outcome = scanned(damaged, compiled=True)
            assert outcome == scanned(damaged, compiled=False), (at, key)
            assert type(outcome) is str or outcome[2] > 0  # refused, or a torn tail


@given(damaged_logs(), st.data())
def test_a_log_read_on_from_where_an_earlier_read_ended_reads_as_its_suffix(
    data: bytes, draw: st.DataObject
) -> None:
    """A feed's read from a ``continuation`` (docs/feed.md): a read of the file as it was
    (any prefix of it), then a read of the bytes after where that one's intact batches
    ended, give the events a whole read gives from that seq on, whatever damage follows."""
    body = data.index(b"\n") + 1
    earlier = data[: draw.draw(st.integers(body, len(data)))]
    _, incarnation, _, batches = log_parts(earlier, "log", "s")
    at = continuation(earlier, body, batches, incarnation, None)
    if at is None:
        return
    assert data[at.offset - len(at.commit_line) : at.offset] == at.commit_line
    _, _, records, parts, _ = continued_parts(data[: body - 1], data[at.offset :], "log", "s", at)
    whole = _events(*log_parts(data, "log", "s")[2:], at.next_seq)
    if isinstance(whole, list):  # a whole read that refuses the log refuses what came before
        assert _events(records, parts, at.next_seq) == whole


def _events(records: Any, batches: Any, after: int) -> list[Any] | str:
    raw = RawLog({"version": 1, "id": "s", "createdAt": 0}, records, "r", "log", batches=batches)
    try:
        scanned = scan_log("s", raw, contiguous_from=None)
    except LedgerError as error:
        return type(error).__name__
    return [event.to_json() for event in scanned.events if event.seq >= after]
