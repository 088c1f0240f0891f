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
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionledger import FrozenDict, JsonValueError, snapshot, thaw
from sessionledger.chunks import pure_pack_run

snapshot_module = importlib.import_module("sessionledger.snapshot")
ROOT = Path(__file__).resolve().parents[3]
PURE = os.environ.get("SESSIONLEDGER_PURE_PYTHON", "") not in ("", "0")


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


@pytest.mark.parametrize("scalar", EDGES, ids=repr)
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
            "print(importlib.import_module('sessionledger.snapshot').ACCELERATED)",
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
