"""What of a stored log is committed: the read path's rules.

A store hands over a ``RawLog`` as it read it; ``scan_log`` decides what it means: the
header's format version and fields, the events of the committed region, and where a torn
tail starts (docs/durability.md, "torn tails and corruption"); ``salvage_point`` finds
the longest intact prefix of a damaged log. The rules are the same for every medium, so
they live here once.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final, overload

import orjson

from sessionledger._errors import (
    CorruptLogError,
    FormatUnsupportedError,
    HeaderError,
    LedgerError,
)
from sessionledger.model._deltas import CHUNK_TYPE
from sessionledger.model._eventlog import ChunkRun, EventLog
from sessionledger.model._events import SESSION_FORMAT_VERSION, SessionEvent, SessionHeader
from sessionledger.model._registry import EventTypeRegistry, unknown_type_in_log
from sessionledger.model._snapshot import ACCELERATOR
from sessionledger.storage._chunks import run_from_text, unpack_events, unpack_to_log
from sessionledger.storage._lines import LineRecords
from sessionledger.storage._logstore import UNPARSABLE, RawBatch, RawLog, RawRecord


@final
@dataclasses.dataclass(frozen=True, slots=True)
class TornTail:
    """What follows the committed region of a log, which a load cuts off and moves into
    quarantine: where it starts (the medium's label of its first batch, such as
    ``"batch 3 (from line 40)"``; None when the store itself found the cut point, with
    nothing but its own bookkeeping to rewrite), its batches and records, and the first
    and last seq that still decode among them. After a load has cut it, ``quarantine``
    names where it went and ``moved_bytes`` counts the medium's bytes moved there."""

    starts_at: str | None
    batches: int
    records: int
    seqs: tuple[int, int] | None
    quarantine: str | None = None
    moved_bytes: int = 0


@final
@dataclasses.dataclass(slots=True)
class ScannedLog:
    """A raw log after the committed-region rule: its header, the committed events (an
    ``EventLog`` when read from seq 0, else a list), and the position where a torn tail
    starts (None when there is none) and what it holds."""

    header: SessionHeader
    events: EventLog | list[SessionEvent]
    torn_at: Any
    revision: str
    location: str | None
    torn_batches: int = 0
    torn: TornTail | None = None

    @property
    def end_seq(self) -> int:
        """The seq after the last committed event (0 for an empty log)."""
        return self.events[-1].seq + 1 if self.events else 0


def check_version(header_json: Mapping[str, Any], location: str | None) -> None:
    """Refuse a stored header of another format version before anything else is read:
    a newer format may store everything else differently (docs/events.md, "the header")."""
    if not isinstance(header_json, Mapping):
        raise HeaderError("stored header is not a JSON object")
    version = header_json.get("version")
    session_id = header_json.get("id")
    label = session_id if type(session_id) is str else None
    if type(version) is not int:
        found = "none" if version is None else f"a {type(version).__name__}"
        raise HeaderError(f"stored header has no integer version ({found})", session_id=label)
    if version > SESSION_FORMAT_VERSION:
        raise FormatUnsupportedError(
            f"log format v{version} was written by a newer sessionledger (this build reads "
            f"v{SESSION_FORMAT_VERSION}); upgrade sessionledger to open it",
            code="FORMAT_NEWER",
            session_id=label,
            path=location,
        )
    if version < SESSION_FORMAT_VERSION:
        raise FormatUnsupportedError(
            f"log format v{version} is older than v{SESSION_FORMAT_VERSION} and this build "
            "has no upgrade path for it",
            code="FORMAT_OLDER",
            session_id=label,
            path=location,
        )


def stored_header(
    value: Mapping[str, Any], session_id: str | None, location: str | None
) -> SessionHeader:
    """Build the stored header; an invalid one is a damaged log (``CorruptLogError``)."""
    try:
        return SessionHeader.from_json(value)
    except HeaderError as error:
        raise CorruptLogError(
            f"stored header is invalid: {error}", session_id=session_id, path=location
        ) from error
    except RecursionError:  # see _decode
        raise CorruptLogError(
            "stored header is invalid: a field is nested too deeply",
            session_id=session_id,
            path=location,
        ) from None


