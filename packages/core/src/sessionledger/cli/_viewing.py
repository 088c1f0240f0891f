"""``view``: the local, read-only web viewer (the ``sessionledger-viewer`` distribution,
docs/viewer.md). The core only starts it: the web stack stays out of the core."""

from __future__ import annotations

import argparse
import sys

from sessionledger._errors import ConfigError
from sessionledger.cli._missing import install_hint
from sessionledger.cli._stores import check_backend


async def view(args: argparse.Namespace) -> int:
    """``view [ID] [--host H] [--port P] [--no-browser]``: serve until Ctrl-C."""
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0 (a free port) to 65535, got {args.port}")
    check_backend(args.store_url, args.plugins)
    try:
        import sessionledger_viewer as viewer  # the optional package: imported on use
    except ModuleNotFoundError as error:
        if error.name != "sessionledger_viewer":
            raise  # a dependency of an installed viewer: the entry point names it
        hint = install_hint("sessionledger-viewer")
        raise ConfigError(f"the viewer is not installed; {hint}") from None
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
