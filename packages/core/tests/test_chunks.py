"""Tests for the chunk-row storage codec (docs/formats.md, "chunk rows")."""

from __future__ import annotations

from collections import OrderedDict
from itertools import pairwise
from typing import Any, Final

import msgspec
import orjson
import pytest
from hypothesis import Phase, find, given, settings, strategies as st

from sessionledger._errors import ConfigError, StorageRowError
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._eventlog import ChunkRun, EventLog, LogRuns
from sessionledger.model._events import Replace, SessionEvent
from sessionledger.model._records import Envelope, ReasoningRow, TextRow, ToolRow
from sessionledger.model._snapshot import MAX_SAFE_INTEGER, FrozenDict, snapshot, thaw
from sessionledger.storage._chunks import (
    MIN_RUN,
    ROW_TYPES,
    pack_chunk_runs,
    unpack_record,
    unpack_to_log,
)
from sessionledger.testing.strategies import chunk_event_batches, json_values, session_logs

M = MAX_SAFE_INTEGER


# -- builders ---------------------------------------------------------------------------------


def ev(seq: int, time: Any, chunk: Any, turn: Any = 1, step: Any = 1) -> dict[str, Any]:
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": time,
        "data": {"turn": turn, "step": step, "chunk": chunk},
    }


def td(index: Any, text: Any) -> dict[str, Any]:
    return {"type": "text-delta", "index": index, "text": text}


def rd(index: Any, text: Any) -> dict[str, Any]:
    return {"type": "reasoning-delta", "index": index, "text": text}


def tcd(index: Any, call_id: Any, args: Any, name: Any = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"type": "tool-call-delta", "index": index, "id": call_id}
    if name is not None:
        chunk["name"] = name
    chunk["argumentsDelta"] = args
    return chunk


def run(kind: str, n: int, seq0: int = 0, index: int = 0) -> list[dict[str, Any]]:
    """n deltas of *kind* with seqs seq0.., times 1000 + 10k and texts t0, t1, ..."""
    make = {"text": td, "reasoning": rd}[kind]
    return [ev(seq0 + k, 1000 + 10 * k, make(index, f"t{k}")) for k in range(n)]


def event(envelope: dict[str, Any]) -> SessionEvent:
    return SessionEvent.from_json(envelope)


