"""A first look: record one agent turn, crash mid-tool, resume, and read it back."""

from __future__ import annotations

import asyncio
import sys

from sessionledger import Ledger, assistant_message, tool_call_block, tool_result, user_message


async def main(store: str) -> None:
    async with Ledger.open(store) as ledger:
        session = ledger.create("quickstart", cwd="/srv/app")
        session.append("turn/start", {"turn": 1})
        session.append(
            "user/message", user_message("What is in package.json?"), surface_op="append"
        )
        session.append("step/start", {"turn": 1, "step": 1})
        chunks = [
            session.append(
                "assistant/chunk",
                {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": t}},
            ).seq
            for t in ("Let ", "me ", "read ", "it.")
        ]
        message = assistant_message(
            [{"type": "text", "text": "Let me read it."}, tool_call_block("c1", "read", "{}")],
            provider="demo",
            model="scripted",
        )
        session.append(
            "assistant/message",
            {"turn": 1, "step": 1, "message": message},
            surface_op="append",
            source_event_seqs=chunks,
        )
        call = session.append(
            "tool/call",
            {"turn": 1, "step": 1, "callId": "c1", "name": "read", "arguments": "{}"},
        )
        await ledger.flush(session)  # durable before the tool runs
        session.append(
            "tool/result",
            {"turn": 1, "step": 1, "message": tool_result("c1", '{"name": "demo"}')},
            surface_op="append",
            source_event_seqs=[call.seq],
        )
        session.append("step/end", {"turn": 1, "step": 1})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    async with Ledger.open(store) as ledger:
        resumed = await ledger.resume("quickstart")
        print(f"{len(resumed.events)} events, surface nodes {list(resumed.surface.nodes)}")
        for event in resumed.events:
            print(f"  {event.seq:>3} {event.type}")
        for message in resumed.derive_messages():
            print(f"{message['role']:>9}: {[block['type'] for block in message['content']]}")


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "memory:quickstart"
    asyncio.run(main(target))
