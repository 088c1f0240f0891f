"""Chunk-row packing: the lossless storage codec every backend shares.

The format is in docs/formats.md, "chunk rows".

Providers stream token-sized deltas, each a whole ``assistant/chunk`` event whose envelope
dwarfs its payload. Only at the storage boundary, a run of at least ``MIN_RUN`` consecutive
deltas of one stream block becomes one *row*; ``unpack_record`` restores the exact events.
Rows are storage records, never events: their tags contain no ``/``, so they cannot pass for
an event type. A row looks like this (keys always in this order)::

    {"type": "text-chunks" | "reasoning-chunks", "seq0": S, "time0": T,
     "data": {"turn": U, "step": P, "index": I, "dt": [g1, ...], "texts": [m0, ...]}}
    {"type": "tool-call-chunks", "seq0": S, "time0": T,
     "data": {"turn": U, "step": P, "index": I, "dt": [g1, ...], "id": C, "name": N,
              "args": [a0, ...]}}

Member ``k`` has seq ``S + k`` and time ``T + g1 + ... + gk``; ``name`` is present exactly
when every member carried one. Decoded members use the canonical key order
``{type, seq, time, data: {turn, step, chunk}}``; a member whose keys were given in another
order decodes equal (``==``) but in canonical order.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from itertools import accumulate, pairwise
from operator import itemgetter
from typing import Any, Final, TypeAlias

import orjson

from sessionledger._accelerator import ACCELERATOR
from sessionledger._errors import ConfigError, StorageRowError
from sessionledger.model._deltas import delta_chunk, delta_fields
from sessionledger.model._eventlog import ChunkRun, LogRuns, pack_texts
from sessionledger.model._events import SessionEvent, make_event
from sessionledger.model._records import ROW_DATA_KEYS, ROW_KEYS, ReasoningRow, TextRow, ToolRow
from sessionledger.model._snapshot import (
    MAX_SAFE_INTEGER,
    FrozenDict,
    brief,
    mark_all_shallow,
)

TEXT_ROW: Final[str] = TextRow.__struct_config__.tag  # type: ignore[assignment]
REASONING_ROW: Final[str] = ReasoningRow.__struct_config__.tag  # type: ignore[assignment]
TOOL_ROW: Final[str] = ToolRow.__struct_config__.tag  # type: ignore[assignment]

#: The tags of packed rows; an event type equal to one of them cannot be stored.
ROW_TYPES: Final = frozenset((TEXT_ROW, REASONING_ROW, TOOL_ROW))

#: Shortest run stored as a row. A format constant: readers accept any length >= 1.
MIN_RUN: Final = 3

_CHUNK: Final = "assistant/chunk"
_M: Final = MAX_SAFE_INTEGER

# Row tag -> (chunk type of its members, data key of its payload list).
_ROW_KINDS: Final = {
    TEXT_ROW: (TextRow.MEMBER, "texts"),
    REASONING_ROW: (ReasoningRow.MEMBER, "texts"),
    TOOL_ROW: (ToolRow.MEMBER, "args"),
}
# Member chunk type -> the tag of its rows.
_ROW_TAG_OF: Final = {member: tag for tag, (member, _) in _ROW_KINDS.items()}
# The keys of a row and of its data, from their one declaration (sessionledger.model._records).
_ROW_KEYS: Final = ROW_KEYS
_TEXT_DATA_KEYS: Final = ROW_DATA_KEYS["text"]
_NAMED_TOOL_DATA_KEYS: Final = ROW_DATA_KEYS["tool"]
_TOOL_DATA_KEYS: Final = _NAMED_TOOL_DATA_KEYS - {"name"}

# What makes members of one run: a delta's fields but its text, (kind, turn, step,
# index, call id, name), as ``delta_fields`` states them; ``name`` is a str when present,
# so None stands unambiguously for "absent" and a named/unnamed mix never compares equal.
_RunKey: TypeAlias = tuple[str, int, int, int, "str | None", "str | None"]
_Member: TypeAlias = tuple[_RunKey, int, int, str]


def pack_chunk_runs(
    events: Iterable[SessionEvent | Mapping[str, Any]],
    max_members: int | None = None,
    max_data_bytes: int | None = None,
    *,
    runs: LogRuns | None = None,
) -> list[dict[str, Any]]:
    """Encode one write batch as storage records, packing delta runs into rows.

    Each input is a ``SessionEvent`` (stored as ``event.to_json()``) or an envelope dict
    (stored as the same object). Eligible members and run boundaries are those of
    docs/formats.md, "chunk rows"; a run of ``MIN_RUN`` or more becomes one row, shorter
    runs stay verbatim, and record order follows input order. Runs never span batches: the
    caller packs each batch alone.

    ``max_members`` caps the members of a row and ``max_data_bytes`` the size of its
    ``data`` as compact UTF-8 JSON. A longer run is cut greedily into the largest prefixes
    that fit; when not even ``MIN_RUN`` members fit, the first member is stored verbatim
    and the cut restarts after it; a tail shorter than ``MIN_RUN`` stays verbatim.

    *runs*, when given, is the in-memory log the events were appended to (their seqs are
    their places in it): the deltas it already keeps in runs are packed from there, with
    no event classified again, into the same records.

    Inputs must already be valid JSON values; packing validates only what decides
    eligibility. An input whose type is a row tag raises ``StorageRowError``: stored
    verbatim, it would read back as a row.
    """
    packer = _Packer(
        _check_cap("max_members", max_members, MIN_RUN),
        _check_cap("max_data_bytes", max_data_bytes, 1),
    )
    if runs is not None and type(events) is list and events:
        first = events[0].seq if type(events[0]) is SessionEvent else None
        if first is not None and first + len(events) <= len(runs):
            for seq, slot, until in runs.walk(first, first + len(events)):
                if type(slot) is ChunkRun:
                    packer.add_run(slot, seq, until)
                else:
                    packer.add(events[seq - first])
            return packer.finish()
    for event in events:
        packer.add(event)
    return packer.finish()


class _Packer:
    """The records of one batch, built as its events arrive: the open run's key, first
    seq and time, gaps and payloads, and where its members came from (an event, or a
    stretch of a log's run) for those a cap leaves verbatim."""

    __slots__ = ("byte_cap", "dt", "key", "limit", "out", "payload", "prev_seq",
                 "prev_time", "seq0", "sources", "time0")  # fmt: skip

    def __init__(self, limit: int | None, byte_cap: int | None) -> None:
        self.limit, self.byte_cap = limit, byte_cap
        self.out: list[dict[str, Any]] = []
        self.key: _RunKey = ("", 0, 0, 0, None, None)
        self.seq0 = self.time0 = self.prev_seq = self.prev_time = 0
        self.dt: list[int] = []
        self.payload: list[str] = []
        # Each member's source: (its offset in the run, an event or (run, first seq)).
        self.sources: list[tuple[int, Any]] = []

    def add(self, event: Any) -> None:
        """Add one input, classifying it."""
        member = _member(event)
        if member is None:
            self.close()
            self.out.append(_verbatim(event))
            return
        key, seq, time, text = member
        if not self._continues(key, seq, time):
            self._open(key, seq, time)
        self.sources.append((len(self.payload), event))
        self.payload.append(text)
        self.prev_seq, self.prev_time = seq, time

    def add_run(self, run: ChunkRun, seq: int, until: int) -> None:
        """Add the members *seq* up to *until* of a log's *run*, as they are: a run holds
        only deltas of one block, in seq order (``EventLog``)."""
        times = run.times[seq - run.seq0 : until - run.seq0]
        gaps = [later - earlier for earlier, later in pairwise(times)]
        if gaps and (min(gaps) < -_M or max(gaps) > _M):
            for member in run.members(seq, until):  # a gap no row can state: cut there
                self.add(member)
            return
        key = (run.kind, run.turn, run.step, run.index, run.call_id, run.name)
        if not self._continues(key, seq, times[0]):
            self._open(key, seq, times[0])
        self.sources.append((len(self.payload), (run, seq)))
        self.dt += gaps
        self.payload += run.texts_between(seq, until)
        self.prev_seq, self.prev_time = until - 1, times[-1]

    def _continues(self, key: _RunKey, seq: int, time: int) -> bool:
        """Tell whether a member with *key*, *seq* and *time* extends the open run (and
        if so add its gap)."""
        if not self.payload or key != self.key or seq != self.prev_seq + 1:
            return False
        gap = time - self.prev_time
        if not -_M <= gap <= _M:
            return False
        self.dt.append(gap)
        return True

    def _open(self, key: _RunKey, seq: int, time: int) -> None:
        self.close()
        self.key, self.seq0, self.time0 = key, seq, time

    def close(self) -> None:
        """Emit the open run, if any."""
        if self.payload:
            _emit_run(self.out, self, self.limit, self.byte_cap)
            self.payload, self.dt, self.sources = [], [], []

    def finish(self) -> list[dict[str, Any]]:
        self.close()
        return self.out

    def verbatim(self, offset: int) -> Any:
        """The record storing the open run's member at *offset* as itself."""
        position = bisect_right(self.sources, offset, key=itemgetter(0)) - 1
        start, source = self.sources[position]
        if type(source) is tuple:
            run, seq = source
            source = run.member(seq + offset - start)
        return _verbatim(source)


def unpack_record(record: Any) -> list[Any]:
    """Expand one storage record into the envelope dicts it stands for.

    A record that is not tagged as a row is returned as ``[record]`` unchanged: envelopes
    are validated by the layers above. A row is validated strictly and expanded in member
    order; any malformed shape raises ``StorageRowError`` naming the tag and the reason.
    Rows of one or more members are accepted (writers never write fewer than ``MIN_RUN``).
    """
    # The common case (an ordinary envelope) costs two lookups; non-mappings and
    # unhashable tags fall out through the exception.
    try:
        kind = _ROW_KINDS.get(record.get("type"))
    except (AttributeError, TypeError):
        return [record]
    if kind is None:
        return [record]
    return _expand_row(record, record["type"], kind[0], kind[1])


def unpack_events(record: Any) -> list[SessionEvent]:
    """Decode one storage record straight into ``SessionEvent``s (the read path).

    Same rules as ``unpack_record`` followed by ``SessionEvent.from_json``; row members are
    built frozen directly instead of being validated a second time.
    """
    kind = _row_kind(record)
    if kind is None:
        return [SessionEvent.from_json(record)]
    return _expand_row(record, record["type"], kind[0], kind[1], as_events=True)


def unpack_to_log(record: Any) -> list[SessionEvent] | ChunkRun:
    """Decode one storage record for an in-memory log: a row becomes one ``ChunkRun``
    without building its members (validated as strictly as ``unpack_events`` does, at
    the speed of a few passes in C over its lists), anything else its events."""
    kind = _row_kind(record)
    if kind is None:
        return [SessionEvent.from_json(record)]
    tag = record["type"]
    seq0, data = _check_row(record, tag, kind[1], members=False)
    payload, gaps, time0 = data[kind[1]], data["dt"], record["time0"]
    if (
        (type(gaps) is list or type(gaps) is tuple)
        and len(gaps) == len(payload) - 1
        and (packed := pack_run(payload, gaps, time0)) is not None
    ):
        if tag == TOOL_ROW:
            fields = (kind[0], data["turn"], data["step"], data["index"], data["id"])
            name = data.get("name")
        else:
            fields = (kind[0], data["turn"], data["step"], data["index"], None)
            name = None
        run = ChunkRun((*fields, name, ""), seq0, None, payload, time0=time0, gaps=gaps)
        run.seal(packed)
        return run
    # Some member is malformed: the member-by-member check raises, naming it.
    return _expand_row(record, tag, kind[0], kind[1], as_events=True)


def _row_kind(record: Any) -> tuple[str, str] | None:
    """The (member chunk type, payload key) of a row, None for any other record."""
    try:
        return _ROW_KINDS.get(record.get("type"))
    except (AttributeError, TypeError):  # not a mapping, or an unhashable type
        return None


def pure_pack_run(texts: Any, gaps: Any, time0: int) -> tuple[str, array[int]] | None:
    """Check a stored row's *texts* (each a ``str``) and *gaps* (safe integers that keep
    every member time safe, from the caller's checked *time0*) and return the texts
    packed as a run keeps them (``pack_texts``), or None when a check fails. The pure
    form of the compiled ``pack_run``: both decide the same."""
    if not (_only_strings(texts) and _gaps_fit(gaps, time0)):
        return None
    return pack_texts(texts)


def _pack_run() -> Callable[[Any, Any, int], tuple[str, array[int]] | None]:
    """The compiled ``pack_run`` where the accelerator runs (its offsets are 4-byte
    ``array("I")`` items), else the pure one."""
    if ACCELERATOR is None or array("I").itemsize != 4:
        return pure_pack_run
    compiled: Callable[[Any, Any, int], tuple[str, array[int]] | None] = ACCELERATOR.pack_run
    return compiled


#: Check and pack a stored row's texts and gaps in one step (see ``pure_pack_run``).
pack_run: Final = _pack_run()


def _only_strings(values: Any) -> bool:
    """Tell whether every item of *values* is a ``str`` (one pass in C)."""
    return set(map(type, values)) <= _STR_ONLY


def _gaps_fit(gaps: Any, time0: int) -> bool:
    """Tell whether *gaps* are safe integers that keep every member time safe."""
    if not gaps:
        return True
    if not set(map(type, gaps)) <= _INT_ONLY:
        return False
    low, high = min(gaps), max(gaps)
    if low < -_M or high > _M:
        return False
    if low >= 0:
        return bool(time0 + sum(gaps) <= _M)
    times = list(accumulate(gaps, initial=time0))
    return bool(min(times) >= -_M and max(times) <= _M)


_INT_ONLY: Final = frozenset((int,))
_STR_ONLY: Final = frozenset((str,))


def _check_cap(name: str, value: int | None, minimum: int) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum} or None, got {value!r}")
    return value


