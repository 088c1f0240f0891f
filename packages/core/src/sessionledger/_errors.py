"""Every error sessionledger raises on purpose, each with a stable ``code``.

Messages are free text; the context that identifies what failed (session id, seq, rule,
path, line, index) travels as keyword attributes and is appended to the message, so a
log line always names the session and the seq. Context arguments are keyword-only with
defaults so the errors survive a pickle round trip (``args`` holds only the message).
"""

from __future__ import annotations

from typing import Any, ClassVar


class LedgerError(Exception):
    """Base of every sessionledger error; ``code`` is stable, the message is not."""

    code: str = "LEDGER"
    #: Context attribute names appended to the message, in this order.
    _context: ClassVar[tuple[str, ...]] = ("session_id", "seq")

    session_id: str | None
    seq: int | None

    def __init__(
        self,
        message: str = "",
        *,
        code: str | None = None,
        session_id: str | None = None,
        seq: int | None = None,
        **context: Any,
    ) -> None:
        if code is not None:
            self.code = code
        self.session_id = session_id
        self.seq = seq
        for name, value in context.items():
            setattr(self, name, value)
        super().__init__(message)

    def __str__(self) -> str:
        message = str(self.args[0]) if self.args else ""
        parts = []
        for name in self._context:
            value = getattr(self, name, None)
            if value is not None:
                label = "session" if name == "session_id" else name
                parts.append(f"{label} {value!r}" if isinstance(value, str) else f"{label} {value}")
        return f"{message} [{', '.join(parts)}]" if parts else message


class JsonValueError(LedgerError, TypeError):
    """A value is not a JSON value (docs/events.md, "JSON values"); ``path`` names where."""

    code = "NOT_JSON"
    path: str | None

    def __init__(self, message: str = "", *, path: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, path=path, **kwargs)


class EventEnvelopeError(LedgerError):
    """An event envelope has missing, extra or ill-typed keys."""

    code = "BAD_ENVELOPE"


class EventDataError(LedgerError):
    """An event type's registered ``validate`` rejected the event's data, or (code
    ``TOO_LARGE``) the event is larger than its ledger's store can hold.

    A class of its own because data that is not a message is neither an envelope nor a
    message problem.
    """

    code = "BAD_DATA"


class HeaderError(LedgerError):
    """A session header field is invalid."""

    code = "BAD_HEADER"


class MessageShapeError(LedgerError):
    """A message carried by a surface event breaks the shape rules (docs/events.md)."""

    code = "BAD_MESSAGE"


class SeedError(LedgerError):
    """A seed event failed validation; ``index`` names it, ``__cause__`` says why."""

    code = "SEQ_GAP"
    _context = ("session_id", "index")
    index: int | None

    def __init__(self, message: str = "", *, index: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, index=index, **kwargs)


class HistoryFormatError(LedgerError):
    """A provider history given to an importer has no place in a session (not a list of
    messages, an unknown role or block, a tool result that answers no call); ``index``
    names the message."""

    code = "BAD_HISTORY"
    _context = ("index",)
    index: int | None

    def __init__(self, message: str = "", *, index: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, index=index, **kwargs)


class SurfaceError(LedgerError):
    """A surface operation or its provenance breaks the rules of docs/surface.md."""

    code = "BAD_SURFACE_OP"


class ReentrantAppendError(LedgerError):
    """``append`` was called from inside a hook of the same session."""

    code = "REENTRANT"


class InvariantError(LedgerError):
    """A turn/step/tool invariant vetoed an append; ``rule`` names the rule."""

    code = "INVARIANT"
    _context = ("session_id", "seq", "rule")
    rule: str | None

    def __init__(self, message: str = "", *, rule: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, rule=rule, **kwargs)


class ForkError(LedgerError):
    """A fork request cannot be honoured; ``code`` says which rule."""

    code = "INVALID_BOUNDARY"


class SessionExistsError(LedgerError):
    """A session with this id is already live or stored."""

    code = "SESSION_ALREADY_EXISTS"


class SessionNotFoundError(LedgerError, LookupError):
    """No session with this id exists where it was looked for."""

    code = "SESSION_NOT_FOUND"


class SessionDeletedError(SessionNotFoundError):
    """A followed session was deleted (or deleted and created anew) while its feed ran:
    the feed ends here, having yielded every event acknowledged before (docs/feed.md)."""

    code = "SESSION_DELETED"


class NotLiveError(LedgerError):
    """The session object is not the live one of this ledger."""

    code = "NOT_LIVE"


