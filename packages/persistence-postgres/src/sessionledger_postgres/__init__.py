"""sessionledger-postgres: session logs in PostgreSQL, shared by many workers, on asyncpg.

Open it through a URL (``Ledger.open("postgresql://user@host/db?schema=sessionledger")``;
``postgres://`` works too) or construct ``PostgresPersistence(dsn)`` and pass it as
``Ledger(persistence=...)``. The URL schemes are registered by
``sessionledger_postgres.plugin`` through the ``sessionledger`` entry-point group.
"""

from sessionledger_postgres.store import PostgresPersistence

__all__ = ["PostgresPersistence"]