def json_round_trip(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def decode_all(records: list[Any]) -> list[Any]:
    """Store each record as JSON text, read it back and expand it, as a backend does."""
    return [member for record in records for member in unpack_record(json_round_trip(record))]


def as_records(batch: list[Any]) -> list[Any]:
    """What the batch must read back as: envelopes in plain JSON form."""
    return [thaw(item.to_json()) if type(item) is SessionEvent else item for item in batch]


def tags(records: list[Any]) -> list[Any]:
    return [record.get("type") for record in records]


def assert_round_trip(batch: list[Any], **caps: Any) -> list[Any]:
    records = pack_chunk_runs(batch, **caps)
    decoded = decode_all(records)
    expected = as_records(batch)
    assert decoded == expected
    assert orjson.dumps(decoded) == orjson.dumps(expected)
    return records


# -- packing: exact records (C cases) ------------------------------------------------------------


def test_public_constants() -> None:
    assert sorted(ROW_TYPES) == ["reasoning-chunks", "text-chunks", "tool-call-chunks"]
    assert isinstance(ROW_TYPES, frozenset)
    assert MIN_RUN == 3


def test_text_run_packs_into_one_exact_row() -> None:
    records = assert_round_trip(run("text", 5))
    assert records == [
        {
            "type": "text-chunks",
            "seq0": 0,
            "time0": 1000,
            "data": {
                "turn": 1,
                "step": 1,
                "index": 0,
                "dt": [10, 10, 10, 10],
                "texts": ["t0", "t1", "t2", "t3", "t4"],
            },
        }
    ]
    assert list(records[0]) == ["type", "seq0", "time0", "data"]
    assert list(records[0]["data"]) == ["turn", "step", "index", "dt", "texts"]
    assert orjson.dumps(records[0]) == (
        b'{"type":"text-chunks","seq0":0,"time0":1000,"data":{"turn":1,"step":1,"index":0,'
        b'"dt":[10,10,10,10],"texts":["t0","t1","t2","t3","t4"]}}'
    )


def test_reasoning_then_named_tool_run_make_two_rows() -> None:
    tools = [ev(seq, seq + 1000, tcd(1, "c1", f"a{seq}", name="write")) for seq in (3, 4, 5)]
    records = assert_round_trip(run("reasoning", 3) + tools)
    assert tags(records) == ["reasoning-chunks", "tool-call-chunks"]
    tool_row = records[1]
    assert tool_row["data"] == {
        "turn": 1,
        "step": 1,
        "index": 1,
        "dt": [1, 1],
        "id": "c1",
        "name": "write",
        "args": ["a3", "a4", "a5"],
    }
    assert orjson.dumps(tool_row) == (
        b'{"type":"tool-call-chunks","seq0":3,"time0":1003,"data":{"turn":1,"step":1,'
        b'"index":1,"dt":[1,1],"id":"c1","name":"write","args":["a3","a4","a5"]}}'
    )


def test_nameless_tool_run_keeps_name_absent() -> None:
    batch = [ev(seq, 1000, tcd(0, "c1", f"a{seq}")) for seq in range(3)]
    records = assert_round_trip(batch)
    assert tags(records) == ["tool-call-chunks"]
    assert list(records[0]["data"]) == ["turn", "step", "index", "dt", "id", "args"]
    assert records[0]["data"]["dt"] == [0, 0]
    for member in decode_all(records):
        assert list(member["data"]["chunk"]) == ["type", "index", "id", "argumentsDelta"]


def test_named_tool_members_decode_with_name_in_place() -> None:
    batch = [ev(seq, 1000, tcd(0, "c1", "{", name="read")) for seq in range(3)]
    member = decode_all(pack_chunk_runs(batch))[0]
    assert list(member) == ["type", "seq", "time", "data"]
    assert list(member["data"]) == ["turn", "step", "chunk"]
    assert list(member["data"]["chunk"]) == ["type", "index", "id", "name", "argumentsDelta"]


def test_short_run_is_stored_verbatim_as_the_same_objects() -> None:
    batch = run("text", 2)
    records = pack_chunk_runs(batch)
    assert records == batch
    assert all(record is item for record, item in zip(records, batch, strict=True))


def test_run_between_boundary_chunks_packs_alone() -> None:
    start = ev(0, 1000, {"type": "block-start", "index": 0, "blockType": "text"})
    end = ev(4, 1040, {"type": "block-end", "index": 0, "block": {"type": "text", "text": "x"}})
    step_end = {"type": "step/end", "seq": 5, "time": 1050, "data": {"turn": 1, "step": 1}}
    records = assert_round_trip([start, *run("text", 3, seq0=1), end, step_end])
    assert tags(records) == ["assistant/chunk", "text-chunks", "assistant/chunk", "step/end"]
    assert records[1]["seq0"] == 1
    assert records[1]["time0"] == 1000
    assert records[1]["data"]["dt"] == [10, 10]


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(
            [ev(0, 1, td(0, "a")), ev(1, 2, td(0, "b")), ev(9, 3, td(0, "c"))], id="seq-gap"
        ),
        pytest.param(
            [ev(0, 1, td(0, "a")), ev(1, 2, td(0, "b")), ev(1, 3, td(0, "c"))], id="seq-repeat"
        ),
        pytest.param(run("text", 2) + run("reasoning", 1, seq0=2), id="kind"),
        pytest.param([*run("text", 2), ev(2, 1020, td(7, "c"))], id="index"),
        pytest.param([*run("text", 2), ev(2, 1020, td(0, "c"), step=2)], id="step"),
        pytest.param([*run("text", 2), ev(2, 1020, td(0, "c"), turn=2)], id="turn"),
        pytest.param(
            [ev(k, 1, tcd(0, call, "a", name="w")) for k, call in enumerate(["c1", "c1", "c2"])],
            id="tool-id",
        ),
        pytest.param(
            [ev(k, 1, tcd(0, "c1", "a", name=name)) for k, name in enumerate(["w", "w", None])],
            id="tool-name-presence",
        ),
        pytest.param(
            [ev(k, 1, tcd(0, "c1", "a", name=name)) for k, name in enumerate([None, "w", "w"])],
            id="tool-name-appears",
        ),
        pytest.param(
            [ev(k, 1, tcd(0, "c1", "a", name=name)) for k, name in enumerate(["w", "w", "r"])],
            id="tool-name-value",
        ),
        pytest.param(
            [
                ev(
                    k,
                    1,
                    {
                        "type": "tool-call-delta",
                        "index": 0,
                        "id": "c1",
                        "name": None,
                        "argumentsDelta": "a",
                    },
                )
                for k in range(3)
            ],
            id="tool-name-null",
        ),
        pytest.param(
            [ev(0, -M, td(0, "a")), ev(1, M - 1, td(0, "b")), ev(2, M, td(0, "c"))],
            id="time-gap-beyond-safe",
        ),
        pytest.param(
            [ev(0, M, td(0, "a")), ev(1, -1, td(0, "b")), ev(2, -1, td(0, "c"))],
            id="negative-time-gap-beyond-safe",
        ),
        pytest.param(
            [ev(0, -1, td(0, "a")), ev(1, M, td(0, "b")), ev(2, M, td(0, "c"))],
            id="time-gap-one-beyond-safe",
        ),
    ],
)
def test_broken_runs_stay_verbatim(batch: list[Any]) -> None:
    records = assert_round_trip(batch)
    assert records == batch


def test_time_gaps_of_exactly_the_safe_bound_keep_a_run() -> None:
    batch = [ev(0, 0, td(0, "a")), ev(1, M, td(0, "b")), ev(2, 0, td(0, "c"))]
    records = assert_round_trip(batch)
    assert records[0]["data"]["dt"] == [M, -M]


def test_negative_gaps_pack_and_restore_exact_times() -> None:
    batch = [ev(0, 1000, td(0, "a")), ev(1, 990, td(0, "b")), ev(2, 995, td(0, "c"))]
    records = assert_round_trip(batch)
    assert records[0]["data"]["dt"] == [-10, 5]
    assert [member["time"] for member in decode_all(records)] == [1000, 990, 995]


