"""What the ledger counts for an event, and the batches it cuts (docs/durability.md,
"limits and the backlog").

The oracle is what the stores write: ``event_bytes`` is never below an event's compact
JSON envelope, nor below the records a batch of events is packed into, whatever the
event (escapes, astral characters, the largest integers, surface ops, sources); and the
append path, which measures a streamed delta from its text alone, counts exactly what
``event_bytes`` counts afresh.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sessionledger import SessionEvent
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._deltas import freeze_delta
from sessionledger.model._snapshot import MAX_SAFE_INTEGER
from sessionledger.storage._chunks import pack_chunk_runs
from sessionledger.storage._limits import (
    EXACT_ABOVE,
    batch_bounds,
    batch_end,
    delta_bytes,
    event_bytes,
)
from sessionledger.testing.strategies import chunk_event_batches, json_texts, json_values

_M = MAX_SAFE_INTEGER


def envelope_size(event: SessionEvent) -> int:
    return len(jsoncodec.dumps(event.to_json()))


@given(chunk_event_batches(form="events", max_size=30))
def test_the_count_bounds_every_envelope_and_the_records_of_a_batch(
    batch: list[Any],
) -> None:
    sizes = [event_bytes(event) for event in batch]
    for event, size in zip(batch, sizes, strict=True):
        assert size >= envelope_size(event), event
    for caps in ((None, None), (1024, 1 << 20), (3, 64)):
        records = pack_chunk_runs(batch, *caps)
        assert sum(len(jsoncodec.dumps(record)) for record in records) <= sum(sizes)


_SURFACE_OPS = st.sampled_from([None, "append", {"op": "replace", "start": _M, "end": _M}])
_SOURCES = st.none() | st.lists(st.sampled_from([0, 1, _M]), min_size=1, max_size=5)


@given(
    st.sampled_from(["user/message", "x/custom", "tool/result"]),
    st.sampled_from([0, _M]),
    st.sampled_from([-_M, 0, _M]),
    json_values(),
    _SURFACE_OPS,
    _SOURCES,
    st.booleans(),
)
def test_the_count_bounds_any_envelope(
    kind: str,
    seq: int,
    time: int,
    data: Any,
    surface_op: Any,
    sources: list[int] | None,
    ignorable: bool,
) -> None:
    envelope: dict[str, Any] = {"type": kind, "seq": seq, "time": time, "data": data}
    if surface_op is not None:
        envelope["surfaceOp"] = surface_op
    if sources is not None:
        envelope["sourceEventSeqs"] = sources
    if ignorable:
        envelope["ignorable"] = True
    event = SessionEvent.from_json(envelope)
    assert event_bytes(event) >= envelope_size(event)


_AWKWARD = st.sampled_from(["\x00", "\x1f", '"', "\\", "\n", "é", "😀", "\u2028", "a"])


@given(
    st.sampled_from(["text-delta", "reasoning-delta", "tool-call-delta"]),
    st.lists(_AWKWARD, max_size=40).map("".join) | json_texts(),
    st.sampled_from([1, _M]),
    st.sampled_from([0, _M]),
    st.sampled_from([None, "", "write", "😀\x00"]),
)
def test_the_append_path_counts_a_delta_as_measured_afresh(
    kind: str, text: str, turn: int, index: int, name: str | None
) -> None:
    if kind == "tool-call-delta":
        chunk: dict[str, Any] = {"type": kind, "index": index, "id": "c\x01" * 3}
        if name is not None:
            chunk["name"] = name
        chunk["argumentsDelta"] = text
    else:
        chunk = {"type": kind, "index": index, "text": text}
    frozen = freeze_delta({"turn": turn, "step": turn, "chunk": chunk})
    assert frozen is not None
    data, fields = frozen
    event = SessionEvent("assistant/chunk", _M, -_M, data)
    assert delta_bytes(event, fields) == event_bytes(event) >= envelope_size(event)


def test_the_count_is_tight_for_the_largest_envelopes() -> None:
    """Every field at its largest, every character escaped as \\u00XX: the count is at
    most a few dozen bytes above the envelope (so each allowance in it is needed)."""
    controls = "\x01" * 200
    events = [
        SessionEvent.from_json(
            {
                "type": "x/" + controls,
                "seq": _M,
                "time": -_M,
                "data": {"a": controls},
                "surfaceOp": {"op": "replace", "start": _M, "end": _M},
                "sourceEventSeqs": [_M] * 5,
                "ignorable": True,
            }
        )
    ]
    for chunk in (
        {"type": "reasoning-delta", "index": _M, "text": controls},
        {"type": "text-delta", "index": _M, "text": controls},
        {"type": "tool-call-delta", "index": _M, "id": controls, "argumentsDelta": controls},
        {
            "type": "tool-call-delta",
            "index": _M,
            "id": controls,
            "name": controls,
            "argumentsDelta": controls,
        },
    ):
        frozen = freeze_delta({"turn": _M, "step": _M, "chunk": chunk})
        assert frozen is not None
        event = SessionEvent("assistant/chunk", _M, -_M, frozen[0])
        assert delta_bytes(event, frozen[1]) == event_bytes(event)
        events.append(event)
    for event in events:
        assert 0 <= event_bytes(event) - envelope_size(event) <= 40, event.type


def test_a_long_delta_is_counted_exactly_and_a_plain_one_not_six_times() -> None:
    plain = "a" * (EXACT_ABOVE // 4)
    controls = "\x01" * (EXACT_ABOVE // 4)
    for text in (plain, controls):
        frozen = freeze_delta(
            {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}}
        )
        assert frozen is not None
        event = SessionEvent("assistant/chunk", 0, 0, frozen[0])
        size = delta_bytes(event, frozen[1])
        assert envelope_size(event) <= size < envelope_size(event) + 256
    # below the threshold the bound is the worst escaping, above it the exact text
    assert event_bytes(SessionEvent("assistant/chunk", 0, 0, frozen[0])) > 6 * len(controls)


@given(st.lists(st.integers(0, 12), max_size=30), st.integers(1, 20))
def test_batches_cover_every_event_in_order_each_within_the_budget(
    sizes: list[int], budget: int
) -> None:
    bounds = batch_bounds(sizes, len(sizes), budget)
    ends = [end for _, end in bounds]
    assert [start for start, _ in bounds] == [0, *ends][: len(bounds)]
    assert [0, *ends][-1] == len(sizes)
    for start, end in bounds:
        assert end > start
        assert sum(sizes[start:end]) <= budget or end - start == 1
        # greedy: the next event would not have fitted
        if end < len(sizes):
            assert sum(sizes[start : end + 1]) > budget
    assert batch_end(sizes, 0, None) == len(sizes)
    assert batch_bounds(sizes, len(sizes), None) == ([(0, len(sizes))] if sizes else [])
