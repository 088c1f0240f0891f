"""``view``: the local, read-only web viewer (the ``sessionledger-viewer`` distribution,
docs/viewer.md). The core only starts it: the web stack stays out of the core, and the
command finds the package through the entry point it publishes, as it finds plugins."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from typing import Any, Final

from sessionledger._errors import ConfigError
from sessionledger.cli._missing import install_hint
from sessionledger.cli._stores import check_backend

#: The entry point the viewer publishes (packages/viewer/pyproject.toml): its module.
VIEWER_GROUP: Final = "sessionledger.viewer"


def load_viewer(needed_for: str) -> Any:
    """The ``sessionledger_viewer`` module, or ``ConfigError`` naming what to install
    (*needed_for* says what needs it). A dependency it lacks is raised as it is: the
    entry point words it, naming the distribution to reinstall."""
    for entry in importlib.metadata.entry_points(group=VIEWER_GROUP, name="viewer"):
        try:
            return entry.load()
        except ModuleNotFoundError as error:
            if error.name != entry.module:
                raise
    hint = install_hint("sessionledger-viewer")
    raise ConfigError(f"{needed_for}; {hint}")


async def view(args: argparse.Namespace) -> int:
    """``view [ID] [--host H] [--port P] [--no-browser]``: serve until Ctrl-C."""
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0 (a free port) to 65535, got {args.port}")
    check_backend(args.store_url, args.plugins)
    viewer = load_viewer("the viewer is not installed")
    try:
        await viewer.serve(
            args.store_url,
            args.id,
            host=args.host,
            port=args.port,
            open_browser=not args.no_browser and sys.stdout.isatty(),
            plugins=args.plugins,
        )
    except OSError as error:
        raise ConfigError(f"cannot listen on {args.host}:{args.port}: {error}") from error
    return 0