def spoiled(how: str) -> dict[str, Any]:
    """A text delta at seq 1, time 1010 that breaks the whitelist in one way."""
    good = ev(1, 1010, td(0, "t1"))
    data, chunk = good["data"], good["data"]["chunk"]
    changes: dict[str, Any] = {
        "extra-envelope-key": {**good, "surfaceOp": "append"},
        "sources": {**good, "sourceEventSeqs": [0]},
        "ignorable": {**good, "ignorable": True},
        "missing-time": {"type": "assistant/chunk", "seq": 1, "data": data, "x": 1},
        "time-float": {**good, "time": 1010.5},
        "time-integral-float": {**good, "time": 1010.0},
        "time-bool": {**good, "time": True},
        "time-unsafe": {**good, "time": M + 1},
        "seq-bool": {**good, "seq": True},
        "seq-negative": {**good, "seq": -1},
        "data-string": {**good, "data": "x"},
        "data-list": {**good, "data": [1]},
        "data-extra-key": {**good, "data": {**data, "extra": 1}},
        "data-ordered-dict": {**good, "data": OrderedDict(data)},
        "turn-string": {**good, "data": {**data, "turn": "x"}},
        "turn-bool": {**good, "data": {**data, "turn": True}},
        "turn-float": {**good, "data": {**data, "turn": 1.0}},
        "turn-unsafe": {**good, "data": {**data, "turn": M + 1}},
        "step-bool": {**good, "data": {**data, "step": False}},
        "chunk-string": {**good, "data": {**data, "chunk": "x"}},
        "index-string": {**good, "data": {**data, "chunk": {**chunk, "index": "x"}}},
        "index-bool": {**good, "data": {**data, "chunk": {**chunk, "index": False}}},
        "index-float": {**good, "data": {**data, "chunk": {**chunk, "index": 0.0}}},
        "text-int": {**good, "data": {**data, "chunk": {**chunk, "text": 7}}},
        "text-subclass": {
            **good,
            "data": {**data, "chunk": {**chunk, "text": type("S", (str,), {})("t")}},
        },
        "chunk-extra-key": {**good, "data": {**data, "chunk": {**chunk, "extra": 1}}},
        "chunk-type-unknown": {**good, "data": {**data, "chunk": {**chunk, "type": "x-delta"}}},
        "chunk-type-unhashable": {**good, "data": {**data, "chunk": {**chunk, "type": ["t"]}}},
        "block-start": ev(1, 1010, {"type": "block-start", "index": 0, "blockType": "text"}),
        "usage": ev(1, 1010, {"type": "usage", "usage": {}}),
        "finish": ev(1, 1010, {"type": "finish", "reason": {"kind": "stop"}}),
        "other-type": {**good, "type": "assistant/chunks"},
    }
    return changes[how]


SPOILS = [
    "extra-envelope-key", "sources", "ignorable", "missing-time", "time-float",
    "time-integral-float", "time-bool", "time-unsafe", "seq-bool", "seq-negative",
    "data-string", "data-list", "data-extra-key", "data-ordered-dict", "turn-string",
    "turn-bool", "turn-float", "turn-unsafe", "step-bool", "chunk-string", "index-string",
    "index-bool", "index-float", "text-int", "text-subclass", "chunk-extra-key",
    "chunk-type-unknown", "chunk-type-unhashable", "block-start", "usage", "finish", "other-type",
]  # fmt: skip


@pytest.mark.parametrize("how", SPOILS)
def test_off_whitelist_member_breaks_the_run(how: str) -> None:
    batch = [ev(0, 1000, td(0, "t0")), spoiled(how), ev(2, 1020, td(0, "t2"))]
    records = pack_chunk_runs(batch)
    assert records == batch
    assert all(record is item for record, item in zip(records, batch, strict=True))
    if how not in ("data-ordered-dict", "text-subclass"):
        assert decode_all(records) == batch


@pytest.mark.parametrize(
    "chunk",
    [
        pytest.param(tcd(0, 7, "a"), id="id-int"),
        pytest.param(tcd(0, "c1", "a", name=7), id="name-int"),
        pytest.param(tcd(0, "c1", 7), id="args-int"),
        pytest.param({"type": "tool-call-delta", "index": 0, "id": "c1"}, id="args-missing"),
        pytest.param(
            {"type": "tool-call-delta", "index": 0, "argumentsDelta": "a"}, id="id-missing"
        ),
        pytest.param({**tcd(0, "c1", "a", name="w"), "extra": 1}, id="extra-key"),
        pytest.param({**tcd(0, "c1", "a"), "text": "a"}, id="text-key-in-tool"),
        pytest.param(
            {"type": "tool-call-delta", "index": 0, "id": "c1", "name": "w"}, id="no-args"
        ),
    ],
)
def test_off_whitelist_tool_member_breaks_the_run(chunk: dict[str, Any]) -> None:
    good = [ev(k, 1000, tcd(0, "c1", "a")) for k in range(3)]
    batch = [good[0], ev(1, 1000, chunk), good[2]]
    assert pack_chunk_runs(batch) == batch


