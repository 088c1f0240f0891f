"""``EventLog``: a session's events in memory, with runs of streamed deltas kept packed.

Most events of an agent session are ``assistant/chunk`` deltas the model never sees
again. Held as objects, each costs several hundred bytes and three objects the cyclic
collector must visit on every full collection, so memory and append cost would grow with
the log. A run of deltas of one stream block is kept instead as one ``ChunkRun``: the
fields its members share once, their times in an ``array`` and their texts in one string. A
member is rebuilt, equal to the event that was appended, whenever it is read; every other
event is kept as it is (docs/reading.md, "memory").
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from itertools import accumulate
from typing import Any, Final, final, overload

from sessionledger._accelerator import ACCELERATOR, choose
from sessionledger.model._deltas import CHUNK_TYPE, DeltaFields, delta_chunk, delta_fields
from sessionledger.model._events import SessionEvent, make_event
from sessionledger.model._snapshot import FrozenDict, mark_shallow, untrack_acyclic


@final
class ChunkRun:
    """Consecutive deltas of one stream block: member ``k`` has seq ``seq0 + k``, time
    ``times[k]`` and the ``k``-th text. Only the log that built a run extends it, and only
    while the run ends its log (``end`` is the seq after its last member); a run shared
    with another log, or made from a stored row, is never extended.

    While a run is open its texts are a list; once closed (``seal``) they are one string
    and the offsets where each ends, so a token-sized delta costs its characters and four
    bytes instead of a string object of fifty."""

    __slots__ = (
        "_ends",
        "_gaps",
        "_joined",
        "_time0",
        "_times",
        "_width",
        "call_id",
        "end",
        "index",
        "kind",
        "name",
        "seq0",
        "step",
        "texts",
        "turn",
    )

    def __init__(
        self,
        fields: DeltaFields,
        seq0: int,
        times: array[int] | None,
        texts: list[str] | tuple[str, ...],
        *,
        time0: int = 0,
        gaps: Sequence[int] | None = None,
    ) -> None:
        # A run read from storage keeps its row's gaps and adds them up only when a
        # member's time is first asked for: a cold load reads few members, if any.
        self.kind, self.turn, self.step, self.index, self.call_id, self.name, _ = fields
        self._width = 3 if self.call_id is None else 4 if self.name is None else 5
        self.seq0 = seq0
        self.end = seq0 + len(texts)
        self._times = times
        self._time0 = time0
        self._gaps = gaps
        self.texts: list[str] | tuple[str, ...] | None = texts
        self._joined = ""
        self._ends: array[int] | None = None
        # A run refers only to scalars, arrays and lists of scalars, and always will: no
        # cycle can pass through it, so the collector need not watch it.
        untrack_acyclic(self, times, texts, gaps)

    @classmethod
    def packed(
        cls,
        fields: DeltaFields,
        seq0: int,
        times: array[int],
        joined: str,
        ends: array[int],
    ) -> ChunkRun:
        """A closed run made straight from its packed form: the texts *joined*, where each
        ends in it (*ends*), and the members' *times* (a stored row decoded in C)."""
        run = cls(fields, seq0, times, ())
        run.end = seq0 + len(ends)
        run.texts = None
        run._joined, run._ends = joined, ends
        untrack_acyclic(ends)
        return run

    @classmethod
    def stored(
        cls,
        fields: DeltaFields,
        seq0: int,
        time0: int,
        gaps: list[int],
        packed: tuple[str, array[int]],
    ) -> ChunkRun:
        """A closed run made straight from a stored row: its first time and *gaps*, and
        its texts *packed* (``pack_texts``). The read path's common case: a few
        assignments, the member times added up only when first asked for."""
        run = cls.__new__(cls)
        run.kind, run.turn, run.step, run.index, run.call_id, run.name, _ = fields
        run._width = 3 if run.call_id is None else 4 if run.name is None else 5
        run.seq0 = seq0
        run._joined, ends = packed
        run._ends = ends
        run.end = seq0 + len(ends)
        run._times = None
        run._time0 = time0
        run._gaps = gaps
        run.texts = None
        untrack_acyclic(run, gaps, ends)  # acyclic, as __init__ says
        return run

    @property
    def times(self) -> array[int]:
        """The members' times (epoch ms), in member order."""
        times = self._times
        if times is None:
            times = self._times = array("q", accumulate(self._gaps or (), initial=self._time0))
            self._gaps = None
            untrack_acyclic(times)
        return times

    def __len__(self) -> int:
        return self.end - self.seq0

    def text(self, offset: int) -> str:
        """The text of the member at *offset* (0 for the first)."""
        texts = self.texts
        if texts is not None:
            return texts[offset]
        ends: array[int] = self._ends  # type: ignore[assignment]
        return self._joined[ends[offset - 1] if offset else 0 : ends[offset]]

    def texts_between(self, start: int, stop: int) -> list[str]:
        """The texts of the members from seq *start* up to (not including) *stop*."""
        first, last = start - self.seq0, stop - self.seq0
        texts = self.texts
        if texts is not None:
            return list(texts[first:last])
        joined, ends = self._joined, self._ends
        assert ends is not None  # a run holds its texts one way or the other
        begin = ends[first - 1] if first else 0
        pieces = []
        for end in ends[first:last]:
            pieces.append(joined[begin:end])
            begin = end
        return pieces

    def seal(self, packed: tuple[str, array[int]] | None = None) -> None:
        """Pack the texts of a closed run into one string (nothing changes for readers);
        *packed* is ``pack_texts`` of them when the caller already has it."""
        texts = self.texts
        if texts is None or len(texts) < 2:
            return
        self._joined, self._ends = packed or pack_texts(texts)
        self.texts = None
        untrack_acyclic(self._ends)

    def holds(self, fields: DeltaFields) -> bool:
        """Tell whether a delta with *fields* belongs to this run's block."""
        return (
            self.kind == fields[0]
            and self.turn == fields[1]
            and self.step == fields[2]
            and self.index == fields[3]
            and self.call_id == fields[4]
            and self.name == fields[5]
        )

    def next_text(self, data: Any) -> str | None:
        """Return the text of *data* when it is a delta of this run's block, else None.

        The append hot path: fields are compared by identity, which is exact (``True``
        is not ``1``) and holds for the small ints a stream repeats; a field that is
        merely equal is left to ``delta_fields`` and ``holds``."""
        try:
            chunk = data["chunk"]
            if not (
                type(data) is FrozenDict
                and len(data) == 3
                and data["turn"] is self.turn
                and data["step"] is self.step
                and type(chunk) is FrozenDict
                and len(chunk) == self._width
                and chunk["index"] is self.index
                and chunk["type"] == self.kind
            ):
                return None
            if self.call_id is None:
                text = chunk["text"]
            elif chunk["id"] == self.call_id and (self.name is None or chunk["name"] == self.name):
                text = chunk["argumentsDelta"]
            else:
                return None
        except (KeyError, TypeError):
            return None
        return text if type(text) is str else None

    def member(self, seq: int) -> SessionEvent:
        """Rebuild the member with *seq* (frozen, canonical key order)."""
        offset = seq - self.seq0
        text = self.text(offset)
        time = self.times[offset]
        chunk = delta_chunk(self.kind, self.index, self.call_id, self.name, text)
        data = mark_shallow(FrozenDict(turn=self.turn, step=self.step, chunk=chunk))
        event = make_event(CHUNK_TYPE, seq, time, data, None, None, False)
        # As acyclic as the run it comes from: a caller that keeps many members (the
        # whole ``events`` tuple) must not make every collection walk them.
        untrack_acyclic(event, data, chunk)
        return event

    def members(self, start: int, stop: int) -> Iterator[SessionEvent]:
        """Rebuild the members from seq *start* up to (not including) *stop*."""
        member = self.member
        for seq in range(start, stop):
            yield member(seq)


