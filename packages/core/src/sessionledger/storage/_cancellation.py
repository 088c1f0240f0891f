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

A task no caller can cancel (``shielded_task``: write-behind's writes, a closing, an
``uninterrupted`` step itself) runs the steps it awaits inline: only the loop's shutdown
reaches it, and that reaches a task of their own just the same, so a task per step would
only cost a loop turn.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")


#: Set in the context of a task no caller can cancel.
_SHIELDED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sessionledger_shielded", default=False
)


def shielded_task(step: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
    """Start *step* as a task that its starter keeps from every caller's cancellation
    (it awaits it through ``asyncio.shield`` or not at all): steps it runs through
    ``uninterrupted`` then run inline."""
    context = contextvars.copy_context()
    context.run(_SHIELDED.set, True)
    return asyncio.get_running_loop().create_task(step, context=context)


async def uninterrupted(step: Awaitable[_T]) -> _T:
    """Await *step* to its end even if the calling task is cancelled meanwhile: the
    caller then waits for it, and raises ``CancelledError`` once it has ended (its
    result or error is dropped: a step records its own outcome)."""
    if _SHIELDED.get():
        return await step  # no caller can cancel this task: the step is whole as it is
    inner = shielded_task(step) if asyncio.iscoroutine(step) else asyncio.ensure_future(step)
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
