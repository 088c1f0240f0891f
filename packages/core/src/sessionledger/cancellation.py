"""Work that a caller's cancellation does not cut short (docs/durability.md, "cancellation").

Some steps must end whole once they have begun: a statement queued on a database
connection, a transaction and its rollback, a claim taken on a lock, a batch written
together with what the policy records about it. Cut short by ``Task.cancel()`` at one of
their awaits, such a step can leave a connection inside a transaction that a later,
acknowledged write joins and a later rollback undoes, or a lock that nothing records.

``uninterrupted`` runs a step as a task of its own. A caller cancelled meanwhile waits
for the step to end, then raises ``CancelledError``: nothing the call began is still
running when it has unwound, and the step is whole. A step therefore includes what
records its outcome (a claim and the note that it is held, a batch and the cursor after
it). Only the loop's own shutdown (``asyncio.run`` cancels every task) reaches a step
itself, which is why each step also undoes itself when cancelled. Such undoing (a
rollback, letting a claim go) runs in the task that unwinds, never in a new task: the
shutdown may cancel a new task before it has run at all.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

__all__ = ["in_thread", "uninterrupted"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def uninterrupted(step: Awaitable[_T]) -> _T:
    """Await *step* to its end even if the calling task is cancelled meanwhile: the
    caller then waits for it, and raises ``CancelledError`` once it has ended (its
    result or error is dropped: a step records its own outcome)."""
    inner = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(inner)
    except asyncio.CancelledError:
        while not inner.done():
            try:
                await asyncio.wait((inner,))
            except asyncio.CancelledError:
                continue  # already on the way out; cancelled twice is cancelled once
        if not inner.cancelled():
            inner.exception()  # the cancellation is what the caller gets
        raise


async def in_thread(function: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run blocking *function* in a worker thread, ``uninterrupted``: a thread cannot be
    stopped, so a cancelled caller waits for it rather than leave it working unseen."""
    loop = asyncio.get_running_loop()
    return await uninterrupted(
        loop.run_in_executor(None, functools.partial(function, *args, **kwargs))
    )
