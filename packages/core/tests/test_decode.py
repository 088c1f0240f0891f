"""The read path's common case (``sessionledger.storage._decode``) against the rules.

A stored record in the writer's form is decoded by msgspec into its Struct and built
into its event or run; anything else is left to the rules of ``committed``, which parse
it with orjson and say what is wrong. The fast decode must only ever take what the rules
take, and make exactly what they make: otherwise what a load accepts would depend on
which of the two ran. Both the compiled and the pure-Python helpers run under it (nox
runs the core's tests once more with ``SESSIONLEDGER_PURE_PYTHON=1``).
"""

from __future__ import annotations

import gc
import importlib
import sys
from array import array
from typing import Any

import orjson
import pytest
from hypothesis import given, strategies as st

from sessionledger._errors import CorruptLogError, LedgerError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._eventlog import ChunkRun, EventLog
from sessionledger.model._events import APPEND, SessionEvent, SessionHeader
from sessionledger.model._snapshot import freeze_mapping
from sessionledger.model._vocabulary import RESERVED_TYPES
from sessionledger.storage._chunks import ROW_TYPES, pack_chunk_runs, unpack_to_log
from sessionledger.storage._committed import scan_log
from sessionledger.storage._decode import decode_batches, decode_lines, decode_records, decode_text
from sessionledger.storage._lines import LineRecords
from sessionledger.storage._logstore import UNPARSABLE, RawLog, RawRecord, parse_json
from sessionledger.testing.strategies import session_logs

SAFE = 2**53 - 1
#: Whether the compiled helpers run: only they untrack what they build (on the pure path
#: the collector may untrack a tuple of scalars itself, at any collection).
ACCELERATED = importlib.import_module("sessionledger._accelerator").ACCELERATED


def run_from_text(text: bytes | memoryview) -> ChunkRun | None:
    """The fast decode of a row's *text*: its run, or None when it leaves it to the rules."""
    item = decode_text(text, row=True)
    assert item is None or type(item) is ChunkRun
    return item


# -- a stored row decoded from its text (a msgspec Struct, then its run) --


def ordinary_decode(text: bytes) -> Any:
    """What the rules make of *text*: the parsed record through ``unpack_to_log`` (a
    run, events, or the error it raises)."""
    value = parse_json(text)
    if value is UNPARSABLE:
        return "unparsable"
    try:
        return unpack_to_log(value)
    except (LedgerError, TypeError, ValueError) as error:
        return error


def run_summary(run: ChunkRun) -> tuple[Any, ...]:
    """Everything a reader can see of *run*, as plain values."""
    members = [orjson.dumps(run.member(seq).to_json()) for seq in range(run.seq0, run.end)]
    fields = (run.kind, run.turn, run.step, run.index, run.call_id, run.name)
    return (fields, tuple(map(type, fields)), run.seq0, run.end, list(run.times), members)


def assert_decodes_as_ordinary(text: bytes) -> ChunkRun | None:
    """The fast decode of *text* either declines, or gives exactly the run the ordinary
    path gives; return the fast run."""
    fast = run_from_text(text)
    if fast is None:
        return None
    slow = ordinary_decode(text)
    assert type(slow) is ChunkRun, (text, slow)
    assert run_summary(fast) == run_summary(slow), text
    assert fast.texts is None  # packed, as a sealed run is
    if ACCELERATED:
        assert not gc.is_tracked(fast._ends)
        assert not gc.is_tracked(fast.times)
    return fast


row_texts = st.lists(
    st.text(max_size=5)
    | st.text(alphabet='"\\/\b\f\n\r\t\x00\x1f\x7fé中😀\u2028', max_size=4)
    | st.sampled_from(["", "\\u0041", "\ufeff", "\U0010ffff"]),
    min_size=1,
    max_size=6,
)
row_ints = st.integers(-SAFE, SAFE) | st.sampled_from([0, 1, -1, SAFE, -SAFE, 10**15, 2**53])
row_ids = st.text(max_size=4) | st.sampled_from(["call-1", 'q"\\', "é"])


@st.composite
def written_rows(draw: st.DrawFn) -> bytes:
    """A row as the writer writes it (keys in its order), with values near every bound."""
    tag = draw(st.sampled_from(sorted(ROW_TYPES)))
    texts_ = draw(row_texts)
    gaps = draw(st.lists(row_ints, min_size=len(texts_) - 1, max_size=len(texts_) - 1))
    data: dict[str, Any] = {
        "turn": draw(row_ints),
        "step": draw(row_ints),
        "index": draw(row_ints),
        "dt": gaps,
    }
    if tag == "tool-call-chunks":
        data["id"] = draw(row_ids)
        if draw(st.booleans()):
            data["name"] = draw(row_ids)
        data["args"] = texts_
    else:
        data["texts"] = texts_
    seq0 = draw(st.integers(0, SAFE) | st.sampled_from([0, SAFE - len(texts_) + 1, SAFE]))
    time0 = draw(row_ints)
    return orjson.dumps({"type": tag, "seq0": seq0, "time0": time0, "data": data})


