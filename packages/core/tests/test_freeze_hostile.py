"""The compiled helpers (``sessionledger._freeze``) against Python code run inside them.

Python code runs inside a compiled helper at more places than it shows: a dict lookup runs
the ``__hash__`` and ``__eq__`` of a key that is not an exact ``str``, a helper calls the
``loads`` or the ``types`` it is handed, and on CPython 3.11 an allocation of any object the
cyclic collector tracks may start a collection, whose gc callbacks and ``__del__`` methods
may change the containers the helper was handed. Here that code replaces every value of
every container of the input by an equal fresh copy, so that the value the helper read is
freed unless the helper holds it, then allocates look-alike decoys that take the freed
memory over. A helper must still give what its pure-Python form gives for the same input
under the same attack. Under ``nox -s sanitize`` (AddressSanitizer) a read of freed memory
stops the run; in an ordinary build the decoys make it a wrong result, or a crash.

The helpers not attacked here read no container of their caller's while Python code can
run: ``parse_row``, ``parse_envelope``, ``line_starts`` and ``ascending`` read bytes or a
tuple of ints, ``make_event`` and ``untrack`` only their own arguments.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from sessionledger import FrozenDict
from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger.model._deltas import pure_freeze_delta
from sessionledger.model._eventlog import ChunkRun, EventLog
from sessionledger.model._events import (
    APPEND,
    SessionEvent,
    SessionHeader,
    make_event,
    pure_from_json,
)
from sessionledger.model._vocabulary import RESERVED_TYPES
from sessionledger.storage._chunks import pack_chunk_runs, pure_pack_run
from sessionledger.storage._committed import scan_log
from sessionledger.storage._lines import LineRecords
from sessionledger.storage._logstore import RawLog, RawRecord

snapshot = importlib.import_module("sessionledger.model._snapshot")
committed = importlib.import_module("sessionledger.storage._committed")
eventlog = importlib.import_module("sessionledger.model._eventlog")
events_module = importlib.import_module("sessionledger.model._events")
chunks = importlib.import_module("sessionledger.storage._chunks")


def compiled_helpers() -> Any:
    """The compiled module, set up as the library sets it up (also where the pure path
    was chosen: it is compared all the same), or None where it was not built."""
    try:
        freeze = importlib.import_module("sessionledger._freeze")
    except ImportError:
        return None
    deltas = importlib.import_module("sessionledger.model._deltas")
    freeze.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    freeze.setup_runs(ChunkRun)
    freeze.setup_deltas(deltas._KINDS, deltas._TOOL_KIND)
    return freeze


COMPILED: Any = compiled_helpers()
pytestmark = pytest.mark.skipif(COMPILED is None, reason="the compiled helpers are not built")


# -- the attack: equal fresh copies in place of every value, then decoys -------------------


def fresh(value: Any) -> Any:
    """An equal copy of *value* that nothing else holds (down to its strings and ints)."""
    kind = type(value)
    if kind is str:
        return value[:1] + value[1:] if len(value) > 1 else value
    if isinstance(value, str):
        return kind(fresh(str(value)))
    if kind is int:
        return int(str(value))
    if kind is dict or kind is FrozenDict:
        return kind({key: fresh(item) for key, item in value.items()})
    if kind is list or kind is tuple:
        return kind(fresh(item) for item in value)
    if kind is SessionEvent:
        return make_event(fresh(value.type), fresh(value.seq), fresh(value.time),
                          fresh(value.data), value.surface_op, value.source_event_seqs,
                          value.ignorable)  # fmt: skip
    if kind is ChunkRun:
        fields = (value.kind, value.turn, value.step, value.index, value.call_id, value.name)
        texts = [fresh(value.text(offset)) for offset in range(len(value))]
        return ChunkRun((*fields, ""), value.seq0, array("q", value.times), texts)
    if kind is RawRecord and value.text is not None:
        return RawRecord.of_text(bytes(value.text), value.position, value.label, value.line)
    return value


def decoy(value: Any) -> Any:
    """A value shaped like *value* (the same sizes, so it may take a freed copy's memory)
    that is not equal to it."""
    kind = type(value)
    if kind is str:
        return "".join(chr(ord(char) ^ 1) for char in value)
    if kind is int:
        return int(str(value ^ 1))
    if kind is dict or kind is FrozenDict:
        return kind({key: decoy(item) for key, item in value.items()})
    if kind is list or kind is tuple:
        return kind(decoy(item) for item in value)
    if kind is SessionEvent:
        return make_event(decoy(value.type), value.seq ^ 1, value.time, decoy(value.data),
                          None, None, False)  # fmt: skip
    if kind is ChunkRun:
        fields = (value.kind, value.turn ^ 1, value.step, value.index, value.call_id, None, "")
        texts = [decoy(value.text(offset)) for offset in range(len(value))]
        return ChunkRun(fields, value.seq0 ^ 1, array("q", value.times), texts)
    return None


class Attack:
    """What the hostile code does each time it runs (``strike``): every value of every
    watched container becomes an equal fresh copy, and decoys are allocated; then the
    free lists are emptied (``absorb``).

    *Deep*, it watches every list and dict of the input and keeps them, so that a
    container a helper holds has its values freed under it; else only the input's own,
    so that the containers inside them are freed whole."""

    def __init__(self, deep: bool) -> None:
        self.deep = deep
        self.containers: list[Any] = []
        self.decoys: list[Any] = []
        self.absorbed: list[Any] = []
        self.armed = False
        self.strikes = 0
        self.busy = False

    def absorb(self, tuples: int = 20) -> None:
        """Take what CPython's free lists of lists, dicts and small tuples hold (up to
        *tuples* of each size), and allocate beyond: with the collector's first threshold
        at 1, the next allocation of a tracked object, whichever, starts a collection."""
        # (appended as a tuple: a list freed now would refill the free list of lists)
        self.absorbed.append(([[] for _ in range(80)], [{} for _ in range(80)],
                              [tuple(range(size)) for size in range(1, 11) for _ in range(tuples)],
                              lambda: None, lambda: None))  # fmt: skip

    def watch(self, value: Any) -> Any:
        """Watch the lists and dicts among a helper's arguments *value* (a tuple), or the
        list or dict *value*, and, deep, every list and dict inside them; return *value*."""
        for item in value if type(value) is tuple else (value,):
            self.watch_one(item, nested=False)
        return value

    def watch_one(self, value: Any, nested: bool) -> None:
        if nested and not self.deep:
            return
        if isinstance(value, dict) or type(value) is list:
            self.containers.append(value)
        items = value.values() if isinstance(value, dict) else value
        for item in items if isinstance(value, dict | list | tuple) else ():
            self.watch_one(item, nested=True)

    def strike(self) -> None:
        if not self.armed or self.busy:
            return
        self.busy = True
        try:
            for container in self.containers:
                if type(container) is list:
                    # Emptied and filled again: its array of items is freed too.
                    copies = [fresh(item) for item in container]
                    container.clear()
                    container += copies
                    self.decoys += [decoy(copy) for copy in copies for _ in range(2)]
                    continue
                for key in list(container):
                    copy = fresh(container[key])
                    if type(container) is FrozenDict:
                        dict.__setitem__(container, key, copy)
                    else:
                        container[key] = copy  # the value held before is freed here
                    self.decoys += [decoy(copy), decoy(copy)]
            self.strikes += 1
            self.absorb()
        finally:
            self.busy = False


ATTACKS: list[Attack] = []  # the attack under way, for the hostile keys and values


def strike() -> None:
    if ATTACKS:
        ATTACKS[-1].strike()


class Sly:
    """A key that stands for *name* (same hash, equal to it) and strikes when compared."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        strike()
        return other == self.name

    def __repr__(self) -> str:
        return f"Sly({self.name!r})"