def scan_log(
    session_id: str, raw: RawLog, *, contiguous_from: int | None, release: bool = False
) -> ScannedLog:
    """Apply the committed-region rule to a raw log (docs/durability.md, "torn tails and
    corruption").

    A batch is the unit of acknowledgement. On a medium that frames its batches, the
    committed region is every batch up to the last intact one: damage in or before it
    (a failed check, an undecodable record, a seq gap, a missing batch) is corruption
    (``CorruptLogError``, naming the batch); only the batches after it are a torn tail.
    On a medium that cannot tear every record is committed, and any damage is
    corruption. Seqs must continue from *contiguous_from*, or from the first record's
    when None (a read that started inside the log). With *release*, each committed record
    is dropped from ``raw.records`` once decoded, so a large log's parsed form and its
    events are not both held at the peak of a cold load (the caller reads *raw* no more).
    """
    check_version(raw.header, raw.location)
    header = stored_header(raw.header, session_id, raw.location)
    if header.id != session_id:
        raise CorruptLogError(
            f"stored header belongs to session {header.id!r}",
            session_id=session_id,
            path=raw.location,
        )
    found = None if raw.torn_at is None else TornTail(None, 0, 0, None)
    if raw.batches is None:
        decoder = _Decoder(session_id, raw, contiguous_from)
        events = decoder.records(raw.records, None)
        if release:
            decoder.release(0, len(raw.records))
        return ScannedLog(header, events, raw.torn_at, raw.revision, raw.location, torn=found)
    intact = [index for index, batch in enumerate(raw.batches) if batch.problem is None]
    committed = raw.batches[: intact[-1] + 1] if intact else ()
    decoder = _Decoder(session_id, raw, contiguous_from)
    for batch in committed[decoder.common_batches(committed) :]:
        decoder.batch(batch)
        if release:
            decoder.release(batch.start, batch.end)
    torn = raw.batches[len(committed) :]
    if not torn:
        return ScannedLog(
            header, decoder.events, raw.torn_at, raw.revision, raw.location, torn=found
        )
    _check_tail_continues(decoder, torn)
    records = [record for batch in torn for record in raw.records[batch.start : batch.end]]
    tail = TornTail(torn[0].label, len(torn), len(records), _seq_span(records))
    return ScannedLog(
        header, decoder.events, torn[0].position, raw.revision, raw.location, len(torn), tail
    )


def _check_tail_continues(decoder: _Decoder, torn: Sequence[RawBatch]) -> None:
    """Refuse a tail that a crash could not have left (``CorruptLogError``).

    A crash tears only the last write, and that write continues the committed seqs. A
    failed batch whose commit record starts later than that means acknowledged batches
    before it were damaged (a lost line break fuses a commit record with the next batch,
    say): corruption, not a tear to cut away.
    """
    expected = decoder.expected
    for batch in torn:
        first = batch.first_seq
        if first is None or expected is None:
            continue
        if first > expected:
            raise decoder.damaged(
                batch.label,
                f"{batch.problem}; its commit record starts at seq {first}, where the "
                f"intact batches before it end at seq {expected}: not a torn last write",
                batch.line,
            )
        expected = batch.end_seq


@final
@dataclasses.dataclass(slots=True)
class Salvage:
    """The longest intact prefix of a damaged log: where to cut it, what is kept, and
    what the cut moves aside (counted in the medium's records and batches)."""

    cut_at: Any
    kept_events: int
    moved_records: int
    moved_batches: int
    moved_seqs: tuple[int, int] | None  # first and last seq of what decodes among them


def salvage_point(session_id: str, raw: RawLog) -> Salvage | None:
    """Find where the longest intact prefix of *raw* ends (a salvage's cut), or None when the
    whole log reads as committed (a torn tail is a load's business, not a salvage's)."""
    check_version(raw.header, raw.location)
    stored_header(raw.header, session_id, raw.location)
    decoder = _Decoder(session_id, raw, 0)
    units: list[tuple[Any, Sequence[RawRecord], RawBatch | None]]
    if raw.batches is None:
        units = [(record.position, (record,), None) for record in raw.records]
    else:
        units = [
            (batch.position, raw.records[batch.start : batch.end], batch) for batch in raw.batches
        ]
    for index, (position, records, batch) in enumerate(units):
        try:
            if batch is None:
                decoder.records(records, None)
            else:
                decoder.batch(batch)
        except CorruptLogError:
            rest = units[index:]
            moved = [record for _, chunk, _ in rest for record in chunk]
            return Salvage(
                cut_at=position,
                kept_events=len(decoder.events),
                moved_records=len(moved),
                moved_batches=sum(1 for *_, unit in rest if unit is not None),
                moved_seqs=_seq_span(moved),
            )
    return None


