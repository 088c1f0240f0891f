"""sessionledger-viewer: a local, read-only web viewer of a store's sessions
(docs/viewer.md). ``sessionledger view [ID]`` runs it; ``create_app`` is the ASGI
application itself, ``serve`` the server the command runs, ``export_html`` the one-file
page ``sessionledger export --format html`` writes."""

from __future__ import annotations

from sessionledger_viewer._app import CONTENT_SECURITY_POLICY, create_app
from sessionledger_viewer._exporting import export_html
from sessionledger_viewer._serving import serve

__all__ = ["CONTENT_SECURITY_POLICY", "create_app", "export_html", "serve"]
