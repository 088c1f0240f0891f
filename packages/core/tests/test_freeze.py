"""The compiled fast path of ``snapshot`` (``sessionledger._freeze``) against the pure one.

Both must accept exactly the same values and build the same frozen copies, sharing the
same scalars; otherwise what a ledger accepts would depend on whether a C compiler was
there at install time. The pure-Python form must also pass the core's tests on its own
(the last test runs them with ``SESSIONLEDGER_PURE_PYTHON=1``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import itertools
import os
import re
import subprocess
import sys
from array import array
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionledger import FrozenDict, JsonValueError, snapshot, thaw
from sessionledger._errors import CorruptLogError, LedgerError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._eventlog import ChunkRun, EventLog
from sessionledger.model._events import APPEND, SessionEvent, SessionHeader, pure_from_json
from sessionledger.model._vocabulary import RESERVED_TYPES
from sessionledger.storage._chunks import (
    ROW_TYPES,
    pack_chunk_runs,
    pure_pack_run,
    run_from_text,
    run_of_parsed_row,
    unpack_to_log,
)
from sessionledger.storage._committed import scan_log
from sessionledger.storage._lines import LineRecords
from sessionledger.storage._logstore import UNPARSABLE, RawLog, RawRecord, parse_json
from sessionledger.testing.strategies import session_logs

snapshot_module = importlib.import_module("sessionledger.model._snapshot")
chunks_module = importlib.import_module("sessionledger.storage._chunks")
ROOT = Path(__file__).resolve().parents[3]
PURE = os.environ.get("SESSIONLEDGER_PURE_PYTHON", "") not in ("", "0")


def stable_id(value: object) -> str:
    """``repr`` without a memory address: every pytest-xdist worker collects the same ids."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


def compiled() -> ModuleType:
    """The compiled module; under CI its absence is a failure (the build must work there)."""
    try:
        return importlib.import_module("sessionledger._freeze")
    except ImportError as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must build the compiled fast path: {error}")
        pytest.skip(f"the compiled fast path is not built here: {error}")


class Text(str):
    pass


class Number(int):
    pass


class Mapping(dict[str, Any]):
    pass


SAFE = 2**53 - 1
surrogates = st.sampled_from(["\ud800", "a\udfff", "\udbff\udc00x", "é\ud834"])
strings = st.text(max_size=6) | st.text(alphabet="é\u4e2d😀", max_size=3) | surrogates
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE - 2, SAFE + 2)
    | st.integers()
    | st.sampled_from([SAFE, -SAFE, SAFE + 1, -SAFE - 1, 2**63, -(2**63), 2**64, 0])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, -0.0, float("nan"), float("inf"), float("-inf")])
    | strings
    | st.builds(Text, strings)
    | st.builds(Number, st.integers(-5, 5))
    | st.sampled_from([b"bytes", object(), {1, 2}, 1j])
)
keys = strings | st.builds(Text, st.text(max_size=3)) | st.integers(-3, 3) | st.none()


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    pairs = st.lists(st.tuples(keys, children), max_size=5)
    return (
        st.lists(children, max_size=5)
        | st.lists(children, max_size=5).map(tuple)
        | pairs.map(dict)
        | pairs.map(lambda items: FrozenDict((k, v) for k, v in items if type(k) is str))
        | pairs.map(lambda items: Mapping((str(k), v) for k, v in items))
    )


values = containers(st.recursive(scalars, containers, max_leaves=30))

#: Each scalar at the edge of a rule, and a few just inside it.
EDGES = [
    None,
    True,
    False,
    0,
    1,
    -1,
    SAFE,
    -SAFE,
    SAFE + 1,
    -SAFE - 1,
    2**63 - 1,
    -(2**63),
    2**63,
    2**64,
    10**30,
    0.0,
    -0.0,
    1.5,
    -1e308,
    5e-324,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    "ascii",
    "é",
    "\u4e2d",
    "😀",
    "\ud800",
    "x\udfff",
    "\ud83d\ude00",
    "\U0010ffff",
    Text("t"),
    Number(1),
    b"",
    1j,
    object(),
    frozenset(),
]


def assert_same(mine: Any, theirs: Any) -> None:
    """Same types all the way down, same key order, and the very same scalar objects."""
    assert type(mine) is type(theirs)
    if type(mine) is FrozenDict:
        assert list(mine) == list(theirs)
        for key in mine:
            assert_same(mine[key], theirs[key])
    elif type(mine) is tuple:
        assert len(mine) == len(theirs)
        for one, other in zip(mine, theirs, strict=True):
            assert_same(one, other)
    else:
        assert mine is theirs


def nested(depth: int, leaf: Any = 1) -> Any:
    value: Any = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


@given(values)
def test_both_forms_accept_the_same_values_and_build_the_same_copies(value: Any) -> None:
    freeze = compiled()
    for ours, pure in (
        (freeze.freeze_mapping, snapshot_module.pure_freeze_mapping),
        (freeze.freeze_sequence, snapshot_module.pure_freeze_sequence),
    ):
        built, expected = ours(value), pure(value)
        if expected is None:
            assert built is None
        else:
            assert_same(built, expected)


@pytest.mark.parametrize("scalar", EDGES, ids=stable_id)
def test_both_forms_agree_on_every_edge_scalar_as_a_value_and_as_a_key(scalar: Any) -> None:
    freeze = compiled()
    cases: list[Any] = [[scalar], (1, scalar), {"k": scalar}, FrozenDict(k=[scalar])]
    if type(scalar) is not dict:
        with contextlib.suppress(TypeError):  # unhashable scalars cannot be keys
            cases.append({scalar: 1})
    for value in cases:
        ours = freeze.freeze_sequence if type(value) in (list, tuple) else freeze.freeze_mapping
        pure = (
            snapshot_module.pure_freeze_sequence
            if type(value) in (list, tuple)
            else snapshot_module.pure_freeze_mapping
        )
        built, expected = ours(value), pure(value)
        if expected is None:
            assert built is None, value
        else:
            assert_same(built, expected)