def _member(event: object) -> _Member | None:
    """Return ``(run key, seq, time, payload)`` for a packable delta, else None."""
    cls = type(event)
    if cls is SessionEvent:
        ev: SessionEvent = event  # type: ignore[assignment]
        if (
            ev.type != _CHUNK
            or ev.surface_op is not None
            or ev.source_event_seqs is not None
            or ev.ignorable is not False
        ):
            return None
        return _chunk_member(ev.seq, ev.time, ev.data)
    if cls is dict or cls is FrozenDict:
        envelope: dict[str, Any] = event  # type: ignore[assignment]
        # With the length fixed, the lookups below succeeding proves the exact key set.
        if len(envelope) != 4 or envelope.get("type") != _CHUNK:
            return None
        try:
            return _chunk_member(envelope["seq"], envelope["time"], envelope["data"])
        except KeyError:
            return None
    return None


def _chunk_member(seq: Any, time: Any, data: Any) -> _Member | None:
    """The member of an ``assistant/chunk`` envelope's fields, if it is an eligible delta."""
    if type(seq) is not int or not 0 <= seq <= _M or type(time) is not int or not -_M <= time <= _M:
        return None
    fields = delta_fields(data)
    if fields is None:
        return None
    return fields[:6], seq, time, fields[6]


def _verbatim(event: Any) -> Any:
    """Return the record that stores *event* as itself."""
    tag: Any
    if type(event) is SessionEvent:
        tag = event.type
        record = event.to_json()
    else:
        record = event
        tag = event.get("type") if isinstance(event, dict) else None
    if type(tag) is str and tag in ROW_TYPES:
        raise StorageRowError(
            f"cannot store an event of type {tag!r}: the name is reserved for packed rows",
            seq=record.get("seq") if isinstance(record, dict) else None,
        )
    return record


