"""PostgreSQL store throughput next to raw asyncpg floors, and TEXT vs JSONB, in one run.

1. Durable write throughput through ``Ledger`` on ``PostgresPersistence``: a realistic
   agent workload (turns with streamed chunks, messages, tool calls and results), with
   ``await ledger.flush(session)`` every 200 events, for 1 writer and for 8 concurrent
   writers. Concurrent writers are separate **processes** (each with its own ledger, pool
   and session), as harness workers on many machines would be. A second line times the
   backend alone (``store.append`` of pre-built events, 200 per batch).
   The floors write the same rows (the core's packed storage records of each 200-event
   batch, prepared untimed) with raw asyncpg, JSON-encoded, one transaction per batch, in
   the same process layout: ``copy_records_to_table``, ``executemany`` of a prepared
   INSERT, and one ``INSERT ... SELECT FROM unnest(...)``. Reported: events/s and the
   ratio to the best floor; every figure is the median of ``--repeats`` interleaved runs.
2. The data column as ``text`` vs ``jsonb``: the same rows appended (one transaction per
   batch) and loaded back (fetch + parse), events/s and table size.

The server is a throwaway one started for this run with ``fsync = on`` (durable), or the
one named by ``$SESSIONLEDGER_PG_URL``. When none can be started the script prints one
``skipped`` line and exits 0. Run: ``python bench/bench_postgres.py [--events N]
[--writers W] [--repeats R]``. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

WORKER_FLAG = "--worker"
BATCH = 200
#: Runs per TEXT/JSONB figure, and the events they store.
REPEATS = 7
FORMAT_EVENTS = 100_000
#: The raw floors: COPY, a prepared INSERT per row (executemany), one INSERT ... unnest.
FLOORS = ("copy", "executemany", "unnest")


# -- the workload -----------------------------------------------------------------------------


def workload(count: int) -> list[tuple[str, dict[str, Any], str | None]]:
    """Return *count* ``(type, data, surface_op)`` appends forming whole agent turns."""
    from sessionledger import assistant_message, tool_call_block, tool_result, user_message

    out: list[tuple[str, dict[str, Any], str | None]] = []
    words = ["The", " file", " declares", " a", " package", " named", " demo", ","]
    turn = 0
    while len(out) < count:
        turn += 1
        out.append(("turn/start", {"turn": turn}, None))
        out.append(("user/message", dict(user_message(f"question {turn}: what next?")), "append"))
        for step in (1, 2):
            out.append(("step/start", {"turn": turn, "step": step}, None))
            for index in range(30):
                chunk = {"type": "text-delta", "index": 0, "text": words[index % len(words)]}
                out.append(("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk}, None))
            text = "".join(words) * 4
            call_id = f"call-{turn}"
            blocks: list[Any] = [{"type": "text", "text": text}]
            if step == 1:
                blocks.append(tool_call_block(call_id, "read_file", '{"path": "package.json"}'))
            message = assistant_message(blocks, provider="acme", model="acme-large")
            out.append(
                (
                    "assistant/message",
                    {"turn": turn, "step": step, "message": message},
                    "append",
                )
            )
            if step == 1:
                arguments = '{"path": "package.json"}'
                call = {"turn": turn, "step": 1, "callId": call_id, "name": "read_file"}
                out.append(("tool/call", {**call, "arguments": arguments}, None))
                result = tool_result(call_id, '{"name": "demo", "version": "1.0.0"}\n' * 40)
                out.append(("tool/result", {"turn": turn, "step": 1, "message": result}, "append"))
            out.append(("step/end", {"turn": turn, "step": step}, None))
        out.append(("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None))
    return out[:count]


def batches_of_rows(session_id: str, count: int) -> list[list[dict[str, Any]]]:
    """Return the storage records the store writes for each 200-event batch."""
    from sessionledger import Session
    from sessionledger.model._snapshot import thaw
    from sessionledger.storage._chunks import pack_chunk_runs

    session = Session.create(session_id)
    for kind, data, surface_op in workload(count):
        session.append(kind, data, surface_op=surface_op)
    envelopes = [thaw(event.to_json()) for event in session.events]
    return [
        pack_chunk_runs(envelopes[start : start + BATCH], 1024, 1 << 20)
        for start in range(0, len(envelopes), BATCH)
    ]


FLOOR_TABLE = """CREATE TABLE IF NOT EXISTS {schema}.floor_events (
  session_id text NOT NULL, seq bigint NOT NULL, type text NOT NULL, time bigint NOT NULL,
  data text NOT NULL, source_event_seqs text, surface_op text, ignorable smallint,
  PRIMARY KEY (session_id, seq))"""
FLOOR_COLUMNS = [
    "session_id",
    "seq",
    "type",
    "time",
    "data",
    "source_event_seqs",
    "surface_op",
    "ignorable",
]


def floor_row(session_id: str, record: dict[str, Any]) -> tuple[Any, ...]:
    """Return the ``events`` row of one storage record, laid out as the store lays it out."""
    from sessionledger.storage._rows import event_columns

    return (session_id, *event_columns(record))


# -- worker processes -------------------------------------------------------------------------


async def run_ledger(url: str, session_id: str, count: int) -> tuple[float, float]:
    import sessionledger_postgres.plugin
    from sessionledger import Ledger

    appends = workload(count)
    async with Ledger.open(
        url, plugins=[sessionledger_postgres.plugin], load_entrypoints=False
    ) as ledger:
        warm = ledger.create(f"{session_id}-warm")  # connect and check the schema untimed
        warm.append("turn/start", {"turn": 1})
        await ledger.flush(warm)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()
        start = time.monotonic()
        session = ledger.create(session_id)
        append = session.append
        for index, (kind, data, surface_op) in enumerate(appends, 1):
            append(kind, data, surface_op=surface_op)
            if index % BATCH == 0:
                await ledger.flush(session)
        await ledger.flush(session)
        end = time.monotonic()
    return start, end


async def run_store(url: str, session_id: str, count: int) -> tuple[float, float]:
    """The backend alone: pre-built events, ``append`` per 200-event batch (no Ledger)."""
    import sessionledger_postgres.plugin
    from sessionledger import Session, SessionHeader
    from sessionledger.runtime._opening import open_store

    session = Session.create(session_id)
    for kind, data, surface_op in workload(count):
        session.append(kind, data, surface_op=surface_op)
    events = list(session.events)
    store = open_store(url, plugins=[sessionledger_postgres.plugin], load_entrypoints=False)
    try:
        await store.list()  # connect and check the schema untimed
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()
        start = time.monotonic()
        await store.create(SessionHeader(id=session_id, created_at=0))
        for first in range(0, len(events), BATCH):
            await store.append(session_id, events[first : first + BATCH])
        end = time.monotonic()
    finally:
        await store.close()
    return start, end


async def run_floor(url: str, session_id: str, count: int, method: str) -> tuple[float, float]:
    import asyncpg

    from sessionledger_postgres.plugin import parse_postgres_url

    dsn, options = parse_postgres_url(url)
    table = f"{options['schema']}.floor_events"
    batches = batches_of_rows(session_id, count)
    insert = (
        f"INSERT INTO {table} ({', '.join(FLOOR_COLUMNS)}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    )
    unnest = (
        f"INSERT INTO {table} ({', '.join(FLOOR_COLUMNS)}) SELECT $1, * FROM unnest($2::bigint[], "
        "$3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::smallint[])"
    )
    conn = await asyncpg.connect(dsn)
    try:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()
        start = time.monotonic()
        for records in batches:
            rows = [floor_row(session_id, record) for record in records]
            if method == "unnest":  # one statement (autocommit = one transaction)
                columns = [list(column) for column in zip(*rows, strict=True)][1:]
                await conn.execute(unnest, session_id, *columns)
                continue
            async with conn.transaction():
                if method == "copy":
                    await conn.copy_records_to_table(
                        "floor_events",
                        records=rows,
                        columns=FLOOR_COLUMNS,
                        schema_name=options["schema"],
                    )
                else:
                    await conn.executemany(insert, rows)
        end = time.monotonic()
    finally:
        await conn.close()
    return start, end


def worker(argv: list[str]) -> None:
    mode, url, session_id, count = argv
    if mode == "ledger":
        start, end = asyncio.run(run_ledger(url, session_id, int(count)))
    elif mode == "store":
        start, end = asyncio.run(run_store(url, session_id, int(count)))
    else:
        start, end = asyncio.run(run_floor(url, session_id, int(count), mode))
    print(f"{start!r} {end!r}", flush=True)


def concurrent(mode: str, url: str, writers: int, count: int) -> float:
    """Run *writers* processes of *mode* at once; return aggregate events/s."""
    run = uuid.uuid4().hex[:8]
    children = [
        subprocess.Popen(
            [sys.executable, __file__, WORKER_FLAG, mode, url, f"{mode}-{run}-{index}", str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(writers)
    ]
    for child in children:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"{mode} worker failed to start: {line!r}")
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    spans = []
    for child in children:
        out, _ = child.communicate(timeout=900)
        if child.returncode != 0:
            raise RuntimeError(f"{mode} worker failed with exit status {child.returncode}")
        start, end = (float(part) for part in out.split())
        spans.append((start, end))
    elapsed = max(end for _, end in spans) - min(start for start, _ in spans)
    return writers * count / elapsed


# -- TEXT vs JSONB ----------------------------------------------------------------------------


async def text_vs_jsonb(dsn: str, schema: str, count: int) -> dict[str, float]:
    import asyncpg

    from sessionledger.model import _jsoncodec as jsoncodec

    batches = batches_of_rows("fmt", count)
    rows = [
        [
            (
                record.get("seq", record.get("seq0")),
                record["type"],
                record.get("time", record.get("time0")),
                jsoncodec.dumps(record["data"]).decode(),
            )
            for record in records
        ]
        for records in batches
    ]
    conn = await asyncpg.connect(dsn)
    results: dict[str, list[float]] = {}
    try:
        for kind in ("text", "jsonb"):
            await conn.execute(
                f"CREATE TABLE {schema}.fmt_{kind} (session_id text NOT NULL, seq bigint NOT NULL,"
                f" type text NOT NULL, time bigint NOT NULL, data {kind} NOT NULL,"
                " PRIMARY KEY (session_id, seq))"
            )
        for _ in range(REPEATS):
            for kind in ("text", "jsonb"):
                table = f"{schema}.fmt_{kind}"
                await conn.execute(f"TRUNCATE {table}")
                insert = (
                    f"INSERT INTO {table} SELECT 'fmt', * FROM unnest($1::bigint[], $2::text[], "
                    f"$3::bigint[], $4::text[]::{kind}[])"
                )
                start = time.perf_counter()
                for batch in rows:
                    columns = [list(column) for column in zip(*batch, strict=True)]
                    await conn.execute(insert, *columns)
                results.setdefault(f"append_{kind}", []).append(time.perf_counter() - start)
                select = (
                    f"SELECT seq, data::text FROM {table} WHERE session_id = 'fmt' ORDER BY seq"
                )
                start = time.perf_counter()
                loaded = [jsoncodec.loads(row[1]) for row in await conn.fetch(select)]
                results.setdefault(f"load_{kind}", []).append(time.perf_counter() - start)
                assert len(loaded) == sum(len(batch) for batch in rows)
        sizes = {
            f"size_{kind}": float(
                await conn.fetchval(f"SELECT pg_total_relation_size('{schema}.fmt_{kind}')")
            )
            for kind in ("text", "jsonb")
        }
    finally:
        await conn.close()
    out = {key: count / statistics.median(samples) for key, samples in results.items()}
    out.update(sizes)
    out["rows"] = float(sum(len(batch) for batch in rows))
    return out


# -- main -------------------------------------------------------------------------------------


async def setup_schema(dsn: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
        await conn.execute(FLOOR_TABLE.format(schema=schema))
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000, help="events per writer")
    parser.add_argument("--writers", type=int, default=8, help="concurrent writer processes")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (median)")
    args = parser.parse_args()
    try:
        from sessionledger_postgres.plugin import parse_postgres_url
        from sessionledger_postgres.testing import (
            PG_URL_ENV,
            ServerUnavailable,
            ThrowawayServer,
            drop_schema,
            pg_url,
            with_options,
        )
    except ImportError as error:
        print(f"bench_postgres: skipped: sessionledger-postgres is not installed ({error})")
        return
    server = ThrowawayServer(durable=True)
    given = bool(os.environ.get(PG_URL_ENV, "").strip())
    try:
        base = pg_url(server)
    except ServerUnavailable as error:
        print(f"bench_postgres: skipped: no PostgreSQL server could be started: {error}")
        return
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    raw = f"{schema}_raw"  # the floor's and the format test's tables: not a store schema
    url = with_options(base, schema=schema, pool_max_size=2)
    raw_url = with_options(base, schema=raw)
    dsn = parse_postgres_url(base)[0]
    try:
        asyncio.run(setup_schema(dsn, raw))
        samples: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.repeats):  # interleaved, so machine noise hits all alike
            for writers in (1, args.writers):
                for mode in (*FLOORS, "store", "ledger"):
                    target = raw_url if mode in FLOORS else url
                    rate = concurrent(mode, target, writers, args.events)
                    samples.setdefault((mode, writers), []).append(rate)
        figures = {key: statistics.median(values) for key, values in samples.items()}
        formats = asyncio.run(text_vs_jsonb(dsn, raw, FORMAT_EVENTS))
    finally:
        for name in (schema, raw):
            asyncio.run(drop_schema(base, name))
        server.stop()
    durable = f"server from ${PG_URL_ENV}" if given else "this run's throwaway server, fsync on"
    print(
        f"## PostgreSQL store: durable appends, flush every {BATCH} events, {args.events:,} "
        f"events per writer, median of {args.repeats} ({durable})"
    )
    for writers in (1, args.writers):
        label = "1 writer" if writers == 1 else f"{writers} writers (processes)"
        floors = {mode: figures[(mode, writers)] for mode in FLOORS}
        for mode, rate in floors.items():
            print(f"{label:<24} raw asyncpg {mode:<11}: {rate:>10,.0f} events/s")
        best = max(floors.values())
        for mode, what in (("store", "store.append alone"), ("ledger", "Ledger -> Postgres")):
            ours = figures[(mode, writers)]
            print(
                f"{label:<24} {what:<22}: {ours:>10,.0f} events/s  "
                f"ratio to the best floor {ours / best:.2f}x"
            )
    print(
        f"## data column TEXT vs JSONB ({FORMAT_EVENTS:,} events = {formats['rows']:,.0f} rows, "
        f"median of {REPEATS})"
    )
    for action in ("append", "load"):
        text, jsonb = formats[f"{action}_text"], formats[f"{action}_jsonb"]
        print(
            f"{action:<6} text : {text:>10,.0f} events/s   jsonb : {jsonb:>10,.0f} events/s   "
            f"text/jsonb {text / jsonb:.2f}x"
        )
    print(
        f"size   text : {formats['size_text'] / 1024:>10,.0f} KiB        jsonb : "
        f"{formats['size_jsonb'] / 1024:>10,.0f} KiB"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == WORKER_FLAG:
        worker(sys.argv[2:])
    else:
        main()