class Kind(str):
    """A delta's type that strikes when hashed or compared (its kind is looked up)."""

    __slots__ = ()

    def __hash__(self) -> int:
        strike()
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        strike()
        return str.__eq__(self, other)


class Types(frozenset[str]):
    """A container of event types whose membership test strikes."""

    def __contains__(self, item: object) -> bool:
        strike()
        return frozenset.__contains__(self, item)


class Dropper:
    """A cycle whose finaliser strikes, then leaves another such cycle for the next
    collection, while *attack* lasts."""

    def __init__(self, attack: Attack) -> None:
        self.attack = attack
        self.cycle = self

    def __del__(self) -> None:
        if self.attack.armed:
            self.attack.strike()
        if self.attack.containers:
            Dropper(self.attack)


#: A collection starts inside an allocation up to CPython 3.11; from 3.12 on, only where
#: the interpreter next runs bytecode, so never inside a helper that calls no Python code.
COLLECTS_IN_ALLOCATIONS = sys.version_info < (3, 12)
VECTORS = ["key", "gc callback", "finalizer"]


def attacked(attack: Attack, vector: str, call: Callable[[], Any]) -> Any:
    """Return what *call* returns (or the exception it raises) with *attack* striking
    where *vector* says: from the hostile keys, values and callables the input holds
    (``key``), or at every collection (a gc callback, or a finaliser). For those, every
    allocation of a tracked object in *call* starts one: the collector's first threshold
    is 1, and each strike empties the free lists and leaves the count past it."""

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            attack.strike()

    thresholds = gc.get_threshold()
    if vector == "gc callback":
        gc.callbacks.append(callback)
    elif vector == "finalizer":
        Dropper(attack)
    ATTACKS.append(attack)
    try:
        gc.collect(0)  # garbage freed now refills no free list later
        if vector != "key":
            attack.absorb(tuples=2000)  # a free list of tuples holds up to 2,000 a size
            gc.set_threshold(1, 1 << 30, 1 << 30)  # the young only: a full one costs
        attack.armed = True  # nothing is allocated from here to the helper's first one
        try:
            return call()
        except Exception as error:  # the same error from both forms is a same outcome
            return error
    finally:
        attack.armed = False
        gc.set_threshold(*thresholds)
        ATTACKS.pop()
        if vector == "gc callback":
            gc.callbacks.remove(callback)
        attack.containers.clear()  # the last Dropper leaves none behind
        attack.absorbed.clear()
        gc.collect(0)


