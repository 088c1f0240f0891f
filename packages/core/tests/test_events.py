"""The event envelope, ``Replace`` and ``SessionHeader`` (docs/events.md)."""

from __future__ import annotations

import pickle
import re
from collections import OrderedDict
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionledger import (
    APPEND,
    SESSION_FORMAT_VERSION,
    EventEnvelopeError,
    FrozenDict,
    HeaderError,
    JsonValueError,
    Replace,
    SessionEvent,
    SessionHeader,
    SurfaceError,
)
from sessionledger.model._events import parse_source_event_seqs, parse_surface_op
from sessionledger.model._snapshot import MAX_SAFE_INTEGER
from sessionledger.model._vocabulary import RESERVED_TYPES
from sessionledger.testing.strategies import json_values

BASE = {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}


def stable_id(value: object) -> str:
    """``repr`` without a memory address: every pytest-xdist worker collects the same ids."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


def event(**changes: Any) -> SessionEvent:
    return SessionEvent.from_json({**BASE, **changes})


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in BASE.items() if k != key}


# --- SessionEvent: immutability and equality ------------------------------------------------


@pytest.mark.parametrize(
    "name", ["type", "seq", "time", "data", "surface_op", "source_event_seqs", "ignorable", "new"]
)
def test_event_attributes_cannot_be_set(name: str) -> None:
    e = event()
    with pytest.raises(AttributeError):
        setattr(e, name, 5)
    assert e == event()


@pytest.mark.parametrize("name", ["type", "seq", "data", "ignorable"])
def test_event_attributes_cannot_be_deleted(name: str) -> None:
    e = event()
    with pytest.raises(AttributeError):
        delattr(e, name)
    assert e.seq == 0


def test_event_has_no_instance_dict() -> None:
    assert not hasattr(event(), "__dict__")


def test_event_data_is_frozen() -> None:
    e = event(data={"turn": 1, "items": [{"a": 1}]})
    assert type(e.data) is FrozenDict
    with pytest.raises(TypeError):
        e.data["turn"] = 2
    with pytest.raises(TypeError):
        e.data["items"][0]["a"] = 2


def test_event_equality_is_field_equality() -> None:
    assert event() == event()
    assert event() is not event()
    assert event() != event(seq=1)
    assert event() != event(time=2)
    assert event() != event(type="turn/end")
    assert event() != event(data={"turn": 2})
    assert event() != event(ignorable=True)
    assert event(surfaceOp="append") != event()
    assert event(sourceEventSeqs=[0]) != event()
    assert event(sourceEventSeqs=[0]) != event(sourceEventSeqs=[1])
    assert event(surfaceOp={"op": "replace", "start": 0, "end": 0}) != event(surfaceOp="append")


def test_event_is_not_equal_to_its_json_form() -> None:
    assert event() != BASE
    assert event() != event().to_json()


def test_event_is_unhashable() -> None:
    with pytest.raises(TypeError):
        hash(event())


def test_event_pickle_round_trip() -> None:
    e = event(
        surfaceOp={"op": "replace", "start": 1, "end": 2}, sourceEventSeqs=[1, 2], ignorable=True
    )
    back = pickle.loads(pickle.dumps(e))
    assert back == e
    assert type(back) is SessionEvent
    with pytest.raises(AttributeError):
        back.seq = 9  # type: ignore[misc]


def test_event_repr_names_type_and_seq() -> None:
    text = repr(event())
    assert "turn/start" in text
    assert "seq=0" in text


# --- to_json --------------------------------------------------------------------------------


def test_to_json_minimal_envelope_has_four_keys_in_order() -> None:
    out = event().to_json()
    assert list(out) == ["type", "seq", "time", "data"]
    assert out == BASE


def test_to_json_full_envelope_key_order() -> None:
    out = event(
        ignorable=True,
        sourceEventSeqs=[0],
        surfaceOp={"op": "replace", "start": 3, "end": 4},
    ).to_json()
    assert list(out) == ["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"]
    assert out["surfaceOp"] == {"op": "replace", "start": 3, "end": 4}
    assert list(out["surfaceOp"]) == ["op", "start", "end"]
    assert list(out["sourceEventSeqs"]) == [0]
    assert out["ignorable"] is True


def test_to_json_append_op_is_the_string() -> None:
    out = event(surfaceOp="append").to_json()
    assert out["surfaceOp"] == "append"
    assert "sourceEventSeqs" not in out
    assert "ignorable" not in out


def test_to_json_omits_ignorable_when_false() -> None:
    assert "ignorable" not in event().to_json()


def test_to_json_keeps_empty_sources() -> None:
    e = SessionEvent.from_json(
        {
            "type": "assistant/message",
            "seq": 0,
            "time": 1,
            "data": {},
            "surfaceOp": "append",
            "sourceEventSeqs": [],
        }
    )
    assert e.to_json()["sourceEventSeqs"] == ()


def test_to_json_serializes_with_orjson() -> None:
    e = event(surfaceOp="append", sourceEventSeqs=[0], ignorable=True, data={"a": [1, {"b": 2}]})
    text = orjson.dumps(e.to_json())
    assert orjson.loads(text) == {
        **BASE,
        "data": {"a": [1, {"b": 2}]},
        "surfaceOp": "append",
        "sourceEventSeqs": [0],
        "ignorable": True,
    }


@given(
    st.text(min_size=1).filter(
        lambda t: t not in RESERVED_TYPES and not any(0xD800 <= ord(c) <= 0xDFFF for c in t)
    ),
    st.integers(0, MAX_SAFE_INTEGER),
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    json_values(),
    st.none() | st.just("append") | st.tuples(st.integers(0, 99), st.integers(0, 99)),
    st.none() | st.lists(st.integers(0, 99), max_size=4),
    st.booleans(),
)
def test_from_json_is_the_inverse_of_to_json(
    type_: str,
    seq: int,
    time: int,
    data: Any,
    op: Any,
    sources: list[int] | None,
    ignorable: bool,
) -> None:
    envelope: dict[str, Any] = {"type": type_, "seq": seq, "time": time, "data": data}
    if op is not None:
        envelope["surfaceOp"] = (
            op if op == "append" else {"op": "replace", "start": op[0], "end": op[1]}
        )
    if sources is not None:
        envelope["sourceEventSeqs"] = sources
    if ignorable:
        envelope["ignorable"] = True
    e = SessionEvent.from_json(envelope)
    assert orjson.dumps(e.to_json()) == orjson.dumps(envelope)
    assert SessionEvent.from_json(e.to_json()) == e
    assert SessionEvent.from_json(orjson.loads(orjson.dumps(e.to_json()))) == e


# --- from_json: strict ----------------------------------------------------------------------


def test_from_json_accepts_minimal_envelope() -> None:
    e = SessionEvent.from_json(BASE)
    assert (e.type, e.seq, e.time, e.data) == ("turn/start", 0, 1, {"turn": 1})
    assert e.surface_op is None
    assert e.source_event_seqs is None
    assert e.ignorable is False


def test_from_json_accepts_frozen_envelope() -> None:
    assert SessionEvent.from_json(FrozenDict(BASE)) == SessionEvent.from_json(BASE)


@pytest.mark.parametrize("data", [None, 0, "text", [], {}, [1, {"a": None}]])
def test_from_json_accepts_any_json_data(data: Any) -> None:
    assert SessionEvent.from_json({**BASE, "data": data}).data == (
        tuple(data) if isinstance(data, list) else data
    )


@pytest.mark.parametrize("time", [0, -1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER])
def test_from_json_accepts_any_safe_integer_time(time: int) -> None:
    assert SessionEvent.from_json({**BASE, "time": time}).time == time


def test_from_json_accepts_largest_safe_seq() -> None:
    assert SessionEvent.from_json({**BASE, "seq": MAX_SAFE_INTEGER}).seq == MAX_SAFE_INTEGER


ENVELOPE_REJECTIONS: dict[str, Any] = {
    "extra key": {**BASE, "extra": True},
    "camel-case key in snake case": {**BASE, "surface_op": "append"},
    "non-str key": {**BASE, 1: 2},
    "type int": {**BASE, "type": 1},
    "type empty": {**BASE, "type": ""},
    "type none": {**BASE, "type": None},
    "seq str": {**BASE, "seq": "0"},
    "seq fractional": {**BASE, "seq": 0.5},
    "seq integral float": {**BASE, "seq": 1.0},
    "seq negative": {**BASE, "seq": -1},
    "seq bool": {**BASE, "seq": True},
    "seq false": {**BASE, "seq": False},
    "seq none": {**BASE, "seq": None},
    "seq beyond 2**53-1": {**BASE, "seq": MAX_SAFE_INTEGER + 1},
    "time str": {**BASE, "time": "1"},
    "time fractional": {**BASE, "time": 0.5},
    "time integral float": {**BASE, "time": 1.0},
    "time bool": {**BASE, "time": True},
    "time beyond 2**53-1": {**BASE, "time": MAX_SAFE_INTEGER + 1},
    "time below -(2**53-1)": {**BASE, "time": -MAX_SAFE_INTEGER - 1},
    "missing type": without("type"),
    "missing seq": without("seq"),
    "missing time": without("time"),
    "missing data": without("data"),
    "ignorable false": {**BASE, "ignorable": False},
    "ignorable str": {**BASE, "ignorable": "yes"},
    "ignorable one": {**BASE, "ignorable": 1},
    "ignorable none": {**BASE, "ignorable": None},
}


@pytest.mark.parametrize("envelope", ENVELOPE_REJECTIONS.values(), ids=ENVELOPE_REJECTIONS.keys())
def test_from_json_rejects_bad_envelope(envelope: Any) -> None:
    with pytest.raises(EventEnvelopeError) as caught:
        SessionEvent.from_json(envelope)
    assert caught.value.code == "BAD_ENVELOPE"


@pytest.mark.parametrize(
    "obj",
    [None, 1, "envelope", [BASE], (BASE,), OrderedDict(BASE), FrozenDict.__mro__[1]],
    ids=["none", "int", "str", "list", "tuple", "OrderedDict", "type"],
)
def test_from_json_rejects_non_dict(obj: Any) -> None:
    with pytest.raises(EventEnvelopeError) as caught:
        SessionEvent.from_json(obj)
    assert caught.value.code == "BAD_ENVELOPE"


def test_from_json_accepts_ignorable_true() -> None:
    assert SessionEvent.from_json({**BASE, "ignorable": True}).ignorable is True


@pytest.mark.parametrize(
    "op",
    [
        None,
        "invalid",
        "APPEND",
        "",
        1,
        True,
        [],
        ["append"],
        {},
        {"op": "append"},
        {"op": "replace", "start": 0},
        {"op": "replace", "start": 0, "end": 0, "extra": 1},
        {"op": "replace", "start": -1, "end": 0},
        {"op": "replace", "start": 0, "end": -1},
        {"op": "replace", "start": 0.5, "end": 1},
        {"op": "replace", "start": 0.0, "end": 1},
        {"op": "replace", "start": True, "end": 1},
        {"op": "replace", "start": "0", "end": 1},
        {"op": "replace", "start": MAX_SAFE_INTEGER + 1, "end": 1},
        {"op": "REPLACE", "start": 0, "end": 1},
    ],
    ids=repr,
)
def test_from_json_rejects_malformed_surface_op(op: Any) -> None:
    with pytest.raises(SurfaceError) as caught:
        SessionEvent.from_json({**BASE, "surfaceOp": op})
    assert caught.value.code == "BAD_SURFACE_OP"


@pytest.mark.parametrize(
    "sources",
    [
        None,
        "0",
        0,
        {"0": 0},
        [None],
        ["0"],
        [0.5],
        [1.0],
        [-1],
        [True],
        [[0]],
        [MAX_SAFE_INTEGER + 1],
    ],
    ids=repr,
)
def test_from_json_rejects_malformed_sources(sources: Any) -> None:
    with pytest.raises(SurfaceError) as caught:
        SessionEvent.from_json({**BASE, "sourceEventSeqs": sources})
    assert caught.value.code == "BAD_SOURCES"


def test_from_json_leaves_log_rules_to_the_session() -> None:
    # A turn/start carrying a surface op, sources citing later seqs, duplicates: the
    # envelope is well formed; these rules run when the event joins a log.
    e = SessionEvent.from_json(
        {**BASE, "surfaceOp": "append", "sourceEventSeqs": [5, 5]},
    )
    assert e.surface_op == APPEND
    assert e.source_event_seqs == (5, 5)


@pytest.mark.parametrize("data", [float("nan"), {"a": {1, 2}}, [b"x"], {"t": "\ud800"}])
def test_from_json_rejects_non_json_data(data: Any) -> None:
    with pytest.raises(JsonValueError) as caught:
        SessionEvent.from_json({**BASE, "data": data})
    assert caught.value.path is not None
    assert caught.value.path.startswith("data")


def test_from_json_copies_data() -> None:
    data = {"turn": 1, "items": [1]}
    e = SessionEvent.from_json({**BASE, "data": data})
    data["items"].append(2)  # type: ignore[attr-defined]
    data["turn"] = 9
    assert e.data == {"turn": 1, "items": (1,)}


def test_from_json_normalizes_surface_metadata() -> None:
    e = SessionEvent.from_json(
        {**BASE, "surfaceOp": {"op": "replace", "start": 1, "end": 2}, "sourceEventSeqs": [1, 2]}
    )
    assert e.surface_op == Replace(1, 2)
    assert type(e.surface_op) is Replace
    assert e.source_event_seqs == (1, 2)
    assert type(e.source_event_seqs) is tuple


# --- Replace and parse_surface_op -----------------------------------------------------------


def test_replace_json_form() -> None:
    out = Replace(3, 7).to_json()
    assert out == {"op": "replace", "start": 3, "end": 7}
    assert list(out) == ["op", "start", "end"]


def test_replace_is_frozen_and_compares_by_value() -> None:
    r = Replace(1, 2)
    with pytest.raises(AttributeError):
        r.start = 5  # type: ignore[misc]
    assert r == Replace(1, 2)
    assert r != Replace(2, 1)
    assert hash(r) == hash(Replace(1, 2))


def test_replace_accepts_same_start_and_end_and_zero() -> None:
    assert Replace(0, 0).start == 0


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (-1, 0),
        (0, -1),
        (True, 0),
        (0, False),
        (0.0, 1),
        ("0", 1),
        (None, 1),
        (MAX_SAFE_INTEGER + 1, 0),
    ],
)
def test_replace_rejects_bad_seqs(start: Any, end: Any) -> None:
    with pytest.raises(SurfaceError) as caught:
        Replace(start, end)
    assert caught.value.code == "BAD_SURFACE_OP"


def test_append_constant() -> None:
    assert APPEND == "append"


def test_parse_surface_op_accepts_the_three_forms() -> None:
    r = Replace(1, 2)
    assert parse_surface_op("append") == APPEND
    assert parse_surface_op(r) is r
    assert parse_surface_op({"op": "replace", "start": 1, "end": 2}) == r
    assert parse_surface_op(FrozenDict({"op": "replace", "start": 1, "end": 2})) == r
    assert parse_surface_op(None) is None


@pytest.mark.parametrize(
    "op",
    [
        "invalid",
        ("replace", 0, 0),
        ["replace", 0, 0],
        OrderedDict(op="replace", start=0, end=0),
        {"op": "replace", "start": 0, "end": 0, "x": 1},
        object(),
    ],
    ids=stable_id,
)
def test_parse_surface_op_rejects_other_forms(op: Any) -> None:
    with pytest.raises(SurfaceError) as caught:
        parse_surface_op(op)
    assert caught.value.code == "BAD_SURFACE_OP"


def test_parse_source_event_seqs_copies_to_tuple() -> None:
    seqs = [0, 1]
    out = parse_source_event_seqs(seqs)
    seqs.append(2)
    assert out == (0, 1)
    assert parse_source_event_seqs(()) == ()
    assert parse_source_event_seqs(None) is None


@pytest.mark.parametrize("seqs", [{0, 1}, range(2), "01", [0, "1"], [True]], ids=repr)
def test_parse_source_event_seqs_rejects_other_forms(seqs: Any) -> None:
    with pytest.raises(SurfaceError) as caught:
        parse_source_event_seqs(seqs)
    assert caught.value.code == "BAD_SOURCES"


# --- SessionHeader --------------------------------------------------------------------------

FULL_HEADER = {
    "version": 1,
    "id": "s1",
    "createdAt": 123,
    "cwd": "/srv/app",
    "parentSession": "parent",
    "seedLength": 2,
    "delegationDepth": 1,
    "title": "A title",
    "meta": {"origin": "subagent", "tags": ["a"]},
}


def test_header_defaults() -> None:
    h = SessionHeader(id="s1", created_at=0)
    assert h.version == SESSION_FORMAT_VERSION == 1
    assert (h.cwd, h.parent_session, h.seed_length, h.title, h.meta) == (None,) * 5
    assert h.delegation_depth == 0


def test_header_is_frozen() -> None:
    h = SessionHeader(id="s1", created_at=0, cwd="/a")
    with pytest.raises(AttributeError):
        h.cwd = "/b"  # type: ignore[misc]
    assert h.cwd == "/a"


def test_header_constructor_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        SessionHeader("s1", 0)  # type: ignore[misc]


HEADER_REJECTIONS: dict[str, dict[str, Any]] = {
    "version 0": {"version": 0},
    "version 2": {"version": 2},
    "version bool": {"version": True},
    "version str": {"version": "1"},
    "version float": {"version": 1.0},
    "id empty": {"id": ""},
    "id int": {"id": 1},
    "id none": {"id": None},
    "createdAt str": {"created_at": "123"},
    "createdAt fractional": {"created_at": 1.5},
    "createdAt negative": {"created_at": -1},
    "createdAt beyond 2**53-1": {"created_at": 2**53},
    "createdAt bool": {"created_at": True},
    "cwd int": {"cwd": 1},
    "cwd relative": {"cwd": "relative/path"},
    "cwd empty": {"cwd": ""},
    "cwd dot": {"cwd": "."},
    "parentSession int": {"parent_session": 1},
    "parentSession empty": {"parent_session": ""},
    "seedLength str": {"seed_length": "1"},
    "seedLength fractional": {"seed_length": 0.5},
    "seedLength negative": {"seed_length": -1},
    "seedLength bool": {"seed_length": True},
    "delegationDepth str": {"delegation_depth": "1"},
    "delegationDepth fractional": {"delegation_depth": 0.5},
    "delegationDepth negative": {"delegation_depth": -1},
    "delegationDepth none": {"delegation_depth": None},
    "delegationDepth bool": {"delegation_depth": True},
    "title int": {"title": 1},
    "title list": {"title": ["a"]},
    "meta list": {"meta": [1]},
    "meta str": {"meta": "x"},
    "meta int": {"meta": 1},
}


@pytest.mark.parametrize("change", HEADER_REJECTIONS.values(), ids=HEADER_REJECTIONS.keys())
def test_header_rejects_invalid_field(change: dict[str, Any]) -> None:
    with pytest.raises(HeaderError) as caught:
        SessionHeader(**{"id": "s1", "created_at": 0, **change})
    assert caught.value.code == "BAD_HEADER"


@pytest.mark.parametrize(
    "meta",
    [{"x": float("nan")}, {"x": {1, 2}}, {1: "a"}, OrderedDict(a=1), {"x": "\ud800"}],
    ids=["nan", "set", "int key", "OrderedDict", "surrogate"],
)
def test_header_rejects_non_json_meta_with_header_error(meta: Any) -> None:
    # Header validation failures raise HeaderError (the JSON error is the cause).
    with pytest.raises(HeaderError) as caught:
        SessionHeader(id="s1", created_at=0, meta=meta)
    assert caught.value.code == "BAD_HEADER"
    assert isinstance(caught.value.__cause__, JsonValueError)


@pytest.mark.parametrize("cwd", ["/", "/srv/app", "/a b/é"])
def test_header_accepts_absolute_cwd(cwd: str) -> None:
    assert SessionHeader(id="s1", created_at=0, cwd=cwd).cwd == cwd


def test_header_accepts_boundary_values() -> None:
    h = SessionHeader(
        id="s1", created_at=MAX_SAFE_INTEGER, seed_length=0, delegation_depth=0, title=""
    )
    assert h.created_at == MAX_SAFE_INTEGER
    assert h.seed_length == 0
    assert h.title == ""


def test_header_meta_is_frozen_copy() -> None:
    meta = {"tags": ["a"], "nested": {"k": 1}}
    h = SessionHeader(id="s1", created_at=0, meta=meta)  # type: ignore[arg-type]
    meta["tags"].append("b")  # type: ignore[attr-defined]
    meta["new"] = 1  # type: ignore[assignment]
    assert h.meta == {"tags": ("a",), "nested": {"k": 1}}
    assert type(h.meta) is FrozenDict
    with pytest.raises(TypeError):
        h.meta["x"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        h.meta["nested"]["k"] = 2  # type: ignore[index]


def test_header_error_names_the_session() -> None:
    with pytest.raises(HeaderError) as caught:
        SessionHeader(id="named", created_at=-1)
    assert caught.value.session_id == "named"
    assert "named" in str(caught.value)


def test_header_to_json_key_names_and_order() -> None:
    h = SessionHeader.from_json(FULL_HEADER)
    out = h.to_json()
    assert list(out) == list(FULL_HEADER)
    assert orjson.loads(orjson.dumps(out)) == FULL_HEADER


def test_header_to_json_omits_absent_optional_fields() -> None:
    out = SessionHeader(id="s1", created_at=5).to_json()
    assert out == {"version": 1, "id": "s1", "createdAt": 5, "delegationDepth": 0}


def test_header_from_json_round_trip() -> None:
    h = SessionHeader.from_json(FULL_HEADER)
    assert h.id == "s1"
    assert h.created_at == 123
    assert h.cwd == "/srv/app"
    assert h.parent_session == "parent"
    assert h.seed_length == 2
    assert h.delegation_depth == 1
    assert h.title == "A title"
    assert h.meta == {"origin": "subagent", "tags": ("a",)}
    assert SessionHeader.from_json(h.to_json()) == h
    assert SessionHeader.from_json(orjson.loads(orjson.dumps(h.to_json()))) == h


@given(
    st.text(min_size=1, max_size=10).filter(
        lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)
    ),
    st.integers(0, MAX_SAFE_INTEGER),
    st.none() | st.sampled_from(["/", "/srv", "/a/b c"]),
    st.none() | st.integers(0, 1000),
    st.integers(0, 10),
    st.none()
    | st.text(max_size=5).filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)),
    st.none() | st.dictionaries(st.sampled_from(["a", "b", "c"]), json_values(5)),
)
def test_header_json_round_trip_property(
    id: str,
    created_at: int,
    cwd: str | None,
    seed_length: int | None,
    depth: int,
    title: str | None,
    meta: dict[str, Any] | None,
) -> None:
    h = SessionHeader(
        id=id,
        created_at=created_at,
        cwd=cwd,
        seed_length=seed_length,
        delegation_depth=depth,
        title=title,
        meta=meta,  # type: ignore[arg-type]
    )
    again = SessionHeader.from_json(orjson.loads(orjson.dumps(h.to_json())))
    assert again == h


@pytest.mark.parametrize(
    "obj",
    [
        {**FULL_HEADER, "unknown": 1},
        {**FULL_HEADER, "created_at": 1},
        {**FULL_HEADER, "origin": "subagent"},
        {k: v for k, v in FULL_HEADER.items() if k != "version"},
        {k: v for k, v in FULL_HEADER.items() if k != "id"},
        {k: v for k, v in FULL_HEADER.items() if k != "createdAt"},
        {**FULL_HEADER, "version": 2},
        {**FULL_HEADER, "cwd": "relative"},
        None,
        [],
        "header",
        1,
    ],
    ids=[
        "unknown key",
        "snake-case key",
        "origin",
        "no version",
        "no id",
        "no createdAt",
        "version 2",
        "relative cwd",
        "none",
        "list",
        "str",
        "int",
    ],
)
def test_header_from_json_rejects(obj: Any) -> None:
    with pytest.raises(HeaderError) as caught:
        SessionHeader.from_json(obj)
    assert caught.value.code == "BAD_HEADER"


def test_header_replace_validates() -> None:
    h = SessionHeader(id="s1", created_at=0)
    assert h.replace(title="t").title == "t"
    with pytest.raises(HeaderError):
        h.replace(cwd="relative")
    assert h.title is None


def test_rejected_values_nested_too_deep_for_repr_still_give_typed_errors() -> None:
    deep: Any = 0
    for _ in range(100_000):
        deep = [deep]
    base = {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}
    for key in ("type", "seq", "time", "ignorable"):
        with pytest.raises(EventEnvelopeError):
            SessionEvent.from_json({**base, key: deep})
    with pytest.raises(SurfaceError):
        SessionEvent.from_json({**base, "surfaceOp": {"op": "replace", "start": deep, "end": 0}})
    with pytest.raises(HeaderError):
        SessionHeader(id="deep", created_at=1, title=deep)
