"""Fixtures for the invariants tests; the event builders live in ``invariants_builders``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The tests import their builders as a plain module (pytest runs with importlib mode).
sys.path.insert(0, str(Path(__file__).parent))

from invariants_builders import HarnessTypes

from sessionledger import Ledger
from sessionledger.model._session import Session
from sessionledger_invariants import InvariantsPlugin


def pytest_configure(config: pytest.Config) -> None:
    # Tests that need ledgers without the plugin carry this marker, so a suite-wide
    # "invariants on" fixture can leave them alone.
    config.addinivalue_line(
        "markers", "invariants_off: the test needs ledgers built without InvariantsPlugin"
    )


@pytest.fixture
def plugin() -> InvariantsPlugin:
    return InvariantsPlugin()


@pytest.fixture
def ledger(plugin: InvariantsPlugin) -> Ledger:
    """An in-memory ledger with only core and the invariants plugin (no entry points)."""
    return Ledger(plugins=[plugin, HarnessTypes()], load_entrypoints=False)


@pytest.fixture
def session(ledger: Ledger) -> Session:
    return ledger.create("s")
