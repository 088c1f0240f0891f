"""The store's connections, and what a forked child does with the ones it inherits.

A child made by ``fork`` (``multiprocessing``'s "fork" start method, ``os.fork``) shares
every socket of its parent. Were it to keep them, a SIGKILLed writer's claims would live
on in its worker: the server drops an advisory lock only when the last copy of the
connection's socket is closed (docs/durability.md, "one writer per session"). Right
after a fork, the child therefore points each inherited connection's descriptor at
``/dev/null``: the socket is the parent's alone again, and whatever the child's copy of
the connection object might later send (a Terminate on garbage collection, say) goes
nowhere, so the child never speaks to the server on the parent's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from typing import Any

import asyncpg

__all__ = ["TrackedConnection", "disown_inherited"]

_OPEN: weakref.WeakSet[TrackedConnection] = weakref.WeakSet()


class TrackedConnection(asyncpg.Connection):
    """An asyncpg connection whose socket a forked child can let go of."""

    _transport: asyncio.BaseTransport | None  # asyncpg's own, declared for the type checker

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _OPEN.add(self)

    def socket_descriptor(self) -> int | None:
        """The descriptor of the connection's socket, or None once it is closed."""
        # asyncpg keeps its transport to itself; asyncio's transport gives the socket.
        transport = self._transport
        if transport is None:
            return None
        sock = transport.get_extra_info("socket")
        descriptor = -1 if sock is None else sock.fileno()
        return descriptor if descriptor >= 0 else None


def disown_inherited() -> None:
    """In a forked child: put ``/dev/null`` where each inherited connection's socket was.

    Run by ``os.register_at_fork``, before the child runs any other code. The descriptor
    numbers stay taken, so nothing the child opens later can be mistaken for a socket.
    """
    descriptors = {
        descriptor
        for connection in list(_OPEN)
        if (descriptor := connection.socket_descriptor()) is not None
    }
    _OPEN.clear()
    if not descriptors:
        return
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            for descriptor in descriptors:
                with contextlib.suppress(OSError):
                    os.dup2(null, descriptor, inheritable=False)
        finally:
            os.close(null)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=disown_inherited)
