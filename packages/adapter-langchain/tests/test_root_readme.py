"""The root README's LangChain section works: its fragment (the lines a user adds to an
async program that has a ``runnable``) runs as written around a fake chat model."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"

PROGRAM = """\
import asyncio

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables.history import RunnableWithMessageHistory

runnable = FakeListChatModel(responses=["Hello from the ledger."])


async def main() -> None:
{fragment}
    config = {{"configurable": {{"session_id": "chat-1"}}}}
    print((await chain.ainvoke("Hi", config)).content)
    history = await LedgerChatMessageHistory("chat-1", ledger).aget_messages()
    print([message.type for message in history])
    await ledger.close()


asyncio.run(main())
"""


def test_the_readme_fragment_runs_in_a_program(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("#### LangChain") :]
    section = re.split(r"\n#{2,4} ", section[len("#### LangChain") :])[0]  # to the next heading
    [fragment] = re.findall(r"^```py\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    program = PROGRAM.format(fragment=textwrap.indent(fragment, "    "))
    (tmp_path / "example.py").write_text(program, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Hello from the ledger.", "['human', 'ai']"]
    assert (tmp_path / "chat.db").exists()
