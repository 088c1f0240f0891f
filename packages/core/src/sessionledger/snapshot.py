"""Lossless JSON values: validate and freeze in one pass, and thaw on request (SPEC §1).

``snapshot`` is on the append hot path, so it is written as one iterative loop that
handles scalars inline and only pushes containers on its explicit stack. What it
checked is exactly what it stores: the frozen copy is built during the same walk.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NoReturn, TypeAlias, Union

from sessionledger.errors import JsonValueError

__all__ = [
    "MAX_SAFE_INTEGER",
    "FrozenDict",
    "JsonValue",
    "is_safe_int",
    "snapshot",
    "thaw",
]

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

    # Set (to True) only on the root of a value snapshot built with its recursive fast
    # path, which proves the value is at most _FAST_DEPTH + 1 levels deep; jsoncodec
    # then serializes it without measuring its depth first. Private to the library.
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
        return _bad_string(value)  # type: ignore[arg-type]
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


def _bad_string(text: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "string contains a lone surrogate"
    return None


def _describe_key(key: object) -> str:
    if type(key) is str:
        return _bad_string(key) or ""
    return f"key {key!r} of type {type(key).__qualname__} is not a string"


def _fail(frames: list[Any], where: object, reason: str, root: str) -> NoReturn:
    """Raise a JsonValueError whose path runs from *root* through the open frames."""
    path = root
    for frame in frames:
        path = _join(path, frame[4])
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
    """Validate *value* as JSON (SPEC §1.1) and return a frozen deep copy of it.

    Mappings become ``FrozenDict``, sequences become ``tuple``; scalars are shared.
    Cycles are rejected, shared references are copied. Raises ``JsonValueError`` naming
    the offending path (rooted at *path*). Depth is bounded by memory, not the call stack.
    """
    kind = type(value)
    if kind is dict or kind is FrozenDict:
        try:
            frozen = _fast_mapping(value, 0)
        except _Retry:
            return _snapshot_container(value, path)
        frozen._shallow = True
        return frozen
    if kind is list or kind is tuple:
        try:
            return _fast_sequence(value, 0)
        except _Retry:
            return _snapshot_container(value, path)
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
        if type(key) is not str or (not key.isascii() and _bad_string(key)):
            raise _Retry
        kind = type(item)
        if kind is str:
            if not item.isascii() and _bad_string(item):
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
            if not item.isascii() and _bad_string(item):
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


def _snapshot_container(root: Any, root_path: str) -> Any:
    """Validate and freeze iteratively: any depth, and errors that name their path."""
    # A frame is [is_mapping, iterator, keys, values, step-in-parent, id].
    # Children that are containers push a new frame; the parent resumes from its
    # iterator once the child is built (post-order), so tuples can be built at the end.
    max_int = MAX_SAFE_INTEGER
    inf = _INF
    dict_t, frozen_t, list_t, tuple_t = dict, FrozenDict, list, tuple
    str_t, int_t, float_t, bool_t = str, int, float, bool
    frames: list[Any] = []
    on_path: set[int] = set()

    def push(container: Any, step: object) -> None:
        ident = id(container)
        if ident in on_path:
            _fail(frames, step, "cycle: a container contains itself", root_path)
        on_path.add(ident)
        if type(container) is dict_t or type(container) is frozen_t:
            frames.append([True, iter(container.items()), [], [], step, ident])
        else:
            frames.append([False, iter(container), None, [], step, ident])

    push(root, _NO_STEP)
    result: Any = None
    while frames:
        frame = frames[-1]
        is_mapping, iterator, keys, values = frame[0], frame[1], frame[2], frame[3]
        descended = False
        if is_mapping:
            for key, item in iterator:
                if type(key) is not str_t or not key.isascii():
                    reason = _describe_key(key)
                    if reason:
                        _fail(frames, key, reason, root_path)
                keys.append(key)
                kind = type(item)
                if kind is str_t:
                    if not item.isascii() and _bad_string(item):
                        _fail(frames, key, "string contains a lone surrogate", root_path)
                elif kind is int_t:
                    if not -max_int <= item <= max_int:
                        _fail(frames, key, f"integer {item} is outside ±(2**53 - 1)", root_path)
                elif item is None or kind is bool_t:
                    pass
                elif kind is dict_t or kind is list_t or kind is tuple_t or kind is frozen_t:
                    push(item, key)
                    descended = True
                    break
                else:
                    problem = _bad_scalar(item)
                    if problem is not None:
                        _fail(frames, key, problem, root_path)
                values.append(item)
        else:
            for item in iterator:
                kind = type(item)
                if kind is str_t:
                    if not item.isascii() and _bad_string(item):
                        _fail(frames, len(values), "string contains a lone surrogate", root_path)
                elif kind is int_t:
                    if not -max_int <= item <= max_int:
                        _fail(
                            frames,
                            len(values),
                            f"integer {item} is outside ±(2**53 - 1)",
                            root_path,
                        )
                elif item is None or kind is bool_t:
                    pass
                elif kind is dict_t or kind is list_t or kind is tuple_t or kind is frozen_t:
                    push(item, len(values))
                    descended = True
                    break
                elif kind is float_t and -inf < item < inf and item != 0.0:
                    pass
                else:
                    problem = _bad_scalar(item)
                    if problem is not None:
                        _fail(frames, len(values), problem, root_path)
                values.append(item)
        if descended:
            continue
        frames.pop()
        on_path.discard(frame[5])
        built = frozen_t(zip(keys, values, strict=True)) if is_mapping else tuple_t(values)
        if frames:
            frames[-1][3].append(built)
        else:
            result = built
    return result


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
