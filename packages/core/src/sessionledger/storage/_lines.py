"""``LineRecords``: the records of a line-oriented log, kept as where their lines start.

A JSONL log of a million events has some 80,000 record lines. Made into a ``RawRecord``
apiece, they would cost a cold load an object, a view and a label each before the decode
looks at one of them. Kept instead as offsets into the bytes the store read (8 bytes a
line), they cost next to nothing, and the decode reads each line straight from those
bytes; a ``RawRecord`` is made only for a record asked for by index, as the rules ask
for a damaged one (docs/backends.md, "the primitives").
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, final, overload

from sessionledger.model._snapshot import ACCELERATOR
from sessionledger.storage._logstore import RawRecord

#: Where a record added whole (``LineRecords.add``) is, among the line starts.
_OWN: Final = -1


@final
class LineRecords(Sequence[RawRecord]):
    """The records of a line-oriented log: lines of *data* kept as text, and records of
    their own (a damaged line, a torn fragment) in between, in log order.

    Record ``k`` of a kept line is what ``RawRecord.of_text`` makes of it: its text a view
    of *data* (up to, not including, its newline), positioned at its byte offset and
    labelled ``"line N"``. The sequence only grows, and only through ``take_lines`` and
    ``add``; ``line_starts`` is where each kept line starts in *data* (-1 for a record
    added whole), for a decode that reads the lines from *data* itself.
    """

    __slots__ = ("_data", "_first_index", "_first_line", "_own", "_starts", "_view")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._view = memoryview(data)
        self._starts = array("q")
        # Each take_lines call numbers its lines on from one line number: where its
        # records begin among all, and that number (line_of looks them up).
        self._first_index = array("q")
        self._first_line = array("q")
        self._own: dict[int, RawRecord] = {}

    @property
    def data(self) -> bytes:
        """The bytes the lines are in."""
        return self._data

    @property
    def line_starts(self) -> array[int]:
        """Where each record's line starts in ``data``, -1 for a record added whole. Not
        to be changed: it is the sequence's own."""
        return self._starts

    def take_lines(self, start: int, stop: int, first_line: int, begins: bytes = b"") -> int:
        """Keep the lines of ``data[start:stop]``, each ended by a newline, up to the first
        that does not begin with *begins*, numbered from *first_line*; return where the
        lines taken end (*start* when none was). One compiled pass where the accelerator
        runs."""
        if not 0 <= start <= stop <= len(self._data) or (
            stop > start and self._data[stop - 1] != 10
        ):
            raise ValueError("start:stop must be within data and end with a newline")
        if first_line < 0:
            raise ValueError("the first line number must be >= 0")
        packed, end = _line_starts(self._data, start, stop, bytes(begins))
        if packed:
            self._first_index.append(len(self._starts))
            self._first_line.append(first_line)
            self._starts.frombytes(packed)
        return end

    def add(self, record: RawRecord) -> None:
        """Add a record of its own (one not kept as a line of text)."""
        self._own[len(self._starts)] = record
        self._starts.append(_OWN)

    def position(self, index: int) -> Any:
        """Record *index*'s position, without making the record."""
        start = self._starts[index]
        return self._own[self._at(index)].position if start == _OWN else start

    def line(self, index: int) -> int | None:
        """Record *index*'s line number, without making the record."""
        index = self._at(index)
        if self._starts[index] == _OWN:
            return self._own[index].line
        run = bisect_right(self._first_index, index) - 1
        return self._first_line[run] + index - self._first_index[run]

    def _at(self, index: int) -> int:
        """*index* as a non-negative index (``IndexError`` when out of range)."""
        size = len(self._starts)
        if not -size <= index < size:
            raise IndexError("record index out of range")
        return index + size if index < 0 else index

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> RawRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[RawRecord]: ...

    def __getitem__(self, index: int | slice) -> RawRecord | list[RawRecord]:
        if type(index) is slice:
            return [self._record(k) for k in range(*index.indices(len(self._starts)))]
        return self._record(self._at(index))

    def __iter__(self) -> Iterator[RawRecord]:
        for index in range(len(self._starts)):
            yield self._record(index)

    def _record(self, index: int) -> RawRecord:
        start = self._starts[index]
        if start == _OWN:
            return self._own[index]
        end = self._data.find(b"\n", start)
        line = self.line(index)
        return RawRecord.of_text(self._view[start:end], start, f"line {line}", line)

    def __repr__(self) -> str:
        return f"<LineRecords of {len(self._starts)} records>"


def pure_line_starts(data: bytes, start: int, stop: int, begins: bytes) -> tuple[bytes, int]:
    """Where each line of ``data[start:stop]`` begins (8-byte native ints, packed), up to
    the first line that does not begin with *begins*, and where the lines taken end. The
    pure form of the compiled ``line_starts``: both give the same."""
    starts = array("q")
    find, begins_with = data.find, data.startswith
    while start < stop:
        end = find(b"\n", start)
        if not begins_with(begins, start, end):
            break
        starts.append(start)
        start = end + 1
    return starts.tobytes(), start


#: The line scan of ``take_lines``: compiled where the accelerator runs.
_line_starts: Final[Callable[[bytes, int, int, bytes], tuple[bytes, int]]] = (
    ACCELERATOR.line_starts if ACCELERATOR is not None else pure_line_starts
)