class SeqMismatchError(LedgerError):
    """A batch does not continue the stored log (for example a stale writer)."""

    code = "SEQ_MISMATCH"


class CorruptLogError(LedgerError):
    """The committed region of a stored log is damaged; nothing was modified."""

    code = "CORRUPT"
    _context = ("session_id", "seq", "path", "line")
    path: str | None
    line: int | None

    def __init__(
        self, message: str = "", *, path: str | None = None, line: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(message, path=path, line=line, **kwargs)


class FormatUnsupportedError(LedgerError):
    """A stored log or store uses a format this build does not read."""

    code = "FORMAT_NEWER"
    _context = ("session_id", "seq", "path")
    path: str | None

    def __init__(self, message: str = "", *, path: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, path=path, **kwargs)


class UnknownEventTypeError(LedgerError):
    """A ledger's session was asked to append (or seed) an event of a type its ledger
    does not know and that is not marked ignorable. Refused at the append site, the log
    unchanged, so that a ledger never accepts what it could not resume.

    It shares its code with ``FormatUnsupportedError``, which refuses such a type in a
    stored log on going live; ``event_type`` is the refused type's name.
    """

    code = "UNKNOWN_EVENT_TYPE"
    event_type: str | None

    def __init__(self, message: str = "", *, event_type: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, event_type=event_type, **kwargs)


class StorageRowError(LedgerError):
    """A stored physical record (such as a packed chunk row) is malformed."""

    code = "BAD_STORAGE_ROW"


class ReadBackMismatchError(LedgerError):
    """A whole log written at once (``SessionPersistence.publish``, what ``copy`` writes)
    read back other than written: ``difference`` says what differs, ``seq`` the first
    event that does. ``published`` tells whether the log was left in the store: a store
    that checks before publishing (every built-in one) publishes nothing, one that can
    only check afterwards leaves the log as it is (docs/backends.md, "whole logs")."""

    code = "READ_BACK_MISMATCH"
    difference: str | None
    published: bool

    def __init__(
        self,
        message: str = "",
        *,
        difference: str | None = None,
        published: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, difference=difference, published=published, **kwargs)


class SessionLockedError(LedgerError):
    """Another writer holds this session."""

    code = "LOCKED"


class StoreUnavailableError(LedgerError):
    """The store's server could not be reached or the connection to it was lost (for
    PostgreSQL: refused, reset, shut down, starting up). A write in flight may or may not
    have committed; retrying is safe. A live feed waits and retries (docs/feed.md)."""

    code = "UNAVAILABLE"


class ResourceLimitError(LedgerError, OSError):
    """The process or the medium ran out of something a write needs: descriptors
    (``EMFILE``), space (``ENOSPC``), quota, file size. Nothing acknowledged was lost and
    the failed write left nothing behind: free the resource (or raise the limit) and
    retry. It is an ``OSError`` too, with ``errno`` set.

    Running out of descriptors is a typed error (docs/durability.md, "one writer per
    session"), and a full disk is the same kind of failure.
    """

    code = "RESOURCE_LIMIT"
    _context = ("session_id", "path")
    path: str | None

    def __init__(
        self, message: str = "", *, errno: int | None = None, path: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(message, path=path, **kwargs)
        self.errno = errno


class BacklogFullError(LedgerError):
    """A ledger's write-behind already holds all the bytes it may (``max_pending_bytes``)
    because its store is slow, stalled or failing: the event was not appended. Flush (or
    let the store catch up) and append again.

    Refused at the append site, the log unchanged, so that a stalled store makes neither
    memory grow without bound nor anything committed be dropped (docs/durability.md,
    "limits and the backlog").
    """

    code = "BACKLOG_FULL"


class QueryError(LedgerError, ValueError):
    """A listing, search or prune was asked something it cannot answer: a malformed or
    foreign cursor, an unknown order, a bad limit, time or ``meta`` filter. Nothing was
    read or changed."""

    code = "BAD_QUERY"


class ConfigError(LedgerError):
    """The library was configured or called in a way it cannot honour."""

    code = "CONFIG"


class LedgerLoopError(ConfigError, RuntimeError):
    """A call cannot reach the event loop its ledger serves (docs/durability.md, "one
    event loop per ledger"): ``LOOP_NOT_RUNNING`` when that loop is not running (it
    stopped, or its ``asyncio.run`` ended), ``LOOP_WOULD_BLOCK`` when a synchronous call
    would wait on the very loop it runs on."""

    code = "LOOP_NOT_RUNNING"
