"""Deterministic workloads: a stream-heavy agent session (a) and a plain chat (b).

(a) ``agent_session(n)``: multi-turn agent work as a harness records it. Each turn has a
    prompt, 1-4 steps of streamed reasoning, text and tool-call-argument deltas (token
    sized: 1-7 characters), the assembled ``assistant/message`` citing its chunk seqs, a
    ``tool/call`` and its ``tool/result`` (a file read, 0.3-4 KB), and the turn's
    boundaries. Deltas are ≥ 90 % of the events. Event times advance like a real stream
    (tens of ms per token, seconds per tool), so packed rows hold realistic gaps.
(b) ``chat_texts(n)``: *n* chat messages of ~0.5 KB each, alternating user / assistant,
    no chunks; ``chat_ops`` turns them into sessionledger appends.

Everything is a pure function of its arguments (seeded ``random.Random``), so both sides
of every comparison get exactly the same payloads, run after run.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sessionledger import assistant_message, tool_call_block, tool_result, user_message

__all__ = [
    "PROVIDER",
    "MODEL",
    "Op",
    "agent_session",
    "chat_ops",
    "chat_texts",
    "delta_share",
    "replay_clock",
]

PROVIDER: Final = "acme"
MODEL: Final = "acme-large-2"
START_MS: Final = 1_760_000_000_000

_PROSE: Final = (
    "The repository declares a package named demo with version 1.0.0 and a test script that "
    "runs pytest over the src tree. The failing assertion compares the parsed configuration "
    "against the expected defaults, so the fix is to load the file relative to the project "
    "root instead of the current working directory. I will read the loader first, then the "
    "test, and change the path handling in one place; after that the suite should pass on "
    "every platform, including Windows where the separator differs. Note that the cache "
    "directory is created lazily, which explains why the first run was slower than the "
    "others, and that the retry logic in the client hides the original error message. "
)
_CODE: Final = (
    "import os\nfrom pathlib import Path\n\n"
    "DEFAULTS = {'timeout': 30, 'retries': 3, 'cache_dir': '.cache'}\n\n"
    "def load_config(name: str = 'config.toml') -> dict:\n"
    "    path = Path(os.getcwd()) / name\n"
    "    if not path.exists():\n"
    "        return dict(DEFAULTS)\n"
    "    with path.open('rb') as handle:\n"
    "        data = tomllib.load(handle)\n"
    "    return {**DEFAULTS, **data}\n\n"
    "class Client:\n"
    "    def __init__(self, config: dict) -> None:\n"
    "        self.timeout = config['timeout']\n"
    "        self.retries = config['retries']\n\n"
    "    def fetch(self, url: str) -> bytes:\n"
    "        for attempt in range(self.retries):\n"
    "            try:\n"
    "                return self._get(url, timeout=self.timeout)\n"
    "            except TimeoutError:\n"
    "                continue\n"
    "        raise RuntimeError('gave up')\n"
)
# Token-sized pieces (what providers stream): a word with its leading space, split when
# long; digits, punctuation and newlines alone.
_TOKEN: Final = re.compile(r" ?[A-Za-z]{1,6}|[0-9]|\n|[^\sA-Za-z0-9]| +")
_PROSE_TOKENS: Final = tuple(_TOKEN.findall(_PROSE * 2))
_TOOLS: Final = ("read_file", "grep", "run_tests", "edit_file")
_FILES: Final = ("src/demo/config.py", "tests/test_config.py", "src/demo/client.py", "README.md")


@dataclass(frozen=True, slots=True)
class Op:
    """One append: event type, data, surface metadata and the event's (deterministic) time."""

    type: str
    data: dict[str, Any]
    surface_op: str | None
    sources: tuple[int, ...] | None
    time: int


