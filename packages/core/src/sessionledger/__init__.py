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

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    # What type checkers see: the same names as _EXPORTS, each re-exported explicitly
    # (packages/core/tests/test_public_api.py checks that the two agree).
    from sessionledger._errors import (
        BacklogFullError as BacklogFullError,
        ConfigError as ConfigError,
        CorruptLogError as CorruptLogError,
        EventDataError as EventDataError,
        EventEnvelopeError as EventEnvelopeError,
        ForkError as ForkError,
        FormatUnsupportedError as FormatUnsupportedError,
        HeaderError as HeaderError,
        HistoryFormatError as HistoryFormatError,
        InvariantError as InvariantError,
        JsonValueError as JsonValueError,
        LedgerError as LedgerError,
        LedgerLoopError as LedgerLoopError,
        MessageShapeError as MessageShapeError,
        NotLiveError as NotLiveError,
        QueryError as QueryError,
        ReadBackMismatchError as ReadBackMismatchError,
        ReentrantAppendError as ReentrantAppendError,
        ResourceLimitError as ResourceLimitError,
        SeedError as SeedError,
        SeqMismatchError as SeqMismatchError,
        SessionDeletedError as SessionDeletedError,
        SessionExistsError as SessionExistsError,
        SessionLockedError as SessionLockedError,
        SessionNotFoundError as SessionNotFoundError,
        StorageRowError as StorageRowError,
        StoreUnavailableError as StoreUnavailableError,
        SurfaceError as SurfaceError,
        UnknownEventTypeError as UnknownEventTypeError,
    )
    from sessionledger.model._derive import (
        messages_at as messages_at,
        transcript as transcript,
    )
    from sessionledger.model._events import (
        APPEND as APPEND,
        SESSION_FORMAT_VERSION as SESSION_FORMAT_VERSION,
        Replace as Replace,
        SessionEvent as SessionEvent,
        SessionHeader as SessionHeader,
    )
    from sessionledger.model._registry import (
        EventType as EventType,
        EventTypeRegistry as EventTypeRegistry,
    )
    from sessionledger.model._repair import (
        TOOL_NOT_STARTED as TOOL_NOT_STARTED,
        TOOL_OUTCOME_UNKNOWN as TOOL_OUTCOME_UNKNOWN,
    )
    from sessionledger.model._session import (
        Session as Session,
        SessionHooks as SessionHooks,
    )
    from sessionledger.model._snapshot import (
        FrozenDict as FrozenDict,
        JsonValue as JsonValue,
        snapshot as snapshot,
        thaw as thaw,
    )
    from sessionledger.model._surface import (
        Replacement as Replacement,
        SurfaceFold as SurfaceFold,
        fold_surface as fold_surface,
    )
    from sessionledger.model._vocabulary import (
        ASSISTANT_CHUNK as ASSISTANT_CHUNK,
        ASSISTANT_MESSAGE as ASSISTANT_MESSAGE,
        REQUEST_CONTEXT as REQUEST_CONTEXT,
        REQUEST_HEADER as REQUEST_HEADER,
        SESSION_END_SEED as SESSION_END_SEED,
        STEP_END as STEP_END,
        STEP_START as STEP_START,
        SURFACE_TYPES as SURFACE_TYPES,
        TOOL_CALL as TOOL_CALL,
        TOOL_PAUSED as TOOL_PAUSED,
        TOOL_RESULT as TOOL_RESULT,
        TURN_END as TURN_END,
        TURN_START as TURN_START,
        USER_MESSAGE as USER_MESSAGE,
        Message as Message,
        assistant_message as assistant_message,
        tool_call_block as tool_call_block,
        tool_result as tool_result,
        user_message as user_message,
    )
    from sessionledger.plugins._hookspecs import (
        hookimpl as hookimpl,
        hookspec as hookspec,
    )
    from sessionledger.runtime._hopping import (
        LedgerThread as LedgerThread,
        on_ledger_loop as on_ledger_loop,
        wait_on_ledger_loop as wait_on_ledger_loop,
    )
    from sessionledger.runtime._ledger import (
        Ledger as Ledger,
    )
    from sessionledger.runtime._opening import (
        open_store as open_store,
    )
    from sessionledger.storage._feed import (
        FeedItem as FeedItem,
        SessionFeed as SessionFeed,
        StoreFeed as StoreFeed,
    )
    from sessionledger.storage._limits import (
        Backlog as Backlog,
    )
    from sessionledger.views._formats import (
        to_anthropic_messages as to_anthropic_messages,
        to_openai_messages as to_openai_messages,
    )
    from sessionledger.views._importing import (
        from_anthropic_messages as from_anthropic_messages,
        from_openai_messages as from_openai_messages,
    )

#: The public API: each internal module and the names of it the package exports. The one
#: list of public names (docs/api.md); ``__all__`` is made from it.
_EXPORTS = {
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
        "SessionDeletedError",
        "SessionExistsError",
        "SessionLockedError",
        "SessionNotFoundError",
        "StorageRowError",
        "StoreUnavailableError",
        "SurfaceError",
        "UnknownEventTypeError",
    ),
    "sessionledger.model._derive": (
        "messages_at",
        "transcript",
    ),
    "sessionledger.model._events": (
        "APPEND",
        "SESSION_FORMAT_VERSION",
        "Replace",
        "SessionEvent",
        "SessionHeader",
    ),
    "sessionledger.model._repair": ("TOOL_NOT_STARTED", "TOOL_OUTCOME_UNKNOWN"),
    "sessionledger.views._formats": ("to_anthropic_messages", "to_openai_messages"),
    "sessionledger.views._importing": ("from_anthropic_messages", "from_openai_messages"),
    "sessionledger.model._registry": (
        "EventType",
        "EventTypeRegistry",
    ),
    "sessionledger.model._session": (
        "Session",
        "SessionHooks",
    ),
    "sessionledger.model._snapshot": (
        "FrozenDict",
        "JsonValue",
        "snapshot",
        "thaw",
    ),
    "sessionledger.model._surface": (
        "Replacement",
        "SurfaceFold",
        "fold_surface",
    ),
    "sessionledger.model._vocabulary": (
        "ASSISTANT_CHUNK",
        "ASSISTANT_MESSAGE",
        "REQUEST_CONTEXT",
        "REQUEST_HEADER",
        "SESSION_END_SEED",
        "STEP_END",
        "STEP_START",
        "SURFACE_TYPES",
        "TOOL_CALL",
        "TOOL_PAUSED",
        "TOOL_RESULT",
        "TURN_END",
        "TURN_START",
        "USER_MESSAGE",
        "Message",
        "assistant_message",
        "tool_call_block",
        "tool_result",
        "user_message",
    ),
    "sessionledger.plugins._hookspecs": (
        "hookimpl",
        "hookspec",
    ),
    "sessionledger.runtime._hopping": (
        "LedgerThread",
        "on_ledger_loop",
        "wait_on_ledger_loop",
    ),
    "sessionledger.runtime._ledger": ("Ledger",),
    "sessionledger.runtime._opening": ("open_store",),
    "sessionledger.storage._feed": ("FeedItem", "SessionFeed", "StoreFeed"),
    "sessionledger.storage._limits": ("Backlog",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF, key=lambda name: (not name.isupper(), not name[0].isupper(), name))  # noqa: PLE0605


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'sessionledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
