"""The plugin hooks and the pluggy manager that finds plugins (entry points, per-ledger
plugin objects) and gathers their event types, validators, observers and backends.
Built on ``sessionledger.model`` only; the modules here are internal (docs/api.md)."""