# -- the pure forms, for a whole path ------------------------------------------------------


@contextlib.contextmanager
def pure_forms() -> Iterator[None]:
    """Every compiled helper the read and write paths take replaced by its pure form."""
    swaps = [
        (committed, "_decode_common", None),
        (committed, "_decode_lines", None),
        (committed, "_decode_batches", None),
        (eventlog, "_extend_slots", None),
        (eventlog, "_loose_needing", None),
        (eventlog, "_loose_outside", None),
        (events_module, "_compiled_from_json", None),
        (chunks, "ACCELERATOR", None),
        (chunks, "pack_run", pure_pack_run),
        (snapshot, "_freeze_mapping", snapshot.pure_freeze_mapping),
        (snapshot, "_freeze_sequence", snapshot.pure_freeze_sequence),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    for module, name, value in swaps:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


# -- what is compared ------------------------------------------------------------------------


def shape(value: Any) -> Any:
    """Everything a reader sees of a result: values, their exact types, key order."""
    kind = type(value)
    if kind is dict or kind is FrozenDict:
        return kind.__name__, [(key, shape(item)) for key, item in value.items()]
    if kind is list or kind is tuple:
        return kind.__name__, [shape(item) for item in value]
    if kind is array:
        return "array", value.typecode, value.tolist()
    if kind is SessionEvent:
        return "event", orjson.dumps(value.to_json()), shape(value.data), value.ignorable
    if isinstance(value, Exception):
        return type(value).__name__
    return kind.__name__, value


def log_shape(slots: list[Any]) -> list[Any]:
    """The events of a log's *slots*, each as ``shape`` sees it (one per slot: a walk of
    slots a broken helper left could loop)."""
    return [
        shape(slot if type(slot) is SessionEvent else slot.member(seq))
        for seq, slot in enumerate(slots)
    ]


def as_made(made: Any, args: tuple[Any, ...]) -> Any:
    return made


@dataclass(frozen=True)
class Case:
    """A compiled helper and its pure form, on fresh input made by *build* (which the
    attack watches); *vectors* are the attacks its input lets in. *view* makes what the
    compiled helper returned, and its arguments after the call, comparable with what the
    pure form returns."""

    name: str
    build: Callable[[], tuple[Any, ...]]
    compiled: Callable[..., Any]
    pure: Callable[..., Any]
    vectors: tuple[str, ...]
    view: Callable[[Any, tuple[Any, ...]], Any] = as_made


GC_ONLY = ("gc callback", "finalizer") if COLLECTS_IN_ALLOCATIONS else ()
EVERY = ("key", *GC_ONLY)


def big(number: int) -> int:
    return int(str(number))  # not a cached small int: only its container holds it


def json_object() -> dict[str, Any]:
    return {"alpha": fresh("text one"), "beta": [fresh("two é"), {"gamma": big(1000),
            "delta": fresh("三 three")}], "epsilon": (fresh("four"), big(5000)),
            "zeta": FrozenDict(eta=fresh("six 😀"))}  # fmt: skip


def envelope(sly: str | None = None) -> dict[Any, Any]:
    """An envelope of every field, *sly* (a key) standing in for its own name."""
    fields = {"type": fresh("x/note"), "seq": big(1000), "time": big(-2000),
              "data": json_object(), "surfaceOp": fresh("append"),
              "sourceEventSeqs": [big(300), big(400)], "ignorable": True}  # fmt: skip
    return {Sly(key) if key == sly else key: value for key, value in fields.items()}


def delta(tool: bool, sly: str | None = None, kind: bool = False) -> dict[Any, Any]:
    """A delta's data; *sly* (a key of the data or of its chunk) stands in for its own
    name, and with *kind* the chunk's type is a ``Kind``."""
    stated = "tool-call-delta" if tool else "text-delta"
    chunk: dict[Any, Any] = {"type": Kind(stated) if kind else fresh(stated), "index": big(300)}
    if tool:
        chunk |= {"id": fresh("call-1"), "name": fresh("edit"), "argumentsDelta": fresh("{}")}
    else:
        chunk["text"] = fresh("some text")
    data = {"turn": big(1000), "step": big(2000), "chunk": chunk}
    for mapping in (data, chunk):
        if sly in mapping:
            mapping[Sly(sly)] = mapping.pop(sly)
    return data


def delta_cases() -> list[Case]:
    cases = []
    for tool in (False, True):
        keys = ["turn", "step", "chunk", "type", "index"]
        keys += ["id", "name", "argumentsDelta"] if tool else ["text"]
        variants = [(None, False, GC_ONLY), (None, True, ("key",))]
        variants += [(key, False, ("key",)) for key in keys]
        for sly, kind, vectors in variants:
            cases.append(Case(
                f"freeze_delta-{'tool' if tool else 'text'}-{sly or ('kind' if kind else 'plain')}",
                lambda tool=tool, sly=sly, kind=kind: (delta(tool, sly, kind),),
                COMPILED.freeze_delta, pure_freeze_delta, vectors,
            ))  # fmt: skip
    return cases


def envelope_cases() -> list[Case]:
    keys = ("type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable")
    return [
        *(Case(f"event_from_json-{key}", lambda key=key: (envelope(key),),
               COMPILED.event_from_json, pure_from_json, ("key",)) for key in keys),
        Case("event_from_json", lambda: (envelope(),), COMPILED.event_from_json, pure_from_json,
             GC_ONLY),
    ]  # fmt: skip


def events_of(items: list[Any]) -> list[Any]:
    """The events of decoded *items* (events and runs), each as ``shape`` sees it."""
    found = []
    for item in items:
        members = item.members(item.seq0, item.end) if type(item) is ChunkRun else [item]
        found += [shape(event) for event in members]
    return found


def note(seq: int, **more: Any) -> dict[str, Any]:
    return {"type": "x/note", "seq": seq, "time": 1000 + seq, "data": {"n": [seq, "é"]}, **more}


def stored_log() -> list[bytes]:
    """A small log's records as the writer stores them (a row of three deltas among
    notes), and two envelopes not in the writer's form (a space: ``loads`` parses them)."""
    chunk = [{"type": "assistant/chunk", "seq": seq, "time": 1000 + seq,
              "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0,
                                                        "text": f"part {seq}"}}}
             for seq in (1, 2, 3)]  # fmt: skip
    texts = [jsoncodec.dumps(record) for record in pack_chunk_runs([note(0), *chunk], 5, None)]
    texts.append(b"{ " + jsoncodec.dumps(note(4, ignorable=True))[1:])
    texts.append(jsoncodec.dumps(note(5, sourceEventSeqs=[0, 4])))
    texts.append(b"{ " + jsoncodec.dumps(note(6, surfaceOp="append"))[1:])
    return texts


