"""What to install when a store scheme has no backend, a module is missing or no plugin
checks stored logs.

The sibling distributions are not on a package index: the hint names the distribution
and the folder of a checkout to install it from. Nothing here imports anything heavy,
so that the entry point can word a ``ModuleNotFoundError`` whatever failed to import.
"""

from __future__ import annotations

import importlib.metadata
from typing import Final

#: Each sibling distribution and its folder in a checkout of the repository.
FOLDERS: Final = {
    "sessionledger": "packages/core",
    "sessionledger-sqlite": "packages/persistence-sqlite",
    "sessionledger-jsonl": "packages/persistence-jsonl",
    "sessionledger-postgres": "packages/persistence-postgres",
    "sessionledger-invariants": "packages/invariants",
    "sessionledger-viewer": "packages/viewer",
}

#: The distribution that serves each store scheme.
BACKENDS: Final = {
    "sqlite": "sessionledger-sqlite",
    "jsonl": "sessionledger-jsonl",
    "postgresql": "sessionledger-postgres",
    "postgres": "sessionledger-postgres",
}

#: Top-level modules of other distributions that ours import, by the distribution.
THIRD_PARTY: Final = {
    "rich": "sessionledger",
    "orjson": "sessionledger",
    "pluggy": "sessionledger",
    "aiosqlite": "sessionledger-sqlite",
    "asyncpg": "sessionledger-postgres",
    "starlette": "sessionledger-viewer",
    "uvicorn": "sessionledger-viewer",
    "jinja2": "sessionledger-viewer",
}


def install_hint(distribution: str) -> str:
    """Return ``install X (from a checkout: pip install ./FOLDER)`` for a sibling."""
    return f"install {distribution} (from a checkout: pip install ./{FOLDERS[distribution]})"


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def missing_backend(scheme: str, served: list[str], *, autoload_switch: str | None) -> str:
    """Word the error for a store URL of *scheme*, which no backend in *served* serves;
    *autoload_switch* names the variable that turned entry points off, if one did."""
    known = ", ".join(f"{name}:" for name in served) or "none"
    message = f"no backend serves {scheme}: URLs (registered schemes: {known})"
    distribution = BACKENDS.get(scheme)
    if distribution is None:
        return message
    if not _installed(distribution):
        return f"{message}; {install_hint(distribution)}"
    if autoload_switch is not None:
        return f"{message}; {distribution} is installed, but {autoload_switch} keeps it unloaded"
    return f"{message}; {distribution} is installed but its plugin did not register {scheme}:"


def no_log_check(*, autoload_switch: str | None) -> str:
    """Word ``verify``'s note when no plugin checks stored logs offline: the invariants
    are not checked, and what to install (or what keeps the installed plugin unloaded)."""
    distribution = "sessionledger-invariants"
    message = "invariants not checked"
    if not _installed(distribution):
        return f"{message}; {install_hint(distribution)}"
    if autoload_switch is not None:
        return f"{message}; {distribution} is installed, but {autoload_switch} keeps it unloaded"
    return f"{message}; {distribution} is installed but its plugin offered no log check"


def distribution_of_module(module: str) -> str | None:
    """Return the distribution of ours that provides or needs top-level *module*."""
    candidate = module.replace("_", "-")
    if candidate in FOLDERS:
        return candidate
    return THIRD_PARTY.get(module)


def missing_module(module: str, importer: str | None) -> str:
    """Word the error for a ``ModuleNotFoundError`` of *module*, raised while *importer*
    (a module name, when known) ran: which distribution to install or reinstall."""
    top = module.partition(".")[0]
    message = f"no module named {top!r}" + (f" (imported by {importer})" if importer else "")
    distribution = distribution_of_module(top)
    if distribution is None:
        return f"{message}; install the distribution that provides it"
    if distribution.replace("-", "_") == top:
        return f"{message}; {install_hint(distribution)}"
    again = install_hint(distribution)
    return f"{message}, a dependency of {distribution}: install {top}, or re{again}"
