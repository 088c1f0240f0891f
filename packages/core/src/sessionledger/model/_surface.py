"""The surface: the ordered seqs of the model-visible nodes (docs/surface.md).

The surface changes only through ``append`` and ``Replace`` ops carried by the three
surface types. Validation is plan-then-commit: ``plan`` checks a candidate against the
current nodes without touching them, ``apply`` commits the plan once the event is in the
log, so a rejected or vetoed candidate never leaves a phantom node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, final

from sessionledger._accelerator import choose
from sessionledger._errors import SeedError, SurfaceError
from sessionledger.model._eventlog import EventLog
from sessionledger.model._events import APPEND, Replace, SessionEvent
from sessionledger.model._vocabulary import ASSISTANT_MESSAGE, SURFACE_TYPES, TOOL_RESULT


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Replacement:
    """One committed replace: event ``seq`` shadowed ``shadowed`` (from ``start`` to ``end``)."""

    seq: int
    start: int
    end: int
    shadowed: tuple[int, ...]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SurfaceFold:
    """The surface of a whole log, with the history of its replacements."""

    nodes: tuple[int, ...]
    replacements: tuple[Replacement, ...]


# A plan is None (the event does not touch the surface), _APPEND_PLAN, or the
# inclusive surface positions (i, j) a replace shadows.
_APPEND_PLAN: Final = (-1, -1)
Plan = tuple[int, int] | None


@final
class SurfaceManager:
    """Keep a log's surface up to date, one event at a time (O(new events)).

    ``log`` is the session's own event list (shared, append-only); the manager reads it
    only to look up the event a ``tool/result`` replace rewrites.
    """

    __slots__ = ("_generation", "_log", "_nodes", "_view")

    def __init__(self, log: Sequence[SessionEvent]) -> None:
        self._log = log
        self._nodes: list[int] = []
        self._generation = 0
        self._view: tuple[int, ...] | None = ()

    @property
    def nodes(self) -> tuple[int, ...]:
        """The seqs on the surface, in model-visible order."""
        view = self._view
        if view is None:
            view = self._view = tuple(self._nodes)
        return view

    @property
    def node_count(self) -> int:
        """How many nodes are on the surface (without building the ``nodes`` tuple)."""
        return len(self._nodes)

    def nodes_from(self, position: int) -> list[int]:
        """Return the seqs of the nodes at surface positions *position* and later: what a
        cache that has seen the first *position* nodes still has to take in."""
        return self._nodes[position:]

    @property
    def replace_generation(self) -> int:
        """How many replaces have been committed; a change invalidates derived caches."""
        return self._generation

    @property
    def last_processed_seq(self) -> int:
        """The seq of the last event the surface has taken into account (-1 when none)."""
        return len(self._log) - 1

    def plan(self, event: SessionEvent) -> Plan:
        """Check *event* (the next one of the log) against the current surface; mutate nothing."""
        op = event.surface_op
        sources = event.source_event_seqs
        if event.type not in SURFACE_TYPES:
            if op is not None:
                raise _error(
                    event, "NOT_SURFACE_TYPE", "is not a surface type and cannot carry a surface op"
                )
            if sources is not None:
                raise _error(
                    event,
                    "NOT_SURFACE_TYPE",
                    "is not a surface type and cannot carry sourceEventSeqs",
                )
            return None
        if op is None:
            raise _error(event, "MISSING_SURFACE_OP", "is a surface type and requires a surface op")
        if sources is not None:
            _check_sources(event, sources)
        if op == APPEND:
            return _APPEND_PLAN
        assert type(op) is Replace
        nodes = self._nodes
        try:
            i = nodes.index(op.start)
        except ValueError:
            raise _error(
                event,
                "REPLACE_START_NOT_FOUND",
                f"replace start seq {op.start} is not on the surface",
            ) from None
        try:
            j = nodes.index(op.end, i) if op.end != op.start else i
        except ValueError:
            if op.end in nodes:
                raise _error(
                    event,
                    "REPLACE_REVERSED",
                    f"replace start seq {op.start} (position {i}) comes after end seq {op.end} "
                    f"(position {nodes.index(op.end)})",
                ) from None
            raise _error(
                event, "REPLACE_END_NOT_FOUND", f"replace end seq {op.end} is not on the surface"
            ) from None
        shadowed = nodes[i : j + 1]
        cited = set(sources or ())
        missing = [seq for seq in shadowed if seq not in cited]
        if missing:
            raise _error(
                event,
                "REPLACE_NOT_COVERED",
                "a replace must cite every node it shadows in sourceEventSeqs; missing "
                + ", ".join(map(str, missing)),
            )
        if event.type == TOOL_RESULT:
            self._check_tool_result_rewrite(event, shadowed)
        return (i, j)

    def shadowed_by(self, plan: Plan) -> tuple[int, ...]:
        """Return the seqs a plan from ``plan`` would shadow (empty unless it replaces)."""
        if plan is None or plan is _APPEND_PLAN:
            return ()
        i, j = plan
        return tuple(self._nodes[i : j + 1])

    def apply(self, event: SessionEvent, plan: Plan) -> None:
        """Commit a plan made by ``plan`` for *event*, which is now the last event of the log."""
        if plan is None:
            return
        if plan is _APPEND_PLAN:
            self._nodes.append(event.seq)
        else:
            i, j = plan
            self._nodes[i : j + 1] = (event.seq,)
            self._generation += 1
        self._view = None

    def _check_tool_result_rewrite(self, event: SessionEvent, shadowed: list[int]) -> None:
        # A tool/result replace prunes tool output: one node, a tool/result, and only the
        # inner content of its tool-result block may differ.
        if len(shadowed) != 1:
            raise _error(
                event, "TOOL_RESULT_REWRITE", "a tool/result replace must shadow exactly one node"
            )
        target = self._log[shadowed[0]]
        if target.type != TOOL_RESULT:
            raise _error(
                event,
                "TOOL_RESULT_REWRITE",
                f"a tool/result replace must shadow a tool/result, not {target.type}",
            )
        if not _same_json(
            _without_result_content(event.data), _without_result_content(target.data)
        ):
            raise _error(
                event,
                "TOOL_RESULT_REWRITE",
                "a tool/result replace may change only the content of its tool-result block",
            )


def _without_result_content(data: Any) -> Any:
    """Return *data* with the tool-result block's inner content blanked, for comparison."""
    if not isinstance(data, Mapping):
        return data
    message = data.get("message")
    if not isinstance(message, Mapping):
        return data
    content = message.get("content")
    if type(content) is not tuple or len(content) != 1 or not isinstance(content[0], Mapping):
        return data
    block = {**content[0], "content": None}
    return {**data, "message": {**message, "content": (block,)}}


