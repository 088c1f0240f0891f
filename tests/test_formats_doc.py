"""docs/formats.md is enough to read a store: a reader written from that page alone.

The reader below uses only the standard library (``json``, ``zlib``, ``sqlite3``,
``hashlib``) and the rules the page states: directory names, the header line, commit
records and their checksums, packed chunk rows, the SQLite rows. Each test has the
library write a store, reads it back with this reader, and compares the result with what
the library itself reads.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import re
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest

from sessionledger import CorruptLogError, Ledger, assistant_message, tool_result, user_message
from sessionledger.model._events import SessionEvent

ROW_TAGS = {"text-chunks": "text-delta", "reasoning-chunks": "reasoning-delta"}
TOOL_ROW = "tool-call-chunks"


# -- the reader, from docs/formats.md ----------------------------------------------------


def escape(text: str) -> str:
    """``~XXXX`` per UTF-16 code unit for every character outside [A-Za-z0-9._-]."""
    out = []
    for char in text:
        if re.fullmatch(r"[A-Za-z0-9._-]", char):
            out.append(char)
        else:
            units = char.encode("utf-16-be")
            out.extend(f"~{units[i : i + 2].hex().upper()}" for i in range(0, len(units), 2))
    return "".join(out)


def cut(escaped: str, limit: int) -> str:
    """Cut to at most *limit* characters without splitting an escape or a surrogate pair."""
    pieces = re.findall(r"~[0-9A-F]{4}|.", escaped)
    out, size, index = [], 0, 0
    while index < len(pieces):
        piece = pieces[index]
        pair = piece.startswith("~D") and piece[2] in "89AB" and index + 1 < len(pieces)
        group = [piece, pieces[index + 1]] if pair else [piece]
        width = sum(len(item) for item in group)
        if size + width > limit:
            break
        out.extend(group)
        size += width
        index += len(group)
    return "".join(out)


def project_key(cwd: str | None) -> str:
    if cwd is None:
        return "_no-cwd"
    slug = escape(re.sub(r"[/\\:]+", "-", cwd)).lstrip("-") or "root"
    return f"--{cut(slug, 251)}--"


def directory_name(session_id: str) -> str:
    if session_id in (".", ".."):
        return "~002E" * len(session_id)
    escaped = escape(session_id)
    if len(escaped) <= 255:
        return escaped
    return cut(escaped, 189) + "~~" + hashlib.sha256(session_id.encode()).hexdigest()


def unpack(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A storage record's events: a packed row expanded, anything else as it is."""
    tag = record.get("type")
    if tag not in ROW_TAGS and tag != TOOL_ROW:
        return [record]
    data = record["data"]
    payload = data["args"] if tag == TOOL_ROW else data["texts"]
    assert len(data["dt"]) == len(payload) - 1
    times = list(itertools.accumulate([record["time0"], *data["dt"]]))
    events = []
    for k, text in enumerate(payload):
        if tag == TOOL_ROW:
            chunk = {"type": "tool-call-delta", "index": data["index"], "id": data["id"]}
            if "name" in data:
                chunk["name"] = data["name"]
            chunk["argumentsDelta"] = text
        else:
            chunk = {"type": ROW_TAGS[tag], "index": data["index"], "text": text}
        events.append(
            {
                "type": "assistant/chunk",
                "seq": record["seq0"] + k,
                "time": times[k],
                "data": {"turn": data["turn"], "step": data["step"], "chunk": chunk},
            }
        )
    return events


def is_commit(value: Any) -> bool:
    return type(value) is dict and list(value) == ["commit"] and type(value["commit"]) is dict


