"""sessionledger: an append-only, provable event ledger for LLM agent sessions.

A harness appends one immutable event per fact (turns, streamed chunks, messages, tool
calls and results) to a session; each event's ``seq`` is its position in the log. The
model's history is derived from the log's surface, compaction shadows history instead of
deleting it, a crash mid-turn is closed by explicit repair events, and a ``Ledger`` stores
the log through a backend chosen by URL (``memory:``, ``jsonl:DIR``, ``sqlite:PATH``).

>>> import asyncio
>>> from sessionledger import Ledger, user_message
>>> async def first_session():
...     async with Ledger.open("memory:") as ledger:
...         session = ledger.create("hello")
...         session.append("turn/start", {"turn": 1})
...         session.append("user/message", user_message("hi"), surface_op="append")
...         await ledger.flush(session)  # durable from here on
...         return session.derive_messages()
>>> [(m["role"], m["content"][0]["text"]) for m in asyncio.run(first_session())]
[('user', 'hi')]

The user documentation is in the repository's ``docs/`` directory: ``docs/README.md``
is the index (events, the surface, reading, durability, storage formats, errors,
plugins, backends).

The names below are imported on first use (``sessionledger.Ledger``, ``from sessionledger
import Ledger``): importing the package alone costs next to nothing, so the command line
takes Ctrl-C over before the heavy imports run.
"""

from __future__ import annotations

import importlib
import sys
import types

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Final

    from sessionledger._errors import (
        BacklogFullError,
        ConfigError,
        CorruptLogError,
        EventDataError,
        EventEnvelopeError,
        ForkError,
        FormatUnsupportedError,
        HeaderError,
        HistoryFormatError,
        InvariantError,
        JsonValueError,
        LedgerError,
        LedgerLoopError,
        MessageShapeError,
        NotLiveError,
        QueryError,
        ReadBackMismatchError,
        ReentrantAppendError,
        ResourceLimitError,
        SeedError,
        SeqMismatchError,
        SessionExistsError,
        SessionLockedError,
        SessionNotFoundError,
        StorageRowError,
        SurfaceError,
        UnknownEventTypeError,
    )
    from sessionledger.model._derive import messages_at, transcript
    from sessionledger.model._events import (
        APPEND,
        SESSION_FORMAT_VERSION,
        Replace,
        SessionEvent,
        SessionHeader,
    )
    from sessionledger.model._registry import EventType, EventTypeRegistry
    from sessionledger.model._session import Session, SessionHooks
    from sessionledger.model._snapshot import FrozenDict, JsonValue, snapshot, thaw
    from sessionledger.model._surface import Replacement, SurfaceFold, fold_surface
    from sessionledger.model._vocabulary import (
        SURFACE_TYPES,
        Message,
        assistant_message,
        tool_call_block,
        tool_result,
        user_message,
    )
    from sessionledger.plugins._hookspecs import hookimpl, hookspec
    from sessionledger.runtime._ledger import Ledger
    from sessionledger.runtime._opening import open_store
    from sessionledger.storage._limits import Backlog

__all__ = [
    "APPEND",
    "SESSION_FORMAT_VERSION",
    "SURFACE_TYPES",
    "Backlog",
    "BacklogFullError",
    "ConfigError",
    "CorruptLogError",
    "EventDataError",
    "EventEnvelopeError",
    "EventType",
    "EventTypeRegistry",
    "ForkError",
    "FormatUnsupportedError",
    "FrozenDict",
    "HeaderError",
    "HistoryFormatError",
    "InvariantError",
    "JsonValue",
    "JsonValueError",
    "Ledger",
    "LedgerError",
    "LedgerLoopError",
    "Message",
    "MessageShapeError",
    "NotLiveError",
    "QueryError",
    "ReadBackMismatchError",
    "ReentrantAppendError",
    "Replace",
    "Replacement",
    "ResourceLimitError",
    "SeedError",
    "SeqMismatchError",
    "Session",
    "SessionEvent",
    "SessionExistsError",
    "SessionHeader",
    "SessionHooks",
    "SessionLockedError",
    "SessionNotFoundError",
    "StorageRowError",
    "SurfaceError",
    "SurfaceFold",
    "UnknownEventTypeError",
    "assistant_message",
    "fold_surface",
    "hookimpl",
    "hookspec",
    "messages_at",
    "open_store",
    "snapshot",
    "thaw",
    "tool_call_block",
    "tool_result",
    "transcript",
    "user_message",
]


#: Each module of the package and the names of it the package exports.
_EXPORTS: Final = {
    "sessionledger.model._derive": ("messages_at", "transcript"),
    "sessionledger._errors": (
        "BacklogFullError",
        "ConfigError",
        "CorruptLogError",
        "EventDataError",
        "EventEnvelopeError",
        "ForkError",
        "FormatUnsupportedError",
        "HeaderError",
        "HistoryFormatError",
        "InvariantError",
        "JsonValueError",
        "LedgerError",
        "LedgerLoopError",
        "MessageShapeError",
        "NotLiveError",
        "QueryError",
        "ReadBackMismatchError",
        "ReentrantAppendError",
        "ResourceLimitError",
        "SeedError",
        "SeqMismatchError",
        "SessionExistsError",
        "SessionLockedError",
        "SessionNotFoundError",
        "StorageRowError",
        "SurfaceError",
        "UnknownEventTypeError",
    ),
    "sessionledger.model._events": (
        "APPEND",
        "SESSION_FORMAT_VERSION",
        "Replace",
        "SessionEvent",
        "SessionHeader",
    ),
    "sessionledger.plugins._hookspecs": ("hookimpl", "hookspec"),
    "sessionledger.runtime._ledger": ("Ledger", "open_store"),
    "sessionledger.storage._limits": ("Backlog",),
    "sessionledger.model._registry": ("EventType", "EventTypeRegistry"),
    "sessionledger.model._session": ("Session", "SessionHooks"),
    "sessionledger.model._snapshot": ("FrozenDict", "JsonValue", "snapshot", "thaw"),
    "sessionledger.model._surface": ("Replacement", "SurfaceFold", "fold_surface"),
    "sessionledger.model._vocabulary": (
        "SURFACE_TYPES",
        "Message",
        "assistant_message",
        "tool_call_block",
        "tool_result",
        "user_message",
    ),
}
_MODULE_OF: Final = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'sessionledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """The package's module type: importing the submodule ``sessionledger.model._snapshot``
    binds it on the package, where the function of that name must stay."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "snapshot" and isinstance(value, types.ModuleType):
            value = value.snapshot
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
