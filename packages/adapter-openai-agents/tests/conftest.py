"""Fixtures for the OpenAI Agents SDK adapter tests: a store URL per backend."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The tests import their fakes as a plain module (pytest runs with importlib mode).
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(params=["sqlite", "jsonl"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh file-backed store on each backend the adapter is tested on."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'ledger.db'}"
    return f"jsonl:{tmp_path / 'sessions'}"