@pytest.mark.parametrize("depth", [63, 64, 65, 66, 67, 200])
@pytest.mark.parametrize("outer", [dict, list])
def test_both_forms_stop_at_the_same_depth(depth: int, outer: type) -> None:
    freeze = compiled()
    inner = nested(depth)
    value = {"root": inner} if outer is dict else [inner]
    for ours, pure in (
        (freeze.freeze_mapping, snapshot_module.pure_freeze_mapping),
        (freeze.freeze_sequence, snapshot_module.pure_freeze_sequence),
    ):
        built, expected = ours(value), pure(value)
        assert (built is None) == (expected is None)
        if expected is not None:
            assert_same(built, expected)
    # Either way snapshot itself takes any depth.
    assert thaw(snapshot(value)) == value


def test_a_cycle_is_left_to_the_careful_walk_which_names_it() -> None:
    freeze = compiled()
    loop: dict[str, Any] = {"a": [1]}
    loop["a"].append(loop)
    assert freeze.freeze_mapping(loop) is None
    with pytest.raises(JsonValueError, match="cycle"):
        snapshot(loop)


def accelerated() -> None:
    compiled()
    if not snapshot_module.ACCELERATED:
        pytest.skip("the pure-Python fast path was chosen (SESSIONLEDGER_PURE_PYTHON)")


