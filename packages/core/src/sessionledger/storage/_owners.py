"""Who writes each session of one backend object: the store's claim, and the owner it is
held for.

Ownership belongs to a ``Ledger``, not to the backend object it writes through
(docs/durability.md, "one writer per session"). The store's claim (a lock byte, an
advisory lock) is taken once per backend object, and keeps other objects and processes
out; on top of it each session records the owner it is held for, so that two ledgers
built on one backend object are two writers and the second is refused as another process
would be. A call made directly on the backend object, naming no owner, writes as the
backend object itself. Owners are kept weakly: a ledger that is garbage-collected lets go
of its sessions here, as a process that dies lets go of its claims.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, final

from sessionledger._errors import SessionLockedError
from sessionledger.storage._logstore import LogStore


@final
class Owner:
    """Stands for one writer, such as a ``Ledger``, in the backend objects it writes
    through. It refers to nothing, so a ledger dropped with its sessions is freed at once
    (and its sessions with it)."""

    __slots__ = ("__weakref__",)


@final
class Owners:
    """The writers of the sessions *backend* stores through *store*.

    *registered* maps the ids of sessions registered for an owner and not stored yet;
    the entry of an owner that was garbage-collected is dropped from it.
    """

    __slots__ = ("_backend", "_held", "_registered", "_store", "_users", "claimed")

    def __init__(self, store: LogStore, backend: object, registered: dict[str, Any]) -> None:
        self._store = store
        self._backend = weakref.ref(backend)  # weak: the backend holds this object
        self._registered = registered
        self._held: dict[str, weakref.ref[object]] = {}
        self._users: weakref.WeakSet[object] = weakref.WeakSet()
        #: The sessions whose store claim this backend object holds.
        self.claimed: set[str] = set()

    def writer(self, owner: object | None) -> object:
        """The owner a call writes as: *owner*, or the backend object for a direct call."""
        if owner is not None:
            return owner
        backend = self._backend()
        assert backend is not None  # the backend holds this object
        return backend

    def holder(self, session_id: str) -> object | None:
        """The live owner holding *session_id*, or None."""
        ref = self._held.get(session_id)
        if ref is None:
            return None
        holder = ref()
        if holder is None:
            del self._held[session_id]
            self._registered.pop(session_id, None)
        return holder

    def refuse_others(self, session_id: str, owner: object) -> None:
        """Raise ``SessionLockedError`` when an owner other than *owner* holds the session."""
        holder = self.holder(session_id)
        if holder is None or holder is owner:
            return
        who = (
            "calls made directly on this backend object hold the session"
            if holder is self._backend()
            else "another Ledger built on this same backend object holds the session"
        )
        raise SessionLockedError(
            f"{who} (pid {os.getpid()}); it is released when that writer releases, deletes "
            "or closes it",
            session_id=session_id,
        )

    def hold(self, session_id: str, owner: object) -> None:
        """Record *owner* as the session's writer (a new session's, before it is stored)."""
        self._held[session_id] = weakref.ref(owner)

    def held_by(self, owner: object) -> list[str]:
        """The sessions *owner* holds."""
        return [session_id for session_id in list(self._held) if self.holder(session_id) is owner]

    async def claim(self, session_id: str, owner: object) -> None:
        """Become *session_id*'s one writer, for *owner*, until released."""
        self.refuse_others(session_id, owner)
        if session_id not in self.claimed:
            await self._store.claim(session_id)
            self.claimed.add(session_id)
        self.hold(session_id, owner)

    @contextlib.asynccontextmanager
    async def owning(
        self, session_id: str, owner: object, *, undo: Callable[[str], None] | None = None
    ) -> AsyncIterator[None]:
        """Hold *session_id* for *owner* for the body and after it; a claim made here is
        let go again (and *undo* called with the id) when the body or the claim itself
        fails or is cancelled, so no claim is left that nothing records."""
        self.refuse_others(session_id, owner)
        fresh = session_id not in self.claimed
        registered = self.holder(session_id) is not None
        try:
            await self.claim(session_id, owner)
            yield
        except BaseException:
            if fresh:
                self.claimed.discard(session_id)
                if not registered:
                    self._held.pop(session_id, None)
                if undo is not None:
                    undo(session_id)
                await self._store.release(session_id)
            raise

    async def release(self, session_id: str) -> None:
        """Let go of the session: its owner and the store's claim."""
        self._held.pop(session_id, None)
        self.claimed.discard(session_id)
        await self._store.release(session_id)

    def attach(self, user: object) -> None:
        """Count *user* (a ledger's ``Owner``) among the users of the backend object."""
        self._users.add(user)

    def detach(self, user: object) -> bool:
        """Stop counting *user*; tell whether another user remains."""
        self._users.discard(user)
        return len(self._users) > 0

    def forget(self, owner: object | None = None) -> None:
        """Forget the owners (only *owner*'s sessions, when given), keeping the claims:
        the backend object is letting go of everything, or *owner* is gone."""
        for session_id in self.held_by(owner) if owner is not None else list(self._held):
            del self._held[session_id]
            self._registered.pop(session_id, None)
        if owner is None:
            self.claimed.clear()
