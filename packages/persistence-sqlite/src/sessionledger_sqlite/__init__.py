"""sessionledger-sqlite: session logs in one SQLite database, on aiosqlite (docs/formats.md).

Open it through a URL (``Ledger.open("sqlite:path/to/ledger.db")``, ``sqlite::memory:``)
or construct ``SqlitePersistence(path)`` and pass it as ``Ledger(persistence=...)``.
The URL scheme is registered by ``sessionledger_sqlite.plugin`` through the
``sessionledger`` entry-point group.
"""

from sessionledger_sqlite.store import SqlitePersistence

__all__ = ["SqlitePersistence"]