class _Decoder:
    """Decode records in order into events, checking that their seqs continue."""

    __slots__ = ("events", "expected", "raw", "session_id")

    def __init__(self, session_id: str, raw: RawLog, contiguous_from: int | None) -> None:
        self.session_id = session_id
        self.raw = raw
        self.expected = contiguous_from
        # From seq 0 the events go into a compact log (index = seq); a read that starts
        # inside the log gets a plain list of its tail.
        self.events: EventLog | list[SessionEvent] = EventLog() if contiguous_from == 0 else []

    def release(self, start: int, end: int) -> None:
        """Drop the decoded records ``start:end`` from the raw log (a list: any other
        sequence is left alone)."""
        records = self.raw.records
        if type(records) is list:
            records[start:end] = [_RELEASED] * (end - start)

    def damaged(self, where: str, reason: str, line: int | None) -> CorruptLogError:
        return CorruptLogError(
            f"committed region is damaged at {where}: {reason}",
            session_id=self.session_id,
            path=self.raw.location,
            line=line,
            seq=self.expected,
        )

    def common_batches(self, batches: Sequence[RawBatch]) -> int:
        """Take the intact batches at the head of *batches* that decode in the common way
        (``_decode_batches``: lines of a ``LineRecords`` into a log from seq 0), in one
        compiled call; return how many it took. ``batch`` takes the rest, one by one."""
        records, log = self.raw.records, self.events
        if (
            _decode_batches is None
            or type(records) is not LineRecords
            or type(log) is not EventLog
            or self.expected is None
        ):
            return 0
        bounds = array("q")
        for batch in batches:
            first, end = batch.first_seq, batch.end_seq
            # -1 stands for a seq not stated; a negative one stated, or one past what 64
            # bits hold, is the rules' to name.
            if batch.problem is not None or not (
                0 <= (first or 0) <= _INT64_MAX and 0 <= (end or 0) <= _INT64_MAX
            ):
                break
            bounds.extend((batch.start, batch.end, -1 if first is None else first,
                           -1 if end is None else end))  # fmt: skip
        taken: list[SessionEvent | ChunkRun] = []
        count, self.expected = _decode_batches(
            records.data, records.line_starts, bounds, self.expected, taken, orjson.loads
        )
        log.extend_segments(taken)
        return int(count)

    def batch(self, batch: RawBatch) -> None:
        """Take an intact batch of a framed medium, or raise ``CorruptLogError``."""
        if batch.problem is not None:
            raise self.damaged(
                batch.label, f"{batch.problem} (an intact batch follows it)", batch.line
            )
        if (
            batch.first_seq is not None
            and self.expected is not None
            and batch.first_seq > self.expected
        ):
            raise self.damaged(
                batch.label,
                f"it starts at seq {batch.first_seq}, the batch before it ends at seq "
                f"{self.expected}: a batch is missing",
                batch.line,
            )
        added = len(self.events)
        self.records(self.raw.records, batch, batch.start, batch.end)
        count = len(self.events) - added
        if batch.first_seq is not None and batch.end_seq is not None:
            stated = batch.end_seq - batch.first_seq
            if count != stated:
                raise self.damaged(
                    batch.label,
                    f"its commit record states {stated} events, its records hold {count}",
                    batch.line,
                )

    def records(
        self,
        records: Sequence[RawRecord],
        batch: RawBatch | None,
        start: int = 0,
        stop: int | None = None,
    ) -> EventLog | list[SessionEvent]:
        """Take ``records[start:stop]``, or raise ``CorruptLogError`` at the first that is
        damaged."""
        events = self.events
        index, total = start, len(records) if stop is None else stop
        taken: list[SessionEvent | ChunkRun] = []
        common: Callable[..., tuple[int, int]] | None = None
        source: tuple[Any, ...] = ()
        log = events if type(events) is EventLog else None
        if log is not None and type(records) is LineRecords:
            common, source = _decode_lines, (records.data, records.line_starts)
        elif log is not None and type(records) is list:
            common, source = _decode_common, (records,)
        while index < total:
            if common is not None and log is not None and self.expected is not None:
                # The common records in one compiled call, added to the log in one more;
                # the record it stops at (or the first, which sets the seqs to expect)
                # takes the rules below.
                index, self.expected = common(
                    *source, index, total, self.expected, taken, orjson.loads
                )
                log.extend_segments(taken)
                taken.clear()
                if index == total:
                    break
            record = records[index]
            index += 1
            if record.text is None:
                common = None  # a store that hands records over parsed: the rules alone
            decoded = _decode(record, packed=True)
            if type(decoded) is ChunkRun:
                if self.expected is None:
                    self.expected = decoded.seq0
                if decoded.seq0 != self.expected:
                    raise self.damaged(
                        _where(record, batch),
                        f"seq gap (expected {self.expected}, got {decoded.seq0})",
                        record.line,
                    )
                count = len(decoded)
                if type(events) is EventLog:
                    events.add_run(decoded)
                else:
                    events.extend(decoded.members(decoded.seq0, decoded.seq0 + count))
                self.expected += count
                continue
            if isinstance(decoded, str):
                raise self.damaged(_where(record, batch), decoded, record.line)
            if not decoded:
                continue
            if self.expected is None:
                self.expected = decoded[0].seq
            if decoded[0].seq != self.expected or (
                len(decoded) > 1
                and any(event.seq != self.expected + k for k, event in enumerate(decoded))
            ):
                raise self.damaged(
                    _where(record, batch),
                    f"seq gap (expected {self.expected}, got {decoded[0].seq})",
                    record.line,
                )
            if len(decoded) == 1:
                events.append(decoded[0])
            else:
                events.extend(decoded)
            self.expected += len(decoded)
        return events