mutation_bytes = st.sampled_from(
    [b" ", b'"', b"\\", b",", b":", b"[", b"]", b"{", b"}", b"-", b"0", b"1", b"9", b".",
     b"e", b"u", b"\x00", b"\x1f", b"\x7f", b"\xc3", b"\xa9", b"\xed\xa0\x80", b"\\ud800",
     b"\\u00e9", b"\\ud83d\\ude00", b"\xc0\x80", b"\n"]
)  # fmt: skip

#: Up to three edits of a text: (where, how: insert / replace / delete, the bytes put).
text_mutations = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 2), mutation_bytes), max_size=3
)


def mutated(text: bytes, mutations: list[tuple[int, int, bytes]]) -> bytes:
    """*text* with each of *mutations* applied in turn (an insert, a replace or a delete)."""
    for place, how, piece in mutations:
        at = place % (len(text) + 1)
        text = text[:at] + (piece if how < 2 else b"") + text[at + (how > 0) :]
    return text


@given(written_rows(), text_mutations)
def test_a_row_decoded_from_its_text_is_the_run_the_ordinary_path_makes(
    text: bytes, mutations: list[tuple[int, int, bytes]]
) -> None:
    # Mostly text no writer wrote, which the fast path must decline, or decode exactly as
    # orjson and the row checks would.
    assert_decodes_as_ordinary(mutated(text, mutations))


@given(written_rows())
def test_every_row_the_writer_writes_takes_the_fast_path(text: bytes) -> None:
    slow = ordinary_decode(text)
    fast = assert_decodes_as_ordinary(text)
    # Only what the row checks refuse is left to the ordinary path.
    assert (fast is not None) == (type(slow) is ChunkRun), text


def text_row(**fields: str) -> bytes:
    """A row's text in the writer's form, with *fields* (JSON fragments) put in place."""
    parts = {
        "tag": "text-chunks",
        "seq0": "4",
        "turn": "1",
        "step": "2",
        "index": "0",
        "dt": "[5]",
        "middle": "",
        "key": "texts",
        "texts": '["a","b"]',
        "end": "",
        **fields,
    }
    return (
        '{{"type":"{tag}","seq0":{seq0},"time0":100,"data":{{"turn":{turn},"step":{step},'
        '"index":{index},"dt":{dt}{middle},"{key}":{texts}{end}}}}}'.format(**parts).encode()
    )


TOOL = {"tag": "tool-call-chunks", "key": "args"}


@pytest.mark.parametrize(
    ("text", "taken"),
    [
        (text_row(), True),
        (text_row(texts='["\\u00e9\\/\\n\\"","\\u0000\\\\"]'), True),
        (text_row(texts='["aÿ中😀","b"]'), True),
        (text_row(texts='["\\ud83d\\ude00","b"]'), True),  # a surrogate pair
        (text_row(texts='["\\ud800","b"]'), False),
        (text_row(texts='["\\u00G0","b"]'), False),
        (text_row(texts='["\\x","b"]'), False),
        (text_row(texts='["a\tb","b"]'), False),  # a raw control character
        (text_row(turn="-0"), True),  # 0, as orjson reads it
        (text_row(turn="01"), False),
        (text_row(turn="1.0"), False),
        (text_row(turn="1e2"), False),
        (text_row(turn=str(SAFE), step=str(-SAFE)), True),
        (text_row(turn=str(SAFE + 1)), False),
        (text_row(turn="12345678901234567890"), False),
        (text_row(dt=f"[{SAFE}]"), False),  # the second member's time leaves the range
        (text_row(dt="[-100]"), True),
        (text_row(texts='["a"]'), False),
        (text_row(dt="[]", texts='["a"]'), True),  # one member
        (text_row(dt="[5,5]"), False),
        (text_row(texts="[]"), False),
        (text_row(texts='["a",1]'), False),
        (text_row(turn=" 1"), True),  # whitespace: JSON all the same
        (text_row(middle=',"name":"x"'), False),
        (text_row(end=',"name":"x"'), False),
        (text_row() + b" ", True),
        (text_row() + b"}", False),
        (text_row(seq0=str(SAFE - 1)), True),
        (text_row(seq0=str(SAFE)), False),
        (text_row(seq0="-1"), False),
        (text_row(tag="other-chunks"), False),
        (text_row(**TOOL, middle=',"id":"c","name":"n"'), True),
        (text_row(**TOOL, middle=',"id":"c\\"\\u00e9"'), True),
        (text_row(**TOOL, middle=',"id":7'), False),
        (text_row(**TOOL, middle=',"name":"n","id":"c"'), True),  # keys in any order
        (text_row(**TOOL), False),  # no id
        (text_row(tag="tool-call-chunks"), False),  # texts, not args
        (b'{"type":"user/message","seq":0,"time":0,"data":{}}', False),
        (b"", False),
        (b"not json", False),
    ],
)
def test_the_fast_row_decode_takes_only_the_writers_form(text: bytes, taken: bool) -> None:
    fast = assert_decodes_as_ordinary(text)
    assert (fast is not None) is taken
    assert (
        assert_decodes_as_ordinary(memoryview(b"xx" + text + b"yy")[2:-2]) is not None or not taken
    )