def hostile_loads(text: Any) -> Any:
    """orjson.loads that strikes, and hands back an envelope whose "ignorable" key is a
    ``Sly``, watched by the attack under way."""
    strike()
    value = orjson.loads(text)
    if "ignorable" in value:
        value[Sly("ignorable")] = value.pop("ignorable")
    return ATTACKS[-1].watch(value) if ATTACKS else value


LOG_HEADER = SessionHeader(id="s", created_at=0).to_json()


def as_lines(texts: list[bytes]) -> LineRecords:
    data = b"".join(text + b"\n" for text in texts)
    lines, position = LineRecords(data), 0
    for number in range(len(texts)):
        position = lines.take_lines(position, data.index(b"\n", position) + 1, number + 2)
    return lines


def records_args() -> tuple[Any, ...]:
    records = [RawRecord.of_text(text, 0, "line x") for text in stored_log()]
    return records, 0, len(records), 0, [], hostile_loads


def lines_args() -> tuple[Any, ...]:
    lines = as_lines(stored_log())
    return lines.data, lines.line_starts, 0, len(lines), 0, [], hostile_loads


def batches_args() -> tuple[Any, ...]:
    lines = as_lines(stored_log())
    bounds = array("q", [0, len(lines), 0, 7])
    return lines.data, lines.line_starts, bounds, 0, [], hostile_loads


