"""Failpoints: named places in the I/O paths where a test can freeze a process to kill it.

A crash test sets ``SESSIONLEDGER_FAILPOINT=<name>`` (or ``<name>:<N>``) in a child's
environment. When the child reaches that point (the N-th time, default the first), it
writes ``FAILPOINT <name> <pid>`` to stderr and blocks forever, so the parent can SIGKILL
it at exactly that instruction. Without the variable every call returns at once. With
``SESSIONLEDGER_FAILPOINT_ACTION=interrupt`` as well, the point sends its own process
SIGINT instead, as a Ctrl-C arriving right there would, and carries on.

The variable is read on the first call, never at import, and cached for the life of the
process. The disabled check is one global read and one dict lookup; failpoints sit on
storage paths (per batch), never on ``Session.append``.

The names are a stable, documented list (``tests/RELIABILITY.md`` and each backend's
README): ``core.*`` here and in ``persistence.py``/``writebehind.py``/``publishing.py``,
``jsonl.*``, ``sqlite.*`` and ``postgresql.*`` in the backends.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Final

from sessionledger._errors import ConfigError

__all__ = ["ACTION_VARIABLE", "ENVIRONMENT_VARIABLE", "failpoint", "failpoint_armed"]

#: The environment variable that arms one failpoint: ``name`` or ``name:N``.
ENVIRONMENT_VARIABLE: Final = "SESSIONLEDGER_FAILPOINT"
#: What the armed point does: ``block`` (the default) waits to be killed, ``interrupt``
#: sends the process SIGINT (Ctrl-C) and carries on.
ACTION_VARIABLE: Final = "SESSIONLEDGER_FAILPOINT_ACTION"
_ACTIONS: Final = ("block", "interrupt")

# name -> the hit that blocks (1-based); None until the first call reads the environment.
_armed: dict[str, int] | None = None
_interrupts = False  # the armed point sends SIGINT instead of blocking
_hits: dict[str, int] = {}
_lock = threading.Lock()  # backends hit failpoints from worker threads


def _load() -> dict[str, int]:
    global _armed, _interrupts  # noqa: PLW0603 - read once, on first use (never at import)
    action = os.environ.get(ACTION_VARIABLE, "").strip() or "block"
    if action not in _ACTIONS:
        raise ConfigError(f"{ACTION_VARIABLE}={action!r} is not one of {', '.join(_ACTIONS)}")
    _interrupts = action == "interrupt"
    spec = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    armed: dict[str, int] = {}
    if spec:
        name, colon, count = spec.rpartition(":")
        if not colon:
            name, count = spec, "1"
        if not name or not count.isdigit() or int(count) < 1:
            raise ConfigError(
                f"{ENVIRONMENT_VARIABLE}={spec!r} is not 'name' or 'name:N' with N >= 1"
            )
        armed[name] = int(count)
    _armed = armed
    return armed


def _reset() -> None:
    """Forget the cached setting and the hit counts (for tests that change the variable)."""
    global _armed  # noqa: PLW0603
    with _lock:
        _armed = None
        _hits.clear()


def failpoint_armed(name: str) -> bool:
    """Tell whether the next ``failpoint(name)`` call will block.

    Lets a writer make a point observable before blocking there, e.g. write half of a
    batch so a kill leaves a torn record (``jsonl.append.mid-write``).
    """
    armed = _armed if _armed is not None else _load()
    target = armed.get(name)
    return target is not None and _hits.get(name, 0) + 1 == target


def failpoint(name: str) -> None:
    """Block forever here if *name* is the armed failpoint (at its N-th hit), or, with
    the ``interrupt`` action, send this process SIGINT and return."""
    armed = _armed if _armed is not None else _load()
    if name not in armed:
        return
    with _lock:
        hit = _hits[name] = _hits.get(name, 0) + 1
    if hit != armed[name]:
        return
    os.write(2, f"FAILPOINT {name} {os.getpid()}\n".encode())  # fd 2: unbuffered, any thread
    if _interrupts:
        os.kill(os.getpid(), signal.SIGINT)  # handled in the main thread, as a Ctrl-C is
        return
    while True:  # the parent SIGKILLs us; nothing may run past this point
        time.sleep(3600)
