"""Child process for the SIGKILL test: flush a turn that stops at a ``tool/call``, then wait.

Usage: ``python sigkill_child.py ROOT SESSION_ID``. Prints ``flushed <call seq>`` once the
``tool/call`` is durable and sleeps until it is killed. Plugins are passed explicitly and
entry points are off, so the child depends on nothing but core and this package.
"""

from __future__ import annotations

import asyncio
import sys

from sessionledger import Ledger, assistant_message, tool_call_block, user_message
from sessionledger_jsonl import plugin


async def main(root: str, session_id: str) -> None:
    ledger = Ledger.open(f"jsonl:{root}", plugins=[plugin], load_entrypoints=False)
    session = ledger.create(session_id, cwd="/srv/app")
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_message("write a.txt"), surface_op="append")
    session.append("step/start", {"turn": 1, "step": 1})
    message = assistant_message(
        [tool_call_block("call-1", "write", '{"path": "a.txt"}')],
        provider="mock",
        model="mock-model",
    )
    session.append(
        "assistant/message",
        {"turn": 1, "step": 1, "message": message},
        surface_op="append",
        source_event_seqs=[],
    )
    call = session.append(
        "tool/call",
        {
            "turn": 1,
            "step": 1,
            "callId": "call-1",
            "name": "write",
            "arguments": '{"path": "a.txt"}',
        },
    )
    await ledger.flush(session)
    print(f"flushed {call.seq}", flush=True)
    await asyncio.sleep(3600)  # the "tool" runs; the parent kills us here


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
