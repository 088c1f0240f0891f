"""Lossless JSON values: validate and freeze in one pass, and thaw on request.

``snapshot`` is on the append hot path, so it is written as one iterative loop that
handles scalars inline and only pushes containers on its explicit stack. What it
checked is exactly what it stores: the frozen copy is built during the same walk. The
rules are in docs/events.md, "JSON values".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import Any, Final, NoReturn, TypeAlias, Union

from sessionledger._errors import JsonValueError

#: Largest integer every JSON reader (including JavaScript) keeps exact: 2**53 - 1.
MAX_SAFE_INTEGER = 2**53 - 1

JsonValue: TypeAlias = Union[
    bool, int, float, str, "FrozenDict", tuple["JsonValue", ...], dict[str, Any], list[Any], None
]


def _readonly(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError("FrozenDict is read-only; use thaw() for a mutable copy")


class FrozenDict(dict[str, Any]):
    """A read-only ``dict``: equal to a plain dict with the same items, serialized by orjson
    directly (it is a real ``dict`` subclass), and every mutating method raises ``TypeError``.
    """

    # Set (to True, through mark_shallow) only on the root of a value whose depth is
    # proved to be at most _FAST_DEPTH + 1 levels; jsoncodec then serializes it without
    # measuring its depth first (is_shallow).
    __slots__ = ("_shallow",)
    _shallow: bool

    __setitem__ = _readonly
    __delitem__ = _readonly
    __ior__ = _readonly
    clear = _readonly
    pop = _readonly
    popitem = _readonly
    setdefault = _readonly
    update = _readonly

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self


def brief(value: object) -> str:
    """Describe *value* for an error message in bounded size and time: the rejected
    value may be a huge string, or nested deeper than ``repr`` can recurse."""
    kind = type(value)
    if kind is str:
        text: str = value  # type: ignore[assignment]
        return repr(text[:40]) + ("..." if len(text) > 40 else "")
    if value is None or kind is bool or kind is float:
        return repr(value)
    if kind is int:
        number: int = value  # type: ignore[assignment]
        return repr(number) if abs(number) < 10**40 else "a very large integer"
    if kind is list or kind is tuple:
        return f"a list of {len(value)}"  # type: ignore[arg-type]
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return f"a {kind.__name__}"


def mark_shallow(value: FrozenDict) -> FrozenDict:
    """Record that *value* is proved at most ``_FAST_DEPTH + 1`` levels deep, so
    ``jsoncodec.dumps`` may skip measuring it; return it. Only for values whose every
    level the caller built itself (``snapshot``'s fast path, decoded chunk rows)."""
    value._shallow = True
    return value


def mark_all_shallow(values: Iterable[FrozenDict]) -> None:
    """``mark_shallow`` each of *values* (one call for a whole decoded chunk row)."""
    for value in values:
        value._shallow = True


def is_shallow(value: FrozenDict) -> bool:
    """Tell whether *value* was marked by ``mark_shallow``."""
    return getattr(value, "_shallow", False)


def is_safe_int(value: object) -> bool:
    """Tell whether *value* is an ``int`` (never a ``bool``) within ±(2**53 - 1)."""
    return type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


_INF = float("inf")


def _bad_scalar(value: object) -> str | None:
    """Return why a non-container *value* is not a JSON scalar, or None when it is one."""
    kind = type(value)
    if value is None or kind is bool:
        return None
    if kind is str:
        return string_flaw(value)  # type: ignore[arg-type]
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:  # type: ignore[operator]
            return None
        return f"integer {value} is outside ±(2**53 - 1)"
    if kind is float:
        if not -_INF < value < _INF:  # type: ignore[operator]
            return f"float {value!r} is not finite"
        if value == 0.0 and str(value)[0] == "-":
            return "float -0.0 is not allowed"
        return None
    return f"{kind.__qualname__} is not a JSON value"


def string_flaw(text: str) -> str | None:
    """Return why *text* cannot be stored as JSON (UTF-8 cannot hold a lone surrogate),
    or None when it can."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "string contains a lone surrogate"
    return None


def _describe_key(key: object) -> str:
    if type(key) is str:
        return string_flaw(key) or ""
    return f"key {key!r} of type {type(key).__qualname__} is not a string"


def _fail(frames: list[_Frame], where: object, reason: str, root: str) -> NoReturn:
    """Raise a JsonValueError whose path runs from *root* through the open frames."""
    path = root
    for frame in frames:
        path = _join(path, frame.step)
    if where is not _NO_STEP:
        path = _join(path, where)
    raise JsonValueError(f"not a JSON value at {path}: {reason}", path=path)


_NO_STEP = object()


def _join(path: str, step: object) -> str:
    if step is _NO_STEP:
        return path
    if type(step) is int:
        return f"{path}[{step}]"
    key = str(step)
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{key!r}]"


def snapshot(value: object, path: str = "value") -> Any:
    """Validate *value* as JSON and return a frozen deep copy of it.

    Mappings become ``FrozenDict``, sequences become ``tuple``; scalars are shared.
    Cycles are rejected, shared references are copied. Raises ``JsonValueError`` naming
    the offending path (rooted at *path*). Depth is bounded by memory, not the call stack.
    """
    kind = type(value)
    if kind is dict or kind is FrozenDict:
        frozen = _freeze_mapping(value)
        if frozen is None:
            return _snapshot_container(value, path)
        frozen._shallow = True  # as mark_shallow does, without the call: the hot path
        return frozen
    if kind is list or kind is tuple:
        sequence = _freeze_sequence(value)
        if sequence is None:
            return _snapshot_container(value, path)
        return sequence
    reason = _bad_scalar(value)
    if reason is not None:
        raise JsonValueError(f"not a JSON value at {path}: {reason}", path=path)
    return value


class _Retry(Exception):
    """The fast path gave up (bad value, or too deep to recurse); the careful walk decides."""


#: Nesting the recursive fast path handles before the iterative walk takes over.
_FAST_DEPTH = 64
_dict_set = dict.__setitem__


def _fast_mapping(source: Any, depth: int) -> FrozenDict:
    # Recursion is several times cheaper than the explicit stack for the small payloads
    # of the hot path; anything unusual (or deep) is re-walked by _snapshot_container,
    # which also produces the error with its path.
    if depth > _FAST_DEPTH:
        raise _Retry
    out = FrozenDict(source)
    for key, item in source.items():
        if type(key) is not str or (not key.isascii() and string_flaw(key)):
            raise _Retry
        kind = type(item)
        if kind is str:
            if not item.isascii() and string_flaw(item):
                raise _Retry
        elif kind is int:
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                raise _Retry
        elif item is None or kind is bool:
            pass
        elif kind is dict or kind is FrozenDict:
            _dict_set(out, key, _fast_mapping(item, depth + 1))
        elif kind is list or kind is tuple:
            _dict_set(out, key, _fast_sequence(item, depth + 1))
        elif kind is not float or not -_INF < item < _INF or (item == 0.0 and _bad_scalar(item)):
            raise _Retry
    return out


def _fast_sequence(source: Any, depth: int) -> tuple[Any, ...]:
    if depth > _FAST_DEPTH:
        raise _Retry
    out = []
    for item in source:
        kind = type(item)
        if kind is str:
            if not item.isascii() and string_flaw(item):
                raise _Retry
        elif kind is int:
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                raise _Retry
        elif item is None or kind is bool:
            pass
        elif kind is dict or kind is FrozenDict:
            item = _fast_mapping(item, depth + 1)
        elif kind is list or kind is tuple:
            item = _fast_sequence(item, depth + 1)
        elif kind is not float or not -_INF < item < _INF or (item == 0.0 and _bad_scalar(item)):
            raise _Retry
        out.append(item)
    return tuple(out)


def pure_freeze_mapping(source: Any) -> FrozenDict | None:
    """Return the frozen copy of the dict *source* when the fast path accepts it, else None
    (the careful walk then decides, and names what is wrong). The pure-Python form of
    the compiled ``sessionledger._freeze.freeze_mapping``: both accept the same values."""
    if type(source) is not dict and type(source) is not FrozenDict:
        return None
    try:
        return _fast_mapping(source, 0)
    except _Retry:
        return None


def pure_freeze_sequence(source: Any) -> tuple[Any, ...] | None:
    """Return the frozen copy (a tuple) of the list or tuple *source* when the fast path
    accepts it, else None; the pure-Python form of ``freeze_sequence``, as above."""
    if type(source) is not list and type(source) is not tuple:
        return None
    try:
        return _fast_sequence(source, 0)
    except _Retry:
        return None


def _compiled() -> ModuleType | None:
    """The compiled accelerator (``sessionledger._freeze``), or None when it was not built
    or ``SESSIONLEDGER_PURE_PYTHON`` is set (README, "the compiled accelerator")."""
    try:
        from sessionledger import _freeze
    except ImportError:
        return None
    _freeze.setup(FrozenDict, MAX_SAFE_INTEGER, _FAST_DEPTH)  # usable, even when not chosen
    if os.environ.get("SESSIONLEDGER_PURE_PYTHON", "") not in ("", "0"):
        return None
    return _freeze


def _leave_tracked(*objects: object) -> None:
    """The pure-Python form of ``untrack_acyclic``: Python cannot untrack an object."""


#: The compiled accelerator when it runs, else None: modules with a compiled form of
#: their own fast path (``chunks``) take it from here, so one choice holds for all.
ACCELERATOR: Final = _compiled()
#: Whether snapshot's fast path runs compiled. Both forms accept the same values and
#: build the same frozen copies; the compiled one also leaves a frozen value untracked
#: by the cyclic collector (it holds nothing the collector tracks).
ACCELERATED: Final = ACCELERATOR is not None
_freeze_mapping: Callable[[Any], FrozenDict | None]
_freeze_sequence: Callable[[Any], tuple[Any, ...] | None]
#: Stop the cyclic collector watching *objects* that can never be part of a reference
#: cycle because all they refer to is scalars, frozen values, arrays and lists of
#: scalars (the log's events and packed runs; the caller vouches for it). A large log
#: then costs every full collection nothing (docs/reading.md, "Memory"). Compiled only:
#: on the pure-Python path the objects stay tracked, which is merely slower.
untrack_acyclic: Callable[..., None]
if ACCELERATOR is not None:
    _freeze_mapping = ACCELERATOR.freeze_mapping
    _freeze_sequence = ACCELERATOR.freeze_sequence
    untrack_acyclic = ACCELERATOR.untrack
else:
    _freeze_mapping, _freeze_sequence = pure_freeze_mapping, pure_freeze_sequence
    untrack_acyclic = _leave_tracked

_CONTAINERS: Final = (dict, list, tuple, FrozenDict)


class _Frame:
    """One container of the careful walk: where it is, and what is built of it so far."""

    __slots__ = ("ident", "items", "keys", "step", "values")

    def __init__(self, container: Any, step: object) -> None:
        self.ident = id(container)
        self.step = step
        self.values: list[Any] = []
        if type(container) is dict or type(container) is FrozenDict:
            self.keys: list[str] | None = []
            self.items: Iterator[Any] = iter(container.items())
        else:
            self.keys = None
            self.items = enumerate(container)

    def build(self) -> Any:
        if self.keys is None:
            return tuple(self.values)
        return FrozenDict(zip(self.keys, self.values, strict=True))


def _snapshot_container(root: Any, root_path: str) -> Any:
    """Validate and freeze iteratively: any depth, and errors that name their path."""
    # Children that are containers push a new frame; the parent resumes from its
    # iterator once the child is built (post-order), so tuples can be built at the end.
    frames: list[_Frame] = []
    on_path: set[int] = set()

    def push(container: Any, step: object) -> None:
        if id(container) in on_path:
            _fail(frames, step, "cycle: a container contains itself", root_path)
        on_path.add(id(container))
        frames.append(_Frame(container, step))

    push(root, _NO_STEP)
    while True:
        frame = frames[-1]
        child = _advance(frame, frames, root_path)
        if child is not None:
            push(*child)
            continue
        frames.pop()
        on_path.discard(frame.ident)
        built = frame.build()
        if not frames:
            return built
        frames[-1].values.append(built)


def _advance(frame: _Frame, frames: list[_Frame], root_path: str) -> tuple[Any, object] | None:
    """Take *frame*'s scalars up to its next container child; return that child and its
    step, or None when the frame is complete."""
    keys, values = frame.keys, frame.values
    for step, item in frame.items:
        if keys is not None:
            if type(step) is not str or not step.isascii():
                reason = _describe_key(step)
                if reason:
                    _fail(frames, step, reason, root_path)
            keys.append(step)
        kind = type(item)
        if kind in _CONTAINERS:
            return item, step
        if item is not None and kind is not bool:
            problem = _bad_scalar(item)
            if problem is not None:
                _fail(frames, step, problem, root_path)
        values.append(item)
    return None


def thaw(value: Any) -> Any:
    """Return a plain, mutable deep copy (``dict``/``list``) of a JSON value."""
    kind = type(value)
    if not (kind is dict or kind is FrozenDict or kind is list or kind is tuple):
        return value
    # Iterative for the same reason as snapshot: frozen values may be deeply nested.
    top: Any = {} if isinstance(value, Mapping) else []
    stack: list[tuple[Any, Iterator[Any], Any]] = [(value, _children(value), top)]
    while stack:
        _, children, out = stack[-1]
        for key, item in children:
            item_kind = type(item)
            if (
                item_kind is dict
                or item_kind is FrozenDict
                or item_kind is list
                or item_kind is tuple
            ):
                child: Any = {} if isinstance(item, Mapping) else []
                _put(out, key, child)
                stack.append((item, _children(item), child))
                break
            _put(out, key, item)
        else:
            stack.pop()
    return top


def _children(container: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(container, Mapping):
        return iter(container.items())
    return enumerate(container)


def _put(out: Any, key: Any, item: Any) -> None:
    if type(out) is dict:
        out[key] = item
    else:
        out.append(item)