def decoded(stopped: Any, args: tuple[Any, ...]) -> Any:
    """Where a compiled decode stopped, and the events it took (into ``taken``)."""
    return stopped, events_of(args[-2])


def pure_decode(stopped: Callable[[tuple[Any, ...]], Any]) -> Callable[..., Any]:
    """The rules' decode of the same records: what the compiled loop must take, and
    where it must stop (*stopped* of the arguments)."""

    def decode(*args: Any) -> Any:
        records = list(as_lines(stored_log()))
        with pure_forms():
            scanned = scan_log("s", RawLog(LOG_HEADER, records, "r"), contiguous_from=0)
        return stopped(args), [shape(event) for event in scanned.events]

    return decode


def segments() -> tuple[Any, ...]:
    first = make_event(fresh("x/note"), 0, big(1000), FrozenDict(a=fresh("b c")), None, None,
                       False)  # fmt: skip
    run = ChunkRun(("text-delta", 1, 1, 0, None, None, ""), 1, array("q", [7, 8, 9]),
                   [fresh("one"), fresh("two"), fresh("three")])  # fmt: skip
    last = make_event(fresh("x/note"), 4, big(1004), FrozenDict(), None, (0,), False)
    return [], [first, run, last], 0


def extended(index: Any, args: tuple[Any, ...]) -> Any:
    """Where extend_slots stopped, and the log it made (its slots, ``args[0]``)."""
    return index, log_shape(args[0])


