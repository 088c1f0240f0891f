"""Tests for the byte-level JSON codec (sessionledger.model._jsoncodec)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionledger._errors import JsonValueError
from sessionledger.model._jsoncodec import (
    ORJSON_MAX_DEPTH,
    JsonDecodeError,
    _deeper_than,
    dumps,
    iterative_dumps,
    iterative_loads,
    loads,
)
from sessionledger.model._snapshot import FrozenDict, snapshot

STRICT = orjson.OPT_STRICT_INTEGER

# --- strategies and helpers ----------------------------------------------------------------

texts = st.text(alphabet=st.characters(codec="utf-8"))  # valid Unicode: no lone surrogates
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53 - 1), 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.lists(children, max_size=5).map(tuple)
        | st.dictionaries(texts, children, max_size=5)
        | st.dictionaries(texts, children, max_size=5).map(FrozenDict)
    ),
    max_leaves=25,
)


def fingerprint(value: Any) -> bytes:
    """Return a type-exact identity of a shallow value (1, 1.0, True and -0.0 all differ)."""
    return orjson.dumps(value)


def decode_outcome(parse: Callable[[Any], Any], data: Any) -> tuple[str, bytes]:
    """Return ("ok", fingerprint) or ("error", b"") for one parse of *data*."""
    try:
        return ("ok", fingerprint(parse(data)))
    except ValueError:  # JsonDecodeError and orjson.JSONDecodeError are both ValueErrors
        return ("error", b"")


# Deep shapes: (prefix, suffix) repeated n times around a leaf, as text and as a value.
LEAF = "é😀\n"
SHAPES: dict[str, tuple[bytes, bytes, Callable[[Any], Any]]] = {
    "lists": (b"[", b"]", lambda inner: [inner]),
    "dicts": (b'{"k":', b"}", lambda inner: {"k": inner}),
    "dict-in-list": (b'[{"k":', b"}]", lambda inner: [{"k": inner}]),
    "list-in-dict": (b'{"k":[', b"]}", lambda inner: {"k": [inner]}),
    "with-siblings": (
        b'[1,{"a":null,"k":',
        b',"z":2.5},"x"]',
        lambda inner: [1, {"a": None, "k": inner, "z": 2.5}, "x"],
    ),
    "frozen": (
        b'[{"k":',
        b"}]",
        lambda inner: (FrozenDict({"k": inner}),),
    ),
}


def deep_value(shape: str, repeats: int) -> tuple[Any, bytes]:
    prefix, suffix, wrap = SHAPES[shape]
    value: Any = LEAF
    for _ in range(repeats):
        value = wrap(value)
    text = prefix * repeats + orjson.dumps(LEAF) + suffix * repeats
    return value, text


def descend(value: Any, shape: str) -> Any:
    """Undo one wrap of *shape*, checking that the decoded containers are plain list/dict."""
    if shape == "lists":
        assert type(value) is list
        assert len(value) == 1
        return value[0]
    if shape == "dicts":
        assert type(value) is dict
        assert list(value) == ["k"]
        return value["k"]
    if shape in ("dict-in-list", "frozen"):
        assert type(value) is list
        assert type(value[0]) is dict
        return value[0]["k"]
    if shape == "list-in-dict":
        assert type(value) is dict
        assert type(value["k"]) is list
        return value["k"][0]
    assert type(value) is list
    assert value[0] == 1
    assert value[2] == "x"
    assert type(value[1]) is dict
    assert list(value[1]) == ["a", "k", "z"]
    return value[1]["k"]


# --- deep values ---------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [10_000, 100_000])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_deep_values_round_trip(shape: str, depth: int) -> None:
    repeats = depth // 2 if shape not in ("lists", "dicts") else depth
    value, expected = deep_value(shape, repeats)

    encoded = dumps(value)
    assert encoded == expected

    decoded = loads(encoded)
    for _ in range(repeats):
        decoded = descend(decoded, shape)
    assert decoded == LEAF


def test_deep_value_from_snapshot_is_serialized() -> None:
    value, expected = deep_value("dict-in-list", 5_000)
    frozen = snapshot(value, "data")
    assert dumps(frozen) == expected


def test_deep_text_is_parsed_from_str_and_buffers() -> None:
    _, text = deep_value("with-siblings", 2_000)
    for data in (text, bytearray(text), memoryview(text), text.decode("utf-8")):
        assert dumps(loads(data)) == text


def test_dumps_is_exact_around_the_depth_limits() -> None:
    # ORJSON_MAX_DEPTH decides which encoder runs; orjson's own limit is about 254.
    for depth in [*range(ORJSON_MAX_DEPTH - 3, ORJSON_MAX_DEPTH + 4), *range(250, 260)]:
        for shape in ("lists", "frozen"):
            value, expected = deep_value(shape, depth)
            assert dumps(value) == expected
    text = b"[" * 1030 + b"]" * 1030
    for depth in range(1020, 1030):
        assert dumps(loads(text[1030 - depth : 1030 + depth])) == text[1030 - depth : 1030 + depth]


def chain(make: Callable[[Any], Any], depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = make(value)
    return value


@pytest.mark.parametrize(
    "make",
    [
        lambda inner: [inner],
        lambda inner: (inner,),
        lambda inner: {"k": inner},
        lambda inner: FrozenDict({"k": inner, "n": 1}),
        lambda inner: (1, inner, "x"),
    ],
    ids=["list", "tuple", "dict", "frozen", "tuple-with-siblings"],
)
def test_depth_scan_counts_every_container_kind(make: Callable[[Any], Any]) -> None:
    assert not _deeper_than(chain(make, 5), 5)
    assert _deeper_than(chain(make, 6), 5)
    assert not _deeper_than(chain(make, ORJSON_MAX_DEPTH), ORJSON_MAX_DEPTH)
    assert _deeper_than(chain(make, ORJSON_MAX_DEPTH + 1), ORJSON_MAX_DEPTH)


def test_depth_scan_sees_the_deepest_branch_of_a_wide_value() -> None:
    # 1 (the dict) + 10 nested lists = 11 levels
    wide = {"rows": [[index, "x", 1.5] for index in range(500)], "deep": chain(lambda v: [v], 10)}
    assert not _deeper_than(wide, 11)
    assert _deeper_than(wide, 10)
    assert not _deeper_than("scalar", 1)
    assert not _deeper_than([], 1)


# orjson 3.13 serializes tuples without checking its depth limit: these shapes abort or
# corrupt the interpreter when handed to orjson.dumps. Run them in a child process so a
# regression fails this test instead of killing the test run.
TUPLE_HAZARDS = """
import sys
from sessionledger.model._jsoncodec import dumps
from sessionledger.model._snapshot import FrozenDict, snapshot