def _row_data(key: _RunKey, dt: list[int], payload: list[str]) -> dict[str, Any]:
    _, turn, step, index, call_id, name = key
    if call_id is None:
        return {"turn": turn, "step": step, "index": index, "dt": dt, "texts": payload}
    data = {"turn": turn, "step": step, "index": index, "dt": dt, "id": call_id}
    if name is not None:
        data["name"] = name
    data["args"] = payload
    return data


def _emit_run(
    out: list[dict[str, Any]], run: _Packer, limit: int | None, byte_cap: int | None
) -> None:
    """Append the records of one finished run: rows where allowed, the rest verbatim."""
    key, seq0, time0, dt, payload = run.key, run.seq0, run.time0, run.dt, run.payload
    n = len(payload)
    if n < MIN_RUN:
        out.extend(map(run.verbatim, range(n)))
        return
    tag = _ROW_TAG_OF[key[0]]
    if limit is None and byte_cap is None:
        out.append({"type": tag, "seq0": seq0, "time0": time0, "data": _row_data(key, dt, payload)})
        return
    start, time = 0, time0
    costs: tuple[int, list[int], list[int]] | None = None
    while n - start >= MIN_RUN:
        end = n if limit is None else min(n, start + limit)
        data = None
        if byte_cap is not None:
            if costs is None:
                # Optimistic: one dump of the whole candidate. Once it fails, per-member
                # sizes are measured once and every later cut of this run uses them.
                data = _row_data(key, dt[start : end - 1], payload[start:end])
                if len(orjson.dumps(data)) > byte_cap:
                    data = None
                    costs = _member_costs(key, dt, payload)
            if costs is not None:
                end = _fit(costs, start, end, byte_cap)
                if end - start < MIN_RUN:
                    out.append(run.verbatim(start))
                    if start < n - 1:
                        time += dt[start]
                    start += 1
                    continue
        if data is None:
            data = _row_data(key, dt[start : end - 1], payload[start:end])
        out.append({"type": tag, "seq0": seq0 + start, "time0": time, "data": data})
        time += sum(dt[start:end])
        start = end
    out.extend(map(run.verbatim, range(start, n)))