def _where(record: RawRecord, batch: RawBatch | None) -> str:
    """Where a damaged record is, for the error: its label, and its batch's."""
    return record.label if batch is None else f"{record.label} ({batch.label})"


#: The largest seq a compiled decode is handed (an 8-byte int): a commit record may state
#: any integer, and one past this is left to the rules, which say the log is damaged.
_INT64_MAX: Final = 2**63 - 1

#: What a released record becomes: its value is gone, its place is kept.
_RELEASED: Final = RawRecord(UNPARSABLE, None, "released")

#: The decode loop's common case in one compiled call, where the accelerator runs: from a
#: given record on, it takes the rows and envelopes in the writer's form whose seqs
#: continue, exactly as ``_decode`` and the loop would take them, and stops at the first
#: other record, for the rules to take (the tests compare both on generated logs). One
#: takes a list of records, the other the lines of ``LineRecords`` from their bytes.
_decode_common = ACCELERATOR.decode_records if ACCELERATOR is not None else None
_decode_lines = ACCELERATOR.decode_lines if ACCELERATOR is not None else None
_decode_batches = ACCELERATOR.decode_batches if ACCELERATOR is not None else None


def _seq_span(records: Sequence[RawRecord]) -> tuple[int, int] | None:
    """The first and last seq among the records that still decode."""
    seqs = [
        event.seq
        for record in records
        if not isinstance(decoded := _decode(record), str)
        for event in decoded  # unpacked: a list of events
    ]
    return (min(seqs), max(seqs)) if seqs else None


def check_event_types(
    registry: EventTypeRegistry,
    session_id: str,
    events: Sequence[SessionEvent],
    location: str | None,
) -> None:
    """Refuse a log holding a type *registry* does not know and the event does not mark
    ignorable: a session going live must not act on what it cannot interpret (docs/plugins.md,
    "event types, and what a ledger refuses")."""
    known = registry.declarations
    unknown: SessionEvent | None = None
    if type(events) is EventLog and CHUNK_TYPE in known:
        # Runs hold only chunks: with that type known, only the other events need a look.
        found = events.first_loose_outside(known)
        unknown = None if found is None else found[1]
    else:
        unknown = next((e for e in events if e.type not in known and not e.ignorable), None)
    if unknown is not None:
        raise FormatUnsupportedError(
            unknown_type_in_log(unknown.type),
            code="UNKNOWN_EVENT_TYPE",
            session_id=session_id,
            seq=unknown.seq,
            path=location,
        )


@overload
def _decode(record: RawRecord) -> list[SessionEvent] | str: ...


@overload
def _decode(record: RawRecord, *, packed: bool) -> list[SessionEvent] | ChunkRun | str: ...


def _decode(record: RawRecord, *, packed: bool = False) -> list[SessionEvent] | ChunkRun | str:
    """Decode one record into events (a row into one ``ChunkRun`` when *packed*), or
    return why it is not a valid record."""
    if packed and (text := record.text) is not None and (run := run_from_text(text)) is not None:
        return run  # a row in the writer's form, decoded from its text in one pass
    value = record.value
    if value is UNPARSABLE:
        return "not valid JSON"
    try:
        return unpack_to_log(value) if packed else unpack_events(value)
    except LedgerError as error:
        return f"{error}"
    except (TypeError, ValueError) as error:
        return f"malformed record: {error}"
    except RecursionError:
        # A value nested too deeply for an error message's repr (events.py formats
        # rejected fields with repr): damaged all the same, never a crash of the read.
        return "malformed record: a field is nested too deeply"