def pure_extend(slots: list[Any], items: list[Any], start: int) -> Any:
    log = EventLog()
    with pure_forms():
        log.extend_segments(items)
    return len(items), [shape(event) for event in log]


def walked_log() -> tuple[Any, ...]:
    """A log's slots (loose events around a run), and a ``Types`` that holds one type."""
    _, items, _ = segments()
    items.append(make_event(fresh("x/other"), 5, big(1005), FrozenDict(), None, None, False))
    items.append(make_event(fresh("x/note"), 6, big(1006), FrozenDict(), None, None, True))
    log = EventLog()
    log.extend_segments(items)
    return log._slots, 0, Types({"x/note"})


def pure_walk(method: str) -> Callable[..., Any]:
    def walk(slots: list[Any], start: int, types: Any) -> Any:
        log = EventLog()
        log._slots = slots
        with pure_forms():
            return getattr(log, method)(types, start)

    return walk


CASES = [] if COMPILED is None else [
    Case("freeze_mapping", lambda: (json_object(),), COMPILED.freeze_mapping,
         snapshot.pure_freeze_mapping, GC_ONLY),
    Case("freeze_sequence", lambda: (list(json_object().values()),), COMPILED.freeze_sequence,
         snapshot.pure_freeze_sequence, GC_ONLY),
    Case("pack_run", lambda: ([fresh("first text"), fresh("é second"), fresh("third 😀")],
                              [big(1000), big(2000)], big(300)),
         COMPILED.pack_run, pure_pack_run, GC_ONLY),
    *envelope_cases(),
    *delta_cases(),
    Case("decode_records", records_args, COMPILED.decode_records,
         pure_decode(lambda args: (len(args[0]), 7)), EVERY, decoded),
    Case("decode_lines", lines_args, COMPILED.decode_lines,
         pure_decode(lambda args: (args[3], 7)), EVERY, decoded),
    Case("decode_batches", batches_args, COMPILED.decode_batches,
         pure_decode(lambda args: (1, 7)), EVERY, decoded),
    Case("extend_slots", segments, COMPILED.extend_slots, pure_extend, GC_ONLY, extended),
    Case("loose_needing", walked_log, COMPILED.loose_needing, pure_walk("loose_needing"),
         EVERY),
    Case("loose_outside", walked_log, COMPILED.loose_outside,
         pure_walk("first_loose_outside"), EVERY),
]  # fmt: skip


def outcome(case: Case, vector: str, deep: bool) -> tuple[Any, int]:
    """What the compiled helper makes of *case*'s input under the attack, and how often
    the attack struck while it ran."""
    attack = Attack(deep)
    args = attack.watch(case.build())
    made = attacked(attack, vector, lambda: case.compiled(*args))
    if not isinstance(made, Exception):
        made = case.view(made, args)
    return shape(made), attack.strikes


def pure_outcome(case: Case) -> Any:
    """What the pure form makes of *case*'s input (the attack changes its meaning in
    nothing, so the pure form runs undisturbed)."""
    try:
        return shape(case.pure(*case.build()))
    except Exception as error:
        return shape(error)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_helper_gives_what_its_pure_form_gives_whatever_python_code_runs_inside(
    case: Case,
) -> None:
    expected = pure_outcome(case)
    for vector in case.vectors:
        for deep in (True, False):
            made, strikes = outcome(case, vector, deep)
            assert made == expected, (vector, deep)
            # The attack struck inside the compiled helper (else the case proves nothing).
            assert strikes > 0, f"no Python code ran inside {case.name} ({vector})"
