"""The compiled fast path of ``snapshot`` (``sessionledger._freeze``) against the pure one.

Both must accept exactly the same values and build the same frozen copies, sharing the
same scalars; otherwise what a ledger accepts would depend on whether a C compiler was
there at install time. The pure-Python form must also pass the core's tests on its own
(``nox -s tests_pure`` runs them with ``SESSIONLEDGER_PURE_PYTHON=1``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import itertools
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from hypothesis import given, strategies as st

from sessionledger import FrozenDict, JsonValueError, snapshot, thaw
from sessionledger._errors import LedgerError
from sessionledger.model._events import APPEND, SessionEvent, pure_from_json
from sessionledger.model._vocabulary import RESERVED_TYPES
from sessionledger.storage._chunks import (
    pure_pack_run,
)
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
    if not importlib.import_module("sessionledger._accelerator").ACCELERATED:
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


def test_each_module_object_keeps_its_own_setup() -> None:
    # Multi-phase initialisation (PEP 489): what setup() hands a module object is that
    # object's state, not a static of the shared library another instance would see.
    freeze = compiled()
    spec = importlib.util.find_spec("sessionledger._freeze")
    assert spec is not None
    assert spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    assert fresh is not freeze
    with pytest.raises(RuntimeError, match="setup"):
        fresh.freeze_mapping({"a": 1})
    assert freeze.freeze_mapping({"a": 1}) == {"a": 1}
    fresh.setup(FrozenDict, SAFE, 3, snapshot_module.mark_shallow)
    assert type(fresh.freeze_mapping({"a": [1]})) is FrozenDict
    with pytest.raises(TypeError):
        fresh.setup(FrozenDict, SAFE, 3, "not callable")
