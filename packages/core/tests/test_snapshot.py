"""Lossless JSON values: snapshot, FrozenDict and thaw (docs/events.md, "JSON values")."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import decimal
import enum
import fractions
import pickle
import types
import uuid
from collections import OrderedDict, UserDict, defaultdict, namedtuple
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionledger import FrozenDict, JsonValueError, LedgerError, snapshot, thaw
from sessionledger.model._snapshot import MAX_SAFE_INTEGER, is_safe_int
from sessionledger.testing.strategies import json_values

# --- helpers --------------------------------------------------------------------------------


def strict_equal(left: Any, right: Any) -> bool:
    """Compare two JSON values with JSON's types: 1, 1.0 and True are three different values.

    Mappings of any kind compare by items, sequences of any kind by position. Iterative,
    so it works on the 10,000-deep values too.
    """
    stack = [(left, right)]
    while stack:
        a, b = stack.pop()
        a_map, b_map = isinstance(a, dict), isinstance(b, dict)
        a_seq, b_seq = isinstance(a, list | tuple), isinstance(b, list | tuple)
        if a_map or b_map:
            if not (a_map and b_map) or a.keys() != b.keys():
                return False
            stack.extend((a[key], b[key]) for key in a)
        elif a_seq or b_seq:
            if not (a_seq and b_seq) or len(a) != len(b):
                return False
            stack.extend(zip(a, b, strict=True))
        elif type(a) is not type(b) or a != b:
            return False
    return True


def containers(value: Any) -> list[Any]:
    """Return every container inside *value* (itself included), iteratively."""
    found = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            found.append(item)
            stack.extend(item)
    return found


def nest_lists(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nest_dicts(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"child": value}
    return value


def rejects(value: Any, path: str = "value") -> JsonValueError:
    with pytest.raises(JsonValueError) as caught:
        snapshot(value, path)
    return caught.value


# --- values that must be rejected -----------------------------------------------------------


class Color(enum.IntEnum):
    RED = 1


class Label(enum.StrEnum):
    A = "a"


class MyStr(str):
    pass


class MyInt(int):
    pass


class MyFloat(float):
    pass


class MyList(list):  # type: ignore[type-arg]
    pass


class MyTuple(tuple):  # type: ignore[type-arg]
    __slots__ = ()


class MyDict(dict):  # type: ignore[type-arg]
    pass


Point = namedtuple("Point", "x y")


@dataclasses.dataclass
class Record:
    value: int = 1


class Plain:
    pass


REJECTED: dict[str, Any] = {
    "negative zero": -0.0,
    "nan": float("nan"),
    "inf": float("inf"),
    "minus inf": float("-inf"),
    "int above 2**53-1": MAX_SAFE_INTEGER + 1,
    "int below -(2**53-1)": -MAX_SAFE_INTEGER - 1,
    "huge int": 10**40,
    "set": {1, 2},
    "frozenset": frozenset({1}),
    "bytes": b"x",
    "bytearray": bytearray(b"x"),
    "memoryview": memoryview(b"x"),
    "complex": 1j,
    "decimal": decimal.Decimal("1.5"),
    "fraction": fractions.Fraction(1, 2),
    "datetime": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    "date": datetime.date(2024, 1, 1),
    "uuid": uuid.UUID(int=1),
    "range": range(3),
    "object": object(),
    "class instance": Plain(),
    "dataclass": Record(),
    "function": lambda: None,
    "type": int,
    "ellipsis": ...,
    "IntEnum member": Color.RED,
    "str enum member": Label.A,
    "str subclass": MyStr("x"),
    "int subclass": MyInt(1),
    "float subclass": MyFloat(1.5),
    "list subclass": MyList([1]),
    "tuple subclass": MyTuple((1,)),
    "namedtuple": Point(1, 2),
    "dict subclass": MyDict(a=1),
    "OrderedDict": OrderedDict(a=1),
    "defaultdict": defaultdict(list, a=[1]),
    "UserDict": UserDict(a=1),
    "mappingproxy": types.MappingProxyType({"a": 1}),
    "generator": (i for i in range(2)),
    "lone high surrogate": "\ud800",
    "lone low surrogate": "a\udfffb",
    "surrogate pair written as two code points": "\ud83d\ude00",
}


@pytest.mark.parametrize("bad", REJECTED.values(), ids=REJECTED.keys())
def test_snapshot_rejects_non_json_value_at_top_level(bad: Any) -> None:
    error = rejects(bad)
    assert error.code == "NOT_JSON"
    assert error.path == "value"


# Depth 2 stays on the recursive fast path, depth 100 goes through the iterative walk;
# both must reject exactly the same values and name the same path.
@pytest.mark.parametrize("depth", [0, 2, 100])
@pytest.mark.parametrize("bad", REJECTED.values(), ids=REJECTED.keys())
def test_snapshot_rejects_non_json_value_nested_in_list_and_names_path(
    bad: Any, depth: int
) -> None:
    error = rejects(nest_lists(depth, [1, "ok", bad]), "data")
    assert error.path == "data" + "[0]" * depth + "[2]"


@pytest.mark.parametrize("depth", [0, 2, 100])
@pytest.mark.parametrize("bad", REJECTED.values(), ids=REJECTED.keys())
def test_snapshot_rejects_non_json_value_nested_in_dict_and_names_path(
    bad: Any, depth: int
) -> None:
    error = rejects(nest_dicts(depth, {"fine": None, "text": bad}), "data")
    assert error.path == "data" + ".child" * depth + ".text"


def test_snapshot_error_path_names_message_block() -> None:
    data = {
        "content": [
            {"type": "text", "text": "a"},
            {"type": "text", "text": "b"},
            {"type": "text", "text": b"raw"},
        ]
    }
    error = rejects(data, "data")
    assert error.path == "data.content[2].text"
    assert "data.content[2].text" in str(error)


def test_snapshot_error_path_quotes_keys_that_are_not_identifiers() -> None:
    assert rejects({"a b": {"x": {1}}}, "data").path == "data['a b'].x"


def test_snapshot_default_root_path_is_value() -> None:
    assert rejects([{1}]).path == "value[0]"


@pytest.mark.parametrize(
    "key",
    [1, 1.5, None, True, (1, 2), b"k", MyStr("k"), Color.RED, frozenset()],
    ids=repr,
)
def test_snapshot_rejects_non_str_keys(key: Any) -> None:
    error = rejects({"outer": {key: 1}}, "data")
    assert error.path is not None
    assert error.path.startswith("data.outer")


@pytest.mark.parametrize("depth", [0, 100])
def test_snapshot_rejects_lone_surrogate_in_key(depth: int) -> None:
    error = rejects(nest_dicts(depth, {"ok": 1, "bad\udc00": 2}), "data")
    assert error.path is not None
    assert error.path.startswith("data" + ".child" * depth)


def test_json_value_error_is_type_error_and_ledger_error() -> None:
    error = rejects({1, 2})
    assert isinstance(error, TypeError)
    assert isinstance(error, LedgerError)


# --- values that must be accepted -----------------------------------------------------------

ACCEPTED: dict[str, Any] = {
    "none": None,
    "true": True,
    "false": False,
    "empty string": "",
    "ascii": "text",
    "unicode": "é 😀 \u2028 \x00",
    "zero": 0,
    "one": 1,
    "minus one": -1,
    "max safe int": MAX_SAFE_INTEGER,
    "min safe int": -MAX_SAFE_INTEGER,
    "float": 1.25,
    "positive zero": 0.0,
    "negative float": -1.5,
    "integral float": 2.0,
    "huge float": 1e308,
    "tiny float": 5e-324,
}


@pytest.mark.parametrize("good", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_snapshot_accepts_json_scalar_unchanged(good: Any) -> None:
    out = snapshot(good)
    assert strict_equal(out, good)
    assert type(out) is type(good)


@pytest.mark.parametrize("depth", [1, 100])
@pytest.mark.parametrize("good", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_snapshot_accepts_json_scalar_nested(good: Any, depth: int) -> None:
    value = nest_dicts(depth, {"list": [good, nest_lists(3, good)]})
    assert strict_equal(snapshot(value), value)


def test_snapshot_keeps_bool_as_bool_and_int_as_int() -> None:
    out = snapshot({"flag": True, "count": 1, "ratio": 1.0, "items": [False, 0, 0.0]})
    assert type(out["flag"]) is bool
    assert type(out["count"]) is int
    assert type(out["ratio"]) is float
    assert [type(x) for x in out["items"]] == [bool, int, float]


def test_snapshot_accepts_tuples_and_our_frozen_types() -> None:
    frozen = snapshot({"a": [1, 2]})
    out = snapshot({"t": (1, (2, 3)), "f": frozen})
    assert out == {"t": (1, (2, 3)), "f": {"a": (1, 2)}}
    assert type(out["f"]) is FrozenDict


def test_snapshot_keeps_key_order() -> None:
    out = snapshot({"z": 1, "a": 2, "m": {"y": 1, "b": 2}})
    assert list(out) == ["z", "a", "m"]
    assert list(out["m"]) == ["y", "b"]


def test_snapshot_of_accepted_wide_value_is_equal() -> None:
    value = {f"k{i}": [i, str(i), {"n": i / 2}] for i in range(2000)}
    assert strict_equal(snapshot(value), value)


@pytest.mark.parametrize("bound", [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0, 5])
def test_is_safe_int_accepts_ints_in_range(bound: int) -> None:
    assert is_safe_int(bound)


@pytest.mark.parametrize(
    "value", [True, False, 1.0, MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, "1", None, MyInt(1)]
)
def test_is_safe_int_rejects_everything_else(value: Any) -> None:
    assert not is_safe_int(value)


# --- deep nesting ---------------------------------------------------------------------------


def test_snapshot_accepts_ten_thousand_nested_lists_and_freezes_every_level() -> None:
    out = snapshot(nest_lists(10_000, "leaf"))
    depth = 0
    while type(out) is tuple:
        assert len(out) == 1
        out = out[0]
        depth += 1
    assert depth == 10_000
    assert out == "leaf"


def test_snapshot_accepts_ten_thousand_nested_dicts_and_freezes_every_level() -> None:
    out = snapshot(nest_dicts(10_000, None))
    depth = 0
    while out is not None:
        assert type(out) is FrozenDict
        with pytest.raises(TypeError):
            out["child"] = None
        out = out["child"]
        depth += 1
    assert depth == 10_000


def test_snapshot_names_path_of_bad_leaf_ten_thousand_levels_down() -> None:
    error = rejects(nest_dicts(10_000, {"x": float("nan")}), "data")
    assert error.path == "data" + ".child" * 10_000 + ".x"


def test_thaw_handles_ten_thousand_nested_levels() -> None:
    out = thaw(snapshot(nest_dicts(5_000, nest_lists(5_000, 1))))
    for _ in range(5_000):
        assert type(out) is dict
        out = out["child"]
    for _ in range(5_000):
        assert type(out) is list
        out = out[0]
    assert out == 1


# --- cycles and shared references -----------------------------------------------------------


def test_snapshot_rejects_self_containing_list() -> None:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    assert rejects(cycle).path == "value[1]"


def test_snapshot_rejects_self_containing_dict() -> None:
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    assert rejects({"outer": cycle}).path == "value.outer.self"


def test_snapshot_rejects_indirect_cycle() -> None:
    a: dict[str, Any] = {}
    b: list[Any] = [a]
    a["b"] = b
    rejects({"root": a})


def test_snapshot_rejects_cycle_far_below_the_root() -> None:
    bottom: list[Any] = []
    top = nest_lists(500, bottom)
    bottom.append(top)
    rejects(top)


def test_snapshot_copies_shared_references() -> None:
    shared = {"value": 1}
    holder = {"shared": shared}
    source = {"list": [holder, shared], "alias": shared}
    out = snapshot(source)
    expected = {"list": [{"shared": {"value": 1}}, {"value": 1}], "alias": {"value": 1}}
    assert strict_equal(out, expected)
    shared["value"] = 2
    assert out["alias"] == {"value": 1}
    assert out["list"][0]["shared"] == {"value": 1}
    source_ids = {id(c) for c in containers(source)}
    assert not source_ids & {id(c) for c in containers(out)}


def test_snapshot_accepts_one_object_shared_many_times() -> None:
    shared = {"a": [1, 2]}
    out = snapshot([shared] * 1000)
    assert len(out) == 1000
    assert all(item == {"a": (1, 2)} for item in out)


def test_snapshot_accepts_shared_reference_far_below_the_root() -> None:
    shared = [1]
    out = snapshot(nest_lists(300, [shared, shared]))
    for _ in range(300):
        out = out[0]
    assert out == ((1,), (1,))


# --- caller mutation and immutability -------------------------------------------------------


def test_mutating_the_source_after_snapshot_changes_nothing() -> None:
    source = {"text": "original", "items": [1, {"deep": ["x"]}]}
    out = snapshot(source)
    source["text"] = "changed"
    source["items"][1]["deep"].append("y")  # type: ignore[index]
    source["extra"] = 1
    assert strict_equal(out, {"text": "original", "items": [1, {"deep": ["x"]}]})


def test_snapshot_containers_are_frozen_types() -> None:
    out = snapshot({"a": [{"b": []}], "c": {}})
    assert all(type(c) in (FrozenDict, tuple) for c in containers(out))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("x", 1),
        lambda d: d.__delitem__("a"),
        lambda d: d.clear(),
        lambda d: d.pop("a"),
        lambda d: d.pop("missing", None),
        lambda d: d.popitem(),
        lambda d: d.setdefault("x", 1),
        lambda d: d.setdefault("a", 1),
        lambda d: d.update({"x": 1}),
        lambda d: d.update(x=1),
        lambda d: d.update(),
        lambda d: d.__ior__({"x": 1}),
    ],
    ids=[
        "setitem",
        "delitem",
        "clear",
        "pop",
        "pop-default",
        "popitem",
        "setdefault",
        "setdefault-existing",
        "update",
        "update-kwargs",
        "update-empty",
        "ior",
    ],
)
def test_frozen_dict_mutating_methods_raise_type_error(mutate: Any) -> None:
    frozen = snapshot({"a": 1, "b": [2]})
    with pytest.raises(TypeError):
        mutate(frozen)
    assert frozen == {"a": 1, "b": (2,)}


def test_frozen_dict_augmented_or_raises() -> None:
    frozen = snapshot({"a": 1})
    with pytest.raises(TypeError):
        frozen |= {"b": 2}
    assert frozen == {"a": 1}


def test_frozen_dict_non_mutating_operations_work() -> None:
    frozen = snapshot({"a": 1, "b": 2})
    assert frozen | {"c": 3} == {"a": 1, "b": 2, "c": 3}
    assert frozen == {"a": 1, "b": 2}
    assert frozen.get("a") == 1
    assert frozen.copy() == {"a": 1, "b": 2}
    assert list(frozen.items()) == [("a", 1), ("b", 2)]


def test_frozen_sequences_are_tuples_and_cannot_grow() -> None:
    frozen = snapshot({"items": [1, 2]})
    with pytest.raises(TypeError):
        frozen["items"][0] = 5
    assert not hasattr(frozen["items"], "append")


def test_frozen_dict_equals_plain_dict() -> None:
    frozen = snapshot({"a": [1, {"b": None}]})
    assert frozen == {"a": (1, {"b": None})}
    plain = {"a": (1, {"b": None})}
    assert plain == frozen
    assert frozen != {"a": (1, {"b": 0})}
    assert isinstance(frozen, dict)


def test_frozen_dict_pickle_round_trip_keeps_type_and_items() -> None:
    frozen = snapshot({"a": [1, {"b": "c"}], "d": {}})
    back = pickle.loads(pickle.dumps(frozen))
    assert back == frozen
    assert type(back) is FrozenDict
    assert type(back["a"][1]) is FrozenDict
    with pytest.raises(TypeError):
        back["x"] = 1


def test_frozen_dict_copy_and_deepcopy_stay_frozen_and_equal() -> None:
    frozen = snapshot({"a": {"b": 1}})
    for clone in (copy.copy(frozen), copy.deepcopy(frozen)):
        assert clone == frozen
        assert type(clone) is FrozenDict
        with pytest.raises(TypeError):
            clone["x"] = 1


def test_frozen_dict_repr_names_the_type() -> None:
    assert "FrozenDict" in repr(snapshot({"a": 1}))


# --- orjson ---------------------------------------------------------------------------------


def test_orjson_serializes_frozen_values_directly() -> None:
    value = {"a": [1, 2.5, None, True, "é"], "b": {"c": [], "d": {}}}
    assert orjson.dumps(snapshot(value)) == orjson.dumps(value)


@given(json_values(max_leaves=30))
def test_orjson_output_of_snapshot_equals_output_of_source(value: Any) -> None:
    assert orjson.dumps(snapshot(value)) == orjson.dumps(value)


# --- thaw -----------------------------------------------------------------------------------


def test_thaw_returns_plain_mutable_deep_copy() -> None:
    frozen = snapshot({"a": [1, {"b": [2]}], "c": "x"})
    plain = thaw(frozen)
    assert type(plain) is dict
    assert type(plain["a"]) is list
    assert type(plain["a"][1]) is dict
    assert type(plain["a"][1]["b"]) is list
    plain["a"][1]["b"].append(3)
    plain["new"] = 1
    assert frozen == {"a": (1, {"b": (2,)}), "c": "x"}


def test_thaw_of_tuple_is_list_and_of_scalar_is_scalar() -> None:
    assert thaw((1, (2,))) == [1, [2]]
    assert type(thaw((1,))) is list
    assert thaw("x") == "x"
    assert thaw(None) is None


def test_thaw_never_returns_frozen_containers() -> None:
    plain = thaw(snapshot([{"a": [{"b": {}}]}]))
    assert all(type(c) in (dict, list) for c in containers(plain))


def test_thaw_copies_plain_input_too() -> None:
    source = {"a": [1]}
    plain = thaw(source)
    plain["a"].append(2)
    assert source == {"a": [1]}


# --- properties -----------------------------------------------------------------------------


@given(json_values(max_leaves=40))
def test_thaw_of_snapshot_round_trips(value: Any) -> None:
    assert strict_equal(thaw(snapshot(value)), value)


@given(json_values(max_leaves=40))
def test_snapshot_of_thawed_snapshot_is_the_same_snapshot(value: Any) -> None:
    frozen = snapshot(value)
    again = snapshot(thaw(frozen))
    assert strict_equal(again, frozen)
    assert orjson.dumps(again) == orjson.dumps(frozen)


@given(json_values(max_leaves=40))
def test_snapshot_containers_are_all_frozen_and_fresh(value: Any) -> None:
    frozen = snapshot(value)
    frozen_containers = containers(frozen)
    assert all(type(c) in (FrozenDict, tuple) for c in frozen_containers)
    # Empty tuples are interned by CPython, so only non-empty ones are checked for freshness.
    source_ids = {id(c) for c in containers(value)}
    assert not {id(c) for c in frozen_containers if c} & source_ids


@given(json_values(max_leaves=40))
def test_snapshot_of_frozen_value_is_equal(value: Any) -> None:
    frozen = snapshot(value)
    assert strict_equal(snapshot(frozen), frozen)


@given(
    json_values(max_leaves=20),
    st.sampled_from(list(REJECTED.values())),
    st.randoms(use_true_random=False),
)
def test_one_bad_value_anywhere_rejects_the_whole_value(value: Any, bad: Any, rnd: Any) -> None:
    # Walk down a random branch of a generated value, plant the bad value there, and
    # expect the error to name that branch.
    tree: dict[str, Any] = {"root": thaw(value)}
    holder: Any = tree
    key: Any = "root"
    expected = "data.root"
    plain_path = True
    while isinstance(holder[key], dict | list) and holder[key] and rnd.random() < 0.7:
        holder = holder[key]
        if isinstance(holder, dict):
            key = rnd.choice(list(holder))
            plain_path = plain_path and key.isidentifier()
            expected += f".{key}"
        else:
            key = rnd.randrange(len(holder))
            expected += f"[{key}]"
    holder[key] = bad
    error = rejects(tree, "data")
    assert error.path is not None
    assert error.path.startswith("data.root")
    if plain_path:
        assert error.path == expected


# --- acceptance oracle ----------------------------------------------------------------------


def is_json(value: Any) -> bool:
    """The JSON-value rules written as plainly as possible (recursive; small values only)."""
    kind = type(value)
    if value is None or kind is bool:
        return True
    if kind is str:
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if kind is int:
        return abs(value) <= 2**53 - 1
    if kind is float:
        return value == value and abs(value) != float("inf") and str(value) != "-0.0"
    if kind in (list, tuple):
        return all(is_json(item) for item in value)
    if kind in (dict, FrozenDict):
        return all(type(k) is str and is_json(k) and is_json(v) for k, v in value.items())
    return False


ANY_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**54), 2**54)
    | st.floats()
    | st.text(max_size=3)
    | st.sampled_from([-0.0, "\ud800", Color.RED, MyInt(3), b"x", 1j])
)
ANY_KEYS = st.text(max_size=3) | st.sampled_from(["\udfff", 1, None, MyStr("k")])


def any_values() -> st.SearchStrategy[Any]:
    return st.recursive(
        ANY_SCALARS,
        lambda children: (
            st.lists(children, max_size=3)
            | st.lists(children, max_size=3).map(tuple)
            | st.dictionaries(ANY_KEYS, children, max_size=3)
            | st.dictionaries(st.text(max_size=2), children, max_size=2).map(OrderedDict)
            | st.lists(children, max_size=2).map(MyList)
        ),
        max_leaves=12,
    )


@given(any_values(), st.integers(0, 80))
def test_snapshot_accepts_exactly_the_json_values(value: Any, depth: int) -> None:
    wrapped = nest_lists(depth, value)
    if is_json(value):
        assert strict_equal(snapshot(wrapped), wrapped)
    else:
        with pytest.raises(JsonValueError):
            snapshot(wrapped)
