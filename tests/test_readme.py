"""The README's Python examples run as written.

Each ```python block of the root README is a whole program, run in a fresh process in an
empty directory; a block whose first line names a ``test_*.py`` file is a test module and
runs under pytest instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXPECTED_OUTPUT = {
    "harness": "42 lines",
    "backends": "['kept in jsonl:tour-sessions']",
    "plugin": "vetoed: ",
    "contract": " passed",
}


def _blocks() -> dict[str, str]:
    names = ["harness", "backends", "plugin", "contract"]
    blocks = BLOCK.findall(README.read_text(encoding="utf-8"))
    assert len(blocks) == len(names), "update the names here when the README changes"
    return dict(zip(names, blocks, strict=True))


@pytest.mark.parametrize("name", ["harness", "backends", "plugin", "contract"])
def test_readme_example_runs(name: str, tmp_path: Path) -> None:
    code = _blocks()[name]
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    first = code.splitlines()[0]
    module = re.match(r"# (test_\w+\.py)", first)
    if module:
        (tmp_path / module.group(1)).write_text(code, encoding="utf-8")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", module.group(1)]
    else:
        (tmp_path / "example.py").write_text(code, encoding="utf-8")
        command = [sys.executable, "example.py"]
    # Twice in the same directory: an example a user re-runs must keep working on the
    # stores its first run left behind.
    for run in ("first", "second"):
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, f"{run} run:\n{done.stdout}{done.stderr}"
        assert EXPECTED_OUTPUT[name] in done.stdout, f"{run} run:\n{done.stdout}"
    if name == "plugin":
        assert done.stdout.count("vetoed: ") == 2
        assert "['todo/write']" in done.stdout
