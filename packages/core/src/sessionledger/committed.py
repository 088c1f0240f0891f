"""What of a stored log is committed: the read path's rules (SPEC §2.2, §2.4, §11.2).

A store hands over a ``RawLog`` as it read it; ``scan_log`` decides what it means: the
header's format version and fields, the events of the committed region, and where a torn
tail starts. The rule is the same for every medium, so it lives here once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, final

from sessionledger.chunks import unpack_events
from sessionledger.errors import (
    CorruptLogError,
    FormatUnsupportedError,
    HeaderError,
    LedgerError,
)
from sessionledger.events import SESSION_FORMAT_VERSION, SessionEvent, SessionHeader
from sessionledger.logstore import UNPARSABLE, RawLog, RawRecord
from sessionledger.registry import EventTypeRegistry
from sessionledger.vocabulary import TURN_END

__all__ = [
    "ScannedLog",
    "check_event_types",
    "check_version",
    "scan_log",
    "stored_header",
]


@final
@dataclasses.dataclass(slots=True)
class ScannedLog:
    """A raw log after the committed-region rule: its header, the committed events, and
    the position where a torn tail starts (None when there is none)."""

    header: SessionHeader
    events: list[SessionEvent]
    torn_at: Any
    revision: str
    location: str | None

    @property
    def end_seq(self) -> int:
        """The seq after the last committed event (0 for an empty log)."""
        return self.events[-1].seq + 1 if self.events else 0


def check_version(header_json: Mapping[str, Any], location: str | None) -> None:
    """Refuse a stored header of another format version before anything else is read:
    a newer format may store everything else differently (SPEC §2.2)."""
    if not isinstance(header_json, Mapping):
        raise HeaderError("stored header is not a JSON object")
    version = header_json.get("version")
    session_id = header_json.get("id")
    label = session_id if type(session_id) is str else None
    if type(version) is not int:
        found = "none" if version is None else f"a {type(version).__name__}"
        raise HeaderError(f"stored header has no integer version ({found})", session_id=label)
    if version > SESSION_FORMAT_VERSION:
        raise FormatUnsupportedError(
            f"log format v{version} was written by a newer sessionledger (this build reads "
            f"v{SESSION_FORMAT_VERSION}); upgrade sessionledger to open it",
            code="FORMAT_NEWER",
            session_id=label,
            path=location,
        )
    if version < SESSION_FORMAT_VERSION:
        raise FormatUnsupportedError(
            f"log format v{version} is older than v{SESSION_FORMAT_VERSION} and this build "
            "has no upgrade path for it",
            code="FORMAT_OLDER",
            session_id=label,
            path=location,
        )


def stored_header(
    value: Mapping[str, Any], session_id: str | None, location: str | None
) -> SessionHeader:
    """Build the stored header; an invalid one is a damaged log (``CorruptLogError``)."""
    try:
        return SessionHeader.from_json(value)
    except HeaderError as error:
        raise CorruptLogError(
            f"stored header is invalid: {error}", session_id=session_id, path=location
        ) from error
    except RecursionError:  # see _decode
        raise CorruptLogError(
            "stored header is invalid: a field is nested too deeply",
            session_id=session_id,
            path=location,
        ) from None


def scan_log(session_id: str, raw: RawLog, *, contiguous_from: int | None) -> ScannedLog:
    """Apply the committed-region rule (SPEC §11.2) to a raw log.

    Records are decoded in order while they are valid and their seqs continue (from
    *contiguous_from*, or from the first record's when None: a read that started inside
    the log). The first damaged record starts a torn tail, unless a complete turn
    follows it: damage before a ``turn/end`` is inside the committed region
    (``CorruptLogError``, nothing returned).
    """
    check_version(raw.header, raw.location)
    header = stored_header(raw.header, session_id, raw.location)
    if header.id != session_id:
        raise CorruptLogError(
            f"stored header belongs to session {header.id!r}",
            session_id=session_id,
            path=raw.location,
        )
    events: list[SessionEvent] = []
    expected = contiguous_from
    issue: tuple[RawRecord, str] | None = None
    for record in raw.records:
        decoded = _decode(record)
        if issue is not None:
            # Damage followed by a complete turn is inside the committed region.
            if not isinstance(decoded, str) and any(event.type == TURN_END for event in decoded):
                bad, reason = issue
                raise CorruptLogError(
                    f"committed region is damaged at {bad.label}: {reason}",
                    session_id=session_id,
                    path=raw.location,
                    line=bad.line,
                )
            continue
        if isinstance(decoded, str):
            issue = (record, decoded)
            continue
        if expected is None:
            expected = decoded[0].seq
        if any(event.seq != expected + offset for offset, event in enumerate(decoded)):
            issue = (record, f"seq gap (expected {expected}, got {decoded[0].seq})")
            continue
        events.extend(decoded)
        expected += len(decoded)
    torn_at = issue[0].position if issue is not None else raw.torn_at
    return ScannedLog(header, events, torn_at, raw.revision, raw.location)


def check_event_types(
    registry: EventTypeRegistry,
    session_id: str,
    events: Sequence[SessionEvent],
    location: str | None,
) -> None:
    """Refuse a log holding a type *registry* does not know and the event does not mark
    ignorable (SPEC §2.4): interpreting it without its plugin could be wrong."""
    known = registry.declarations
    for event in events:
        if event.type not in known and not event.ignorable:
            raise FormatUnsupportedError(
                f"event type {event.type!r} is unknown to this build and not marked "
                "ignorable; refusing to interpret the log (written by a newer program?)",
                code="UNKNOWN_EVENT_TYPE",
                session_id=session_id,
                seq=event.seq,
                path=location,
            )


def _decode(record: RawRecord) -> list[SessionEvent] | str:
    """Decode one record into events, or return why it is not a valid record."""
    value = record.value
    if value is UNPARSABLE:
        return "not valid JSON"
    try:
        return unpack_events(value)
    except LedgerError as error:
        return f"{error}"
    except (TypeError, ValueError) as error:
        return f"malformed record: {error}"
    except RecursionError:
        # A value nested too deeply for an error message's repr (events.py formats
        # rejected fields with repr): damaged all the same, never a crash of the read.
        return "malformed record: a field is nested too deeply"