def _same_json(left: Any, right: Any) -> bool:
    """Compare two JSON values as JSON does: ``1``, ``1.0`` and ``true`` differ (Python's
    ``==`` would call them equal); object key order does not matter. Iterative: any depth.
    """
    stack = [(left, right)]
    while stack:
        a, b = stack.pop()
        if isinstance(a, Mapping):
            if not isinstance(b, Mapping) or a.keys() != b.keys():
                return False
            stack.extend((a[key], b[key]) for key in a)
        elif type(a) is tuple or type(a) is list:
            if (type(b) is not tuple and type(b) is not list) or len(a) != len(b):
                return False
            stack.extend(zip(a, b, strict=True))
        elif type(a) is not type(b) or a != b:
            return False
    return True


def _check_sources(event: SessionEvent, sources: tuple[int, ...]) -> None:
    if not sources and event.type != ASSISTANT_MESSAGE:
        raise _error(
            event,
            "SOURCES_EMPTY",
            "sourceEventSeqs may be empty only on assistant/message (a known empty stream)",
        )
    # An assistant message cites every delta of its stream, in order: a rising tuple holds
    # no duplicate and ends with its largest seq (one pass in C, where it runs).
    rising = _ascending(sources)
    if not rising and len(set(sources)) != len(sources):
        raise _error(event, "SOURCES_DUPLICATE", "sourceEventSeqs must not contain duplicates")
    if sources and (sources[-1] if rising else max(sources)) >= event.seq:
        seq = next(seq for seq in sources if seq >= event.seq)
        raise _error(
            event,
            "SOURCES_NOT_EARLIER",
            f"sourceEventSeqs must cite earlier events, but cites {seq}",
        )


def _error(event: SessionEvent, code: str, message: str) -> SurfaceError:
    return SurfaceError(f"{event.type} {message}", code=code, seq=event.seq)


def fold_surface(events: Iterable[SessionEvent | Mapping[str, Any]]) -> SurfaceFold:
    """Replay a whole log (from seq 0) and return its surface and replacement history.

    Pure: raises the same ``SurfaceError`` a session would for the same log, and
    ``SeedError`` (code ``SEQ_GAP``) when seqs are not contiguous from 0.
    """
    if type(events) is EventLog:
        return fold_log(events, len(events) - 1)
    log: list[SessionEvent] = []
    manager = SurfaceManager(log)
    replacements: list[Replacement] = []
    for index, item in enumerate(events):
        event = item if type(item) is SessionEvent else SessionEvent.from_json(item)
        _fold_one(manager, replacements, index, event, log.append)
    return SurfaceFold(manager.nodes, tuple(replacements))


def fold_log(log: EventLog, upto: int) -> SurfaceFold:
    """``fold_surface`` of a compact log's events 0 to *upto*: only the events no run
    holds are folded (a run holds deltas, which never touch the surface), so a large
    log's deltas are never built. The same checks: the same errors."""
    manager = SurfaceManager(log)
    replacements: list[Replacement] = []
    for index, event in log.loose():
        if index > upto:
            break
        _fold_one(manager, replacements, index, event, None)
    return SurfaceFold(manager.nodes, tuple(replacements))


def _fold_one(
    manager: SurfaceManager,
    replacements: list[Replacement],
    index: int,
    event: SessionEvent,
    keep: Callable[[SessionEvent], None] | None,
) -> None:
    """Fold *event*, the one at *index*, into *manager*; note what a replace shadowed.
    *keep* adds it to the log the manager reads (None: the log holds it already)."""
    if event.seq != index:
        raise SeedError(
            f"event at index {index} has seq {event.seq}; a log is contiguous from 0",
            index=index,
            code="SEQ_GAP",
        )
    plan = manager.plan(event)
    shadowed = manager.shadowed_by(plan)
    if shadowed:
        op = event.surface_op
        assert type(op) is Replace
        replacements.append(Replacement(event.seq, op.start, op.end, shadowed))
    if keep is not None:
        keep(event)
    manager.apply(event, plan)


def _never_known(seqs: tuple[int, ...]) -> bool:
    """The pure form of the compiled ``ascending``, for the check above: it does not know
    (False), so the general checks decide."""
    return False


#: Whether provenance rises strictly: compiled where the accelerator runs.
_ascending: Final[Callable[[tuple[int, ...]], bool]] = choose("ascending", _never_known)