def chain(make, depth):
    value = "x"
    for _ in range(depth):
        value = make(value)
    return value

cases = [
    (chain(lambda v: (v,), 20_000), b"[" * 20_000 + b'"x"' + b"]" * 20_000),
    (chain(lambda v: ({"k": v},), 300), b'[{"k":' * 300 + b'"x"' + b"}]" * 300),
    (chain(lambda v: (FrozenDict({"k": v}),), 300), b'[{"k":' * 300 + b'"x"' + b"}]" * 300),
    ([chain(lambda v: (v,), 20_000)], b"[" * 20_001 + b'"x"' + b"]" * 20_001),
    (snapshot(chain(lambda v: [{"k": v}], 5_000)), b'[{"k":' * 5_000 + b'"x"' + b"}]" * 5_000),
]
for value, expected in cases:
    assert dumps(value) == expected
print("ok")
"""


def test_deep_tuples_never_reach_orjson() -> None:
    result = subprocess.run(
        [sys.executable, "-c", TUPLE_HAZARDS],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"


def test_deep_shared_references_are_serialized_each_time() -> None:
    shared: Any = [1, {"s": "t"}]
    value: Any = [shared, shared]
    for _ in range(1_000):
        value = [value, shared]
    part = b'[1,{"s":"t"}]'
    expected = b"[" * 1_001 + part + b"," + part + b"]" + (b"," + part + b"]") * 1_000
    assert dumps(value) == expected
    assert dumps(loads(expected)) == expected


# --- differential tests against orjson on shallow values -----------------------------------


@given(values)
def test_iterative_dumps_matches_orjson(value: Any) -> None:
    expected = orjson.dumps(value, option=STRICT)
    assert iterative_dumps(value) == expected
    assert dumps(value) == expected


@given(values)
def test_iterative_loads_matches_orjson_on_compact_text(value: Any) -> None:
    text = orjson.dumps(value)
    assert fingerprint(iterative_loads(text)) == fingerprint(orjson.loads(text))
    assert fingerprint(iterative_loads(text.decode("utf-8"))) == text


@given(
    values,
    st.sampled_from([None, 0, 2, "\t", "\r\n "]),
    st.booleans(),
    st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", "\t:\r")]),
)
def test_iterative_loads_matches_orjson_on_other_layouts(
    value: Any, indent: Any, ensure_ascii: bool, separators: tuple[str, str]
) -> None:
    # json.dumps escapes differently (\uXXXX and surrogate pairs with ensure_ascii), writes
    # floats with repr and adds whitespace: all valid JSON that orjson reads.
    text = json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators)
    assert fingerprint(iterative_loads(text)) == fingerprint(orjson.loads(text))
    assert fingerprint(iterative_loads(text.encode())) == fingerprint(orjson.loads(text))


json_ish = st.text(
    alphabet=st.sampled_from(list('[]{}",:0123456789-+.eE \n\t\rtruefalsnl\\/u\x01é'))
)


@given(json_ish)
def test_iterative_loads_agrees_with_orjson_on_arbitrary_text(text: str) -> None:
    assert decode_outcome(iterative_loads, text) == decode_outcome(orjson.loads, text)


@given(st.binary(max_size=30))
def test_iterative_loads_agrees_with_orjson_on_arbitrary_bytes(data: bytes) -> None:
    assert decode_outcome(iterative_loads, data) == decode_outcome(orjson.loads, data)


@given(values, st.data())
def test_iterative_loads_agrees_with_orjson_on_damaged_documents(value: Any, data: Any) -> None:
    text = orjson.dumps(value)
    index = data.draw(st.integers(0, len(text)))
    damage = data.draw(st.sampled_from(["delete", "insert", "replace"]))
    byte = data.draw(st.sampled_from([*b'[]{}",:0-.e \\u\x00\x1ftfn', 0xC3, 0xFF]))
    if damage == "delete":
        damaged = text[:index] + text[index + 1 :]
    elif damage == "insert":
        damaged = text[:index] + bytes([byte]) + text[index:]
    else:
        damaged = text[:index] + bytes([byte]) + text[index + 1 :]
    assert decode_outcome(iterative_loads, damaged) == decode_outcome(orjson.loads, damaged)


# --- strictness ----------------------------------------------------------------------------

MALFORMED = [
    b"",
    b"   ",
    b"NaN",
    b"-Infinity",
    b"Infinity",
    b"[1,]",
    b'{"a":1,}',
    b"[,1]",
    b"[1,,2]",
    b"{,}",
    b"[1 2]",
    b'{"a" 1}',
    b'{"a":1 "b":2}',
    b"{1:2}",
    b"{'a':1}",
    b"/* c */ 1",
    b"1 // c",
    b"[1]x",
    b"[1]]",
    b"[",
    b'{"a":',
    b'"abc',
    b"01",
    b"-01",
    b"1.",
    b".5",
    b"+1",
    b"1e",
    b"1e+",
    b"-",
    b"tru",
    b"nulll",
    b"True",
    b"1e400",
    b"-1e400",
    b"\xef\xbb\xbf1",
    b"\x0c1",
    b'"\x00"',
    b'"a\nb"',
    b'"\x1f"',
    b'"\\x41"',
    b'"\\u12"',
    b'"\\uZZZZ"',
    b'"\\ud800"',
    b'"\\udc00"',
    b'"\\ud800\\u0041"',
    b'"\\ude00\\ud83d"',
    b'"\\ud83d"x',
    b'"\xff"',
    b'"\xc3"',
    b'"\xed\xa0\x80"',
]


@pytest.mark.parametrize("text", MALFORMED, ids=repr)
def test_malformed_text_is_rejected_by_both_parsers(text: bytes) -> None:
    with pytest.raises(JsonDecodeError):
        iterative_loads(text)
    with pytest.raises(JsonDecodeError):
        loads(text)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)


@pytest.mark.parametrize("text", [text for text in MALFORMED if text.strip()], ids=repr)
def test_malformed_text_inside_deep_nesting_is_rejected(text: bytes) -> None:
    with pytest.raises(JsonDecodeError):
        loads(b"[" * 2_000 + text + b"]" * 2_000)


def test_shallow_syntax_errors_come_from_orjson_unchanged() -> None:
    # Only a depth refusal reaches the fallback; other errors keep orjson's message.
    for text in (b"[1,]", b'{"a" 1}', b"\xef\xbb\xbf1", b"[1]x"):
        with pytest.raises(orjson.JSONDecodeError) as reference:
            orjson.loads(text)
        with pytest.raises(JsonDecodeError) as caught:
            loads(text)
        assert str(caught.value) == str(reference.value)
        assert caught.value.pos == reference.value.pos
        assert isinstance(caught.value, ValueError)


def test_deep_error_is_reported_with_its_byte_offset() -> None:
    text = b"[" * 2_000 + b"[1,]" + b"]" * 2_000
    with pytest.raises(JsonDecodeError) as caught:
        loads(text)
    assert caught.value.pos == 2_003
    assert "2003" in str(caught.value)


def test_unbalanced_deep_text_is_rejected() -> None:
    for text in (b"[" * 5_000, b"[" * 5_000 + b"]" * 4_999, b"[" * 5_000 + b"]" * 5_001):
        with pytest.raises(JsonDecodeError):
            loads(text)


def test_str_with_lone_surrogate_is_rejected() -> None:
    with pytest.raises(JsonDecodeError):
        iterative_loads('"\ud800"')
    with pytest.raises(JsonDecodeError):
        loads('"\ud800"')


# --- numbers, strings, escapes -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-0",
        "-0.0",
        "1.0",
        "1E2",
        "1e+2",
        "2.5e-3",
        "1e-400",
        "9007199254740993",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "1" + "0" * 40,
        "0.1",
        "123456789.123456789e-5",
    ],
)
def test_numbers_decode_like_orjson(text: str) -> None:
    expected = orjson.loads(text)
    result = iterative_loads(text)
    assert type(result) is type(expected)
    assert fingerprint(result) == fingerprint(expected)
    deep = loads("[" * 2_000 + text + "]" * 2_000)
    for _ in range(2_000):
        deep = deep[0]
    assert fingerprint(deep) == fingerprint(expected)


def test_number_types_follow_orjson() -> None:
    assert iterative_loads(b"-0") == 0
    assert type(iterative_loads(b"-0")) is int
    assert type(iterative_loads(b"1.0")) is float
    negative_zero = iterative_loads(b"-0.0")
    assert negative_zero == 0.0
    assert math.copysign(1.0, negative_zero) == -1.0
    assert type(iterative_loads(b"18446744073709551616")) is float


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_are_written_exactly_as_orjson_writes_them(number: float) -> None:
    assert iterative_dumps([number]) == orjson.dumps([number])


def test_non_ascii_and_astral_text_is_written_as_utf8() -> None:
    text = "zé 中文 😀 \u2028"
    expected = ('"' + text + '"').encode("utf-8")
    assert dumps(text) == expected
    assert iterative_dumps(text) == expected
    assert iterative_dumps({text: [text]}) == b"{" + expected + b":[" + expected + b"]}"


def test_control_characters_quotes_and_backslashes_are_escaped() -> None:
    text = '\x00\x01\x08\t\n\x0b\x0c\r\x1f"\\/\x7f'
    expected = orjson.dumps(text)
    assert b"\n" not in expected
    assert iterative_dumps([text]) == b"[" + expected + b"]"
    assert loads(dumps([text] * 3)) == [text] * 3


def test_escapes_decode_to_the_right_characters() -> None:
    text = b'["\\u00e9\\ud83d\\ude00\\uD83D\\uDE00\\n\\t\\"\\\\\\/\\b\\f\\r\\u0000", "\xc3\xa9"]'
    expected = ['é😀😀\n\t"\\/\b\f\r\x00', "é"]
    assert iterative_loads(text) == expected
    assert orjson.loads(text) == expected


def test_duplicate_keys_keep_the_last_value_in_the_first_position() -> None:
    text = b'{"a":1,"b":2,"a":3}'
    assert list(iterative_loads(text).items()) == [("a", 3), ("b", 2)]
    assert list(orjson.loads(text).items()) == [("a", 3), ("b", 2)]


def test_whitespace_around_tokens_is_accepted() -> None:
    text = b' \t\r\n{ "a" : [ 1 , 2.5 , true , false , null , { } , [ ] ] } \n'
    assert iterative_loads(text) == {"a": [1, 2.5, True, False, None, {}, []]}


# --- values that cannot be serialized ------------------------------------------------------


@dataclasses.dataclass
class Point:
    x: int


NOT_JSON = [
    {1, 2},
    b"bytes",
    object(),
    Point(1),
    datetime.date(2024, 1, 1),
    2**53,
    -(2**53),
    "\ud800",
    {1: "int key"},
    {"k": {("tuple", "key"): 1}},
]


@pytest.mark.parametrize("value", NOT_JSON, ids=lambda value: type(value).__name__)
def test_values_that_are_not_json_raise_json_value_error(value: Any) -> None:
    with pytest.raises(JsonValueError):
        dumps(value)
    with pytest.raises(JsonValueError):
        iterative_dumps(value)
    deep: Any = value
    for _ in range(1_000):
        deep = {"k": [deep]}
    with pytest.raises(JsonValueError):
        dumps(deep)


def test_str_subclass_keys_are_rejected_like_orjson_does() -> None:
    class Key(str):
        pass

    with pytest.raises(JsonValueError):
        dumps({Key("k"): 1})
    with pytest.raises(JsonValueError):
        iterative_dumps({Key("k"): 1})


def test_cycles_raise_instead_of_looping() -> None:
    items: list[Any] = [1]
    items.append(items)
    with pytest.raises(JsonValueError, match="contains itself"):
        dumps(items)
    mapping: dict[str, Any] = {}
    mapping["self"] = [{"again": mapping}]
    with pytest.raises(JsonValueError, match="contains itself"):
        dumps(mapping)
    deep: Any = items
    for _ in range(1_000):
        deep = [deep]
    with pytest.raises(JsonValueError, match="contains itself"):
        dumps(deep)


def test_frozen_values_are_serialized_directly() -> None:
    frozen = snapshot({"a": [1, {"b": (2.5, None)}], "c": "é"}, "data")
    assert dumps(frozen) == '{"a":[1,{"b":[2.5,null]}],"c":"é"}'.encode()
    assert iterative_dumps(frozen) == dumps(frozen)


def test_error_classes() -> None:
    assert issubclass(JsonDecodeError, ValueError)
    error = JsonDecodeError("bad", 3)
    assert error.pos == 3
    assert str(error) == "bad"


def test_only_values_proved_shallow_skip_the_depth_scan() -> None:
    from sessionledger.model._snapshot import snapshot

    shallow = snapshot({"a": [1, {"b": "c"}]})
    assert getattr(shallow, "_shallow", False) is True
    nested: Any = "leaf"
    for _ in range(300):
        nested = [{"k": nested}]
    deep = snapshot({"root": nested})  # past the fast path's depth: built by the careful walk
    assert getattr(deep, "_shallow", False) is False
    record = {"type": "x/deep", "seq": 0, "time": 1, "data": deep}
    assert dumps(record) == iterative_dumps(record)
    assert loads(dumps(record)) == loads(iterative_dumps(record))
