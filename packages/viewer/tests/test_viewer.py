"""The viewer as a user runs it: ``sessionledger view`` in a process of its own, its pages
fetched over HTTP (docs/viewer.md). Every page is checked for what it must show and for
the headers every response carries; the store is compared byte for byte afterwards."""

from __future__ import annotations

import html
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sessionledger_viewer import CONTENT_SECURITY_POLICY
from viewer_helpers import HUGE, fetch, fill, snapshot, store_url, viewer, viewer_env

from sessionledger import Ledger

BACKENDS = ("sqlite", "jsonl")
#: How the pages write a range of seqs (an en dash).
DASH = "\u2013"


def links(page: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', page)


def check_headers(headers: dict[str, str]) -> None:
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("kind", BACKENDS)
async def test_pages_show_the_log_the_surface_and_provenance_and_write_nothing(
    tmp_path: Path, kind: str
) -> None:
    url = store_url(kind, tmp_path)
    made = await fill(url)
    main = made["main"]
    summary = next(e for e in main.events if e.source_event_seqs and e.surface_op != "append")
    # The last turn's, on the surface after the replace.
    message = [e for e in main.events if e.type == "assistant/message"][-1]
    result = [e for e in main.events if e.type == "tool/result"][-1]
    root = tmp_path / ("ledger.db" if kind == "sqlite" else "logs")
    before = snapshot(tmp_path)
    env = viewer_env(tmp_path)
    with viewer(env, url, "main") as running:
        assert running.url.startswith("http://127.0.0.1:")
        assert running.url == f"{running.base}/sessions/main"
        base = running.base
        # The listing: every session, the fork's lineage as a link to its parent.
        listing = fetch(base + "/")
        assert listing.status == 200
        check_headers(listing.headers)
        assert {"/sessions/main", "/sessions/child", "/sessions/hostile"} <= set(
            links(listing.body)
        )
        seed = made["child"].header.seed_length
        assert f'forked from <a href="/sessions/main">main</a> at {seed} events' in listing.body
        # The session: log and surface side by side, the replaced range with its seqs.
        page = fetch(running.url)
        assert page.status == 200
        check_headers(page.headers)
        assert 'class="log"' in page.body
        assert 'class="surface"' in page.body
        replaced = page.body.split('id="replace-', 1)[1].split("</li>", 1)[0]
        op = summary.surface_op
        assert f"replaced nodes {op.start}{DASH}{op.end}" in replaced  # type: ignore[union-attr]
        cited = re.findall(r'class="cited-seq" href="/sessions/main/events/(\d+)"', replaced)
        assert [int(seq) for seq in cited] == list(summary.source_event_seqs or ())
        shadowed = re.findall(r'class="shadowed-seq" href="/sessions/main/events/(\d+)"', replaced)
        assert [int(seq) for seq in shadowed] == list(summary.source_event_seqs or ())
        for seq in shadowed:
            row = page.body.split(f'<tr id="e{seq}"', 1)[1].split("</tr>", 1)[0]
            assert 'class="shadowed' in row
            assert f"shadowed by {summary.seq}" in row
        # Provenance as links on the surface: the message to its chunks, the result to
        # its call.
        surface = page.body.split('class="surface"', 1)[1]
        for event in (message, result):
            item = surface.split(f'href="/sessions/main/events/{event.seq}">', 1)[1]
            item = item.split("</li>", 1)[0]
            sources = list(event.source_event_seqs or ())
            assert f'class="source" href="/sessions/main/events/{sources[0]}"' in item
            if len(sources) > 1:  # a stream's chunks, as one range
                assert f">{sources[0]}{DASH}{sources[-1]}</a>" in item
        # Every event's stored JSON, and who cites it.
        shown = fetch(f"{base}/sessions/main/events/{summary.seq}")
        check_headers(shown.headers)
        stored = html.unescape(shown.body.split('<pre class="json">', 1)[1].split("</pre>")[0])
        assert json.loads(stored) == json.loads(orjson.dumps(summary.to_json()))
        cited_page = fetch(f"{base}/sessions/main/events/{message.source_event_seqs[0]}")  # type: ignore[index]
        assert f'class="cited-by" href="/sessions/main/events/{message.seq}"' in cited_page.body
        # Time travel: before the replace the model saw the turns, after it the summary.
        before_replace = fetch(f"{base}/sessions/main/messages?at={summary.seq - 1}")
        after_replace = fetch(f"{base}/sessions/main/messages?at={summary.seq}")
        check_headers(after_replace.headers)
        assert "read the report" in before_replace.body
        assert "read the report" not in after_replace.body
        assert "summary: a report was read" in after_replace.body
        # Live updates read the events after a seq, as JSON.
        tail = fetch(f"{base}/api/sessions/main/tail?after={main.seq - 3}")
        check_headers(tail.headers)
        assert [row["seq"] for row in json.loads(tail.body)["events"]] == [
            main.seq - 2,
            main.seq - 1,
        ]
        # The static files, and what is not there, carry the same headers.
        for path in ("/static/viewer.js", "/static/viewer.css", "/sessions/nope", "/nothing"):
            answered = fetch(base + path)
            check_headers(answered.headers)
        assert fetch(base + "/sessions/nope").status == 404
        assert fetch(f"{base}/sessions/main/events/{main.seq}").status == 404
        # Another name for this machine is refused (a page of another site cannot read
        # sessions through a name it controls).
        assert fetch(running.url, host="attacker.example").status == 400
        searched = fetch(base + "/?q=numbers+grew")
        assert "/sessions/main/events/" in searched.body
    assert snapshot(tmp_path) == before, "the viewer changed the store"
    assert root.exists()


async def test_the_timeline_times_turns_steps_and_tools_and_diffs_requests(
    tmp_path: Path,
) -> None:
    url = store_url("sqlite", tmp_path)
    main = (await fill(url))["main"]
    events = main.events
    with viewer(viewer_env(tmp_path), url, "main") as running:
        page = fetch(running.url + "/timeline")
        assert "timeline and requests" in fetch(running.url).body
    assert page.status == 200
    check_headers(page.headers)
    turns = [e for e in events if e.type == "turn/start"]
    for turn in turns:
        assert f'href="/sessions/main/events/{turn.seq}">turn {turn.data["turn"]}</a>' in page.body
    steps = [e for e in events if e.type == "step/start"]
    assert page.body.count('<tr class="step">') == len(steps)
    # Each tool call links to its call and, with its time, to its result.
    for call in (e for e in events if e.type == "tool/call"):
        result = next(
            e
            for e in events
            if e.type == "tool/result"
            and e.data["message"]["source"]["callId"] == call.data["callId"]
        )
        took = f"{(result.time - call.time) / 1000:.3f}s"
        assert (
            f'<a href="/sessions/main/events/{call.seq}">{call.data["name"]}</a> '
            f'<a href="/sessions/main/events/{result.seq}">{took}</a>'
        ) in page.body
    # The requests: all of the first header, then only what the second changed.
    requests = page.body.split("<h2>Requests</h2>", 1)[1]
    assert requests.count('<td class="path">') == 4  # 3 leaves, then 1 change
    assert '<td class="path">config.model</td>' in requests
    changed = requests.split('<td class="path">config.model</td>')[-1].split("</tr>")[0]
    assert "mock-model" in changed
    assert "mock-model-2" in changed


@pytest.mark.parametrize("kind", BACKENDS)
async def test_closers_a_resume_would_append_are_shown_as_not_stored(
    tmp_path: Path, kind: str
) -> None:
    from sessionledger.testing.builders import open_turn_with_pending_call

    url = store_url(kind, tmp_path)
    async with Ledger.open(url) as ledger:
        crashed = ledger.create("crashed")
        stored = open_turn_with_pending_call(crashed, 1)
        await ledger.flush(crashed)
    length = len(stored)
    before = snapshot(tmp_path)
    with viewer(viewer_env(tmp_path), url, "crashed") as running:
        page = fetch(running.url)
        last_stored = fetch(f"{running.url}/events/{length - 1}")
        closer = fetch(f"{running.url}/events/{length}")
    assert snapshot(tmp_path) == before  # shown, not written
    rows = re.findall(r'<tr id="e(\d+)" class="([^"]*)"', page.body)
    unstored = [int(seq) for seq, classes in rows if "unstored" in classes]
    assert unstored
    assert unstored == list(range(length, length + len(unstored)))
    assert "closers a resume would append" in page.body
    assert "<h2>As stored</h2>" in last_stored.body
    assert "<h2>Not stored: a closer a resume would append</h2>" in closer.body
    assert "TOOL_OUTCOME_UNKNOWN" in closer.body or "turn/end" in closer.body


async def test_hostile_content_is_text(tmp_path: Path) -> None:
    url = store_url("sqlite", tmp_path)
    await fill(url)
    with viewer(viewer_env(tmp_path), url) as running:
        pages = [
            fetch(running.base + "/"),
            fetch(running.base + "/sessions/hostile"),
            fetch(running.base + "/sessions/hostile/events/1"),
            fetch(running.base + "/sessions/hostile/messages"),
        ]
    for page in pages:
        assert page.status == 200
        assert "<script>alert" not in page.body
        assert "<img src=x" not in page.body
        assert 'href="javascript:' not in page.body
        assert "\x1b" not in page.body or "&lt;script&gt;" in page.body
        # The only script is the viewer's own file; no inline handler anywhere.
        assert re.findall(r"<script[^>]*>", page.body) in ([], ['<script src="/static/viewer.js">'])
        assert not re.search(r"\son[a-z]+=", page.body.replace("onerror=alert(1)&gt;", ""))
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in pages[1].body
    # A huge line: a row shows its start, its event's page the whole of it.
    assert len(pages[1].body) < 200_000
    assert "HUGE-END" not in pages[1].body
    with viewer(viewer_env(tmp_path), url) as running:
        whole = fetch(running.base + "/sessions/hostile/events/2")
    assert HUGE in whole.body


async def test_an_empty_or_missing_store_is_shown_empty_and_not_created(tmp_path: Path) -> None:
    url = store_url("sqlite", tmp_path)
    with viewer(viewer_env(tmp_path), url) as running:
        listing = fetch(running.base + "/")
        missing = fetch(running.base + "/sessions/anything")
    assert listing.status == 200
    assert "no stored session" in listing.body
    assert missing.status == 404
    assert not (tmp_path / "ledger.db").exists()


async def test_ctrl_c_stops_it_and_the_url_comes_first(tmp_path: Path) -> None:
    url = store_url("jsonl", tmp_path)
    async with Ledger.open(url) as ledger:
        ledger.create("s").append("turn/start", {"turn": 1})
    with viewer(viewer_env(tmp_path), url, "s") as running:
        assert running.url.endswith("/sessions/s")
        assert fetch(running.url).status == 200
        running.process.send_signal(signal.SIGINT)
        code = running.process.wait(timeout=30)
        assert running.process.stderr is not None
        err = running.process.stderr.read()
    assert code == 130, err
    assert err.strip().splitlines()[-1] == "interrupted"


async def test_another_address_to_listen_on_is_accepted_as_a_host(tmp_path: Path) -> None:
    url = store_url("jsonl", tmp_path)
    async with Ledger.open(url) as ledger:
        ledger.create("s").append("turn/start", {"turn": 1})
    with viewer(viewer_env(tmp_path), url, "--host", "127.0.0.2", "s") as running:
        assert running.url.startswith("http://127.0.0.2:")
        assert fetch(running.url).status == 200
        assert fetch(running.url, host="localhost").status == 200
        assert fetch(running.url, host="attacker.example").status == 400


def test_a_browser_opens_only_on_a_terminal_and_never_with_no_browser(tmp_path: Path) -> None:
    """``$BROWSER`` (Python's ``webbrowser``) names a script that notes the URL it is
    given: run on a pseudo-terminal it is called, piped or with ``--no-browser`` it is not."""
    import os
    import pty
    import time

    noted = tmp_path / "opened"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\necho "$1" >> {noted}\n')
    script.chmod(0o755)
    env = {**viewer_env(tmp_path), "BROWSER": f"{script} %s"}
    command = [sys.executable, "-m", "sessionledger", "view", "--store", "memory:x"]

    def on_terminal(*extra: str) -> str:
        leader, follower = pty.openpty()
        process = subprocess.Popen(
            [*command, *extra], env=env, stdin=follower, stdout=follower, stderr=follower
        )
        os.close(follower)
        first = b""
        while not first.endswith(b"\n"):
            first += os.read(leader, 1)
        deadline = time.monotonic() + 20
        while not noted.exists() and "--no-browser" not in extra and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        os.close(leader)
        return first.decode().strip()

    url = on_terminal()
    assert url.startswith("http://127.0.0.1:")
    assert noted.read_text().split() == [url]
    noted.unlink()
    on_terminal("--no-browser")
    with viewer(env, "memory:x"):  # piped (the helper adds --no-browser: run it bare too)
        pass
    piped = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert piped.stdout is not None
    piped.stdout.readline()
    time.sleep(1)
    piped.send_signal(signal.SIGINT)
    piped.communicate(timeout=30)
    assert not noted.exists()


def test_a_port_that_cannot_be_used_is_one_line_of_error(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "sessionledger", "view", "--store", "memory:x", "--port", "70000"],
        env=viewer_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--port must be 0" in done.stderr


def test_without_the_viewer_installed_the_command_says_what_to_install(tmp_path: Path) -> None:
    import subprocess

    def run(hidden: str) -> subprocess.CompletedProcess[str]:
        code = (
            f"import sys; sys.modules[{hidden!r}] = None; "
            "from sessionledger.cli.__main__ import main; sys.exit(main())"
        )
        return subprocess.run(
            [sys.executable, "-c", code, "view", "--store", "memory:x", "--no-browser"],
            env=viewer_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    missing = run("sessionledger_viewer")
    assert missing.returncode == 2
    assert missing.stderr == (
        "error: CONFIG: the viewer is not installed; install sessionledger-viewer "
        "(from a checkout: pip install ./packages/viewer)\n"
    )
    broken = run("starlette")
    assert broken.returncode == 2
    assert broken.stderr.startswith("error: CONFIG: no module named 'starlette' (imported by ")
    assert broken.stderr.endswith(
        ", a dependency of sessionledger-viewer: install starlette, or reinstall "
        "sessionledger-viewer (from a checkout: pip install ./packages/viewer)\n"
    )


def export(env: dict[str, str], url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionledger", "--store", url, "export", *args],
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )


async def test_exports_write_what_other_tools_read_and_change_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    url = store_url("sqlite", root)
    made = await fill(url)
    main = made["main"]
    env = viewer_env(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    before = snapshot(root)
    # STS: a session line, then a message line per message the user saw, with times.
    sts = export(env, url, "main", "--format", "sts")
    assert sts.returncode == 0, sts.stderr
    lines = [json.loads(line) for line in sts.stdout.splitlines()]
    assert lines[0] == {
        "type": "session",
        "harness": "sessionledger",
        "id": "main",
        "name": "a compacted session",
    }
    seen = main.transcript()
    assert len(lines) == 1 + len(seen)
    assert all(line["type"] == "message" for line in lines[1:])
    roles = [line["message"]["role"] for line in lines[1:]]
    assert roles[0] == "user"
    assert "tool" in roles
    for line in lines[1:]:
        message = line["message"]
        assert type(message["timestamp"]) is int
        if message["role"] == "tool":  # stitched to the call it answers
            calls = [
                call["id"] for other in lines[1:] for call in other["message"].get("toolCalls", ())
            ]
            assert message["toolCallId"] in calls
    # Markdown: the transcript, as piped output prints it, under the session's facts.
    text = export(env, url, "main", "--format", "markdown").stdout
    assert text.startswith(f"# transcript of main ({len(seen)} messages)\n\n- title: ")
    assert "    read the report" in text
    # The provider formats: what `messages --format` prints.
    for kind in ("openai", "anthropic"):
        exported = export(env, url, "main", "--format", kind)
        printed = subprocess.run(
            [sys.executable, "-m", "sessionledger", "--store", url, "messages", "main",
             "--format", kind],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert json.loads(exported.stdout) == json.loads(printed.stdout)
    # HTML: one file, no script, every link inside it, the same views as the pages.
    page = out / "main.html"
    written = export(env, url, "main", "--format", "html", "-o", str(page))
    assert written.returncode == 0, written.stderr
    assert written.stdout == ""
    body = page.read_text(encoding="utf-8")
    assert "<script" not in body
    assert all(link.startswith("#") for link in links(body)), "a link leaves the file"
    summary = next(e for e in main.events if e.source_event_seqs and e.surface_op != "append")
    assert f'id="replace-{summary.seq}"' in body
    assert f'<tr id="e{summary.seq}"' in body
    assert body.count('<tr id="e') == main.seq
    assert 'class="grid timeline"' in body
    assert "summary: a report was read" in body
    hostile = export(env, url, "hostile", "--format", "html").stdout
    assert "<script>alert" not in hostile
    assert "&lt;script&gt;alert" in hostile
    # Nothing is left half-written, and the store is as it was.
    assert sorted(path.name for path in out.iterdir()) == ["main.html"]
    assert snapshot(root) == before
    refused = export(env, url, "main", "--format", "sts", "-o", str(tmp_path / "no" / "x.jsonl"))
    assert refused.returncode == 2
    assert "its folder does not exist" in refused.stderr
