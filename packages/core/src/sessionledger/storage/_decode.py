"""The read path's common case: stored records decoded by msgspec into events and runs.

A cold load spends most of its time turning the stored log's JSON text into events. A
record in the writer's form is decoded here in one msgspec call into its Struct
(``sessionledger.model._records``), then built into its event, or a row into one closed
``ChunkRun``, with no intermediate dict. Anything else (a record msgspec refuses, one
whose values the fast freeze declines, a seq that does not follow) stops the loop, and
the rules of ``sessionledger.storage._committed`` take that record: they parse it as they always
did and accept or refuse it, so what a load accepts does not depend on this module
(docs/durability.md, "torn tails and corruption"; the tests compare both on generated
logs and spoilt records).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec
from msgspec import UNSET

from sessionledger.model._eventlog import ChunkRun
from sessionledger.model._events import APPEND, SessionEvent, make_event
from sessionledger.model._records import Envelope, ReasoningRow, TextRow, ToolRow, ToolRowData
from sessionledger.model._snapshot import MAX_SAFE_INTEGER, freeze_mapping, mark_shallow
from sessionledger.model._vocabulary import RESERVED_TYPES
from sessionledger.storage._chunks import pack_run
from sessionledger.storage._logstore import RawRecord

Decoded = SessionEvent | ChunkRun

_ROWS: Final = msgspec.json.Decoder(TextRow | ReasoningRow | ToolRow)
_ENVELOPES: Final = msgspec.json.Decoder(Envelope)
#: How a row in the writer's form begins (its tag is its first key): such a line goes to
#: the row decoder, any other to the envelope decoder.
_ROW_STARTS: Final = tuple(
    f'{{"type":"{tag}",'.encode() for tag in ("text-chunks", "reasoning-chunks", "tool-call-chunks")
)
_ROW_START_SIZE: Final = max(map(len, _ROW_STARTS))
_REFUSED: Final = (msgspec.DecodeError, RecursionError)


def _run(row: TextRow | ToolRow) -> ChunkRun | None:
    """The closed run of a decoded row, or None when the rules must look at it (a check
    the Struct cannot state: the counts, the member seqs and times)."""
    data = row.data
    if type(data) is ToolRowData:
        texts = data.args
        call_id: str | None = data.id
        name = None if data.name is UNSET else data.name
    else:
        texts, call_id, name = data.texts, None, None  # type: ignore[union-attr]
    count, gaps, seq0 = len(texts), data.dt, row.seq0
    if not count or len(gaps) != count - 1 or seq0 + count - 1 > MAX_SAFE_INTEGER:
        return None
    packed = pack_run(texts, gaps, row.time0)
    if packed is None:
        return None
    fields = (row.MEMBER, data.turn, data.step, data.index, call_id, name, "")
    return ChunkRun.stored(fields, seq0, row.time0, gaps, packed)


def _event(envelope: Envelope) -> SessionEvent | None:
    """The event of a decoded envelope in its common form, or None for the rules (a
    reserved or empty type, a replace, an ``ignorable`` that is not true, data that is no
    object or that the fast freeze declines)."""
    kind = envelope.type
    if not kind or kind in RESERVED_TYPES:
        return None
    op = envelope.surface_op
    if op is not UNSET:
        if type(op) is not str or op != APPEND:
            return None
        op = APPEND
    else:
        op = None
    ignorable = envelope.ignorable
    if ignorable is False:
        return None
    sources = envelope.source_event_seqs
    data = freeze_mapping(envelope.data)
    if data is None:
        return None
    return make_event(
        kind,
        envelope.seq,
        envelope.time,
        mark_shallow(data),  # as snapshot marks a frozen value it built on its fast path
        op,
        None if sources is UNSET else tuple(sources),
        ignorable is True,
    )


def _follows(item: Decoded | None, expected: int) -> int:
    """The seq expected after *item* when it was decoded and begins at *expected* (the
    log stays contiguous), else -1: the rules take that record."""
    if item is None:
        return -1
    if type(item) is ChunkRun:
        return item.end if item.seq0 == expected else -1
    return expected + 1 if item.seq == expected else -1


def decode_text(text: bytes | memoryview, row: bool | None = None) -> Decoded | None:
    """The event or run of one record's JSON *text* in the writer's form, else None.
    *row* says whether the text begins as a row does (None: look)."""
    if row is None:
        row = bytes(text[:_ROW_START_SIZE]).startswith(_ROW_STARTS)
    try:
        if row:
            return _run(_ROWS.decode(text))
        return _event(_ENVELOPES.decode(text))
    except _REFUSED:
        return None


def decode_lines(
    data: bytes, starts: Sequence[int], index: int, stop: int, expected: int, taken: list[Any]
) -> tuple[int, int]:
    """Decode the lines ``index:stop`` of a ``LineRecords`` (each starting in *data* at
    ``starts[k]``, -1 for a record of its own) into *taken* while each is in the writer's
    form and its first seq is *expected*; return where it stopped and the seq expected
    there. The rules take the record it stopped at."""
    view, find, begins = memoryview(data), data.find, data.startswith
    append, rows, envelopes = taken.append, _ROWS.decode, _ENVELOPES.decode
    mark = len(taken)
    # decode_text and _follows, written out: most of a cold load is this loop. The seq
    # is compared before anything is built from a record: a record out of place costs
    # nothing more.
    for first in starts[index:stop]:
        if first < 0:
            break
        end = find(b"\n", first)
        if end < 0:
            break
        try:
            if begins(_ROW_STARTS, first):
                row = rows(view[first:end])
                if row.seq0 != expected:
                    break
                run = _run(row)
                if run is None:
                    break
                append(run)
                expected = run.end
            else:
                envelope = envelopes(view[first:end])
                if envelope.seq != expected:
                    break
                event = _event(envelope)
                if event is None:
                    break
                append(event)
                expected += 1
        except _REFUSED:
            break
    return index + len(taken) - mark, expected


def decode_records(
    records: Sequence[RawRecord], index: int, stop: int, expected: int, taken: list[Any]
) -> tuple[int, int]:
    """``decode_lines`` for records handed over as JSON text (``RawRecord.of_text``); it
    stops at a record handed over parsed, too."""
    append, follows = taken.append, _follows
    while index < stop:
        text = records[index].text
        item = None if text is None else decode_text(text)
        after = follows(item, expected)
        if after < 0:
            break
        append(item)
        expected = after
        index += 1
    return index, expected


def decode_batches(
    data: bytes,
    starts: Sequence[int],
    bounds: Sequence[tuple[int, int, int | None, int | None]],
    expected: int,
    taken: list[Any],
) -> tuple[int, int]:
    """``decode_lines`` over a framed log's intact batches, each given as (its first and
    end record, the first and end seq its commit record states). A batch is taken whole
    when its stated first seq is the one expected, all its records decode and it holds
    as many events as it states; the first that is not is left whole to the rules.
    Returns how many batches were taken and the seq expected after them."""
    done, count = 0, len(starts)
    for start, stop, first, end in bounds:
        if not 0 <= start <= stop <= count or (first is not None and first != expected):
            break
        mark = len(taken)
        reached, after = decode_lines(data, starts, start, stop, expected, taken)
        if reached != stop or (
            first is not None and end is not None and after - expected != end - first
        ):
            del taken[mark:]
            break
        expected = after
        done += 1
    return done, expected
