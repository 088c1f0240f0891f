"""The event envelope, surface operations and the session header (docs/events.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, Final, Literal, TypeAlias, final

from sessionledger._errors import EventEnvelopeError, HeaderError, JsonValueError, SurfaceError
from sessionledger.model._snapshot import (
    ACCELERATOR,
    MAX_SAFE_INTEGER,
    FrozenDict,
    brief,
    snapshot,
    string_flaw,
)
from sessionledger.model._vocabulary import RESERVED_TYPES

#: The one format version this build reads and writes (docs/events.md, "the header").
SESSION_FORMAT_VERSION: Final = 1

#: The surface operation that adds an event's seq at the tail of the surface.
APPEND: Final = "append"

_ENVELOPE_KEYS = frozenset(
    ("type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable")
)
_REQUIRED_KEYS = ("type", "seq", "time", "data")
_INT_ONLY: Final = frozenset((int,))


def _is_seq(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def _is_time(value: object) -> bool:
    return type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Replace:
    """Replace the current surface nodes from ``start`` to ``end`` (by surface position,
    inclusive) with the new event. Both are seqs of nodes currently on the surface.
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if not (_is_seq(self.start) and _is_seq(self.end)):
            raise SurfaceError(
                f"replace start and end must be non-negative integers, got "
                f"{brief(self.start)} and {brief(self.end)}",
                code="BAD_SURFACE_OP",
            )

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form ``{"op": "replace", "start": s, "end": e}``."""
        return {"op": "replace", "start": self.start, "end": self.end}


SurfaceOp: TypeAlias = Literal["append"] | Replace


def parse_surface_op(value: object) -> SurfaceOp | None:
    """Normalize a surface op given as ``"append"``, a ``Replace`` or its JSON dict form."""
    if value is None:
        return None
    if type(value) is str:
        if value == APPEND:
            return APPEND
    elif type(value) is Replace:
        return value
    elif type(value) is dict or type(value) is FrozenDict:
        if value.keys() == {"op", "start", "end"} and value["op"] == "replace":
            start, end = value["start"], value["end"]
            if _is_seq(start) and _is_seq(end):
                return Replace(start, end)
        raise SurfaceError(f"invalid replace surface op {brief(value)}", code="BAD_SURFACE_OP")
    raise SurfaceError(
        f"invalid surface op {brief(value)}: expected 'append', a Replace or "
        "{'op': 'replace', 'start': s, 'end': e}",
        code="BAD_SURFACE_OP",
    )


def parse_source_event_seqs(value: object) -> tuple[int, ...] | None:
    """Normalize provenance to a tuple of non-negative ints (log rules are checked later)."""
    if value is None:
        return None
    if type(value) is tuple or type(value) is list:
        seqs = tuple(value)
        # An assistant message cites every delta of its stream: check them in C passes
        # (exact ints, no bool, within range) and look at each only to name a bad one.
        if not seqs or (
            set(map(type, seqs)) <= _INT_ONLY and min(seqs) >= 0 and max(seqs) <= MAX_SAFE_INTEGER
        ):
            return seqs
        for item in seqs:
            if not _is_seq(item):
                raise SurfaceError(
                    f"sourceEventSeqs must contain non-negative integers, got {brief(item)}",
                    code="BAD_SOURCES",
                )
        return seqs
    raise SurfaceError(
        f"sourceEventSeqs must be a list of seqs, got {type(value).__qualname__}",
        code="BAD_SOURCES",
    )


class _EventFields:
    # The slots live here with a plain __init__, so building an event costs one
    # ordinary call; the instance is then re-classed to the frozen SessionEvent.
    __slots__ = ("type", "seq", "time", "data", "surface_op", "source_event_seqs", "ignorable")

    type: str
    seq: int
    time: int
    data: Any
    surface_op: SurfaceOp | None
    source_event_seqs: tuple[int, ...] | None
    ignorable: bool

    def __init__(
        self,
        type: str,
        seq: int,
        time: int,
        data: Any,
        surface_op: SurfaceOp | None,
        source_event_seqs: tuple[int, ...] | None,
        ignorable: bool,
    ) -> None:
        self.type = type
        self.seq = seq
        self.time = time
        self.data = data
        self.surface_op = surface_op
        self.source_event_seqs = source_event_seqs
        self.ignorable = ignorable
        self.__class__ = SessionEvent  # noqa: PLE0237 - layouts are identical


@final
class SessionEvent(_EventFields):
    """One immutable fact in a session log.

    Users get events from ``Session.append``, ``from_json``, seeds and storage; the
    constructor is for the library and does not validate. ``data`` is a frozen JSON
    value; equality is field equality.
    """

    __slots__ = ()

    def __new__(
        cls,
        type: str,
        seq: int,
        time: int,
        data: Any,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: tuple[int, ...] | None = None,
        ignorable: bool = False,
    ) -> SessionEvent:
        return _EventFields(type, seq, time, data, surface_op, source_event_seqs, ignorable)  # type: ignore[return-value]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Fields were set by _EventFields in __new__.
        pass

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"SessionEvent is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"SessionEvent is immutable; cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not SessionEvent:
            return NotImplemented
        return (
            self.seq == other.seq
            and self.type == other.type
            and self.time == other.time
            and self.surface_op == other.surface_op
            and self.source_event_seqs == other.source_event_seqs
            and self.ignorable == other.ignorable
            and self.data == other.data
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = ""
        if self.surface_op is not None:
            extra += f", surface_op={self.surface_op!r}"
        if self.source_event_seqs is not None:
            extra += f", source_event_seqs={self.source_event_seqs!r}"
        if self.ignorable:
            extra += ", ignorable=True"
        return (
            f"SessionEvent(type={self.type!r}, seq={self.seq}, time={self.time}, "
            f"data={self.data!r}{extra})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            SessionEvent,
            (
                self.type,
                self.seq,
                self.time,
                self.data,
                self.surface_op,
                self.source_event_seqs,
                self.ignorable,
            ),
        )

    def to_json(self) -> dict[str, Any]:
        """Return the JSON envelope with keys in their documented order; absent ones are
        omitted (docs/events.md, "the envelope")."""
        out: dict[str, Any] = {
            "type": self.type,
            "seq": self.seq,
            "time": self.time,
            "data": self.data,
        }
        op = self.surface_op
        if op is not None:
            out["surfaceOp"] = APPEND if op == APPEND else op.to_json()
        if self.source_event_seqs is not None:
            out["sourceEventSeqs"] = self.source_event_seqs
        if self.ignorable:
            out["ignorable"] = True
        return out

    @classmethod
    def from_json(cls, obj: object) -> SessionEvent:
        """Build an event from its JSON envelope, strictly: exactly the envelope's keys, typed.

        Raises ``EventEnvelopeError`` for the envelope, ``SurfaceError`` for malformed
        surface metadata and ``JsonValueError`` for a non-JSON ``data``. Rules that need
        the log (contiguity, provenance) run when the event joins a session.
        """
        if _compiled_from_json is not None and (event := _compiled_from_json(obj)) is not None:
            return event  # the common envelope, checked and frozen in one compiled call
        return pure_from_json(obj)


def pure_from_json(obj: object) -> SessionEvent:
    """``SessionEvent.from_json`` in Python alone: the rules themselves, and the form that
    says what is wrong. Its compiled common case decides as it does (the tests compare
    them on generated envelopes)."""
    if type(obj) is not dict and type(obj) is not FrozenDict:
        raise EventEnvelopeError(
            f"event envelope must be a JSON object, got {type(obj).__qualname__}"
        )
    envelope: Mapping[str, Any] = obj
    if not envelope.keys() <= _ENVELOPE_KEYS:
        extra = sorted(str(k) for k in envelope.keys() - _ENVELOPE_KEYS)
        raise EventEnvelopeError(f"event envelope has unknown keys {extra}")
    for key in _REQUIRED_KEYS:
        if key not in envelope:
            raise EventEnvelopeError(f"event envelope lacks {key!r}")
    type_ = envelope["type"]
    seq = envelope["seq"]
    if type(type_) is not str or not type_ or type_ in RESERVED_TYPES:
        raise EventEnvelopeError(
            f"event type must be a non-empty string that is not a storage tag, got {brief(type_)}"
        )
    if not _is_seq(seq):
        raise EventEnvelopeError(f"event seq must be a non-negative integer, got {brief(seq)}")
    time = envelope["time"]
    if not _is_time(time):
        raise EventEnvelopeError(
            f"event time must be an integer within ±(2**53 - 1), got {brief(time)}", seq=seq
        )
    ignorable = envelope.get("ignorable", False)
    if "ignorable" in envelope and ignorable is not True:
        raise EventEnvelopeError(
            f"event ignorable must be true when present, got {brief(ignorable)}", seq=seq
        )
    try:
        surface_op = parse_surface_op(envelope.get("surfaceOp"))
        if "surfaceOp" in envelope and surface_op is None:
            raise SurfaceError("surfaceOp must not be null", code="BAD_SURFACE_OP")
        sources = parse_source_event_seqs(envelope.get("sourceEventSeqs"))
        if "sourceEventSeqs" in envelope and sources is None:
            raise SurfaceError("sourceEventSeqs must not be null", code="BAD_SOURCES")
    except SurfaceError as error:
        error.seq = seq
        raise
    data = snapshot(envelope["data"], "data")
    return make_event(type_, seq, time, data, surface_op, sources, ignorable)


#: Build an event without validation (the library's fast path; see SessionEvent).
make_event: Callable[
    [str, int, int, Any, SurfaceOp | None, tuple[int, ...] | None, bool], SessionEvent
] = _EventFields  # type: ignore[assignment]


def _from_json_compiled() -> Callable[[object], SessionEvent | None] | None:
    """The compiled common case of ``from_json`` where the accelerator runs: it builds
    the event ``pure_from_json`` would, or returns None and leaves the envelope to it."""
    if ACCELERATOR is None:
        return None
    ACCELERATOR.setup_events(SessionEvent, RESERVED_TYPES, APPEND)
    compiled: Callable[[object], SessionEvent | None] = ACCELERATOR.event_from_json
    return compiled


_compiled_from_json: Final = _from_json_compiled()
if ACCELERATOR is not None:
    # The same event, built in C (the append hot path, and every delta a run rebuilds).
    make_event = ACCELERATOR.make_event


def _is_absolute(path: str) -> bool:
    return PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute()


_HEADER_KEYS = {
    "version": "version",
    "id": "id",
    "createdAt": "created_at",
    "cwd": "cwd",
    "parentSession": "parent_session",
    "seedLength": "seed_length",
    "delegationDepth": "delegation_depth",
    "title": "title",
    "meta": "meta",
}


@final
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SessionHeader:
    """What a session is, kept beside its log (never as an event); validated on construction."""

    id: str
    created_at: int
    version: int = SESSION_FORMAT_VERSION
    cwd: str | None = None
    parent_session: str | None = None
    seed_length: int | None = None
    delegation_depth: int = 0
    title: str | None = None
    meta: FrozenDict | None = None

    def __post_init__(self) -> None:
        def bad(message: str) -> HeaderError:
            return HeaderError(f"session header {message}", session_id=_text_or_none(self.id))

        if type(self.version) is not int or self.version != SESSION_FORMAT_VERSION:
            raise bad(f"version must be {SESSION_FORMAT_VERSION}, got {brief(self.version)}")
        if type(self.id) is not str or not self.id:
            raise bad(f"id must be a non-empty string, got {brief(self.id)}")
        for name in ("id", "cwd", "parent_session", "title"):
            text = getattr(self, name)
            if type(text) is str and not text.isascii() and string_flaw(text):
                raise bad(f"{name} contains a lone surrogate, which no JSON file can hold")
        if not _is_seq(self.created_at):
            raise bad(f"createdAt must be a non-negative integer, got {brief(self.created_at)}")
        if self.cwd is not None and (type(self.cwd) is not str or not _is_absolute(self.cwd)):
            raise bad(f"cwd must be an absolute path string, got {brief(self.cwd)}")
        if self.parent_session is not None and (
            type(self.parent_session) is not str or not self.parent_session
        ):
            raise bad(f"parentSession must be a non-empty string, got {brief(self.parent_session)}")
        if self.seed_length is not None and not _is_seq(self.seed_length):
            raise bad(f"seedLength must be a non-negative integer, got {brief(self.seed_length)}")
        if not _is_seq(self.delegation_depth):
            raise bad(
                "delegationDepth must be a non-negative integer, "
                f"got {brief(self.delegation_depth)}"
            )
        if self.title is not None and type(self.title) is not str:
            raise bad(f"title must be a string, got {brief(self.title)}")
        if self.meta is not None:
            if not isinstance(self.meta, Mapping):
                raise bad(f"meta must be a JSON object, got {type(self.meta).__qualname__}")
            try:
                frozen = snapshot(self.meta, "meta")
            except JsonValueError as error:
                # Every header validation failure is a HeaderError.
                raise bad(f"meta is not a JSON object: {error}") from error
            object.__setattr__(self, "meta", frozen)

    def to_json(self) -> dict[str, Any]:
        """Return the header's JSON form (documented key names; absent optional fields
        omitted)."""
        out: dict[str, Any] = {"version": self.version, "id": self.id, "createdAt": self.created_at}
        if self.cwd is not None:
            out["cwd"] = self.cwd
        if self.parent_session is not None:
            out["parentSession"] = self.parent_session
        if self.seed_length is not None:
            out["seedLength"] = self.seed_length
        out["delegationDepth"] = self.delegation_depth
        if self.title is not None:
            out["title"] = self.title
        if self.meta is not None:
            out["meta"] = self.meta
        return out

    @classmethod
    def from_json(cls, obj: object) -> SessionHeader:
        """Build a header from its JSON form; unknown keys are rejected (``HeaderError``)."""
        if not isinstance(obj, Mapping):
            raise HeaderError(f"session header must be a JSON object, got {type(obj).__qualname__}")
        unknown = [key for key in obj if key not in _HEADER_KEYS]
        if unknown:
            raise HeaderError(f"session header has unknown keys {sorted(map(str, unknown))}")
        for key in ("version", "id", "createdAt"):
            if key not in obj:
                raise HeaderError(f"session header lacks {key!r}")
        kwargs = {_HEADER_KEYS[key]: value for key, value in obj.items()}
        return cls(**kwargs)

    def replace(self, **changes: Any) -> SessionHeader:
        """Return a copy with *changes* applied (validated like a new header)."""
        return dataclasses.replace(self, **changes)


def _text_or_none(value: object) -> str | None:
    return value if type(value) is str else None