def _member_costs(
    key: _RunKey, dt: list[int], payload: list[str]
) -> tuple[int, list[int], list[int]]:
    """Return the serialized size of an empty row's data, and each payload and gap size."""
    base = len(orjson.dumps(_row_data(key, [], [])))
    return base, [len(orjson.dumps(text)) for text in payload], [len(str(gap)) for gap in dt]


def _fit(costs: tuple[int, list[int], list[int]], start: int, end: int, byte_cap: int) -> int:
    """Return the end of the longest cut from *start* (at most *end*) within *byte_cap*."""
    base, payload_cost, gap_cost = costs
    size = base + payload_cost[start]
    if size > byte_cap:
        return start
    stop = start + 1
    while stop < end:
        # One more member adds its payload, a comma, its gap and (past the first gap)
        # a comma in the dt list.
        size += payload_cost[stop] + 1 + gap_cost[stop - 1] + (1 if stop - start > 1 else 0)
        if size > byte_cap:
            break
        stop += 1
    return stop


def _bad(tag: str, reason: str, seq: int | None = None) -> StorageRowError:
    return StorageRowError(f"malformed {tag} row: {reason}", seq=seq)


def _expand_row(
    record: Any, tag: str, chunk_type: str, payload_key: str, *, as_events: bool = False
) -> list[Any]:
    """Validate a tagged row and return its members as envelope dicts (or events)."""
    seq0, data = _check_row(record, tag, payload_key)
    payload = data[payload_key]
    times = _member_times(tag, seq0, record["time0"], data["dt"], len(payload))
    turn, step = data["turn"], data["step"]
    seqs = range(seq0, seq0 + len(payload))
    chunks = _member_chunks(tag, chunk_type, data, payload)
    if not as_events:
        return [
            {
                "type": _CHUNK,
                "seq": seq,
                "time": time,
                "data": {"turn": turn, "step": step, "chunk": dict(chunk)},
            }
            for seq, time, chunk in zip(seqs, times, chunks, strict=True)
        ]
    # The read path's members, built frozen directly: the row was validated above, so
    # a second snapshot walk per member would only repeat it.
    members = [FrozenDict(turn=turn, step=step, chunk=chunk) for chunk in chunks]
    mark_all_shallow(members)
    return [
        make_event(_CHUNK, seq, time, member, None, None, False)
        for seq, time, member in zip(seqs, times, members, strict=True)
    ]


