"""The README's examples run as written: each ``python`` block is a complete program (a ``py``
block is a fragment of one), run in a fresh namespace in an empty directory, offline, with
pydantic-ai's own ``TestModel``; the blocks run in order on one store, as a reader would run
them."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

#: What each complete program prints, in the README's order.
PRINTS = [["Hello from the ledger.", "2"], ["Hello again.", "4"]]


def test_every_complete_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert len(blocks) == len(PRINTS)
    monkeypatch.chdir(tmp_path)
    for number, (block, expected) in enumerate(zip(blocks, PRINTS, strict=True), 1):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"README.md, block {number}", "exec"), {"__name__": "__main__"})
        assert out.getvalue().splitlines() == expected, number