def _take(rng: random.Random, count: int) -> list[str]:
    start = rng.randrange(len(_PROSE_TOKENS) - count) if count < len(_PROSE_TOKENS) else 0
    return list((_PROSE_TOKENS * (1 + count // len(_PROSE_TOKENS)))[start : start + count])


def _split_json(text: str, rng: random.Random) -> list[str]:
    pieces, at = [], 0
    while at < len(text):
        size = rng.randint(2, 6)
        pieces.append(text[at : at + size])
        at += size
    return pieces


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ops: list[Op] = []
        self.now = START_MS

    def add(
        self,
        kind: str,
        data: dict[str, Any],
        gap: int,
        surface_op: str | None = None,
        sources: Sequence[int] | None = None,
    ) -> int:
        self.now += gap
        seq = len(self.ops)
        self.ops.append(
            Op(kind, data, surface_op, None if sources is None else tuple(sources), self.now)
        )
        return seq

    def chunks(
        self, turn: int, step: int, chunk_type: str, index: int, texts: list[str]
    ) -> list[int]:
        seqs = []
        for text in texts:
            chunk = {"type": chunk_type, "index": index, "text": text}
            data = {"turn": turn, "step": step, "chunk": chunk}
            seqs.append(self.add("assistant/chunk", data, self.rng.randint(8, 60)))
        return seqs

    def tool_chunks(
        self, turn: int, step: int, call_id: str, name: str, pieces: list[str]
    ) -> list[int]:
        seqs = []
        for number, piece in enumerate(pieces):
            chunk: dict[str, Any] = {"type": "tool-call-delta", "index": 2, "id": call_id}
            if number == 0:
                chunk["name"] = name  # providers name the tool in its first delta only
            chunk["argumentsDelta"] = piece
            data = {"turn": turn, "step": step, "chunk": chunk}
            seqs.append(self.add("assistant/chunk", data, self.rng.randint(8, 40)))
        return seqs

    def turn(self, turn: int) -> None:
        rng = self.rng
        self.add("turn/start", {"turn": turn}, rng.randint(2_000, 30_000))
        if turn == 1:
            tools = [
                {
                    "name": name,
                    "description": f"{name.replace('_', ' ')} in the workspace",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                }
                for name in _TOOLS
            ]
            header = {
                "config": {"provider": PROVIDER, "model": MODEL, "maxTokens": 8192},
                "system": "You are a careful coding agent. " * 8,
                "tools": tools,
            }
            self.add("request/header", {"reason": "initial", "header": header}, 1)
            self.add(
                "request/context",
                {"provider": PROVIDER, "model": MODEL, "contextWindow": 200_000},
                1,
            )
        prompt = "".join(_take(rng, rng.randint(15, 90))).strip()
        self.add(
            "user/message",
            dict(user_message(prompt, id=f"user-{turn}")),
            rng.randint(1, 5),
            surface_op="append",
        )
        steps = rng.randint(1, 4)
        for step in range(1, steps + 1):
            self.add("step/start", {"turn": turn, "step": step}, rng.randint(1, 5))
            reasoning = _take(rng, rng.randint(15, 70))
            text = _take(rng, rng.randint(8, 110))
            seqs = self.chunks(turn, step, "reasoning-delta", 0, reasoning)
            seqs += self.chunks(turn, step, "text-delta", 1, text)
            blocks: list[Any] = [
                {"type": "reasoning", "text": "".join(reasoning)},
                {"type": "text", "text": "".join(text)},
            ]
            call_id = name = arguments = None
            if step < steps:
                call_id, name = f"call-{turn}-{step}", rng.choice(_TOOLS)
                arguments = (
                    f'{{"path": "{rng.choice(_FILES)}", "start": {rng.randint(1, 200)}, '
                    f'"end": {rng.randint(201, 900)}}}'
                )
                seqs += self.tool_chunks(turn, step, call_id, name, _split_json(arguments, rng))
                blocks.append(tool_call_block(call_id, name, arguments))
            message = assistant_message(
                blocks, provider=PROVIDER, model=MODEL, id=f"assistant-{turn}-{step}"
            )
            usage = {"inputTokens": rng.randint(2_000, 90_000), "outputTokens": len(seqs)}
            self.add(
                "assistant/message",
                {"turn": turn, "step": step, "message": dict(message), "usage": usage},
                rng.randint(1, 10),
                surface_op="append",
                sources=seqs,
            )
            if call_id is not None and name is not None and arguments is not None:
                call = self.add(
                    "tool/call",
                    {
                        "turn": turn,
                        "step": step,
                        "callId": call_id,
                        "name": name,
                        "arguments": arguments,
                    },
                    rng.randint(1, 5),
                )
                start = rng.randrange(len(_CODE))
                size = rng.randint(300, 4_000)
                output = (_CODE * (2 + size // len(_CODE)))[start : start + size]
                result = tool_result(call_id, output, id=f"result-{turn}-{step}")
                self.add(
                    "tool/result",
                    {"turn": turn, "step": step, "message": dict(result)},
                    rng.randint(50, 2_500),
                    surface_op="append",
                    sources=[call],
                )
            self.add("step/end", {"turn": turn, "step": step}, rng.randint(1, 5))
        self.add("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, rng.randint(1, 5))


def agent_session(events: int, *, seed: int = 20_260_101) -> list[Op]:
    """Return the appends of a stream-heavy agent session of about *events* events.

    Whole turns only (a cold load of a closed log writes nothing), so the count is at
    least *events* and exceeds it by less than one turn (a turn is ~20-500 events).
    """
    builder = _Builder(seed)
    turn = 0
    while len(builder.ops) < events:
        turn += 1
        builder.turn(turn)
    return builder.ops


def delta_share(ops: Sequence[Op]) -> float:
    """Return the fraction of *ops* that are streamed deltas (``assistant/chunk``)."""
    return sum(op.type == "assistant/chunk" for op in ops) / len(ops)


def replay_clock(ops: Sequence[Op]) -> Callable[[], int]:
    """Return a clock that gives a header time, then the time of each op in order.

    A ledger calls its clock once for the session header and once per append, so a
    session built with it gets exactly the times the workload planned (and so the same
    stored bytes on every run).
    """
    # A C-level iterator method: the clock itself should cost next to nothing. Calling it
    # more often than planned raises StopIteration, which would be a bug in the bench.
    times: Iterator[int] = iter([START_MS, *(op.time for op in ops)])
    return times.__next__


def chat_texts(count: int, *, size: int = 500, seed: int = 7) -> list[str]:
    """Return *count* chat message texts of about *size* characters each."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        tokens: list[str] = []
        while sum(map(len, tokens)) < size:
            tokens.extend(_take(rng, 40))
        out.append("".join(tokens)[:size].strip())
    return out


def chat_ops(texts: Sequence[str]) -> list[Op]:
    """Return sessionledger appends for a chat: ``user/message`` and ``assistant/message``
    alternating, no chunks and no turn boundaries (the peers store messages only)."""
    ops = []
    for index, text in enumerate(texts):
        if index % 2 == 0:
            data: dict[str, Any] = dict(user_message(text, id=f"m{index}"))
            ops.append(Op("user/message", data, "append", None, START_MS + index))
        else:
            message = assistant_message(text, provider=PROVIDER, model=MODEL, id=f"m{index}")
            data = {"turn": 1, "step": 1, "message": dict(message)}
            ops.append(Op("assistant/message", data, "append", None, START_MS + index))
    return ops
