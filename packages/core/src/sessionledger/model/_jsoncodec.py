"""Turn JSON values into compact UTF-8 bytes and back, at any nesting depth.

Every backend reads and writes through this module. orjson does the work whenever it
safely can; values 10,000 levels deep must be stored and loaded too, which orjson
cannot do, so an explicit-stack encoder and parser take over for deep values.

- Writing: orjson refuses lists and dicts nested deeper than about 254 levels, but it does
  not count tuples reliably: in orjson 3.13 a deep chain of tuples (which is what
  ``snapshot`` makes of nested lists) is serialized without any depth check and corrupts
  memory or overflows the native stack. So ``dumps`` first measures the nesting depth with
  a cheap level-by-level scan and gives orjson only values at most ``ORJSON_MAX_DEPTH``
  deep; deeper ones go to ``iterative_dumps``. Never call ``orjson.dumps`` on frozen values
  directly.
- Reading: orjson refuses documents nested deeper than 1024 levels with a clean error;
  ``loads`` then hands the text to ``iterative_loads``.

The fallbacks handle structure only (brackets, commas, colons, whitespace) and hand each
scalar leaf or token to orjson, so their output is byte-for-byte what orjson produces,
whatever orjson version is installed: orjson's float formatting has changed between
releases (3.11.7 started writing ``1e+30`` instead of ``1e30``), so a hand-written
formatter could only match one version.

Errors: a value that cannot be serialized raises ``JsonValueError``; malformed text raises
``JsonDecodeError`` (a ``ValueError`` defined here; orjson's own decode error is always
translated to it, never let through).
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from sessionledger._errors import JsonValueError
from sessionledger.model._snapshot import FrozenDict, is_shallow

# Passing dataclasses and datetimes through makes orjson refuse them (they are not JSON
# values: docs/events.md, "JSON values") instead of converting them silently; valid
# values are unaffected.
_DUMP_OPTIONS: Final = (
    orjson.OPT_STRICT_INTEGER | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)


class JsonDecodeError(ValueError):
    """Reject text that is not one well-formed JSON document.

    ``pos`` is a best-effort offset of the failure (orjson's, or a byte offset in the UTF-8
    text when the depth-unlimited parser found it), meant for messages only.
    """

    pos: int | None

    def __init__(self, message: str, pos: int | None = None) -> None:
        super().__init__(message)
        self.pos = pos


#: Deepest nesting ``dumps`` hands to orjson. orjson's own limit is 254 levels for lists and
#: dicts and none at all for tuples; staying well below it also keeps orjson's native
#: recursion short on threads with small stacks. Deeper values are rare and take the
#: explicit-stack encoder.
ORJSON_MAX_DEPTH: Final = 128

_LEAF_TYPES: Final = frozenset({str, int, float, bool, type(None)})


def _deeper_than(value: Any, limit: int) -> bool:
    """Tell whether *value* nests containers more than *limit* levels deep.

    Walks level by level; a container whose members are all plain scalars is settled by
    one C-level scan of their types, so the cost is about one step per container.
    Conservative at the boundary: a non-JSON leaf exactly at the limit counts as deeper.
    """
    level: list[Any] = [value]
    for _ in range(limit):
        below: list[Any] = []
        for item in level:
            kind = type(item)
            members: Any
            if kind is dict or kind is FrozenDict:
                members = item.values()
            elif kind is list or kind is tuple:
                members = item
            elif kind in _LEAF_TYPES:
                continue
            elif isinstance(item, dict):
                members = dict.values(item)
            elif isinstance(item, (list, tuple)):
                members = item
            else:
                continue
            if not _LEAF_TYPES.issuperset(map(type, members)):
                below.extend(members)
        if not below:
            return False
        level = below
    return True


def _is_shallow_record(record: dict[str, Any]) -> bool:
    """Tell whether every member of *record* is a scalar, a flat sequence or mapping of
    scalars, or a value ``snapshot`` proved shallow (an event envelope, in practice)."""
    for item in record.values():
        kind = type(item)
        if kind in _LEAF_TYPES:
            continue
        if kind is FrozenDict:
            if not is_shallow(item):
                return False
        elif kind is tuple or kind is list:
            if not _LEAF_TYPES.issuperset(map(type, item)):
                return False
        elif kind is dict:
            if not _LEAF_TYPES.issuperset(map(type, item.values())):
                return False
        else:
            return False
    return True


def _is_depth_error(error: Exception) -> bool:
    # orjson has no dedicated exception type for its nesting limits; its messages say
    # "Recursion limit reached" (dumps) and "depth limit exceeded" (loads).
    message = str(error).lower()
    return "recursion" in message or "depth" in message


def dumps(value: Any) -> bytes:
    """Serialize a JSON value to compact UTF-8 JSON bytes, at any nesting depth.

    *value* is expected to be validated already (``snapshot`` output or plain JSON data).
    Keys keep their order; non-ASCII text is written as UTF-8, not escaped; the bytes are
    exactly what ``orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER)`` writes for a
    value orjson accepts. Raises ``JsonValueError`` for anything that is not serializable
    (a set, bytes, a non-``str`` key, an integer beyond ±(2**53 - 1), a lone surrogate, a
    dataclass or datetime, a cycle).
    """
    # The write path's common case (an event envelope around snapshot data) is settled
    # without the depth scan, which would cost several times the dump itself.
    shallow = (type(value) is dict and _is_shallow_record(value)) or (
        type(value) is FrozenDict and is_shallow(value)
    )
    if not shallow and _deeper_than(value, ORJSON_MAX_DEPTH):
        # Also where a cycle ends up; the fallback reports it.
        return iterative_dumps(value)
    try:
        return orjson.dumps(value, option=_DUMP_OPTIONS)
    except TypeError as error:  # orjson.JSONEncodeError is TypeError itself
        if _is_depth_error(error):
            # Only reachable through containers the depth scan does not know about.
            return iterative_dumps(value)
        raise JsonValueError(f"value cannot be serialized as JSON: {error}") from error


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse one JSON document into plain ``dict``/``list`` values, at any nesting depth.

    The result matches ``orjson.loads`` exactly (``-0`` is the int 0, ``1.0`` a float,
    integers outside the 64-bit range become floats, a repeated key keeps its last value).
    The caller validates and freezes it. Malformed text raises ``JsonDecodeError``; only
    orjson's depth-limit refusal sends the text to the slower depth-unlimited parser.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as error:
        if not _is_depth_error(error):
            raise JsonDecodeError(str(error), error.pos) from error
    return iterative_loads(data)


# --- encoder -------------------------------------------------------------------------------

_END: Final = object()  # sentinel for an exhausted container iterator


def iterative_dumps(value: Any) -> bytes:
    """Serialize like ``dumps`` with an explicit stack instead of recursion.

    ``dumps`` calls this for values nested deeper than ``ORJSON_MAX_DEPTH``; it is public
    so tests and benchmarks can compare it with orjson directly. Containers are the types
    orjson serializes as such (``dict`` and its subclasses such as ``FrozenDict``, ``list``
    and its subclasses, exact ``tuple``); every other value is a leaf encoded by orjson
    itself, so scalars come out byte-identical. Raises ``JsonValueError`` like ``dumps``.
    """
    encode = orjson.dumps
    options = _DUMP_OPTIONS
    out: list[bytes] = []
    emit = out.append
    key_cache: dict[str, bytes] = {}  # '"key":' fragments; object keys repeat

    def key_fragment(key: object) -> bytes:
        if type(key) is not str:
            # orjson takes exactly str keys (not even subclasses) without OPT_NON_STR_KEYS.
            raise JsonValueError(
                f"object key {key!r} of type {type(key).__qualname__} is not a str"
            )
        fragment = key_cache.get(key)
        if fragment is None:
            fragment = key_cache[key] = encode(key, None, options) + b":"
        return fragment

    # The innermost open container lives in locals: the container (None at top level),
    # whether it is an object, and its position (an index into a sequence, an items
    # iterator for an object). Enclosing ones wait on three parallel stacks, which keeps
    # the walk from allocating garbage-collected objects per level.
    container: Any = None
    is_object = False
    position: Any = 0
    containers: list[Any] = []
    kinds: list[bool] = []
    positions: list[Any] = []
    open_ids: set[int] = set()  # containers on the current path, to detect cycles
    current: Any = value
    try:
        while True:
            kind = type(current)
            if kind is str or kind is int or kind is float:
                emit(encode(current, None, options))
            elif current is None:
                emit(b"null")
            elif kind is bool:
                emit(b"true" if current else b"false")
            else:
                if kind is dict or kind is FrozenDict:
                    opens: bool | None = True
                elif kind is list or kind is tuple:
                    opens = False
                elif isinstance(current, dict):
                    opens = True
                elif isinstance(current, list):
                    opens = False
                else:  # str/int subclasses, enums...: whatever orjson does with them
                    emit(encode(current, None, options))
                    opens = None
                if opens is not None:
                    if not current:
                        emit(b"{}" if opens else b"[]")
                    else:
                        if id(current) in open_ids:
                            raise JsonValueError(
                                "value cannot be serialized as JSON: it contains itself"
                            )
                        open_ids.add(id(current))
                        if container is not None:
                            containers.append(container)
                            kinds.append(is_object)
                            positions.append(position)
                        container = current
                        is_object = opens
                        if opens:
                            position = iter(dict.items(container))
                            key, current = next(position)
                            emit(b"{")
                            emit(key_fragment(key))
                        else:
                            position = 0
                            current = container[0]
                            emit(b"[")
                        continue
            # The current value is complete: close exhausted containers, then move on to
            # the next member of the innermost open one.
            while True:
                if container is None:
                    return b"".join(out)
                if is_object:
                    member: Any = next(position, _END)
                    if member is not _END:
                        key, current = member
                        emit(b",")
                        emit(key_fragment(key))
                        break
                    emit(b"}")
                else:
                    position += 1
                    if position < len(container):
                        current = container[position]
                        emit(b",")
                        break
                    emit(b"]")
                open_ids.discard(id(container))
                if containers:
                    container = containers.pop()
                    is_object = kinds.pop()
                    position = positions.pop()
                else:
                    container = None
    except JsonValueError:
        raise
    except TypeError as error:  # orjson refused a leaf
        raise JsonValueError(f"value cannot be serialized as JSON: {error}") from error


# --- parser --------------------------------------------------------------------------------

# JSON whitespace is exactly space, tab, LF and CR (RFC 8259 §2).
_WHITESPACE: Final = re.compile(rb"[ \t\n\r]*+")
_WHITESPACE_BYTES: Final = frozenset(b" \t\n\r")
# A string token up to its closing quote; its content is checked by orjson (escapes,
# control characters, surrogate pairs, UTF-8).
_STRING: Final = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
_NUMBER: Final = re.compile(rb"-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][-+]?+[0-9]++)?+")
_LITERALS: Final = ((b"true", True), (b"false", False), (b"null", None))
_QUOTE, _OPEN_ARRAY, _CLOSE_ARRAY = ord('"'), ord("["), ord("]")
_OPEN_OBJECT, _CLOSE_OBJECT, _COMMA, _COLON = ord("{"), ord("}"), ord(","), ord(":")


def _describe(text: bytes, pos: int) -> str:
    return "end of data" if pos >= len(text) else f"{text[pos : pos + 1]!r}"


def _skip(text: bytes, pos: int) -> int:
    if pos < len(text) and text[pos] in _WHITESPACE_BYTES:
        return _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]
    return pos


def _scalar_token(text: bytes, pos: int, token: bytes) -> Any:
    try:
        return orjson.loads(token)
    except orjson.JSONDecodeError as error:
        raise JsonDecodeError(f"{error.msg} at byte {pos}", pos) from error


def _parse_string(text: bytes, pos: int, cache: dict[bytes, str]) -> tuple[str, int]:
    match = _STRING.match(text, pos)
    if match is None:
        raise JsonDecodeError(f"unterminated string starting at byte {pos}", pos)
    token = match.group()
    value = cache.get(token)
    if value is None:
        value = _scalar_token(text, pos, token)
        if len(token) <= 64:  # object keys repeat; long texts rarely do
            cache[token] = value
    return value, match.end()


def _parse_key(text: bytes, pos: int, cache: dict[bytes, str]) -> tuple[str, int]:
    """Parse ``"key" :`` at *pos* (whitespace already skipped); return the key and the
    position of its value (whitespace skipped)."""
    if pos >= len(text) or text[pos] != _QUOTE:
        found = _describe(text, pos)
        raise JsonDecodeError(f"expected a string key at byte {pos}, found {found}", pos)
    key, pos = _parse_string(text, pos, cache)
    pos = _skip(text, pos)
    if pos >= len(text) or text[pos] != _COLON:
        raise JsonDecodeError(f"expected ':' at byte {pos}, found {_describe(text, pos)}", pos)
    return key, _skip(text, pos + 1)


def iterative_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse like ``loads`` with an explicit stack instead of recursion.

    ``loads`` calls this only when orjson refuses the text for its depth; it is public so
    tests and benchmarks can compare it with orjson directly. The parser is strict RFC 8259
    (no NaN/Infinity, trailing commas, comments, leading zeros or byte order mark) and hands
    every string and number token to orjson, so scalars decode exactly as orjson decodes
    them: control characters and lone surrogate escapes are rejected, numbers keep orjson's
    int/float rules.
    """
    if isinstance(data, str):
        try:
            text = data.encode("utf-8")
        except UnicodeEncodeError as error:
            raise JsonDecodeError(f"text is not valid Unicode: {error}", error.start) from None
    else:
        text = bytes(data)
    end = len(text)
    cache: dict[bytes, str] = {}
    # containers[i] is an open list or dict; keys[i] the key awaiting its value (dicts only).
    containers: list[Any] = []
    keys: list[str | None] = []
    pos = _skip(text, 0)
    while True:
        # A value starts at pos.
        if pos >= end:
            raise JsonDecodeError(f"expected a JSON value at byte {pos}, found end of data", pos)
        char = text[pos]
        value: Any
        if char == _OPEN_ARRAY:
            pos = _skip(text, pos + 1)
            if pos < end and text[pos] == _CLOSE_ARRAY:
                value = []
                pos += 1
            else:
                containers.append([])
                keys.append(None)
                continue
        elif char == _OPEN_OBJECT:
            pos = _skip(text, pos + 1)
            if pos < end and text[pos] == _CLOSE_OBJECT:
                value = {}
                pos += 1
            else:
                key, pos = _parse_key(text, pos, cache)
                containers.append({})
                keys.append(key)
                continue
        elif char == _QUOTE:
            value, pos = _parse_string(text, pos, cache)
        else:
            match = _NUMBER.match(text, pos)
            if match is not None:
                value = _scalar_token(text, pos, match.group())
                pos = match.end()
            else:
                for word, literal in _LITERALS:
                    if text.startswith(word, pos):
                        value = literal
                        pos += len(word)
                        break
                else:
                    raise JsonDecodeError(
                        f"expected a JSON value at byte {pos}, found {_describe(text, pos)}", pos
                    )
        # A value is complete: store it in the innermost container, closing containers
        # as long as their closing bracket follows.
        while True:
            pos = _skip(text, pos)
            if not containers:
                if pos != end:
                    raise JsonDecodeError(f"unexpected data after the document at byte {pos}", pos)
                return value
            container = containers[-1]
            char = text[pos] if pos < end else -1
            if type(container) is list:
                container.append(value)
                if char == _COMMA:
                    pos = _skip(text, pos + 1)
                    break
                if char != _CLOSE_ARRAY:
                    raise JsonDecodeError(
                        f"expected ',' or ']' at byte {pos}, found {_describe(text, pos)}", pos
                    )
            else:
                container[keys[-1]] = value
                if char == _COMMA:
                    keys[-1], pos = _parse_key(text, _skip(text, pos + 1), cache)
                    break
                if char != _CLOSE_OBJECT:
                    raise JsonDecodeError(
                        f"expected ',' or '}}' at byte {pos}, found {_describe(text, pos)}", pos
                    )
            containers.pop()
            keys.pop()
            value = container
            pos += 1
