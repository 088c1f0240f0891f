"""The event model: values, events, the in-memory log, the surface, the vocabulary of
core event types and the registry plugins add to, crash repair, and one session in memory
(append, fold, derive). Nothing here does I/O. Public names are exported by
``sessionledger`` itself (docs/api.md); the modules here are internal."""
