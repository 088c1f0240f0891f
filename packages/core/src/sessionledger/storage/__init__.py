"""Storage: the policy every backend shares (``SessionPersistence``: write-behind batches,
cold load, repair, listing, retention) over the primitives a backend implements
(``LogStore``), and the helpers a backend for local files or SQL rows builds on.

This namespace is the API for backend authors (docs/backends.md, docs/api.md); the
modules under it are internal. The first-party backends import only from here, from
``sessionledger`` and from ``sessionledger.testing``.
"""

from sessionledger.model._eventlog import LogRuns
from sessionledger.model._jsoncodec import dumps, loads
from sessionledger.storage._cancellation import in_thread, uninterrupted
from sessionledger.storage._claims import Claims
from sessionledger.storage._committed import check_version, scan_log, stored_header
from sessionledger.storage._files import (
    DIR_MODE,
    FILE_MODE,
    fsync_dir,
    make_private_dirs,
    missing_directories,
    open_private_file,
)
from sessionledger.storage._limits import PORTABLE_MAX_EVENT_BYTES
from sessionledger.storage._lines import LineRecords
from sessionledger.storage._links import (
    mount_points,
    own_status,
    pinned,
    refuse_mount_points,
    single_name_refusal,
)
from sessionledger.storage._listing import (
    SessionInfo,
    SessionPage,
    SessionQuery,
    StoredSummary,
    matches_query,
)
from sessionledger.storage._logstore import (
    UNPARSABLE,
    Batch,
    LogStore,
    RawBatch,
    RawLog,
    RawRecord,
    Repair,
    RepairReceipt,
    SearchRow,
    collector_paused,
    join_batches,
    parse_json,
)
from sessionledger.storage._memory import MemoryPersistence
from sessionledger.storage._persistence import BackendFactory, SessionPersistence
from sessionledger.storage._rows import member_count
from sessionledger.storage._stored import SalvageReport, StoredSession
from sessionledger.views._searching import IndexedText, TextQuery, indexed_texts
from sessionledger.views._summaries import SessionSummary, summarize

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "PORTABLE_MAX_EVENT_BYTES",
    "UNPARSABLE",
    "BackendFactory",
    "Batch",
    "Claims",
    "IndexedText",
    "LineRecords",
    "LogStore",
    "LogRuns",
    "MemoryPersistence",
    "RawBatch",
    "RawLog",
    "RawRecord",
    "Repair",
    "RepairReceipt",
    "SalvageReport",
    "SearchRow",
    "SessionInfo",
    "SessionPage",
    "SessionPersistence",
    "SessionQuery",
    "SessionSummary",
    "StoredSession",
    "StoredSummary",
    "TextQuery",
    "check_version",
    "collector_paused",
    "dumps",
    "fsync_dir",
    "in_thread",
    "indexed_texts",
    "join_batches",
    "loads",
    "make_private_dirs",
    "matches_query",
    "member_count",
    "missing_directories",
    "mount_points",
    "open_private_file",
    "own_status",
    "parse_json",
    "pinned",
    "refuse_mount_points",
    "scan_log",
    "single_name_refusal",
    "stored_header",
    "summarize",
    "uninterrupted",
]