Slot = SessionEvent | ChunkRun


def pack_texts(texts: Sequence[str]) -> tuple[str, array[int]]:
    """Return *texts* joined into one string, and where each ends in it."""
    joined = "".join(texts)
    kind = "I" if len(joined) < 2**32 and array("I").itemsize >= 4 else "q"
    return joined, array(kind, accumulate(map(len, texts)))


@final
class EventLog(Sequence[SessionEvent]):
    """An append-only sequence of events, index = seq, with delta runs packed.

    Reading returns ``SessionEvent``s (a slice returns a tuple); an event read twice is
    equal both times, though a packed member is a new object each time it is read.
    """

    __slots__ = ("_open", "_slots")

    def __init__(self, events: Iterable[SessionEvent] = ()) -> None:
        # One slot per event: the event itself, or the run that holds it.
        self._slots: list[Slot] = []
        self._open: ChunkRun | None = None  # the run this log may extend
        # It only ever holds events and runs, which cannot be part of a cycle: the
        # collector need not walk a million slots on every full collection.
        untrack_acyclic(self._slots)
        for event in events:
            self.append(event)

    # -- writing ------------------------------------------------------------------------

    def append(self, event: SessionEvent) -> None:
        """Add *event* (its seq must be the log's length; the caller checked it)."""
        slots = self._slots
        if (
            event.type != CHUNK_TYPE
            or event.surface_op is not None
            or event.ignorable
            or event.source_event_seqs is not None
        ):
            if self._open is not None:
                self._close()
            slots.append(event)
            # An event refers only to scalars and frozen values, which cannot refer back
            # to it: it is never part of a cycle (SessionEvent is immutable).
            untrack_acyclic(event, event.source_event_seqs, event.surface_op)
            return
        run = self._open
        if run is not None and run.end == len(slots):
            text = run.next_text(event.data)
            if text is not None:
                run._times.append(event.time)  # type: ignore[union-attr]
                run.texts.append(text)  # type: ignore[union-attr]
                run.end += 1
                slots.append(run)
                return
        fields = delta_fields(event.data)
        if fields is None:
            self._close()
            slots.append(event)
            untrack_acyclic(event)  # a chunk event: no surface metadata
            return
        self.append_delta(event, fields)

    def append_delta(self, event: SessionEvent, fields: DeltaFields) -> None:
        """Add a delta *event* whose run fields the caller already has (``freeze_delta``)."""
        slots = self._slots
        run = self._open
        if run is not None and run.end == len(slots) and run.holds(fields):
            run._times.append(event.time)  # type: ignore[union-attr]
            run.texts.append(fields[6])  # type: ignore[union-attr]
            run.end += 1
        else:
            self._close()
            run = self._open = ChunkRun(fields, len(slots), array("q", (event.time,)), [fields[6]])
        slots.append(run)

    def _close(self) -> None:
        """Stop extending the open run; seal it if it still ends this log (a run a copy
        extended past it is the copy's to seal)."""
        run = self._open
        if run is not None:
            if run.end == len(self._slots):
                run.seal()
            self._open = None

    def extend(self, events: Iterable[SessionEvent]) -> None:
        """Append each of *events* in order."""
        for event in events:
            self.append(event)

    def add_run(self, run: ChunkRun) -> None:
        """Add a whole run that starts at the log's length (a stored row, or a run of
        another log); the log never extends it."""
        if run.seq0 != len(self._slots):
            raise ValueError(f"a run starting at seq {run.seq0} cannot follow {len(self._slots)}")
        self._close()
        self._slots.extend([run] * len(run))

    def extend_segments(self, segments: list[SessionEvent | ChunkRun]) -> None:
        """Add each of *segments* in order, as it is: an event in a slot of its own (a
        delta too, unlike ``append``: the few a writer leaves unpacked cost little memory
        kept so) and a run in one slot per member (starting at the log's length). A
        store's decoded records come in one call this way."""
        self._close()
        slots = self._slots
        index = 0 if _extend_slots is None else _extend_slots(slots, segments, 0)
        for position in range(index, len(segments)):
            item = segments[position]
            if type(item) is ChunkRun:
                if item.seq0 != len(slots):
                    raise ValueError(
                        f"a run starting at seq {item.seq0} cannot follow {len(slots)}"
                    )
                slots += [item] * (item.end - item.seq0)
            else:
                slots.append(item)
                # An event refers only to scalars and frozen values (see append).
                untrack_acyclic(item, item.source_event_seqs, item.surface_op)

    def fill_from(self, other: EventLog) -> None:
        """Make this empty log hold *other*'s events, in one step: its events and runs are
        shared (both immutable to readers; this log never extends a run of *other*)."""
        if self._slots:
            raise ValueError(f"only an empty log can be filled, this one holds {len(self._slots)}")
        self._slots.extend(other._slots)

    def copy(self) -> EventLog:
        """Return a log with the same events (runs are shared, never extended by both)."""
        log = EventLog()
        log._slots = self._slots.copy()
        untrack_acyclic(log._slots)
        return log

    def plus(self, events: Iterable[SessionEvent]) -> EventLog:
        """Return a copy of this log with *events* appended."""
        log = self.copy()
        log.extend(events)
        return log

    # -- reading ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slots)

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[SessionEvent, ...]: ...

    def __getitem__(self, index: int | slice) -> SessionEvent | tuple[SessionEvent, ...]:
        if type(index) is slice:
            start, stop, step = index.indices(len(self._slots))
            if step == 1:
                return tuple(self.iter_from(start, stop))
            return tuple(self[position] for position in range(start, stop, step))
        slot = self._slots[index]
        if type(slot) is SessionEvent:
            return slot
        if index < 0:
            index += len(self._slots)
        return slot.member(index)

    def __iter__(self) -> Iterator[SessionEvent]:
        return self.iter_from(0)

    def __reversed__(self) -> Iterator[SessionEvent]:
        slots = self._slots
        for seq in range(len(slots) - 1, -1, -1):
            slot = slots[seq]
            yield slot if type(slot) is SessionEvent else slot.member(seq)

    def walk(self, start: int, stop: int | None) -> Iterator[tuple[int, Slot, int]]:
        """Yield ``(seq, slot, until)`` from seq *start* up to *stop*: each event no run
        holds once (``until`` = seq + 1), each run once, from *seq* up to ``until``."""
        slots = self._slots
        end = len(slots) if stop is None else min(stop, len(slots))
        seq = max(start, 0)
        while seq < end:
            slot = slots[seq]
            until = seq + 1 if type(slot) is SessionEvent else min(end, slot.end)
            yield seq, slot, until
            seq = until

    def iter_from(self, start: int, stop: int | None = None) -> Iterator[SessionEvent]:
        """Yield the events from seq *start* up to *stop* (the end when None)."""
        for seq, slot, until in self.walk(start, stop):
            if type(slot) is SessionEvent:
                yield slot
            else:
                yield from slot.members(seq, until)

    def unpacked(self, start: int = 0) -> Iterator[SessionEvent]:
        """Yield the events from seq *start* on that no run holds: every event that is
        not a streamed delta, without rebuilding one delta."""
        for _, slot in self.loose(start):
            yield slot

    def loose(self, start: int = 0) -> Iterator[tuple[int, SessionEvent]]:
        """Yield each event no run holds from seq *start* on, with its place in the log
        (its seq, in a log built contiguously from 0). The walk of ``walk``, written
        out: a restore and a type check take every loose event of a large log."""
        slots = self._slots
        seq, end = max(start, 0), len(slots)
        while seq < end:
            slot = slots[seq]
            if type(slot) is SessionEvent:
                yield seq, slot
                seq += 1
            else:
                seq = slot.end  # past the run (at most the end of a longer log's)

    def loose_needing(
        self, types: Container[str], start: int = 0
    ) -> list[tuple[int, SessionEvent]]:
        """Each event no run holds from seq *start* on, with its place, that is of a type
        in *types*, carries a surface op or provenance, or whose seq is not its place: the
        ones a restore looks at (in one compiled walk where the accelerator runs)."""
        if _loose_needing is not None:
            return _loose_needing(self._slots, start, types)
        return [
            (seq, event)
            for seq, event in self.loose(start)
            if event.surface_op is not None
            or event.source_event_seqs is not None
            or event.seq != seq
            or event.type in types
        ]

    def first_loose_outside(
        self, types: Container[str], start: int = 0
    ) -> tuple[int, SessionEvent] | None:
        """The first event no run holds from seq *start* on whose type is not in *types*
        and that is not marked ignorable, with its place; None when there is none."""
        if _loose_outside is not None:
            return _loose_outside(self._slots, start, types)
        for seq, event in self.loose(start):
            if event.type not in types and not event.ignorable:
                return seq, event
        return None

    def segments(self) -> Iterator[Slot]:
        """Yield, in log order, each event no run holds and each run once (a run shared
        with a longer log is cut to this log's length)."""
        for seq, slot, until in self.walk(0, None):
            if type(slot) is ChunkRun and until < slot.end:
                run = slot
                slot = ChunkRun(
                    (run.kind, run.turn, run.step, run.index, run.call_id, run.name, ""),
                    seq,
                    run.times[: until - seq],
                    run.texts_between(seq, until),
                )
            yield slot

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EventLog | tuple | list):
            return NotImplemented
        if len(self) != len(other):
            return False
        return all(mine == theirs for mine, theirs in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<EventLog of {len(self._slots)} events>"


@final
class LogRuns:
    """A read-only window on how a log keeps its events: a writer packs the runs it
    already holds into rows (``pack_chunk_runs``) without classifying each delta again."""

    __slots__ = ("_log",)

    def __init__(self, log: EventLog) -> None:
        self._log = log

    def __len__(self) -> int:
        return len(self._log)

    def walk(self, start: int, stop: int | None) -> Iterator[tuple[int, Slot, int]]:
        """``EventLog.walk``: each event no run holds once, each run once."""
        return self._log.walk(start, stop)


# The compiled loops over a log's slots where the accelerator runs, else None (the methods
# above hold their pure forms; setup_runs makes it build runs as ChunkRun.packed does).
if ACCELERATOR is not None:
    ACCELERATOR.setup_runs(ChunkRun)
_extend_slots: Final[Callable[[list[Slot], list[Slot], int], int] | None] = choose(
    "extend_slots", None
)
_loose_needing: Final[Callable[..., list[tuple[int, SessionEvent]]] | None] = choose(
    "loose_needing", None
)
_loose_outside: Final[Callable[..., tuple[int, SessionEvent] | None] | None] = choose(
    "loose_outside", None
)
