"""sessionledger-jsonl: the ``jsonl:DIR`` backend, one append-only JSONL file per session.

Installing the package registers the scheme through the ``sessionledger`` entry-point
group, so ``Ledger.open("jsonl:./sessions")`` works without importing anything from here.
Construct ``JsonlPersistence(root)`` directly to pass options such as ``fsync=False``.
"""

from __future__ import annotations

from sessionledger_jsonl.store import JsonlPersistence

__all__ = ["JsonlPersistence"]