def _check_row(record: Any, tag: str, payload_key: str, *, members: bool = True) -> tuple[int, Any]:
    """Check a row's shape, except its gaps (and, unless *members*, its payload
    entries); return its ``seq0`` and ``data``."""
    if record.keys() != _ROW_KEYS:
        raise _bad(tag, f"keys must be exactly {sorted(_ROW_KEYS)}, got {sorted(map(str, record))}")
    seq0, time0, data = record["seq0"], record["time0"], record["data"]
    if type(seq0) is not int or not 0 <= seq0 <= _M:
        raise _bad(tag, f"seq0 must be a safe non-negative integer, got {brief(seq0)}")
    if type(time0) is not int or not -_M <= time0 <= _M:
        raise _bad(tag, f"time0 must be a safe integer, got {brief(time0)}", seq0)
    if type(data) is not dict and type(data) is not FrozenDict:
        raise _bad(tag, f"data must be an object, got {type(data).__name__}", seq0)
    if tag == TOOL_ROW:
        _check_tool_data(tag, data, seq0)
    elif data.keys() != _TEXT_DATA_KEYS:
        raise _bad(
            tag,
            f"data keys must be exactly {sorted(_TEXT_DATA_KEYS)}, "
            f"got {sorted(map(str, data.keys()))}",
            seq0,
        )
    for field in ("turn", "step", "index"):
        value = data[field]
        if type(value) is not int or not -_M <= value <= _M:
            raise _bad(tag, f"{field} must be a safe integer, got {brief(value)}", seq0)
    payload = data[payload_key]
    if (type(payload) is not list and type(payload) is not tuple) or not payload:
        raise _bad(tag, f"{payload_key} must be a non-empty list", seq0)
    for text in payload if members else ():
        if type(text) is not str:
            raise _bad(tag, f"{payload_key} entries must be strings, got {brief(text)}", seq0)
    if seq0 + len(payload) - 1 > _M:
        raise _bad(tag, f"member seq {seq0 + len(payload) - 1} leaves the safe-integer range", seq0)
    return seq0, data