def containers(value: Any) -> list[Any]:
    """Every container of a frozen value, the value included."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if type(item) is FrozenDict or type(item) is tuple:
            found.append(item)
            stack.extend(item.values() if type(item) is FrozenDict else item)
    return found


def test_a_frozen_value_is_left_to_reference_counting() -> None:
    accelerated()
    frozen = snapshot({"flat": {"a": 1, "b": "x"}, "list": [1, 2.5, None], "deep": [{"c": [1]}]})
    assert len(containers(frozen)) == 6
    assert not any(gc.is_tracked(item) for item in containers(frozen))
    # A value deeper than the fast path goes is frozen by the careful walk, which
    # leaves it to the collector as before.
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    assert gc.is_tracked(snapshot(deep))


def test_a_cycle_made_through_an_untracked_frozen_value_is_still_collected() -> None:
    accelerated()
    frozen = snapshot({"flat": {"a": 1}, "other": [{"b": 2}]})
    flat = frozen["flat"]
    # Storing a container into one (bypassing the guard) tracks it again, so the
    # collector sees the cycle and frees it once nothing else holds it.
    dict.__setitem__(flat, "self", [flat])
    assert gc.is_tracked(flat)
    gc.collect()
    del frozen, flat
    assert gc.collect() >= 2  # the dict and the list of the cycle


def test_untrack_leaves_objects_the_collector_does_not_track_alone() -> None:
    accelerated()
    untrack = compiled().untrack
    items: list[Any] = [1, "text", None, 2.5, b"bytes", (1, 2)]
    untrack(*items)
    untrack()
    run_of_scalars = [1, 2, 3]
    assert gc.is_tracked(run_of_scalars)
    untrack(run_of_scalars, run_of_scalars)  # twice is the same as once
    assert not gc.is_tracked(run_of_scalars)
    run_of_scalars.append(4)
    assert run_of_scalars == [1, 2, 3, 4]


def test_no_reference_is_leaked_on_success_or_on_a_refusal() -> None:
    freeze = compiled()
    text = "shared " * 100
    key = "".join(["key", "-one"])
    accepted = {key: text, "list": [text, {key: text}]}
    refused = {key: text, "list": [text, 2**60]}
    before = sys.getrefcount(text), sys.getrefcount(key)
    for _ in range(1000):
        assert freeze.freeze_mapping(accepted) is not None
        assert freeze.freeze_mapping(refused) is None
        assert freeze.freeze_sequence([text, (text,)]) is not None
        assert freeze.pack_run([text, key], [7], 0) is not None
        assert freeze.pack_run([text, key], [2**60], 0) is None
    assert (sys.getrefcount(text), sys.getrefcount(key)) == before
    gap = 2**40 + 1  # not a cached small int
    before_gap = sys.getrefcount(gap)
    for _ in range(1000):
        freeze.pack_run([text], [gap], 0)
    assert sys.getrefcount(gap) == before_gap


def test_the_compiled_module_refuses_a_bad_configuration_and_other_types() -> None:
    freeze = compiled()
    with pytest.raises(ValueError):
        freeze.setup(list, 10, 3)
    with pytest.raises(TypeError):
        freeze.setup("FrozenDict", 10, 3)
    assert freeze.freeze_mapping([1]) is None
    assert freeze.freeze_sequence({}) is None


texts = st.lists(strings | st.sampled_from([Text("sub"), 1, None, b"x", ""]), max_size=8)
gap_values = st.integers(-SAFE - 2, SAFE + 2) | st.sampled_from(
    [True, False, 1.0, Number(3), 2**64, -(2**64), SAFE, -SAFE, 0]
)
time0s = st.integers(-SAFE, SAFE) | st.sampled_from([SAFE, -SAFE, SAFE - 1, 0])


def assert_same_pack(texts_: Any, gaps: Any, time0: int) -> None:
    built, expected = compiled().pack_run(texts_, gaps, time0), pure_pack_run(texts_, gaps, time0)
    assert (built is None) == (expected is None), (texts_, gaps, time0)
    if expected is not None:
        (joined, ends), (want_joined, want_ends) = built, expected
        assert joined == want_joined
        assert type(joined) is str
        assert ends.typecode == want_ends.typecode
        assert ends == want_ends
        assert not gc.is_tracked(ends)


@given(texts, st.lists(gap_values, max_size=8), time0s, st.booleans())
def test_pack_run_decides_and_packs_as_the_pure_form(
    texts_: list[Any], gaps: list[Any], time0: int, as_tuples: bool
) -> None:
    if as_tuples:
        assert_same_pack(tuple(texts_), tuple(gaps), time0)
    else:
        assert_same_pack(texts_, gaps, time0)


@pytest.mark.parametrize(
    ("gaps", "time0"),
    [
        ([SAFE], 0),  # the last member time at the bound
        ([SAFE], 1),  # one past it
        ([-SAFE], 0),
        ([-SAFE], -1),
        ([SAFE, -SAFE, SAFE], 0),
        ([SAFE, SAFE], -SAFE),  # back within range, but the second time is not
        ([-1, SAFE], SAFE),  # the first time is fine, the next leaves the range
        ([], SAFE),
        ([0] * 1000, -SAFE),
    ],
)
def test_pack_run_member_time_bounds(gaps: list[int], time0: int) -> None:
    assert_same_pack(["a"] * (len(gaps) + 1), gaps, time0)


def test_pack_run_refuses_what_is_not_a_list_and_wide_texts_pack_alike() -> None:
    pack = compiled().pack_run
    assert pack(iter(["a"]), [], 0) is None
    assert pack(["a", "b"], iter([1]), 0) is None
    assert pack(["a"], [], 2**70) is None
    wide = ["é😀" * 3, "中", "", "x"]
    assert_same_pack(wide, [1, 2, 3], 0)


@pytest.mark.skipif(PURE, reason="this run is the pure-Python one")
def test_the_core_tests_pass_on_the_pure_python_fast_path() -> None:
    env = {**os.environ, "SESSIONLEDGER_PURE_PYTHON": "1"}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib; "
            "print(importlib.import_module('sessionledger.model._snapshot').ACCELERATED)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "False"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "packages/core/tests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


# -- a stored row decoded from its text (chunks.run_from_text, the compiled parse_row) --


def fast_rows() -> None:
    """Rows are decoded from their text only on the compiled path: skip on the pure one."""
    compiled()
    if not snapshot_module.ACCELERATED:
        pytest.skip("the pure-Python run parses every row, then checks it")


def ordinary_decode(text: bytes) -> Any:
    """What the read path makes of *text* without the compiled row parser: the parsed
    record through ``unpack_to_log`` (a run, events, or the error it raises)."""
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
    fast_rows()
    # Mostly text no writer wrote, which the fast path must decline, or decode exactly as
    # orjson and the row checks would.
    assert_decodes_as_ordinary(mutated(text, mutations))


@given(written_rows())
def test_every_row_the_writer_writes_takes_the_fast_path(text: bytes) -> None:
    fast_rows()
    slow = ordinary_decode(text)
    fast = assert_decodes_as_ordinary(text)
    # Only what the fast path leaves to the ordinary one by design: a one-member row,
    # or a bound the row checks refuse.
    assert (fast is not None) == (type(slow) is ChunkRun and slow.end - slow.seq0 >= 2), text


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
        (text_row(texts='["\\ud83d\\ude00","b"]'), False),  # a pair: left to orjson
        (text_row(texts='["\\ud800","b"]'), False),
        (text_row(texts='["\\u00G0","b"]'), False),
        (text_row(texts='["\\x","b"]'), False),
        (text_row(texts='["a\tb","b"]'), False),  # a raw control character
        (text_row(turn="-0"), False),
        (text_row(turn="01"), False),
        (text_row(turn="1.0"), False),
        (text_row(turn="1e2"), False),
        (text_row(turn=str(SAFE), step=str(-SAFE)), True),
        (text_row(turn=str(SAFE + 1)), False),
        (text_row(turn="12345678901234567890"), False),
        (text_row(dt=f"[{SAFE}]"), False),  # the second member's time leaves the range
        (text_row(dt="[-100]"), True),
        (text_row(texts='["a"]'), False),
        (text_row(dt="[]", texts='["a"]'), False),
        (text_row(dt="[5,5]"), False),
        (text_row(texts="[]"), False),
        (text_row(texts='["a",1]'), False),
        (text_row(turn=" 1"), False),
        (text_row(middle=',"name":"x"'), False),
        (text_row(end=',"name":"x"'), False),
        (text_row() + b" ", False),
        (text_row() + b"}", False),
        (text_row(seq0=str(SAFE - 1)), True),
        (text_row(seq0=str(SAFE)), False),
        (text_row(seq0="-1"), False),
        (text_row(tag="other-chunks"), False),
        (text_row(**TOOL, middle=',"id":"c","name":"n"'), True),
        (text_row(**TOOL, middle=',"id":"c\\"\\u00e9"'), True),
        (text_row(**TOOL, middle=',"id":7'), False),
        (text_row(**TOOL, middle=',"name":"n","id":"c"'), False),
        (text_row(**TOOL), False),  # no id
        (text_row(tag="tool-call-chunks"), False),  # texts, not args
        (b'{"type":"user/message","seq":0,"time":0,"data":{}}', False),
        (b"", False),
        (b"not json", False),
    ],
)
def test_the_fast_row_decode_takes_only_the_writers_form(text: bytes, taken: bool) -> None:
    fast_rows()
    fast = assert_decodes_as_ordinary(text)
    assert (fast is not None) is taken
    assert (
        assert_decodes_as_ordinary(memoryview(b"xx" + text + b"yy")[2:-2]) is not None or not taken
    )


def test_the_fast_row_decode_refuses_invalid_utf8_and_keeps_no_references() -> None:
    fast_rows()
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
    assert compiled().parse_row(object()) is None


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
    """What a load makes of *records* with no compiled row parser and no compiled loop."""
    saved = chunks_module.ACCELERATOR
    chunks_module.ACCELERATOR = None
    try:
        return scan_outcome(records, common=False)
    finally:
        chunks_module.ACCELERATOR = saved


def test_a_character_split_between_two_texts_is_refused_as_the_pure_path_refuses_it() -> None:
    # Each text of a row is a JSON string of its own, so orjson refuses a row where one
    # holds the first bytes of a character and the next the rest, though the texts
    # joined are UTF-8; the compiled parse must refuse it too, and the load say CORRUPT.
    fast_rows()
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


def test_an_integer_past_64_bits_in_any_field_the_compiled_decode_reads_is_taken_alike() -> None:
    # Every integer a row or an envelope states, at and past 2**63 and 2**64: a load with
    # the compiled decode loop says what the rules alone say (never OverflowError).
    compiled()
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


def test_a_seq_past_64_bits_handed_to_a_compiled_loop_is_declined_not_an_overflow() -> None:
    # The loops' own integer arguments: an expected seq no record can state takes nothing
    # (the rules then name the first record), a walk from past any log finds nothing, and
    # a run starting past 64 bits is left to extend_segments, which refuses it.
    freeze = compiled()
    freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    freeze.setup_runs(ChunkRun)
    text = b'{"type":"x/note","seq":0,"time":0,"data":{}}'
    records = [RawRecord.of_text(text, 0, "line 2", 2)]
    lines = as_lines(records)
    bounds = array("q", [0, 1, 0, 1])
    for expected in (2**63, 2**64, 10**30):
        taken: list[Any] = []
        assert freeze.decode_records(records, 0, 1, expected, taken, orjson.loads) == (0, expected)
        assert freeze.decode_lines(lines.data, lines.line_starts, 0, 1, expected, taken,
                                   orjson.loads) == (0, expected)  # fmt: skip
        assert freeze.decode_batches(lines.data, lines.line_starts, bounds, expected, taken,
                                     orjson.loads) == (0, expected)  # fmt: skip
        assert taken == []
    log = EventLog([SessionEvent.from_json(orjson.loads(text))])
    for start in (2**63, 2**64):
        assert log.loose_needing(frozenset(["x/note"]), start) == []
        assert log.first_loose_outside(frozenset(), start) is None
    far = ChunkRun(("text-delta", 1, 1, 0, None, None, ""), 2**63, array("q", [1]), ["a"])
    assert freeze.extend_slots([], [far], 0) == 0
    with pytest.raises(ValueError, match="cannot follow"):
        EventLog().extend_segments([far])


def test_the_pure_path_parses_every_row() -> None:
    if snapshot_module.ACCELERATED:
        pytest.skip("the compiled path runs here")
    assert run_from_text(text_row()) is None
    assert type(ordinary_decode(text_row())) is ChunkRun


# -- an event built from its envelope (SessionEvent.from_json's compiled common case) --


def event_builder() -> Any:
    """The compiled build, set up as events.py sets it up (it does so only when chosen)."""
    freeze = compiled()
    freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    return freeze.event_from_json


def pure_outcome(envelope: Any) -> Any:
    try:
        return pure_from_json(envelope)
    except (LedgerError, TypeError, ValueError, RecursionError) as error:
        return error


def assert_builds_as_pure(envelope: Any) -> SessionEvent | None:
    """The compiled build of *envelope* declines, or is exactly the event the pure
    ``from_json`` builds, frozen alike; return it."""
    built = event_builder()(envelope)
    if built is None:
        return None
    expected = pure_outcome(envelope)
    assert type(expected) is SessionEvent, (envelope, expected)
    assert type(built) is SessionEvent  # built in C as make_event builds it
    assert built == expected
    with pytest.raises(AttributeError):
        built.seq = 0  # type: ignore[misc]
    fields = ("type", "seq", "time", "surface_op", "source_event_seqs", "ignorable")
    assert [type(getattr(built, name)) for name in fields] == [
        type(getattr(expected, name)) for name in fields
    ]
    assert type(built.data) is FrozenDict
    assert built.data._shallow is True
    assert orjson.dumps(built.to_json()) == orjson.dumps(expected.to_json())
    return built


envelope_values = st.sampled_from(
    [None, True, False, 0, 1, -1, SAFE, SAFE + 1, -SAFE - 1, 2**64, 1.0, "", "x", "append",
     "Append", "text-chunks", "session", [], [1, 2], (3,), [True], [-1], [SAFE + 1], [1.0],
     {}, {"op": "replace", "start": 0, "end": 1}, {"a": [1, {"b": "c"}]}, {"a": -0.0},
     {"a": "\ud800"}, [{}], Text("t"), Number(4)]
)  # fmt: skip
envelope_keys = st.sampled_from(
    ["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable", "other"]
)


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    """A stored envelope, well formed or spoilt in its keys or values."""
    envelope: dict[str, Any] = {
        "type": draw(st.sampled_from(["x/note", "user/message", "é"])),
        "seq": draw(st.integers(0, SAFE)),
        "time": draw(st.integers(-SAFE, SAFE)),
        "data": draw(st.dictionaries(st.text(max_size=3), scalars, max_size=3)),
    }
    if draw(st.booleans()):
        envelope["surfaceOp"] = "append"
    if draw(st.booleans()):
        envelope["sourceEventSeqs"] = draw(st.lists(st.integers(0, SAFE), max_size=4))
    if draw(st.booleans()):
        envelope["ignorable"] = True
    for key in draw(st.lists(envelope_keys, max_size=2)):
        if draw(st.booleans()):
            envelope.pop(key, None)
        else:
            envelope[key] = draw(envelope_values)
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([FrozenDict(envelope), list(envelope), Mapping(envelope)]))
    return envelope


@given(envelopes())
def test_an_event_built_from_its_envelope_is_the_one_from_json_builds(envelope: Any) -> None:
    assert_builds_as_pure(envelope)


@given(session_logs())
def test_every_stored_envelope_but_a_replace_takes_the_compiled_build(
    log: list[dict[str, Any]],
) -> None:
    for envelope in log:
        built = assert_builds_as_pure(orjson.loads(orjson.dumps(envelope)))
        replace = type(envelope.get("surfaceOp")) is dict
        assert (built is None) is replace, envelope


def test_the_compiled_build_keeps_no_references() -> None:
    envelope = orjson.loads(b'{"type":"x/note","seq":4,"time":5,"data":{"a":[1]},'
                            b'"sourceEventSeqs":[1,2],"surfaceOp":"append"}')  # fmt: skip
    build = event_builder()
    held = [envelope["type"], envelope["data"], envelope["sourceEventSeqs"]]
    before = [sys.getrefcount(value) for value in held]
    for _ in range(1000):
        assert build(envelope) is not None
        assert build({**envelope, "seq": -1}) is None
    assert [sys.getrefcount(value) for value in held] == before


def test_each_envelope_field_at_each_edge_builds_as_from_json_does() -> None:
    # Every key, absent or holding each edge value, over one well-formed envelope: a
    # table, so that no rule is left to the luck of a draw.
    base = {"type": "x/note", "seq": 3, "time": -4, "data": {"a": 1},
            "surfaceOp": "append", "sourceEventSeqs": [0, 2], "ignorable": True}  # fmt: skip
    assert assert_builds_as_pure(dict(base)) is not None
    taken = 0
    for key in [*base, "other"]:
        for value in [*ENVELOPE_EDGES, base.get(key)]:
            for envelope in ({**base, key: value}, {k: v for k, v in base.items() if k != key}):
                taken += assert_builds_as_pure(envelope) is not None
    assert taken > 20


ENVELOPE_EDGES = [None, True, False, 0, 1, -1, SAFE, SAFE + 1, -SAFE, -SAFE - 1, 2**64, 1.0,
                  "", "x", "é", "append", "Append", *sorted(RESERVED_TYPES), [], (), [1, 2],
                  (3,), [True], [False], [-1], [SAFE], [SAFE + 1], [1.0], ["1"], [Number(1)],
                  iter([1]), {}, {"op": "replace", "start": 0, "end": 1}, {"a": [1, {"b": "c"}]},
                  {"a": -0.0}, {"a": float("nan")}, {"a": "\ud800"}, {1: 2}, FrozenDict(a=1),
                  Mapping(a=1), [{}], Text("t"), Text("append"), Number(4)]  # fmt: skip


# -- the decode loop's common case (committed._decode_common, the compiled decode_records) --

committed_module = importlib.import_module("sessionledger.storage._committed")
LOG_HEADER = SessionHeader(id="s", created_at=0).to_json()


def scan_outcome(records: list[RawRecord] | LineRecords, *, common: bool) -> Any:
    """What a load makes of *records* with or without the compiled common cases: every
    event as stored, or the error it raises."""
    saved = (
        committed_module._decode_common,
        committed_module._decode_lines,
        committed_module._decode_batches,
    )
    if not common:
        committed_module._decode_common = committed_module._decode_lines = None
        committed_module._decode_batches = None
    try:
        kept = records if type(records) is LineRecords else list(records)
        raw = RawLog(LOG_HEADER, kept, "r")
        scanned = scan_log("s", raw, contiguous_from=0)
    except CorruptLogError as error:
        return f"{error}"
    finally:
        (
            committed_module._decode_common,
            committed_module._decode_lines,
            committed_module._decode_batches,
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
def test_the_compiled_decode_loop_takes_a_log_as_the_rules_take_it(
    log: list[dict[str, Any]], spoils: list[tuple[int, str]]
) -> None:
    compiled()
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
    compiled()
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
    # A load from seq 0 knows the first seq to expect: the compiled loop takes them all.
    compiled()
    if not snapshot_module.ACCELERATED:
        pytest.skip("the pure-Python run decodes every record by the rules")
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


def test_the_compiled_decode_loop_keeps_no_references_and_passes_errors_on() -> None:
    freeze = compiled()
    freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    freeze.setup_runs(ChunkRun)
    row = text_row()  # seqs 4 and 5
    text = b'{"type":"x/note","seq":6,"time":5,"data":{"a":[1.5]}}'  # a float: loads parses it
    records = [RawRecord.of_text(row, 0, "line 2"), RawRecord.of_text(text, 0, "line 3")]
    held = [text, row, *records]
    before = [sys.getrefcount(value) for value in held]
    for _ in range(300):
        taken: list[Any] = []
        assert freeze.decode_records(records, 0, 2, 5, taken, orjson.loads) == (0, 5)  # row: 4
        assert taken == []
        assert freeze.decode_records(records, 0, 2, 4, taken, orjson.loads) == (2, 7)
        assert [type(item) for item in taken] == [ChunkRun, SessionEvent]
        log = EventLog(SessionEvent("x/note", seq, 0, {}) for seq in range(4))
        log.extend_segments(taken)
        assert [event.seq for event in log] == list(range(7))
        assert freeze.decode_records(records, 2, 2, 7, taken, orjson.loads) == (2, 7)
    del taken, log
    assert [sys.getrefcount(value) for value in held] == before

    def refuse(_: Any) -> None:
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        freeze.decode_records(records, 1, 2, 6, [], refuse)
    with pytest.raises(TypeError):
        freeze.decode_records(tuple(records), 0, 2, 4, [], orjson.loads)
    with pytest.raises(TypeError):
        freeze.decode_records(records, 0, 2, 4, (), orjson.loads)
    with pytest.raises(ValueError):
        freeze.decode_records(records, -1, 2, 4, [], orjson.loads)
    assert freeze.decode_records([RawRecord({}, 0, "x")], 0, 1, 0, [], orjson.loads) == (0, 0)


def test_the_compiled_decode_of_lines_keeps_no_references_and_checks_its_arguments() -> None:
    freeze = compiled()
    freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    freeze.setup_runs(ChunkRun)
    data = text_row() + b"\n" + b'{"type":"x/note","seq":6,"time":5,"data":{"a":[0.5]}}\n'
    starts = array("q", [0, data.index(b"\n") + 1, -1])
    before = sys.getrefcount(data), sys.getrefcount(starts)
    for _ in range(300):
        taken: list[Any] = []
        assert freeze.decode_lines(data, starts, 0, 3, 5, taken, orjson.loads) == (0, 5)
        assert freeze.decode_lines(data, starts, 0, 3, 4, taken, orjson.loads) == (2, 7)
        assert [type(item) for item in taken] == [ChunkRun, SessionEvent]
        assert freeze.decode_lines(data, starts, 1, 1, 6, taken, orjson.loads) == (1, 6)
        far = array("q", [len(data)])
        assert freeze.decode_lines(data, far, 0, 1, 4, taken, orjson.loads) == (0, 4)
    del taken
    assert (sys.getrefcount(data), sys.getrefcount(starts)) == before

    def refuse(_: Any) -> None:
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        freeze.decode_lines(data, starts, 1, 3, 6, [], refuse)
    for wrong in (array("i", [0]), array("d", [0.0]), [0, 1], b"\0" * 8):
        with pytest.raises(TypeError):
            freeze.decode_lines(data, wrong, 0, 1, 4, [], orjson.loads)
    with pytest.raises(TypeError):
        freeze.decode_lines(bytearray(data), starts, 0, 1, 4, [], orjson.loads)
    for start, stop, expected in ((-1, 1, 4), (2, 1, 4), (0, 4, 4), (0, 1, -1)):
        with pytest.raises(ValueError):
            freeze.decode_lines(data, starts, start, stop, expected, [], orjson.loads)
    with pytest.raises(BufferError):  # the starts cannot change while it reads them
        freeze.decode_lines(data, starts, 1, 3, 6, [], lambda _: starts.append(0))


def test_the_compiled_decode_of_batches_takes_whole_batches_only() -> None:
    freeze = compiled()
    freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    freeze.setup_runs(ChunkRun)
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
            got = freeze.decode_batches(data, starts, array("q", bounds), 4, taken, orjson.loads)
            assert (got, len(taken)) == (outcome, kept), bounds
    del taken
    assert (sys.getrefcount(data), sys.getrefcount(starts)) == before
    starts[3] = -1  # a record of its own: its batch is left whole to the rules
    taken = []
    assert freeze.decode_batches(
        data, starts, array("q", [0, 2, 4, 7, 2, 4, 7, 9]), 4, taken, orjson.loads
    ) == (1, 7)
    assert len(taken) == 2
    for wrong in (array("i", [0, 1, 4, 5]), array("q", [0, 1, 4])):
        with pytest.raises(TypeError):
            freeze.decode_batches(data, starts, wrong, 4, [], orjson.loads)
    with pytest.raises(ValueError):
        freeze.decode_batches(data, starts, array("q"), -1, [], orjson.loads)


def test_a_run_built_by_the_compiled_decode_equals_chunkrun_packed_slot_by_slot() -> None:
    # The compiled decode builds a stored row's run itself: every slot must hold what
    # ChunkRun.packed puts there (a slot added to ChunkRun fails setup_runs until the C
    # build sets it too).
    freeze = compiled()
    freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    freeze.setup_runs(ChunkRun)
    rows = [
        text_row(),
        text_row(tag="reasoning-chunks", texts='["\\u00e9","中😀"]'),
        text_row(**TOOL, middle=',"id":"c1"'),
        text_row(**TOOL, middle=',"id":"c1","name":"edit"'),
        *(text for text in written(small_log(0, 12)) if text.startswith(b'{"type":"text-chunks"')),
    ]
    for row in rows:
        parsed = freeze.parse_row(row)
        assert parsed is not None, row
        taken: list[Any] = []
        records = [RawRecord.of_text(row, 0, "line 2")]
        assert freeze.decode_records(records, 0, 1, parsed[1], taken, orjson.loads)[0] == 1
        (built,) = taken
        reference = run_of_parsed_row(parsed)
        for name in ChunkRun.__slots__:
            mine, theirs = getattr(built, name), getattr(reference, name)
            assert type(mine) is type(theirs), name
            assert mine == theirs, name
        assert not gc.is_tracked(built)


# -- provenance that rises (surface._check_sources' compiled shortcut) --


def rises(seqs: Any) -> bool:
    """What ``ascending`` must say: a non-empty tuple of exact 64-bit ints, strictly rising
    (an int beyond 64 bits it leaves to the general checks)."""
    return (
        type(seqs) is tuple
        and len(seqs) > 0
        and all(type(seq) is int and -(2**63) <= seq < 2**63 for seq in seqs)
        and all(a < b for a, b in itertools.pairwise(seqs))
    )


@given(
    st.lists(st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, True, 1.0, SAFE, 2**63]))
    | st.lists(st.integers(0, 50), unique=True).map(sorted)
)
def test_ascending_says_whether_a_tuple_of_ints_rises_strictly(items: list[Any]) -> None:
    freeze = compiled()
    assert freeze.ascending(tuple(items)) is rises(tuple(items))
    assert freeze.ascending(items) is False  # only a tuple, as the events hold them
    assert freeze.ascending(tuple(Number(item) for item in items if type(item) is int)) is (False)


# -- an envelope parsed straight into its frozen form (the compiled parse_envelope) --

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
        return ("object", type(value).__name__, gc.is_tracked(value), items)
    if isinstance(value, tuple | list):
        items = [frozen_view(item) for item in value]
        return ("array", type(value).__name__, gc.is_tracked(value), items)
    return (type(value).__name__, value)


def assert_parses_as_orjson(text: bytes) -> Any:
    """The compiled parse of *text* declines, or is exactly orjson's envelope with each
    value frozen as the fast freeze freezes it (and so is accepted by it); return it."""
    freeze = compiled()
    parsed = freeze.parse_envelope(text)
    if parsed is None:
        return None
    expected = orjson.loads(text)
    assert type(parsed) is dict
    assert type(expected) is dict
    assert list(parsed) == list(expected)
    for key, value in expected.items():
        # Each value frozen as event_from_json freezes data: from depth 0 down.
        if type(value) is dict:
            frozen = freeze.freeze_mapping(value)
        elif type(value) is list:
            frozen = freeze.freeze_sequence(value)
        else:
            frozen = freeze.freeze_sequence([value])
            frozen = frozen if frozen is None else frozen[0]
            assert frozen is not None or value is None, text
        assert frozen is not None or value is None, text  # what it parses, freeze takes
        assert frozen_view(parsed[key]) == frozen_view(frozen), text
    return parsed


@given(envelope_texts())
def test_an_envelope_parsed_to_its_frozen_form_is_orjsons_frozen(text: bytes) -> None:
    assert_parses_as_orjson(text)


@given(envelope_texts(), text_mutations)
def test_a_mutated_envelope_is_declined_or_parsed_as_orjson_parses_it(
    text: bytes, mutations: list[tuple[int, int, bytes]]
) -> None:
    assert_parses_as_orjson(mutated(text, mutations))


def has_float(value: Any) -> bool:
    if type(value) is float:
        return True
    if type(value) is dict:
        return any(has_float(item) for item in value.values())
    return type(value) is list and any(has_float(item) for item in value)


def freeze_takes(value: Any) -> bool:
    """Whether the fast freeze takes *value* as event_from_json takes data (depth 0)."""
    freeze = compiled()
    if type(value) is dict:
        return freeze.freeze_mapping(value) is not None
    if type(value) is list:
        return freeze.freeze_sequence(value) is not None
    return freeze.freeze_sequence([value]) is not None


@given(envelope_texts())
def test_the_writers_envelopes_take_the_fast_parse_unless_a_rule_sends_them_on(
    text: bytes,
) -> None:
    # Only a float, or a value outside the fast freeze's range or depth, is left to orjson.
    value = orjson.loads(text)
    taken = not has_float(value) and all(freeze_takes(item) for item in value.values())
    assert (compiled().parse_envelope(text) is not None) is taken, text


@pytest.mark.parametrize(
    ("text", "taken"),
    [
        (b'{"type":"x/note","seq":0,"time":0,"data":{}}', True),
        (b'{"type":"x/note","seq":0,"time":0,"data":{"a":[1,true,null,"\\u00e9\\n"]}}', True),
        (b'{"a":1,"a":2}', False),  # a repeated key: orjson decides
        (b'{"a":{"b":1,"c":2,"b":3}}', False),  # at any depth
        (b'{"a":1.5}', False),  # a float
        (b'{"a":1e2}', False),
        (b'{"a":-0}', False),
        (b'{"a":01}', False),
        (b'{ "a":1}', False),  # whitespace
        (b'{"a":1} ', False),
        (b'{"a":"\\ud800"}', False),  # a surrogate escape
        (b'{"a":"\xed\xa0\x80"}', False),  # an encoded surrogate: not UTF-8
        (b'{"a":"\xc3"}', False),  # cut short
        (b'{"a":"\t"}', False),  # a raw control character
        (b'{"a":tru}', False),
        (b'{"a":[1,]}', False),
        (b'{"a":["x""y"]}', False),  # no comma
        (b'{"a":[1"y"]}', False),
        (b'{"a":{"b":1"c":2}}', False),
        (b'{"a":1"b":2}', False),
        (b'{"a""b"}', False),  # no colon
        (b'{"a":{"b":}}', False),
        (b'{"a":1', False),
        (b"[1]", False),
        (b"{}", False),  # no key at all: not an envelope's form
        (b'{"a":9007199254740991,"b":-9007199254740991}', True),
        (b'{"a":9007199254740992}', False),
        (b'{"\\u0041":"\\"\\\\\\/\\b\\f\\n\\r\\t"}', True),
    ],
)
def test_each_edge_of_the_fast_parse(text: bytes, taken: bool) -> None:
    assert (assert_parses_as_orjson(text) is not None) is taken


def test_the_fast_parse_keeps_no_references_and_shares_keys() -> None:
    freeze = compiled()
    text = b'{"type":"x/note","seq":0,"time":0,"data":{"message":{"role":"user"}}}'
    before = sys.getrefcount(text)
    first = [freeze.parse_envelope(text) for _ in range(300)]
    assert sys.getrefcount(text) == before
    keys = [next(iter(parsed["data"])) for parsed in first]
    assert all(key is keys[0] for key in keys)  # one str for a repeated key
    assert keys[0] is sys.intern("message")
    with pytest.raises(TypeError):
        freeze.parse_envelope("not bytes")


def test_the_fast_parse_tells_many_keys_apart() -> None:
    # More distinct keys than its cache has places, of one length: each parsed key must
    # be the key of its text, whatever the cache held before.
    freeze = compiled()
    keys = [f"k{number:04}" for number in range(3000)]
    for _ in range(2):
        for start in range(0, len(keys), 100):
            chosen = keys[start : start + 100]
            text = orjson.dumps({key: number for number, key in enumerate(chosen)})
            parsed = freeze.parse_envelope(text)
            assert list(parsed) == chosen
            assert list(parsed.values()) == list(range(len(chosen)))


@pytest.mark.parametrize("data", [b"[]", b'"x"', b"1", b"null", b"true", b"[{}]"])
def test_an_envelope_whose_data_is_no_object_decodes_as_the_rules_decode_it(data: bytes) -> None:
    compiled()
    text = b'{"type":"x/note","seq":0,"time":0,"data":' + data + b"}"
    records = [RawRecord.of_text(text, 0, "line 2")]
    assert scan_outcome(records, common=True) == scan_outcome(records, common=False)
    lines = as_lines(records)
    assert scan_outcome(lines, common=True) == scan_outcome(list(lines), common=False)


# -- a streamed delta validated and frozen in one step (deltas.freeze_delta, compiled) --


def delta_freezer() -> Any:
    """The compiled freeze_delta, set up as deltas.py sets it up (only when chosen)."""
    from sessionledger.model import _deltas as deltas

    freeze = compiled()
    freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    freeze.setup_deltas(deltas._KINDS, deltas._TOOL_KIND)
    return freeze.freeze_delta


def delta_outcome(freeze: Any, data: Any) -> Any:
    """What *freeze* makes of *data*: None, the error, or everything a reader sees of the
    frozen data and the run fields (types, key order, the kind's identity)."""
    try:
        made = freeze(data)
    except Exception as error:
        return type(error).__name__
    if made is None:
        return None
    frozen, fields = made
    chunk = frozen["chunk"]
    return (
        type(frozen).__name__,
        list(frozen.items())[:2],
        type(chunk).__name__,
        [(key, type(value).__name__, value) for key, value in chunk.items()],
        frozen._shallow,
        [(type(field).__name__, field) for field in fields],
        fields[0] is chunk["type"],
        orjson.dumps(frozen),
    )


class Kind(str):
    pass


class Weird:
    def __hash__(self) -> int:
        return hash("text-delta")

    def __eq__(self, other: object) -> bool:
        return other == "text-delta"


DELTA_EDGES = [None, True, 0, 1, -1, 2, SAFE, SAFE + 1, 2**64, 1.0, "", "x", "é", "\ud800",
               "text-delta", "reasoning-delta", "tool-call-delta", Kind("text-delta"), Weird(),
               [], {}, Text("t"), Number(2)]  # fmt: skip
delta_values = st.sampled_from(DELTA_EDGES)


@st.composite
def delta_data(draw: st.DrawFn) -> Any:
    """Delta data near every rule's edge: a well-formed delta of each kind, then keys
    dropped, added or given edge values, in any order, as dict or FrozenDict."""
    kind = draw(st.sampled_from(["text-delta", "reasoning-delta", "tool-call-delta"]))
    chunk: dict[Any, Any] = {"type": kind, "index": draw(st.sampled_from([0, 3, SAFE]))}
    if kind == "tool-call-delta":
        chunk["id"] = draw(st.sampled_from(["call-1", "é", ""]))
        if draw(st.booleans()):
            chunk["name"] = draw(st.sampled_from(["edit", ""]))
        chunk["argumentsDelta"] = draw(st.text(max_size=4))
    else:
        chunk["text"] = draw(st.text(max_size=4))
    data: dict[Any, Any] = {"turn": draw(st.sampled_from([1, 2, SAFE])), "step": 1}
    data["chunk"] = chunk
    for _ in range(draw(st.integers(0, 2))):
        target = draw(st.sampled_from([data, chunk]))
        how = draw(st.sampled_from(["drop", "add", "set"]))
        keys = list(target)
        if how == "drop" and keys:
            del target[draw(st.sampled_from(keys))]
        elif how == "add":
            target[draw(st.sampled_from(["other", "name", "text", "id", 1]))] = 1
        elif keys:
            target[draw(st.sampled_from(keys))] = draw(delta_values)
    for target in (chunk, data):
        order = draw(st.permutations(list(target)))
        items = {key: target[key] for key in order}
        target.clear()
        target.update(items)
    if draw(st.booleans()):
        data["chunk"] = (
            FrozenDict(data["chunk"]) if type(data.get("chunk")) is dict else data.get("chunk")
        )
        data = FrozenDict(data)
    return data


@given(delta_data())
def test_a_delta_freezes_in_c_as_in_python(data: Any) -> None:
    from sessionledger.model import _deltas as deltas

    fast = delta_freezer()
    assert delta_outcome(fast, data) == delta_outcome(deltas.pure_freeze_delta, data)


def test_a_delta_of_each_kind_takes_the_compiled_freeze() -> None:
    from sessionledger.model import _deltas as deltas

    fast = delta_freezer()
    for chunk in (
        {"type": "text-delta", "index": 0, "text": "a"},
        {"type": "reasoning-delta", "index": 1, "text": "é"},
        {"type": "tool-call-delta", "index": 0, "id": "c", "argumentsDelta": "{"},
        {"type": "tool-call-delta", "index": 0, "id": "c", "name": "n", "argumentsDelta": ""},
    ):
        data = {"chunk": chunk, "step": 2, "turn": 1}
        assert fast(data) is not None
        assert delta_outcome(fast, data) == delta_outcome(deltas.pure_freeze_delta, data)
        before = [sys.getrefcount(value) for value in chunk.values()]
        for _ in range(200):
            fast(data)
        assert [sys.getrefcount(value) for value in chunk.values()] == before
    unhashable = {"chunk": {"type": [], "index": 0, "text": "a"}, "turn": 1, "step": 1}
    assert fast(unhashable) is None
    assert delta_outcome(deltas.pure_freeze_delta, unhashable) is None


def test_the_compiled_make_event_builds_what_make_event_builds() -> None:
    freeze = compiled()
    freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    fields = ("x/note", 3, 4, FrozenDict(a=1), None, (1, 2), True)
    built = freeze.make_event(*fields)
    assert type(built) is SessionEvent
    assert built == SessionEvent(*fields)
    assert (built.type, built.seq, built.time, built.data, built.surface_op) == fields[:5]
    assert (built.source_event_seqs, built.ignorable) == fields[5:]
    with pytest.raises(TypeError):
        freeze.make_event(*fields[:6])


def test_each_delta_field_at_each_edge_freezes_in_c_as_in_python() -> None:
    # A table, every field of each kind of delta given every edge value: no rule is left
    # to the luck of a draw.
    from sessionledger.model import _deltas as deltas

    fast = delta_freezer()
    text = {"type": "text-delta", "index": 0, "text": "a"}
    tool = {"type": "tool-call-delta", "index": 0, "id": "c", "name": "n", "argumentsDelta": "x"}
    taken = 0
    for chunk in (text, tool):
        for top in (False, True):
            keys = ["turn", "step", "chunk"] if top else list(chunk)
            for key in keys:
                for value in DELTA_EDGES:
                    new_chunk = chunk if top else {**chunk, key: value}
                    data = {"turn": 1, "step": 1, "chunk": new_chunk}
                    if top:
                        data[key] = value
                    outcome = delta_outcome(fast, data)
                    assert outcome == delta_outcome(deltas.pure_freeze_delta, data), data
                    taken += outcome is not None
    assert taken > 10