def read_jsonl(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """Return (header, committed events, number of torn batches); raise on corruption."""
    data = path.read_bytes()
    header_end = data.index(b"\n") + 1
    header = json.loads(data[:header_end])
    assert header["type"] == "session"
    assert header["storageFormat"] == 2
    assert header["version"] == 1
    pieces = data[header_end:].split(b"\n")
    partial = pieces.pop()  # b"" when the file ends with a newline
    lines = [piece + b"\n" for piece in pieces]
    batches: list[tuple[list[bytes], bool, dict[str, Any] | None]] = []
    pending: list[bytes] = []
    after_header = True  # the pending lines start right after the header line
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        if not is_commit(value):
            pending.append(line)
            continue
        fields = value["commit"]
        count = fields.get("records")
        ours = count if type(count) is int and 0 <= count <= len(pending) else len(pending)
        extra, mine = pending[: len(pending) - ours], pending[len(pending) - ours :]
        if extra:
            batches.append((extra, False, None))
        covered = (data[:header_end] if after_header and not extra else b"") + b"".join(mine)
        intact = (
            set(fields) == {"first", "next", "records", "crc32"}
            and type(fields["first"]) is int
            and type(fields["next"]) is int
            and count == len(mine)
            and fields["crc32"] == zlib.crc32(covered)
        )
        batches.append((mine, intact, fields))
        pending, after_header = [], False
    if pending or partial:
        batches.append((pending + ([partial] if partial else []), False, None))
    last_intact = max((i for i, (_, ok, _) in enumerate(batches) if ok), default=-1)
    events: list[dict[str, Any]] = []
    for lines_of_batch, intact, fields in batches[: last_intact + 1]:
        if not intact:
            raise ValueError("corrupt: a damaged batch before an intact one")
        assert fields is not None
        if fields["first"] != len(events):
            raise ValueError("corrupt: a batch is missing")
        for line in lines_of_batch:
            for event in unpack(json.loads(line)):
                if event["seq"] != len(events):
                    raise ValueError("corrupt: seq gap")
                events.append(event)
        if len(events) != fields["next"]:
            raise ValueError("corrupt: the commit record counts other events")
    return header, events, len(batches) - last_intact - 1


def read_sqlite(path: Path, session_id: str) -> list[dict[str, Any]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA application_id").fetchone()[0] == 0x534C4447
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3
        found = db.execute(
            "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable, members "
            "FROM events WHERE session_id = ? ORDER BY seq",
            (session_id,),
        ).fetchall()
    finally:
        db.close()
    events: list[dict[str, Any]] = []
    for seq, kind, time, data, sources, surface_op, ignorable, members in found:
        if ignorable == 0:
            record = {"type": kind, "seq0": seq, "time0": time, "data": json.loads(data)}
            unpacked = unpack(record)
            assert len(unpacked) == members
            events.extend(unpacked)
            continue
        record = {"type": kind, "seq": seq, "time": time, "data": json.loads(data)}
        if surface_op is not None:
            record["surfaceOp"] = json.loads(surface_op)
        if sources is not None:
            record["sourceEventSeqs"] = json.loads(sources)
        if ignorable == 1:
            record["ignorable"] = True
        events.append(record)
    return events


# -- a store the library writes ----------------------------------------------------------


def chunk(turn: int, step: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"turn": turn, "step": step, "chunk": body}


async def write_store(url: str, session_id: str, cwd: str | None) -> list[dict[str, Any]]:
    ticks = itertools.count(1_700_000_000_000, 3)
    async with Ledger.open(url, clock=lambda: next(ticks)) as ledger:
        s = ledger.create(session_id, cwd=cwd)
        s.append("turn/start", {"turn": 1})
        s.append("user/message", user_message("héllo 🌍"), surface_op="append")
        await ledger.flush(s)
        s.append("step/start", {"turn": 1, "step": 1})
        for text in ("Hel", "lo", " wö", "rld"):
            delta = {"type": "text-delta", "index": 0, "text": text}
            s.append("assistant/chunk", chunk(1, 1, delta))
        for text in ("hm", "m"):  # a run of two: stored verbatim
            delta = {"type": "reasoning-delta", "index": 1, "text": text}
            s.append("assistant/chunk", chunk(1, 1, delta))
        for named in (True, True, True, False, False, False):
            body = {"type": "tool-call-delta", "index": 2, "id": "c1"}
            if named:
                body["name"] = "read"
            body["argumentsDelta"] = '{"a"' if named else "}"
            s.append("assistant/chunk", chunk(1, 1, body))
        await ledger.flush(s)
        text = {"type": "text", "text": "Hello wörld"}
        call_block = {"type": "tool-call", "id": "c1", "name": "read", "arguments": '{"a"}'}
        reply = assistant_message([text, call_block], provider="acme", model="large")
        s.append(
            "assistant/message",
            {"turn": 1, "step": 1, "message": reply},
            surface_op="append",
            source_event_seqs=[3, 4, 5, 6],
        )
        call = {"turn": 1, "step": 1, "callId": "c1", "name": "read", "arguments": '{"a"}'}
        s.append("tool/call", call)
        s.append(
            "tool/result",
            {"turn": 1, "step": 1, "message": tool_result("c1", "ok")},
            surface_op="append",
        )
        s.append("note/private", {"x": 1}, ignorable=True)
        s.append("step/end", {"turn": 1, "step": 1})
        s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        return [event.to_json() for event in s.events]


def as_json(events: list[dict[str, Any]]) -> list[Any]:
    return json.loads(json.dumps(events))


ODD_IDS = ["plain", "a/b", ".", "..", "ti~lde", "space id", "astral-🌍", "x" * 300]
ODD_CWDS = [None, "/srv/app", "/srv/my app", "C:\\Users\\x", "/", "/ünï/🌍", "/" + "é" * 200, "/"]


@pytest.mark.parametrize(("session_id", "cwd"), list(zip(ODD_IDS, ODD_CWDS, strict=True)))
def test_the_jsonl_layout_and_lines_read_as_the_page_says(
    tmp_path: Path, session_id: str, cwd: str | None
) -> None:
    written = asyncio.run(write_store(f"jsonl:{tmp_path}", session_id, cwd))
    log = tmp_path / project_key(cwd) / directory_name(session_id) / "session.jsonl"
    header, events, torn = read_jsonl(log)
    assert header["id"] == session_id
    assert torn == 0
    assert events == as_json(written)
    rows = [json.loads(line) for line in log.read_bytes().splitlines()[1:]]
    assert {row["type"] for row in rows if "type" in row} >= {"text-chunks", TOOL_ROW}
    assert sum(is_commit(row) for row in rows) == 3


def test_a_torn_tail_and_damage_are_told_apart_as_the_page_says(tmp_path: Path) -> None:
    written = asyncio.run(write_store(f"jsonl:{tmp_path}", "s", "/srv/app"))
    log = tmp_path / "--srv-app--" / "s" / "session.jsonl"
    intact = log.read_bytes()

    log.write_bytes(intact + b'{"type":"step/start","seq":99,')  # a crash mid-write
    _, events, torn = read_jsonl(log)
    assert (events, torn) == (as_json(written), 1)

    lines = intact.split(b"\n")
    lines[1] = lines[1].replace(b'"turn":1', b'"turn":2')  # first batch no longer matches
    log.write_bytes(b"\n".join(lines))
    with pytest.raises(ValueError, match="corrupt"):
        read_jsonl(log)

    async def library_view() -> None:
        async with Ledger.open(f"jsonl:{tmp_path}") as ledger:
            await ledger.inspect("s")

    with pytest.raises(CorruptLogError):
        asyncio.run(library_view())


def test_the_last_batch_torn_is_left_out_by_reader_and_library(tmp_path: Path) -> None:
    written = asyncio.run(write_store(f"jsonl:{tmp_path}", "s", None))
    log = tmp_path / "_no-cwd" / "s" / "session.jsonl"
    data = log.read_bytes()
    log.write_bytes(data[: data.rindex(b'{"commit"')])  # the last commit record never landed
    _, events, torn = read_jsonl(log)
    assert torn == 1

    async def library_view() -> list[SessionEvent]:
        async with Ledger.open(f"jsonl:{tmp_path}") as ledger:
            return list((await ledger.persistence.inspect("s")).events)  # type: ignore[union-attr]

    shown = asyncio.run(library_view())
    assert events == as_json(written[: len(events)])
    assert [event.to_json() for event in shown[: len(events)]] == written[: len(events)]

    async def resume() -> None:
        async with Ledger.open(f"jsonl:{tmp_path}") as ledger:
            await ledger.resume("s")

    torn_bytes = log.read_bytes()[len(data[: data.index(b"\n") + 1]) :]
    asyncio.run(resume())
    [quarantine] = log.parent.glob("session.jsonl.quarantine-*")
    assert re.fullmatch(r"session\.jsonl\.quarantine-\d{8}T\d{6}\.\d{6}Z", quarantine.name)
    assert torn_bytes.endswith(quarantine.read_bytes())
    assert read_jsonl(log)[2] == 0  # cut, then closed by a new, intact batch


def test_the_sqlite_rows_read_as_the_page_says(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    written = asyncio.run(write_store(f"sqlite:{path}", "s", "/srv/app"))
    assert read_sqlite(path, "s") == as_json(written)
    assert (path.stat().st_mode & 0o777) == 0o600
    assert (tmp_path / "ledger.db.locks").exists()
