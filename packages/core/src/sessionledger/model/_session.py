"""``Session``: one append-only log, its surface and its derived views (docs/reading.md)."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

from sessionledger._errors import (
    ConfigError,
    EventEnvelopeError,
    HeaderError,
    LedgerError,
    ReentrantAppendError,
    SeedError,
    UnknownEventTypeError,
)
from sessionledger.model._deltas import CHUNK_TYPE, DeltaFields, freeze_delta
from sessionledger.model._derive import DerivedMessages, RequestFolds, transcript
from sessionledger.model._eventlog import ChunkRun, EventLog, LogRuns
from sessionledger.model._events import (
    SessionEvent,
    SessionHeader,
    make_event,
    parse_source_event_seqs,
    parse_surface_op,
)
from sessionledger.model._registry import EventTypeRegistry, unknown_type_at_append
from sessionledger.model._shapes import DATA_CHECKS
from sessionledger.model._snapshot import MAX_SAFE_INTEGER, snapshot, string_flaw, untrack_acyclic
from sessionledger.model._surface import SurfaceManager
from sessionledger.model._vocabulary import RESERVED_TYPES, SESSION_END_SEED, SURFACE_TYPES

logger = logging.getLogger("sessionledger")

#: A clock returns Unix epoch milliseconds.
Clock = Callable[[], int]
Validator = Callable[["Session", SessionEvent], object]
Observer = Callable[["Session", SessionEvent], object]
#: Called with a candidate event (and a streamed delta's run fields, when the append has
#: them) before the validators; raises to refuse it.
Admission = Callable[["Session", SessionEvent, "DeltaFields | None"], object]


def system_clock() -> int:
    """Return the wall clock in Unix epoch milliseconds."""
    return time.time_ns() // 1_000_000


#: The core vocabulary, for sessions that no ledger configured.
_CORE_TYPES = EventTypeRegistry.with_core()


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SessionHooks:
    """What a ledger attaches to its sessions: pre-commit validators, post-commit
    observers (each with the plugin name used when its failure is logged), the event
    types it knows, and the *recorder* that carries each committed event towards the
    store (the ledger's durability bridge, ``sessionledger.runtime._durability``), with its
    *admission*, which refuses an event the store could not take before the validators
    run (docs/durability.md, "limits and the backlog"). Built once per ledger so
    ``append`` calls plain functions.

    *refuse_unknown_types* is set for a ledger's sessions: a type *event_types* does not
    know is refused at ``append`` and in seeds unless marked ignorable, because the
    ledger could not read it back. A detached session accepts any type.
    """

    validators: tuple[Validator, ...] = ()
    observers: tuple[tuple[str, Observer], ...] = ()
    event_types: EventTypeRegistry = dataclasses.field(default_factory=lambda: _CORE_TYPES)
    recorder: Observer | None = None
    refuse_unknown_types: bool = False
    admission: Admission | None = None
    #: The recorder (when there is one) and then the observers: what ``append`` calls
    #: after the commit, in this order.
    post_commit: tuple[tuple[str, Observer], ...] = dataclasses.field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        chain = self.observers
        if self.recorder is not None:
            chain = (("sessionledger.runtime._durability", self.recorder), *chain)
        object.__setattr__(self, "post_commit", chain)


_NO_HOOKS = SessionHooks()


@final
class Session:
    """An append-only session log with its surface and derived views.

    Build one with ``Session.create`` (detached, or by a ``Ledger`` with hooks attached)
    or ``Session.restore`` (from storage). ``append`` is synchronous and never blocks on
    I/O; durability is the ledger's business.
    """

    __slots__ = (
        "_busy",
        "_clock",
        "_derived",
        "_events_view",
        "_first_live_seq",
        "_folds",
        "_header",
        "_hooks",
        "_log",
        "_plain_chunks",
        "_surface",
        "_types",
        "__weakref__",
    )

    def __init__(self, header: SessionHeader, clock: Clock) -> None:
        # Use create() or restore(); this only wires empty state together.
        self._header = header
        self._clock = clock
        self._log = EventLog()
        self._surface = SurfaceManager(self._log)
        self._derived = DerivedMessages(self._log, self._surface)
        self._folds = RequestFolds(self._log)
        self._events_view: tuple[SessionEvent, ...] | None = ()
        self._hooks = _NO_HOOKS
        self._types = _CORE_TYPES.declarations
        self._plain_chunks = _plain_chunks(self._types)
        self._busy = False
        self._first_live_seq = 0

    # -- construction -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        id: str | None = None,
        *,
        header: SessionHeader | Mapping[str, Any] | None = None,
        seed: Iterable[SessionEvent | Mapping[str, Any]] | None = None,
        clock: Clock | None = None,
        hooks: SessionHooks | None = None,
    ) -> Session:
        """Create a session, optionally from a *seed* log (events or envelope dicts).

        A seed is validated event by event exactly like appends (first error wins, raised
        as ``SeedError`` naming the index); unless it already ends with one, a
        ``session/end-seed`` marker follows it. Seed values are copied: the caller keeps
        its objects. ``id=None`` mints a UUID4 id.
        """
        clock = _checked(clock)
        header = _make_header(id, header, clock)
        session = cls(header, clock)
        hooks = hooks or _NO_HOOKS
        session._types = hooks.event_types.declarations
        session._plain_chunks = _plain_chunks(session._types)
        if seed is not None:
            session._load_seed(seed, copy=True, strict=hooks.refuse_unknown_types)
        session._hooks = hooks
        return session

    @classmethod
    def restore(
        cls,
        header: SessionHeader,
        events: Iterable[SessionEvent | Mapping[str, Any]],
        *,
        clock: Clock | None = None,
        hooks: SessionHooks | None = None,
    ) -> Session:
        """Rebuild a session from storage; the events are owned by the session from now on.

        ``SessionEvent`` inputs are taken as they are (they are immutable); envelope dicts
        are validated and frozen in one pass. The stored log is a seed: the same checks
        run, and a ``session/end-seed`` marker follows it unless it already ends with one.
        """
        if type(header) is not SessionHeader:
            raise HeaderError(f"restore needs a SessionHeader, got {type(header).__qualname__}")
        session = cls(header, _checked(clock))
        hooks = hooks or _NO_HOOKS
        session._types = hooks.event_types.declarations
        session._plain_chunks = _plain_chunks(session._types)
        # The store's read path decides about unknown types (reading keeps them, going
        # live refuses them), so restoring never refuses one.
        session._load_seed(events, copy=False, strict=False)
        session._hooks = hooks
        return session

    def _load_seed(
        self, seed: Iterable[SessionEvent | Mapping[str, Any]], *, copy: bool, strict: bool
    ) -> None:
        log = self._log
        types = self._types
        needs_checks = {
            name for name, declared in types.items() if declared.validate is not None
        } | SURFACE_TYPES
        # A stored log is restored run by run: a run of deltas needs no check unless a
        # plugin declared one for chunks (then each member is checked like any event).
        runs_pass = CHUNK_TYPE not in needs_checks and (not strict or CHUNK_TYPE in types)
        if type(seed) is EventLog and not copy and runs_pass and not log:
            # A stored log is taken whole, its events and runs shared: only the events
            # no run holds are looked at, in order, and only those a check or the
            # surface needs cost more than a glance. A failure leaves *seed* as it was.
            log.fill_from(seed)
            check = self._check_seed
            if not strict:
                # The look _check_seed would take first, in one walk: most loose events
                # (boundaries, lone deltas) need no more.
                for index, event in seed.loose_needing(needs_checks):
                    check(event, index, copy=False, strict=False, checks=needs_checks)
            else:
                for index, event in seed.loose():
                    if (
                        event.type in needs_checks
                        or event.surface_op is not None
                        or event.source_event_seqs is not None
                        or event.seq != index
                        or (event.type not in types and not event.ignorable)
                    ):
                        check(event, index, copy=False, strict=True, checks=needs_checks)
        else:
            items = seed.segments() if type(seed) is EventLog and not copy else seed
            for item in items:
                if type(item) is not ChunkRun:
                    self._seed_one(item, copy=copy, strict=strict, checks=needs_checks)
                elif runs_pass and item.seq0 == len(log):
                    log.add_run(item)
                else:
                    for member in item.members(item.seq0, item.seq0 + len(item)):
                        self._seed_one(member, copy=copy, strict=strict, checks=needs_checks)
        self._first_live_seq = len(log)
        self._events_view = None
        if not log or log[-1].type != SESSION_END_SEED:
            self.append(SESSION_END_SEED, {})

    def _seed_one(
        self,
        item: SessionEvent | Mapping[str, Any],
        *,
        copy: bool,
        strict: bool,
        checks: set[str],
    ) -> None:
        """Validate one seed event and add it at the end of the log."""
        log = self._log
        log.append(self._check_seed(item, len(log), copy=copy, strict=strict, checks=checks))

    def _check_seed(
        self,
        item: SessionEvent | Mapping[str, Any],
        index: int,
        *,
        copy: bool,
        strict: bool,
        checks: set[str],
    ) -> SessionEvent:
        """Validate the seed event at *index* and take it into the surface; return it."""
        types = self._types
        if (
            not copy
            and type(item) is SessionEvent
            and item.seq == index
            and item.surface_op is None
            and item.source_event_seqs is None
            and item.type not in checks
            and (not strict or item.type in types or item.ignorable)
        ):
            # A stored event of a type with no registered check and no surface
            # metadata (the bulk of a log: chunks, boundaries) needs nothing more.
            return item
        try:
            if type(item) is SessionEvent and not copy:
                event = item
            else:
                envelope = item.to_json() if type(item) is SessionEvent else item
                event = SessionEvent.from_json(envelope)
            declared = types.get(event.type)
            if declared is None:
                if strict and not event.ignorable:
                    raise UnknownEventTypeError(
                        unknown_type_at_append(event.type), event_type=event.type
                    )
            elif declared.validate is not None:
                declared.validate(event.data)
            if event.seq != index:
                raise SeedError(
                    f"seed event at index {index} has seq {event.seq}; a seed is contiguous from 0",
                    code="SEQ_GAP",
                    index=index,
                )
            plan = self._surface.plan(event)
        except SeedError as error:
            error.session_id = self.id
            raise
        except Exception as error:
            # Plugin validators may raise their own exception types; a seed failure is
            # always a SeedError whose code is the cause's (BAD_DATA when it has none).
            raise SeedError(
                f"seed event at index {index} is invalid: {error}",
                code=getattr(error, "code", "BAD_DATA"),
                index=index,
                session_id=self.id,
            ) from error
        self._surface.apply(event, plan)
        return event

    # -- the append pipeline ------------------------------------------------------------

    def append(
        self,
        type: str,
        data: Any = None,
        *,
        surface_op: object = None,
        source_event_seqs: object = None,
        ignorable: bool = False,
    ) -> SessionEvent:
        """Validate, commit and publish one event; return the committed (frozen) event.

        In order (docs/plugins.md, "the append pipeline"): snapshot the data, check the
        message shape and the type's registered ``validate``, refuse reentrant appends,
        build the candidate (``seq`` = log length, ``time`` = clock), plan the surface
        change, run the pre-commit validators (any exception vetoes and propagates),
        commit, then run the post-commit observers (each failure is logged and contained).
        A failure at any step before the commit leaves the session exactly as it was.
        """
        if (
            type == CHUNK_TYPE
            and surface_op is None
            and source_event_seqs is None
            and ignorable is False
            and self._plain_chunks
            and (delta := freeze_delta(data)) is not None
        ):
            return self._append_delta(*delta)
        if (
            builtin_type(type) is not str
            or not type
            or (not type.isascii() and string_flaw(type))
            or (ignorable is not False and ignorable is not True)
            or type in RESERVED_TYPES
        ):
            raise EventEnvelopeError(
                f"event type must be a non-empty string that is not a storage tag, and "
                f"ignorable a bool; got {type!r} and {ignorable!r}",
                session_id=self.id,
            )
        log = self._log
        try:
            frozen = snapshot(data, "data")
            declared = self._types.get(type)
            if declared is not None:
                if declared.validate is not None:
                    declared.validate(frozen)
                if declared.ignorable:
                    ignorable = True
            elif not ignorable and self._hooks.refuse_unknown_types:
                raise UnknownEventTypeError(
                    unknown_type_at_append(type), event_type=type, seq=len(log)
                )
            check = DATA_CHECKS.get(type)
            if check is not None:
                check(frozen)
            if self._busy:
                raise ReentrantAppendError(
                    "append was called from inside a hook of the same session"
                )
            if surface_op is None and source_event_seqs is None and type not in SURFACE_TYPES:
                event = make_event(type, len(log), self._clock(), frozen, None, None, ignorable)
                plan = None
            else:
                op = parse_surface_op(surface_op)
                sources = parse_source_event_seqs(source_event_seqs)
                event = make_event(type, len(log), self._clock(), frozen, op, sources, ignorable)
                plan = self._surface.plan(event)
        except LedgerError as error:
            if error.session_id is None:
                error.session_id = self._header.id
            raise
        hooks = self._hooks
        if hooks.admission is not None:
            hooks.admission(self, event, None)
        if hooks.validators:
            self._vet(hooks.validators, event)
        log.append(event)
        if plan is not None:
            self._surface.apply(event, plan)
        self._events_view = None
        if hooks.post_commit:
            self._notify(hooks.post_commit, event)
        return event

    def _append_delta(self, frozen: Any, fields: DeltaFields) -> SessionEvent:
        """``append`` of a well-formed streamed delta (already validated and frozen by
        ``freeze_delta``): the same pipeline, without the steps that cannot apply to it
        (no surface change, no registered check; the shape is proved)."""
        if self._busy:
            raise ReentrantAppendError(
                "append was called from inside a hook of the same session",
                session_id=self._header.id,
            )
        log = self._log
        try:
            event = make_event(CHUNK_TYPE, len(log), self._clock(), frozen, None, None, False)
        except LedgerError as error:
            if error.session_id is None:
                error.session_id = self._header.id
            raise
        hooks = self._hooks
        if hooks.admission is not None:
            hooks.admission(self, event, fields)
        if hooks.validators:
            self._vet(hooks.validators, event)
        log.append_delta(event, fields)
        self._events_view = None
        if hooks.post_commit:
            self._notify(hooks.post_commit, event)
        return event

    def _vet(self, validators: tuple[Validator, ...], event: SessionEvent) -> None:
        """Run the pre-commit validators on the candidate; any exception vetoes it."""
        self._busy = True
        try:
            for validate in validators:
                validate(self, event)
        finally:
            self._busy = False

    def _notify(self, observers: tuple[tuple[str, Observer], ...], event: SessionEvent) -> None:
        """Hand a committed event to the recorder and each observer in turn; a failure of
        one is logged and stops neither the others nor the append."""
        self._busy = True
        try:
            for name, observe in observers:
                try:
                    observe(self, event)
                except Exception:
                    logger.warning(
                        "observer %s failed for session %r at seq %d; the event stays committed",
                        name,
                        self._header.id,
                        event.seq,
                        exc_info=True,
                    )
        finally:
            self._busy = False

    # -- reading ------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id (from the header)."""
        return self._header.id

    @property
    def header(self) -> SessionHeader:
        """The session header (immutable)."""
        return self._header

    @property
    def seq(self) -> int:
        """The seq the next event will get (the log length)."""
        return len(self._log)

    @property
    def first_live_seq(self) -> int:
        """How many events the constructor's seed supplied (0 without a seed)."""
        return self._first_live_seq

    @property
    def events(self) -> tuple[SessionEvent, ...]:
        """The whole log as a tuple: the same object until the next successful append."""
        view = self._events_view
        if view is None:
            view = self._events_view = tuple(self._log)
            untrack_acyclic(view)  # it holds only events, which hold no cycle
        return view

    def event_log(self) -> EventLog:
        """Return a compact copy of the log (an ``EventLog``, docs/reading.md, "memory"):
        what ``events`` holds without building every event, for a restore or a fork."""
        return self._log.copy()

    def runs(self) -> LogRuns:
        """How the log keeps its events, read-only: a ledger's store packs the delta
        runs it holds into rows as they are (docs/formats.md, "chunk rows")."""
        return LogRuns(self._log)

    @property
    def surface(self) -> SurfaceManager:
        """The model-visible nodes (``nodes``) and the ``replace_generation``."""
        return self._surface

    @property
    def hooks(self) -> SessionHooks:
        """The hooks this session calls (empty for a detached session)."""
        return self._hooks

    def detach(self) -> None:
        """Stop calling the hooks of the ledger this session belonged to; the event types
        stay, so registered checks still run on later appends. The ledger calls this when
        the session leaves it (``release``, ``delete``, ``close``); later appends are
        neither checked by its plugins nor stored."""
        hooks = self._hooks
        self._hooks = SessionHooks(
            event_types=hooks.event_types, refuse_unknown_types=hooks.refuse_unknown_types
        )

    def event_at(self, seq: int) -> SessionEvent:
        """Return the event with *seq* without copying the log."""
        if builtin_type(seq) is not int or not 0 <= seq < len(self._log):
            raise IndexError(f"seq {seq!r} is not in session {self.id!r} (length {len(self._log)})")
        return self._log[seq]

    def events_from(self, seq: int) -> tuple[SessionEvent, ...]:
        """Return the events from *seq* on (a tail, without copying the whole log)."""
        if builtin_type(seq) is not int or seq < 0:
            raise IndexError(f"seq {seq!r} is not a seq of session {self.id!r}")
        return self._log[seq:]

    def derive_messages(self) -> list[Any]:
        """Return a fresh list of the frozen messages on the surface (the model's history)."""
        return self._derived.messages()

    def transcript(self) -> list[Any]:
        """Return what the user saw: append-origin messages in log order, shadowed or not."""
        return transcript(self._log)

    def request_header(self) -> Any:
        """Return the canonical request header folded from ``request/header`` events."""
        return self._folds.header()

    def request_context(self) -> Any:
        """Return the last ``request/context`` record, or None."""
        return self._folds.context()

    def __repr__(self) -> str:
        return f"<Session {self.id!r} seq={len(self._log)}>"


builtin_type = type


def _plain_chunks(types: Mapping[str, Any]) -> bool:
    """Tell whether chunks are declared as the core declares them (no registered check,
    not ignorable), so a well-formed delta may take the short path of ``append``."""
    declared = types.get(CHUNK_TYPE)
    return declared is not None and declared.validate is None and not declared.ignorable


def _checked(clock: Clock | None) -> Clock:
    """Return the system clock, or *clock* wrapped so a bad reading fails the append
    instead of committing an event no reader could load back."""
    if clock is None or clock is system_clock:
        return system_clock

    def checked() -> int:
        now = clock()
        if builtin_type(now) is not int or not -MAX_SAFE_INTEGER <= now <= MAX_SAFE_INTEGER:
            raise ConfigError(f"the session clock returned {now!r}; it must return integer ms")
        return now

    return checked


def _make_header(
    id: str | None, header: SessionHeader | Mapping[str, Any] | None, clock: Clock
) -> SessionHeader:
    if header is None:
        return SessionHeader(id=id if id is not None else str(uuid.uuid4()), created_at=clock())
    if type(header) is not SessionHeader:
        header = SessionHeader.from_json(header)
    if id is not None and header.id != id:
        raise HeaderError(
            f"session header id {header.id!r} does not match the session id {id!r}", session_id=id
        )
    return header