def test_surface_metadata_on_session_events_keeps_them_verbatim() -> None:
    plain = [event(ev(k, 1000 + k, td(0, f"t{k}"))) for k in range(3)]
    for extra in ({"surfaceOp": "append"}, {"sourceEventSeqs": [0]}, {"ignorable": True}):
        middle = event({**ev(1, 1001, td(0, "t1")), **extra})
        batch = [plain[0], middle, plain[2]]
        records = assert_round_trip(batch)
        assert records == [item.to_json() for item in batch]
        assert list(records[1]) == ["type", "seq", "time", "data", *extra]
    replaced = SessionEvent(
        "assistant/chunk", 1, 1001, snapshot(ev(1, 1001, td(0, "t"))["data"]), Replace(0, 0)
    )
    assert pack_chunk_runs([plain[0], replaced, plain[2]])[1] == replaced.to_json()


def test_session_events_and_dicts_pack_alike_and_together() -> None:
    batch = run("text", 4)
    from_events = pack_chunk_runs([event(item) for item in batch])
    assert orjson.dumps(from_events) == orjson.dumps(pack_chunk_runs(batch))
    mixed = [event(batch[0]), batch[1], event(batch[2]), batch[3]]
    assert orjson.dumps(pack_chunk_runs(mixed)) == orjson.dumps(from_events)
    assert_round_trip(mixed)


def test_frozen_envelopes_pack_like_plain_ones() -> None:
    batch = run("reasoning", 3)
    frozen = [snapshot(item) for item in batch]
    assert type(frozen[0]) is FrozenDict
    assert orjson.dumps(pack_chunk_runs(frozen)) == orjson.dumps(pack_chunk_runs(batch))


def test_verbatim_session_events_are_stored_in_to_json_form() -> None:
    turn_start = event({"type": "turn/start", "seq": 0, "time": 5, "data": {"turn": 1}})
    assert pack_chunk_runs([turn_start]) == [turn_start.to_json()]


def test_any_iterable_is_accepted_and_inputs_are_not_changed() -> None:
    batch = run("text", 4)
    before = orjson.dumps(batch)
    records = pack_chunk_runs(iter(batch))
    assert tags(records) == ["text-chunks"]
    records[0]["data"]["texts"].append("x")
    assert orjson.dumps(batch) == before


def test_empty_batch_packs_to_nothing() -> None:
    assert pack_chunk_runs([]) == []


def test_member_key_order_is_not_preserved_but_equality_is() -> None:
    def member(k: int) -> dict[str, Any]:
        chunk = {"text": f"t{k}", "index": 0, "type": "text-delta"}
        return {
            "data": {"chunk": chunk, "step": 1, "turn": 1},
            "time": k,
            "seq": k,
            "type": "assistant/chunk",
        }

    shuffled = [member(k) for k in range(3)]
    decoded = decode_all(pack_chunk_runs(shuffled))
    assert decoded == shuffled
    assert list(decoded[0]) == ["type", "seq", "time", "data"]
    assert list(decoded[0]["data"]["chunk"]) == ["type", "index", "text"]


def test_event_typed_like_a_row_tag_cannot_be_stored() -> None:
    for tag in sorted(ROW_TYPES):
        envelope = {"type": tag, "seq": 4, "time": 0, "data": {}}
        with pytest.raises(StorageRowError, match="reserved") as caught:
            pack_chunk_runs([envelope])
        assert caught.value.code == "BAD_STORAGE_ROW"
        assert caught.value.seq == 4
        with pytest.raises(StorageRowError, match="reserved"):
            pack_chunk_runs([*run("text", 3), envelope])


def test_runs_are_never_merged_across_batches() -> None:
    batch = run("text", 4)
    assert pack_chunk_runs(batch[:2]) + pack_chunk_runs(batch[2:]) == batch
    assert tags(pack_chunk_runs(batch)) == ["text-chunks"]


# -- caps -------------------------------------------------------------------------------------


def test_member_cap_splits_a_long_run_and_leaves_a_short_tail_verbatim() -> None:
    batch = run("text", 10)
    records = assert_round_trip(batch, max_members=4)
    assert tags(records) == ["text-chunks", "text-chunks", "assistant/chunk", "assistant/chunk"]
    assert records[1]["seq0"] == 4
    assert records[1]["time0"] == 1040
    assert records[1]["data"]["dt"] == [10, 10, 10]
    assert records[1]["data"]["texts"] == ["t4", "t5", "t6", "t7"]
    assert records[2:] == batch[8:]
    assert tags(pack_chunk_runs(batch, max_members=5)) == ["text-chunks"] * 2
    assert tags(pack_chunk_runs(batch, max_members=10)) == ["text-chunks"]


def test_byte_cap_takes_the_largest_prefix_that_fits() -> None:
    batch = [ev(k, 1000 + k, td(0, 'é"\n😀' * (k + 1))) for k in range(8)]
    uncapped = pack_chunk_runs(batch)[0]["data"]
    for cap in range(40, len(orjson.dumps(uncapped)) + 2):
        records = assert_round_trip(batch, max_data_bytes=cap)
        assert records == expected_records(batch, None, cap), cap


