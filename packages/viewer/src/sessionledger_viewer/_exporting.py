"""``sessionledger export ID --format html``: the viewer's views of one session in one
self-contained file (docs/viewer.md, "exports"): its style inlined, no script, every
link an anchor in the same file, so it opens offline and shows the same as the pages.
"""

from __future__ import annotations

from collections.abc import Sequence

from sessionledger import Session, SessionEvent, SessionHeader, messages_at
from sessionledger_viewer import _describe as describe, _timeline as timing
from sessionledger_viewer._app import HERE, environment


def _anchor(seq: int) -> str:
    return f"#e{seq}"


def export_html(store_url: str, header: SessionHeader, events: Sequence[SessionEvent]) -> str:
    """The page of *header*'s session holding *events* (as ``inspect`` read them from
    *store_url*): its replaced ranges, its whole log beside its surface, its timeline
    and requests, and the messages the model sees at its end."""
    session = Session.restore(header, events)
    length = session.first_live_seq
    history = describe.surface_history(session)
    turns = timing.timeline(session, length)
    history_now = messages_at(session.event_log(), length - 1) if length else []
    template = environment().get_template("export.html")
    return template.render(
        store=store_url,
        style=(HERE / "static" / "viewer.css").read_text(encoding="utf-8"),
        header=header,
        length=length,
        rows=describe.rows(session, 0, length, history, length),
        surface=describe.surface_items(session, history.nodes),
        replaced=history.replaced,
        turns=turns,
        longest=timing.longest(turns),
        requests=timing.requests(session, length),
        messages=describe.shown_messages(history_now),
        href=_anchor,
    )