def _check_tool_data(tag: str, data: Any, seq0: int) -> None:
    if data.keys() not in (_TOOL_DATA_KEYS, _NAMED_TOOL_DATA_KEYS):
        raise _bad(
            tag,
            f"data keys must be {sorted(_TOOL_DATA_KEYS)} plus an optional 'name', "
            f"got {sorted(map(str, data.keys()))}",
            seq0,
        )
    if type(data["id"]) is not str:
        raise _bad(tag, f"id must be a string, got {brief(data['id'])}", seq0)
    if "name" in data and type(data["name"]) is not str:
        raise _bad(tag, f"name must be a string, got {brief(data['name'])}", seq0)


def _member_times(tag: str, seq0: int, time0: int, dt: Any, n: int) -> list[int]:
    """Check a row's gaps and return its members' times."""
    if (type(dt) is not list and type(dt) is not tuple) or len(dt) != n - 1:
        got = f"{len(dt)} entries" if type(dt) is list or type(dt) is tuple else brief(dt)
        raise _bad(tag, f"dt must list {n - 1} gaps for {n} members, got {got}", seq0)
    times = [time0]
    time = time0
    for gap in dt:
        if type(gap) is not int or not -_M <= gap <= _M:
            raise _bad(tag, f"dt entries must be safe integers, got {brief(gap)}", seq0)
        time += gap
        if not -_M <= time <= _M:
            raise _bad(tag, f"member time {time} leaves the safe-integer range", seq0)
        times.append(time)
    return times


def _member_chunks(tag: str, chunk_type: str, data: Any, payload: Any) -> list[FrozenDict]:
    """Return the frozen ``chunk`` object of each member of a validated row."""
    index = data["index"]
    if tag != TOOL_ROW:
        return [delta_chunk(chunk_type, index, None, None, text) for text in payload]
    call_id, name = data["id"], data.get("name")
    return [delta_chunk(chunk_type, index, call_id, name, text) for text in payload]