def test_member_that_cannot_start_a_row_is_stored_verbatim_and_packing_resumes() -> None:
    batch = [ev(0, 1000, td(0, "X" * 500)), *run("text", 5, seq0=1)]
    batch[1:] = [{**item, "time": 1000 + 7 * item["seq"]} for item in batch[1:]]
    records = assert_round_trip(batch, max_members=1024, max_data_bytes=200)
    assert tags(records) == ["assistant/chunk", "text-chunks"]
    assert records[0] is batch[0]
    assert records[1]["seq0"] == 1
    assert records[1]["time0"] == 1007
    assert records[1]["data"]["dt"] == [7, 7, 7, 7]


def test_byte_cap_too_small_for_anything_stores_everything_verbatim() -> None:
    batch = run("text", 6)
    assert pack_chunk_runs(batch, max_data_bytes=10) == batch


def test_rows_respect_both_caps() -> None:
    batch = [ev(k, k, td(0, "abcdefghij"[: k % 10])) for k in range(300)]
    records = assert_round_trip(batch, max_members=7, max_data_bytes=120)
    for record in records:
        if record["type"] in ROW_TYPES:
            assert MIN_RUN <= len(record["data"]["texts"]) <= 7
            assert len(orjson.dumps(record["data"])) <= 120


@pytest.mark.parametrize(
    "caps",
    [
        {"max_members": 2},
        {"max_members": 0},
        {"max_members": True},
        {"max_members": 3.0},
        {"max_data_bytes": 0},
        {"max_data_bytes": "1024"},
        {"max_data_bytes": False},
    ],
)
def test_invalid_caps_are_refused(caps: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        pack_chunk_runs(run("text", 3), **caps)


# -- decoding (D cases) -----------------------------------------------------------------------


def test_records_that_are_not_rows_pass_through_unchanged() -> None:
    envelope = {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}
    assert unpack_record(envelope)[0] is envelope
    for value in ("junk", None, 7, [1, 2], {"type": ["text-chunks"]}, {"no": "type"}, {"type": 1}):
        result = unpack_record(value)
        assert result == [value]
        assert result[0] is value


def base_row(**data_changes: Any) -> dict[str, Any]:
    data = {"turn": 1, "step": 1, "index": 0, "dt": [], "texts": ["a"]}
    data.update(data_changes)
    return {"type": "text-chunks", "seq0": 0, "time0": 1, "data": data}


def tool_row(**data_changes: Any) -> dict[str, Any]:
    data = {"turn": 1, "step": 1, "index": 0, "dt": [], "id": "c1", "args": ["a"]}
    data.update(data_changes)
    return {"type": "tool-call-chunks", "seq0": 0, "time0": 1, "data": data}


def without(row: dict[str, Any], key: str) -> dict[str, Any]:
    data = dict(row["data"])
    del data[key]
    return {**row, "data": data}


MALFORMED = {
    "data-string": ({**base_row(), "data": "x"}, "data must be an object"),
    "data-list": ({**base_row(), "data": []}, "data must be an object"),
    "extra-envelope-key": ({**base_row(), "extra": 1}, "keys must be exactly"),
    "missing-data": ({"type": "text-chunks", "seq0": 0, "time0": 1}, "keys must be exactly"),
    "seq0-negative": ({**base_row(), "seq0": -1}, "seq0"),
    "seq0-bool": ({**base_row(), "seq0": True}, "seq0"),
    "seq0-float": ({**base_row(), "seq0": 1.0}, "seq0"),
    "seq0-unsafe": ({**base_row(), "seq0": M + 1}, "seq0"),
    "time0-infinite": ({**base_row(), "time0": float("inf")}, "time0"),
    "time0-fraction": ({**base_row(), "time0": 1.5}, "time0"),
    "time0-bool": ({**base_row(), "time0": False}, "time0"),
    "time0-unsafe": ({**base_row(), "time0": -M - 1}, "time0"),
    "args-in-text-row": (without(base_row(args=["a"]), "texts"), "data keys"),
    "texts-and-args": (base_row(args=["a"]), "data keys"),
    "texts-missing": (without(base_row(), "texts"), "data keys"),
    "text-not-string": (base_row(texts=[7]), "entries must be strings"),
    "texts-empty": (base_row(texts=[]), "non-empty list"),
    "texts-string": (base_row(texts="a"), "non-empty list"),
    "dt-too-long": (base_row(dt=[1, 2], texts=["a", "b"]), "dt must list 1 gaps"),
    "dt-too-short": (base_row(texts=["a", "b"]), "dt must list 1 gaps"),
    "dt-not-list": (base_row(dt=0), "dt must list"),
    "dt-nan": (base_row(dt=[float("nan")], texts=["a", "b"]), "dt entries"),
    "dt-fraction": (base_row(dt=[0.5], texts=["a", "b"]), "dt entries"),
    "dt-bool": (base_row(dt=[True], texts=["a", "b"]), "dt entries"),
    "dt-unsafe": (base_row(dt=[M + 1], texts=["a", "b"]), "dt entries"),
    "member-seq-unsafe": (
        {**base_row(dt=[0, 0], texts=["a", "b", "c"]), "seq0": M - 1},
        "member seq",
    ),
    "member-time-unsafe": ({**base_row(dt=[1], texts=["a", "b"]), "time0": M}, "member time"),
    "member-time-below": ({**base_row(dt=[-1], texts=["a", "b"]), "time0": -M}, "member time"),
    "turn-string": (base_row(turn="x"), "turn"),
    "turn-bool": (base_row(turn=True), "turn"),
    "step-float": (base_row(step=1.0), "step"),
    "index-none": (base_row(index=None), "index"),
    "index-unsafe": (base_row(index=M + 1), "index"),
}
MALFORMED_TOOL = {
    "id-missing": (without(tool_row(), "id"), "data keys"),
    "id-int": (tool_row(id=7), "id must be a string"),
    "name-int": (tool_row(name=7), "name must be a string"),
    "name-null": (tool_row(name=None), "name must be a string"),
    "texts-in-tool-row": (without(tool_row(texts=["a"]), "args"), "data keys"),
    "arg-not-string": (tool_row(args=[None]), "entries must be strings"),
    "args-empty": (tool_row(args=[]), "non-empty list"),
    "extra-data-key": (tool_row(extra=1), "data keys"),
}


@pytest.mark.parametrize(("row", "reason"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_text_rows_are_refused(row: dict[str, Any], reason: str) -> None:
    for tag in ("text-chunks", "reasoning-chunks"):
        with pytest.raises(StorageRowError, match=rf"malformed {tag} row: .*{reason}") as caught:
            unpack_record({**row, "type": tag})
        assert caught.value.code == "BAD_STORAGE_ROW"


@pytest.mark.parametrize(("row", "reason"), MALFORMED_TOOL.values(), ids=MALFORMED_TOOL.keys())
def test_malformed_tool_rows_are_refused(row: dict[str, Any], reason: str) -> None:
    with pytest.raises(StorageRowError, match=rf"malformed tool-call-chunks row: .*{reason}"):
        unpack_record(row)


def test_malformed_row_error_names_the_row_seq() -> None:
    with pytest.raises(StorageRowError) as caught:
        unpack_record({**base_row(texts=[1]), "seq0": 12})
    assert caught.value.seq == 12
    assert "seq 12" in str(caught.value)


def test_valid_base_rows_decode() -> None:
    assert unpack_record(base_row()) == [ev(0, 1, td(0, "a"))]
    assert unpack_record(tool_row()) == [ev(0, 1, tcd(0, "c1", "a"))]
    assert unpack_record(tool_row(name="w")) == [ev(0, 1, tcd(0, "c1", "a", name="w"))]


def test_rows_shorter_than_a_run_still_decode() -> None:
    assert unpack_record(base_row(dt=[4], texts=["a", "b"])) == [
        ev(0, 1, td(0, "a")),
        ev(1, 5, td(0, "b")),
    ]


def test_rows_at_the_edges_of_the_safe_range_decode() -> None:
    edge = {**base_row(dt=[0, 1], texts=["a", "b", "c"]), "seq0": M - 2, "time0": M - 1}
    assert [(m["seq"], m["time"]) for m in unpack_record(edge)] == [
        (M - 2, M - 1),
        (M - 1, M - 1),
        (M, M),
    ]
    low = {**base_row(dt=[M, -M], texts=["a", "b", "c"]), "time0": -M}
    assert [m["time"] for m in unpack_record(low)] == [-M, 0, -M]


def test_frozen_rows_decode_like_plain_ones() -> None:
    row = pack_chunk_runs(run("text", 4))[0]
    assert unpack_record(snapshot(row)) == unpack_record(row) == run("text", 4)


def test_decoded_members_are_fresh_and_independent() -> None:
    members = unpack_record(json_round_trip(pack_chunk_runs(run("text", 3))[0]))
    members[0]["data"]["chunk"]["text"] = "changed"
    assert members[1]["data"]["chunk"]["text"] == "t1"
    assert members[0]["data"] is not members[1]["data"]


# -- properties -------------------------------------------------------------------------------


def spec_member(record: Any) -> tuple[tuple[Any, ...], str] | None:
    """Eligibility as docs/formats.md states it, written plainly: (run key, payload) or None."""

    def is_object(value: Any) -> bool:
        return type(value) in (dict, FrozenDict)

    def safe(value: Any) -> bool:
        return type(value) is int and abs(value) <= M

    if not is_object(record) or set(record) != {"type", "seq", "time", "data"}:
        return None
    if record["type"] != "assistant/chunk" or not safe(record["seq"]) or record["seq"] < 0:
        return None
    data = record["data"]
    if not safe(record["time"]) or not is_object(data) or set(data) != {"turn", "step", "chunk"}:
        return None
    chunk = data["chunk"]
    if not (safe(data["turn"]) and safe(data["step"]) and is_object(chunk)):
        return None
    if not safe(chunk.get("index")):
        return None
    base = (chunk.get("type"), data["turn"], data["step"], chunk["index"])
    if base[0] in ("text-delta", "reasoning-delta"):
        if set(chunk) == {"type", "index", "text"} and type(chunk["text"]) is str:
            return base, chunk["text"]
    elif base[0] == "tool-call-delta":
        named = set(chunk) == {"type", "index", "id", "name", "argumentsDelta"}
        if named or set(chunk) == {"type", "index", "id", "argumentsDelta"}:
            name = chunk.get("name")
            strings = type(chunk["id"]) is str and type(chunk["argumentsDelta"]) is str
            if strings and (not named or type(name) is str):
                return (*base, chunk["id"], named, name), chunk["argumentsDelta"]
    return None


def spec_row(members: list[tuple[Any, tuple[Any, ...], str]]) -> dict[str, Any]:
    first, key, _ = members[0]
    times = [record["time"] for record, _, _ in members]
    data: dict[str, Any] = {"turn": key[1], "step": key[2], "index": key[3]}
    data["dt"] = [b - a for a, b in pairwise(times)]
    payload = [text for _, _, text in members]
    tag = {"text-delta": "text-chunks", "reasoning-delta": "reasoning-chunks"}.get(key[0])
    if tag is None:
        tag = "tool-call-chunks"
        data["id"] = key[4]
        if key[5]:
            data["name"] = key[6]
        data["args"] = payload
    else:
        data["texts"] = payload
    return {"type": tag, "seq0": first["seq"], "time0": first["time"], "data": data}


def expected_records(batch: list[Any], max_members: int | None, max_bytes: int | None) -> list[Any]:
    """The records the codec must write, by the slowest obvious method (re-dump every prefix)."""
    records = as_records(batch)
    runs: list[list[Any]] = []
    for record in records:
        member = spec_member(record)
        last = runs[-1][-1] if runs else None
        if (
            member is not None
            and last is not None
            and last[1] == member[0]
            and record["seq"] == last[0]["seq"] + 1
            and abs(record["time"] - last[0]["time"]) <= M
        ):
            runs[-1].append((record, *member))
        else:
            runs.append([(record, *member)] if member is not None else [(record, None, None)])
    out: list[Any] = []
    for members in runs:
        if members[0][1] is None:
            out.append(members[0][0])
            continue
        start = 0
        while len(members) - start >= MIN_RUN:
            size = (
                len(members) - start
                if max_members is None
                else min(max_members, len(members) - start)
            )
            while max_bytes is not None and size >= MIN_RUN:
                data = spec_row(members[start : start + size])["data"]
                if len(orjson.dumps(data)) <= max_bytes:
                    break
                size -= 1
            if size < MIN_RUN:
                out.append(members[start][0])
                start += 1
                continue
            out.append(spec_row(members[start : start + size]))
            start += size
        out.extend(record for record, _, _ in members[start:])
    return out


@given(chunk_event_batches())
def test_pack_then_unpack_restores_every_batch(batch: list[Any]) -> None:
    assert_round_trip(batch)
    direct = [m for record in pack_chunk_runs(batch) for m in unpack_record(record)]
    assert direct == [item.to_json() if type(item) is SessionEvent else item for item in batch]


@given(chunk_event_batches(), st.integers(MIN_RUN, 6), st.integers(1, 400))
def test_pack_with_caps_restores_every_batch(batch: list[Any], members: int, size: int) -> None:
    records = assert_round_trip(batch, max_members=members, max_data_bytes=size)
    for record in records:
        if record["type"] in ROW_TYPES:
            payload = record["data"].get("texts", record["data"].get("args"))
            assert MIN_RUN <= len(payload) <= members
            assert len(orjson.dumps(record["data"])) <= size


@given(chunk_event_batches())
def test_pack_makes_exactly_the_rows_spec_prescribes(batch: list[Any]) -> None:
    assert orjson.dumps(pack_chunk_runs(batch)) == orjson.dumps(expected_records(batch, None, None))


@given(chunk_event_batches(), st.sampled_from([None, 3, 4, 1024]), st.integers(20, 300))
def test_capped_pack_cuts_runs_greedily(batch: list[Any], members: Any, size: int) -> None:
    records = pack_chunk_runs(batch, max_members=members, max_data_bytes=size)
    assert orjson.dumps(records) == orjson.dumps(expected_records(batch, members, size))
    if members is not None:
        by_members = pack_chunk_runs(batch, max_members=members)
        assert orjson.dumps(by_members) == orjson.dumps(expected_records(batch, members, None))


@given(chunk_event_batches(form="events"))
def test_repacking_decoded_records_gives_the_same_records(batch: list[Any]) -> None:
    records = json_round_trip(pack_chunk_runs(batch))
    again = pack_chunk_runs(decode_all(records))
    assert orjson.dumps(again) == orjson.dumps(records)


@settings(max_examples=30)
@given(session_logs())
def test_session_logs_round_trip_through_rows(log: list[dict[str, Any]]) -> None:
    assert_round_trip(log, max_members=1024, max_data_bytes=1 << 20)
    assert_round_trip([event(item) for item in log])


# -- the strategies themselves ----------------------------------------------------------------


@given(json_values())
def test_json_values_strategy_draws_valid_json(value: Any) -> None:
    assert thaw(snapshot(value)) == value


@settings(max_examples=30)
@given(session_logs())
def test_session_logs_strategy_draws_contiguous_valid_envelopes(log: list[dict[str, Any]]) -> None:
    assert [item["seq"] for item in log] == list(range(len(log)))
    assert all(a["time"] <= b["time"] for a, b in pairwise(log))
    assert [thaw(event(item).to_json()) for item in log] == log


@pytest.mark.parametrize(
    "goal",
    [
        pytest.param(lambda r: r["type"] == "text-chunks", id="text-row"),
        pytest.param(lambda r: r["type"] == "reasoning-chunks", id="reasoning-row"),
        pytest.param(lambda r: r["type"] == "tool-call-chunks" and "name" in r["data"], id="named"),
        pytest.param(
            lambda r: r["type"] == "tool-call-chunks" and "name" not in r["data"], id="nameless"
        ),
        pytest.param(
            lambda r: r["type"] in ROW_TYPES and min(r["data"]["dt"]) < 0, id="negative-gap"
        ),
        pytest.param(lambda r: r.get("time") in (M, -M), id="extreme-time"),
        pytest.param(lambda r: r.get("surfaceOp") == "append", id="surface-event"),
    ],
)
def test_batch_strategy_reaches_each_kind_of_record(goal: Any) -> None:
    find(
        chunk_event_batches(),
        lambda batch: any(goal(record) for record in pack_chunk_runs(batch)),
        settings=settings(max_examples=2000, database=None, phases=[Phase.generate]),
    )


# -- packing from the runs a log holds -------------------------------------------------------


def _numbered(batch: list[Any]) -> list[SessionEvent]:
    """The batch's events with seqs 0, 1, ...: their places in a log."""
    return [
        SessionEvent.from_json({**thaw(item.to_json()), "seq": seq})
        for seq, item in enumerate(batch)
    ]


def _logs(events: list[SessionEvent], cut: int, caps: dict[str, Any]) -> list[EventLog]:
    """Logs holding *events* the ways a session's log comes to hold them: appended one by
    one; a copy taken at *cut* and extended (a fork: its runs shared, never extended); and
    loaded from the records of a capped write, then appended to (stored rows as runs,
    loose deltas as events)."""
    appended = EventLog(events)
    forked = EventLog(events[:cut]).copy()
    forked.extend(events[cut:])
    loaded = EventLog()
    for record in pack_chunk_runs(events[:cut], **caps):
        decoded = unpack_to_log(json_round_trip(record))
        loaded.extend_segments([decoded] if type(decoded) is ChunkRun else decoded)
    loaded.extend(events[cut:])
    return [appended, forked, loaded]


@given(
    chunk_event_batches(form="events"),
    st.data(),
    st.sampled_from([{}, {"max_members": 3}, {"max_members": 4, "max_data_bytes": 60}]),
)
def test_packing_from_a_logs_runs_makes_the_same_records(
    batch: list[Any], data: st.DataObject, caps: dict[str, Any]
) -> None:
    events = _numbered(batch)
    cut = data.draw(st.integers(0, len(events)))
    start = data.draw(st.integers(0, len(events)))
    stop = data.draw(st.integers(start, len(events)))
    window = events[start:stop]
    expected = orjson.dumps(pack_chunk_runs(window, **caps))
    for log in _logs(events, cut, {"max_members": 3}):
        assert list(log) == events
        assert orjson.dumps(pack_chunk_runs(window, **caps, runs=LogRuns(log))) == expected


def test_packing_from_runs_reads_their_texts_and_times_not_the_events() -> None:
    events = _numbered([event(item) for item in run("text", 5)])
    log = EventLog(events)
    # Where the log holds a run, its members are packed, not the events handed over (the
    # caller vouches they are the same): this is what spares classifying each again.
    others = _numbered([event(ev(k, 0, td(0, "other"))) for k in range(5)])
    (row,) = pack_chunk_runs(others, runs=LogRuns(log))
    assert row["data"]["texts"] == ["t0", "t1", "t2", "t3", "t4"]
    assert row["data"]["dt"] == [10, 10, 10, 10]


def test_a_gap_no_row_can_state_cuts_a_logs_run() -> None:
    envelopes = [ev(k, time, td(0, f"t{k}")) for k, time in enumerate([-M, -M, -M, M, M, M])]
    events = _numbered([event(item) for item in envelopes])
    log = EventLog(events)
    assert len(list(log.segments())) == 1  # the log keeps one run
    records = pack_chunk_runs(events, runs=LogRuns(log))
    assert tags(records) == ["text-chunks", "text-chunks"]
    assert orjson.dumps(records) == orjson.dumps(pack_chunk_runs(events))


# -- the writer follows the declared record shapes ---------------------------------------------

_DECLARED_ROW: Final = msgspec.json.Decoder(TextRow | ReasoningRow | ToolRow)
_DECLARED_ENVELOPE: Final = msgspec.json.Decoder(Envelope)


@given(chunk_event_batches(form="events"), st.sampled_from([{}, {"max_members": 3}]))
def test_every_record_the_writer_makes_is_its_declared_shape_byte_for_byte(
    batch: list[Any], caps: dict[str, Any]
) -> None:
    """The Structs of ``sessionledger.model._records`` are the one declaration of a record:
    what the packer writes decodes as one and encodes back to the same bytes (keys, their
    order and the values' types), rows and envelopes alike."""
    for record in pack_chunk_runs(batch, **caps):
        text = jsoncodec.dumps(record)
        declared = _DECLARED_ROW if record["type"] in ROW_TYPES else _DECLARED_ENVELOPE
        # Back through the writer's own encoder: floats are spelt as it spells them.
        assert jsoncodec.dumps(msgspec.to_builtins(declared.decode(text))) == text
