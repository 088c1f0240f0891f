"""Serving the viewer on this machine: a socket bound before the server starts (so the
URL printed first is the one that answers), uvicorn on it, a browser only on request.
"""

from __future__ import annotations

import socket
import sys
import urllib.parse
import webbrowser
from collections.abc import Iterable
from typing import TextIO

import uvicorn

from sessionledger_viewer._app import create_app

#: Where the viewer listens unless told otherwise: this machine only.
HOST = "127.0.0.1"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on *host*:*port* (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def address(sock: socket.socket, session_id: str | None) -> str:
    """The URL of the page to open first: the session's, or the listing's."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    path = "/" if session_id is None else "/sessions/" + urllib.parse.quote(session_id, safe="")
    return f"http://{shown}:{port}{path}"


async def serve(
    store_url: str,
    session_id: str | None = None,
    *,
    host: str = HOST,
    port: int = 0,
    open_browser: bool = False,
    plugins: Iterable[object] = (),
    out: TextIO | None = None,
) -> None:
    """Serve the viewer of *store_url* until cancelled or interrupted; print the URL of
    the first page (*session_id*'s, or the listing) as the first line of *out*, and open
    it in a browser when *open_browser*."""
    out = sys.stdout if out is None else out
    sock = bind(host, port)
    try:
        url = address(sock, session_id)
        app = create_app(store_url, plugins=plugins, host=host)
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", server_header=False
        )
        server = uvicorn.Server(config)
        out.write(f"{url}\n")
        out.write("serving read-only; Ctrl-C stops\n")
        out.flush()
        if open_browser:
            webbrowser.open(url)
        await server.serve(sockets=[sock])
    finally:
        sock.close()
