"""The one place that chooses compiled or pure code.

``sessionledger._freeze`` holds compiled forms of a few object-level helpers (freezing a
mapping, packing a run, the log's walks; docs/internals.md). Each has a pure-Python twin
that decides the same. Which of the two runs is chosen here once, for every module:
the compiled one when the extension was built, unless ``SESSIONLEDGER_PURE_PYTHON`` is
set (docs/reading.md, "the compiled accelerator"). A module asks ``choose`` for a
helper, or reads ``ACCELERATOR`` for the set-up calls it owns.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any, Final, TypeVar

__all__ = ["ACCELERATED", "ACCELERATOR", "BUILT", "choose"]

_T = TypeVar("_T")


def _built() -> ModuleType | None:
    """The compiled extension, or None when it was not built."""
    try:
        from sessionledger import _freeze
    except ImportError:
        return None
    return _freeze


def _pure_chosen() -> bool:
    return os.environ.get("SESSIONLEDGER_PURE_PYTHON", "") not in ("", "0")


#: The compiled extension whether it runs or not (the tests compare it with the pure
#: forms in-process), None when it was not built.
BUILT: Final = _built()
#: The compiled extension when it runs, else None.
ACCELERATOR: Final = None if _pure_chosen() else BUILT
#: Whether the compiled helpers run.
ACCELERATED: Final = ACCELERATOR is not None


def choose(name: str, pure: _T) -> _T:
    """The compiled helper *name* where the accelerator runs, else *pure*, its twin."""
    if ACCELERATOR is None:
        return pure
    compiled: Any = getattr(ACCELERATOR, name)
    return compiled  # type: ignore[no-any-return]