def test_the_fast_row_decode_refuses_invalid_utf8_and_keeps_no_references() -> None:
    good = text_row(texts='["ab","cd"]')
    for bad in (b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe9"):
        spoilt = good.replace(b"ab", b"a" + bad)
        assert run_from_text(spoilt) is None
        assert ordinary_decode(spoilt) == "unparsable"
    before = sys.getrefcount(good)
    for _ in range(1000):
        assert run_from_text(good) is not None
        assert run_from_text(good[:-1]) is None
    assert sys.getrefcount(good) == before
    assert run_from_text(b"\x00" * 10) is None
    assert run_from_text(b"{}") is None


#: Characters of every UTF-8 length, the shortest and longest of each.
SPLIT_CHARACTERS = ["\x80", "é", "\u07ff", "\u0800", "中", "\uffff", "😀", "\U0010ffff"]


def split_rows() -> list[tuple[bytes, bytes]]:
    """Rows whose texts hold one character cut between two members (at each of its
    bytes, with an empty member between the halves or not, in a text, a reasoning and a
    tool call's row); each with its twin that has the whole character on each side."""
    found = []
    for character in SPLIT_CHARACTERS:
        encoded = character.encode()
        for cut in range(1, len(encoded)):
            for between in (b"", b'"",'):
                halves = b'["a' + encoded[:cut] + b'",' + between + b'"' + encoded[cut:] + b'b"]'
                whole = b'["a' + encoded + b'",' + between + b'"' + encoded + b'b"]'
                gaps = "[5,5]" if between else "[5]"
                for fields in ({}, {"tag": "reasoning-chunks"}, {**TOOL, "middle": ',"id":"c"'}):
                    row = text_row(**fields, seq0="0", dt=gaps, texts="{}")
                    found.append((row.replace(b"{}", halves), row.replace(b"{}", whole)))
    return found


def pure_scan(records: list[RawRecord]) -> Any:
    """What a load makes of *records* by the rules alone."""
    return scan_outcome(records, common=False)


def test_a_character_split_between_two_texts_is_refused_as_the_pure_path_refuses_it() -> None:
    # Each text of a row is a JSON string of its own, so orjson refuses a row where one
    # holds the first bytes of a character and the next the rest, though the texts
    # joined are UTF-8; the fast decode must refuse it too, and the load say CORRUPT.
    for halves, whole in split_rows():
        assert ordinary_decode(halves) == "unparsable"
        assert run_from_text(halves) is None, halves
        records = [RawRecord.of_text(halves, 0, "line 2", 2)]
        refused = scan_outcome(records, common=True)
        assert type(refused) is str
        assert "not valid JSON" in refused
        assert refused == pure_scan(records)
        assert scan_outcome(as_lines(records), common=True) == refused
        assert assert_decodes_as_ordinary(whole) is not None, whole  # still taken whole


#: Integers at and past what 64 bits hold (and the safe range's edge), either sign.
WIDE_INTS = [2**53, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, 10**30,
             -(2**63), -(2**63) - 1, -(2**64) - 1]  # fmt: skip


def with_number(text: bytes, field: bytes, number: int) -> bytes:
    """*text* (the writer's form) with the integer after *field* (``b'"seq":'``, say)
    written as *number*: orjson cannot write an integer past 64 bits."""
    start = text.index(field) + len(field)
    end = start + len(text[start:]) - len(text[start:].lstrip(b"-0123456789"))
    return text[:start] + str(number).encode() + text[end:]


def test_an_integer_past_64_bits_in_any_field_the_fast_decode_reads_is_taken_alike() -> None:
    # Every integer a row or an envelope states, at and past 2**63 and 2**64: a load with
    # the fast decode says what the rules alone say (never OverflowError).
    row = text_row(seq0="1", dt="[5,6]", texts='["a","b","c"]')
    envelope = jsoncodec.dumps(
        {"type": "x/note", "seq": 4, "time": 9, "data": {}, "sourceEventSeqs": [0, 2]}
    )
    first = jsoncodec.dumps({"type": "x/note", "seq": 0, "time": 0, "data": {}})
    row_fields = [b'"seq0":', b'"time0":', b'"turn":', b'"step":', b'"index":', b'"dt":[',
                  b'"dt":[5,']  # fmt: skip
    envelope_fields = [b'"seq":', b'"time":', b'"sourceEventSeqs":[', b'"sourceEventSeqs":[0,']
    places = [(row, field) for field in row_fields]
    places += [(envelope, field) for field in envelope_fields]
    for text, field in places:
        for number in WIDE_INTS:
            spoilt = with_number(text, field, number)
            texts_ = [first, spoilt]
            if text is envelope:  # seqs 1-3 before it, as a row
                texts_.insert(1, text_row(seq0="1", dt="[5,6]", texts='["a","b","c"]'))
            records = [RawRecord.of_text(t, 0, f"line {n}", n) for n, t in enumerate(texts_, 2)]
            outcome = scan_outcome(records, common=True)
            assert outcome == pure_scan(records), (field, number)
            assert scan_outcome(as_lines(records), common=True) == outcome, (field, number)


def test_a_seq_past_64_bits_handed_to_a_decode_loop_is_declined_not_an_overflow() -> None:
    # The loops' own integer arguments: an expected seq no record can state takes nothing
    # (the rules then name the first record), a walk from past any log finds nothing, and
    # a run starting past 64 bits is left to extend_segments, which refuses it.
    freeze = importlib.import_module("sessionledger.model._snapshot").BUILT
    text = b'{"type":"x/note","seq":0,"time":0,"data":{}}'
    records = [RawRecord.of_text(text, 0, "line 2", 2)]
    lines = as_lines(records)
    bounds = [(0, 1, 0, 1)]
    for expected in (2**63, 2**64, 10**30):
        taken: list[Any] = []
        assert decode_records(records, 0, 1, expected, taken) == (0, expected)
        assert decode_lines(lines.data, lines.line_starts, 0, 1, expected, taken) == (0, expected)
        assert decode_batches(lines.data, lines.line_starts, bounds, expected, taken) == (
            0,
            expected,
        )
        assert taken == []
    log = EventLog([SessionEvent.from_json(orjson.loads(text))])
    for start in (2**63, 2**64):
        assert log.loose_needing(frozenset(["x/note"]), start) == []
        assert log.first_loose_outside(frozenset(), start) is None
    far = ChunkRun(("text-delta", 1, 1, 0, None, None, ""), 2**63, array("q", [1]), ["a"])
    if freeze is not None:  # set up as the library sets it up where it is chosen
        freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
        freeze.setup_runs(ChunkRun)
        assert freeze.extend_slots([], [far], 0) == 0
    with pytest.raises(ValueError, match="cannot follow"):
        EventLog().extend_segments([far])


def test_the_fast_row_decode_runs_on_either_path() -> None:
    # msgspec decodes on the pure-Python path too: only the helpers under it differ.
    assert type(run_from_text(text_row())) is ChunkRun
    assert type(ordinary_decode(text_row())) is ChunkRun


# -- the decode loop's common case (sessionledger.storage._decode's loops) --

committed_module = importlib.import_module("sessionledger.storage._committed")


def rules_alone(*args: Any) -> tuple[int, int]:
    """A decode loop that takes nothing: where it was asked to start, the seq expected."""
    return (args[2], args[4]) if len(args) == 6 else (args[1], args[3])


def no_batches(*args: Any) -> tuple[int, int]:
    return 0, args[3]


LOG_HEADER = SessionHeader(id="s", created_at=0).to_json()


def scan_outcome(records: list[RawRecord] | LineRecords, *, common: bool) -> Any:
    """What a load makes of *records* with or without the fast common case: every event
    as stored, or the error it raises."""
    saved = (
        committed_module.decode_records,
        committed_module.decode_lines,
        committed_module.decode_batches,
    )
    if not common:
        committed_module.decode_records = committed_module.decode_lines = rules_alone
        committed_module.decode_batches = no_batches
    try:
        kept = records if type(records) is LineRecords else list(records)
        raw = RawLog(LOG_HEADER, kept, "r")
        scanned = scan_log("s", raw, contiguous_from=0)
    except CorruptLogError as error:
        return f"{error}"
    finally:
        (
            committed_module.decode_records,
            committed_module.decode_lines,
            committed_module.decode_batches,
        ) = saved
    assert type(scanned.events) is EventLog
    return [orjson.dumps(event.to_json()) for event in scanned.events]


def written(log: list[dict[str, Any]]) -> list[bytes]:
    """The storage records of *log* as the writer writes them, rows packed (small caps,
    so several rows)."""
    return [jsoncodec.dumps(record) for record in pack_chunk_runs(log, 5, None)]


def spoilt(text: bytes, how: str) -> RawRecord:
    """One record of *text*, spoilt as *how* says (or kept, "text")."""
    value = orjson.loads(text)
    if how == "parsed":  # handed over parsed, as a store without text does
        return RawRecord(value, 0, "line x")
    if how == "gap":
        key = "seq0" if "seq0" in value else "seq"
        value[key] += 1
    elif how == "back":
        key = "seq0" if "seq0" in value else "seq"
        value[key] = max(0, value[key] - 1)
    elif how == "other key":
        value["other"] = 1
    elif how == "row tag":
        value["type"] = "text-chunks"
    elif how == "negative":
        value["time" if "time" in value else "time0"] = -(2**53)  # just past the safe range
    spoilt_text = {
        "text": text,
        "spaced": b"{ " + text[1:],
        "not json": b'{"type":"x/note",',
        "empty": b"",
        "trailing": text + b" x",
    }.get(how, orjson.dumps(value))
    return RawRecord.of_text(memoryview(spoilt_text), 0, "line x")


SPOILERS = ["text", "parsed", "gap", "back", "other key", "row tag", "negative", "spaced",
            "not json", "empty", "trailing"]  # fmt: skip


@given(session_logs(), st.lists(st.tuples(st.integers(0, 200), st.sampled_from(SPOILERS))))
def test_the_fast_decode_loop_takes_a_log_as_the_rules_take_it(
    log: list[dict[str, Any]], spoils: list[tuple[int, str]]
) -> None:
    texts = written(log)
    ways = ["text"] * len(texts)
    for at, how in spoils:
        ways[at % len(texts)] = how
    records = [spoilt(text, how) for text, how in zip(texts, ways, strict=True)]
    fast = scan_outcome(records, common=True)
    assert fast == scan_outcome(records, common=False)
    if set(ways) == {"text"}:
        assert fast == [orjson.dumps(envelope) for envelope in log]
    lines = as_lines(records)  # the same records as a line-oriented store keeps them
    assert scan_outcome(lines, common=True) == scan_outcome(list(lines), common=False)


def as_lines(records: list[RawRecord]) -> LineRecords:
    """*records* as ``LineRecords``: each text record a line of one buffer, each parsed one
    a record of its own."""
    data = b"".join(bytes(record.text) + b"\n" for record in records if record.text is not None)
    lines, position = LineRecords(data), 0
    for number, record in enumerate(records, start=2):
        if record.text is None:
            lines.add(record)
        else:
            position = lines.take_lines(position, data.index(b"\n", position) + 1, number)
    return lines


def small_log(notes: int, deltas: int) -> list[dict[str, Any]]:
    """*notes* events, then *deltas* text deltas of one block, then *notes* events again."""

    def note(seq: int) -> dict[str, Any]:
        return {"type": "x/note", "seq": seq, "time": seq, "data": {"n": seq}}

    def delta(seq: int) -> dict[str, Any]:
        chunk = {"type": "text-delta", "index": 0, "text": f"d{seq}"}
        return {"type": "assistant/chunk", "seq": seq, "time": seq,
                "data": {"turn": 1, "step": 1, "chunk": chunk}}  # fmt: skip

    end = notes + deltas
    return [
        *map(note, range(notes)),
        *map(delta, range(notes, end)),
        *map(note, range(end, end + notes)),
    ]


def test_each_spoilt_record_at_each_place_is_taken_as_the_rules_take_it() -> None:
    # A table, rows and events alike: no record kind is left to the luck of a draw.
    texts = written(small_log(3, 13))  # 3 notes, rows of 5, 5 and 3 deltas, 3 notes
    assert len(texts) == 9
    for at in range(len(texts)):
        for how in SPOILERS:
            records = [spoilt(text, how if k == at else "text") for k, text in enumerate(texts)]
            fast = scan_outcome(records, common=True)
            assert fast == scan_outcome(records, common=False), (at, how)
            lines = as_lines(records)
            in_lines = scan_outcome(lines, common=True)
            assert in_lines == scan_outcome(list(lines), common=False), (at, how)


def test_the_rules_see_no_record_of_a_written_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A load from seq 0 knows the first seq to expect: the fast loop takes them all.
    log = small_log(15, 30)
    records = [RawRecord.of_text(text, 0, "line x") for text in written(log)]
    seen: list[RawRecord] = []
    ordinary = committed_module._decode

    def counted(record: RawRecord, **options: Any) -> Any:
        seen.append(record)
        return ordinary(record, **options)

    monkeypatch.setattr(committed_module, "_decode", counted)
    assert scan_outcome(records, common=True) == [orjson.dumps(event) for event in log]
    assert scan_outcome(as_lines(records), common=True) == [orjson.dumps(e) for e in log]
    assert seen == []
    assert len(records) == 36  # the deltas are in rows


def test_the_decode_loop_keeps_no_references() -> None:
    row = text_row()  # seqs 4 and 5
    text = b'{"type":"x/note","seq":6,"time":5,"data":{"a":[1.5]}}'
    records = [RawRecord.of_text(row, 0, "line 2"), RawRecord.of_text(text, 0, "line 3")]
    held = [text, row, *records]
    before = [sys.getrefcount(value) for value in held]
    for _ in range(300):
        taken: list[Any] = []
        assert decode_records(records, 0, 2, 5, taken) == (0, 5)  # the row starts at 4
        assert taken == []
        assert decode_records(records, 0, 2, 4, taken) == (2, 7)
        assert [type(item) for item in taken] == [ChunkRun, SessionEvent]
        log = EventLog(SessionEvent("x/note", seq, 0, {}) for seq in range(4))
        log.extend_segments(taken)
        assert [event.seq for event in log] == list(range(7))
        assert decode_records(records, 2, 2, 7, taken) == (2, 7)
    del taken, log
    assert [sys.getrefcount(value) for value in held] == before
    assert decode_records([RawRecord({}, 0, "x")], 0, 1, 0, []) == (0, 0)  # parsed: the rules'


def test_the_decode_of_lines_stops_at_a_record_of_its_own_or_past_the_data() -> None:
    data = text_row() + b"\n" + b'{"type":"x/note","seq":6,"time":5,"data":{"a":[0.5]}}\n'
    starts = array("q", [0, data.index(b"\n") + 1, -1])
    before = sys.getrefcount(data), sys.getrefcount(starts)
    for _ in range(300):
        taken: list[Any] = []
        assert decode_lines(data, starts, 0, 3, 5, taken) == (0, 5)
        assert decode_lines(data, starts, 0, 3, 4, taken) == (2, 7)
        assert [type(item) for item in taken] == [ChunkRun, SessionEvent]
        assert decode_lines(data, starts, 1, 1, 6, taken) == (1, 6)
        far = array("q", [len(data)])
        assert decode_lines(data, far, 0, 1, 4, taken) == (0, 4)
    del taken
    assert (sys.getrefcount(data), sys.getrefcount(starts)) == before


def as_bounds(flat: list[int]) -> list[tuple[int, int, int | None, int | None]]:
    """Four numbers per batch (-1 for a seq not stated) as decode_batches takes them."""
    seq = [None if number == -1 and k % 4 > 1 else number for k, number in enumerate(flat)]
    return [tuple(seq[k : k + 4]) for k in range(0, len(seq), 4)]  # type: ignore[misc]


def test_the_decode_of_batches_takes_whole_batches_only() -> None:
    note = b'{"type":"x/note","seq":%d,"time":5,"data":{"a":[1]}}\n'
    data = text_row() + b"\n" + b"".join(note % seq for seq in (6, 7, 8))  # seqs 4 to 8
    starts = array("q", [0])
    for _ in range(3):
        starts.append(data.index(b"\n", starts[-1]) + 1)
    before = sys.getrefcount(data), sys.getrefcount(starts)
    for bounds, outcome, kept in [
        ([0, 2, 4, 7, 2, 4, 7, 9], (2, 9), 4),  # two batches, both whole
        ([0, 2, 4, 7, 2, 4, 7, 10], (1, 7), 2),  # the second states one event too many
        ([0, 2, 4, 7, 2, 4, 8, 9], (1, 7), 2),  # the second states a seq not expected
        ([0, 2, -1, -1, 2, 4, -1, -1], (2, 9), 4),  # no stated seqs
        ([0, 2, 5, 7], (0, 4), 0),  # the first does not start where the log ends
        ([0, 5, 4, 9], (0, 4), 0),  # past the records
        ([], (0, 4), 0),
    ]:
        for _ in range(100):
            taken: list[Any] = []
            got = decode_batches(data, starts, as_bounds(bounds), 4, taken)
            assert (got, len(taken)) == (outcome, kept), bounds
    del taken
    assert (sys.getrefcount(data), sys.getrefcount(starts)) == before
    starts[3] = -1  # a record of its own: its batch is left whole to the rules
    taken = []
    assert decode_batches(data, starts, as_bounds([0, 2, 4, 7, 2, 4, 7, 9]), 4, taken) == (1, 7)
    assert len(taken) == 2


def test_a_run_built_by_the_fast_decode_equals_the_rules_run_slot_by_slot() -> None:
    # The fast decode builds a stored row's run with ChunkRun.stored: every slot must
    # hold what the rules' unpack_to_log puts there.
    rows = [
        text_row(),
        text_row(tag="reasoning-chunks", texts='["\\u00e9","中😀"]'),
        text_row(**TOOL, middle=',"id":"c1"'),
        text_row(**TOOL, middle=',"id":"c1","name":"edit"'),
        *(text for text in written(small_log(0, 12)) if text.startswith(b'{"type":"text-chunks"')),
    ]
    for row in rows:
        reference = unpack_to_log(orjson.loads(row))
        assert type(reference) is ChunkRun, row
        taken: list[Any] = []
        records = [RawRecord.of_text(row, 0, "line 2")]
        assert decode_records(records, 0, 1, reference.seq0, taken)[0] == 1
        (built,) = taken
        for name in ChunkRun.__slots__:
            mine, theirs = getattr(built, name), getattr(reference, name)
            assert type(mine) is type(theirs), name
            assert mine == theirs, name
        assert gc.is_tracked(built) == gc.is_tracked(reference)


# -- an envelope decoded straight into its event (an Envelope Struct, then its event) --

json_strings = (
    st.text(max_size=8)
    | st.text(alphabet='"\\/\b\f\n\r\t\x00\x1f\x7fé中😀\u2028', max_size=5)
    | st.sampled_from(["", "type", "data", "seq", "\ufeff", "\U0010ffff", "a" * 40])
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE - 2, SAFE + 2)
    | st.sampled_from([0, -1, SAFE, -SAFE, 2**63 - 1, -(2**63), 0.5, -0.0, 1e300])
    | json_strings
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_strings, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def envelope_texts(draw: st.DrawFn) -> bytes:
    """An envelope as the writer writes it, its fields near every rule's edge, and now
    and then one nested around the depth the fast freeze takes."""
    envelope: dict[str, Any] = {
        "type": draw(st.sampled_from(["x/note", "assistant/message", "", "text-chunks"])),
        "seq": draw(st.integers(-1, SAFE + 1)),
        "time": draw(st.integers(-SAFE - 1, SAFE + 1)),
        "data": draw(st.dictionaries(json_strings, json_values, max_size=4)),
    }
    for key, values in (
        ("surfaceOp", st.sampled_from(["append", "x", {"op": "replace", "start": 0}])),
        ("sourceEventSeqs", st.lists(st.integers(-1, 5), max_size=3)),
        ("ignorable", st.booleans()),
        ("other", json_values),
    ):
        if draw(st.booleans()):
            envelope[key] = draw(values)
    depth = draw(st.sampled_from([0, 0, 0, 63, 64, 65, 66]))
    if depth:
        nested: Any = draw(st.sampled_from(["leaf", [], {}]))
        arrays = draw(st.booleans())  # which kind sits at the odd levels
        for level in range(depth):
            nested = [nested] if (level % 2 == 1) == arrays else {"k": nested}
        envelope["data"]["deep"] = nested
    keys = draw(st.permutations(list(envelope)))
    return orjson.dumps({key: envelope[key] for key in keys})


def frozen_view(value: Any) -> Any:
    """*value* with each container's type and tracking, to compare frozen values exactly."""
    if isinstance(value, dict):
        items = [(key, frozen_view(item)) for key, item in value.items()]
        return ("object", type(value).__name__, ACCELERATED and gc.is_tracked(value), items)
    if isinstance(value, tuple | list):
        items = [frozen_view(item) for item in value]
        return ("array", type(value).__name__, ACCELERATED and gc.is_tracked(value), items)
    return (type(value).__name__, value)


def rules_event(text: bytes) -> SessionEvent | None:
    """The event the rules make of an envelope's *text*, None when they refuse it."""
    value = parse_json(text)
    try:
        return None if value is UNPARSABLE else SessionEvent.from_json(value)
    except (LedgerError, TypeError, ValueError, RecursionError):
        return None


def assert_decodes_as_the_rules(text: bytes) -> SessionEvent | None:
    """The fast decode of an envelope's *text* declines, or is exactly the event the rules
    make of it, its data frozen alike; return it."""
    fast = decode_text(text, row=False)
    assert decode_text(memoryview(b"x" + text)[1:], row=False) == fast
    if fast is None:
        return None
    assert type(fast) is SessionEvent
    expected = rules_event(text)
    assert expected is not None, text
    assert fast == expected, text
    assert frozen_view(fast.data) == frozen_view(expected.data), text
    assert type(fast.source_event_seqs) is type(expected.source_event_seqs)
    assert fast.surface_op is expected.surface_op  # None or APPEND: shared constants
    return fast


@given(envelope_texts())
def test_an_envelope_decoded_fast_is_the_event_the_rules_make(text: bytes) -> None:
    assert_decodes_as_the_rules(text)


@given(envelope_texts(), text_mutations)
def test_a_mutated_envelope_is_declined_or_decoded_as_the_rules_decode_it(
    text: bytes, mutations: list[tuple[int, int, bytes]]
) -> None:
    assert_decodes_as_the_rules(mutated(text, mutations))


def freeze_takes(value: Any) -> bool:
    """Whether the fast freeze takes *value* as an event's data."""
    return freeze_mapping(value) is not None


@given(envelope_texts())
def test_the_writers_envelopes_take_the_fast_decode_unless_a_rule_sends_them_on(
    text: bytes,
) -> None:
    # Only what the rules refuse, a replace, or data outside the fast freeze's range or
    # depth is left to the rules.
    value = orjson.loads(text)
    taken = (
        rules_event(text) is not None
        and value.get("surfaceOp", "append") == "append"
        and freeze_takes(value["data"])
    )
    assert (decode_text(text) is not None) is taken, text


def envelope_of(data: bytes) -> bytes:
    return b'{"type":"x/note","seq":0,"time":0,"data":' + data + b"}"


@pytest.mark.parametrize(
    ("text", "taken"),
    [
        (b'{"type":"x/note","seq":0,"time":0,"data":{}}', True),
        (b'{"type":"x/note","seq":0,"time":0,"data":{"a":[1,true,null,"\\u00e9\\n"]}}', True),
        (envelope_of(b'{"a":1,"a":2}'), True),  # a repeated key: the last, as orjson
        (envelope_of(b'{"a":{"b":1,"c":2,"b":3}}'), True),  # at any depth
        (b'{"type":"x/note","seq":0,"seq":1,"time":0,"data":{}}', True),
        (envelope_of(b'{"a":1.5}'), True),  # a float
        (envelope_of(b'{"a":1e2}'), True),
        (envelope_of(b'{"a":-0}'), True),
        (envelope_of(b'{"a":-0.0}'), False),  # the rules refuse it
        (envelope_of(b'{"a":01}'), False),
        (envelope_of(b'{ "a":1}'), True),  # whitespace
        (envelope_of(b'{"a":1} '), True),
        (envelope_of(b'{"a":"\\ud800"}'), False),  # a surrogate escape
        (envelope_of(b'{"a":"\xed\xa0\x80"}'), False),  # an encoded surrogate: not UTF-8
        (envelope_of(b'{"a":"\xc3"}'), False),  # cut short
        (envelope_of(b'{"a":"\t"}'), False),  # a raw control character
        (envelope_of(b'{"a":tru}'), False),
        (envelope_of(b'{"a":[1,]}'), False),
        (envelope_of(b'{"a":["x""y"]}'), False),  # no comma
        (envelope_of(b'{"a":[1"y"]}'), False),
        (envelope_of(b'{"a":{"b":1"c":2}}'), False),
        (envelope_of(b'{"a":1"b":2}'), False),
        (envelope_of(b'{"a""b"}'), False),  # no colon
        (envelope_of(b'{"a":{"b":}}'), False),
        (envelope_of(b'{"a":1'), False),
        (envelope_of(b"[1]"), False),  # data that is no object: the rules decide
        (envelope_of(b"{}"), True),
        (envelope_of(b'{"a":9007199254740991,"b":-9007199254740991}'), True),
        (envelope_of(b'{"a":9007199254740992}'), False),
        (envelope_of(b'{"a":18446744073709551616}'), False),  # orjson: a float; msgspec: int
        (envelope_of(b'{"\\u0041":"\\"\\\\\\/\\b\\f\\n\\r\\t"}'), True),
        (b'{"type":"x/note","seq":0,"time":0,"data":{},"surfaceOp":"append"}', True),
        (b'{"type":"x/note","seq":0,"time":0,"data":{},"surfaceOp":null}', False),
        (b'{"type":"x/note","seq":0,"time":0,"data":{},"ignorable":true}', True),
        (b'{"type":"x/note","seq":0,"time":0,"data":{},"ignorable":false}', False),
        (b'{"type":"x/note","seq":0,"time":0,"data":{},"sourceEventSeqs":[]}', True),
        (b'{"type":"x/note","seq":0,"time":0,"data":{},"sourceEventSeqs":null}', False),
        (b'{"type":"x/note","seq":0,"time":0,"data":{},"other":1}', False),
        (b'{"type":"","seq":0,"time":0,"data":{}}', False),
        (b'{"type":"text-chunks","seq":0,"time":0,"data":{}}', False),
        (b'{"type":"x/note","seq":0,"time":0}', False),
    ],
)
def test_each_edge_of_the_fast_decode(text: bytes, taken: bool) -> None:
    assert (assert_decodes_as_the_rules(text) is not None) is taken
    records = [RawRecord.of_text(text, 0, "line 2")]
    assert scan_outcome(records, common=True) == scan_outcome(records, common=False)


def test_the_fast_decode_keeps_no_references() -> None:
    text = b'{"type":"x/note","seq":0,"time":0,"data":{"message":{"role":"user"}}}'
    before = sys.getrefcount(text)
    first = [decode_text(text) for _ in range(300)]
    assert sys.getrefcount(text) == before
    assert all(event == first[0] for event in first)


def test_the_fast_decode_tells_many_keys_apart() -> None:
    # Many distinct keys of one length: each decoded key must be the key of its text.
    keys = [f"k{number:04}" for number in range(3000)]
    for _ in range(2):
        for start in range(0, len(keys), 100):
            chosen = keys[start : start + 100]
            data = orjson.dumps({key: number for number, key in enumerate(chosen)})
            event = decode_text(envelope_of(data))
            assert event is not None
            assert list(event.data) == chosen
            assert list(event.data.values()) == list(range(len(chosen)))


@pytest.mark.parametrize("data", [b"[]", b'"x"', b"1", b"null", b"true", b"[{}]"])
def test_an_envelope_whose_data_is_no_object_decodes_as_the_rules_decode_it(data: bytes) -> None:
    text = b'{"type":"x/note","seq":0,"time":0,"data":' + data + b"}"
    records = [RawRecord.of_text(text, 0, "line 2")]
    assert scan_outcome(records, common=True) == scan_outcome(records, common=False)
    lines = as_lines(records)
    assert scan_outcome(lines, common=True) == scan_outcome(list(lines), common=False)
