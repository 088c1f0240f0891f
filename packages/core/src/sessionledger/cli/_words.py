"""Counted nouns in the command line's output: ``1 event``, ``2 events``, ``3 batches``.

Kept apart from ``render`` (which needs rich) so that the demo's child process, which
prints counts too, starts without it.
"""

from __future__ import annotations


def plural(count: int, noun: str) -> str:
    """Return ``"1 session"`` / ``"3 sessions"`` (``"2 batches"``)."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}es" if noun.endswith(("ch", "sh", "s", "x")) else f"{count} {noun}s"
