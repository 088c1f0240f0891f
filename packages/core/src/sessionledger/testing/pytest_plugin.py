"""pytest plugin (entry point ``pytest11``): inert until a test module subclasses the kit.

It only makes the kit importable early and registers the ``slow`` marker, so a backend's
test suite can ``from sessionledger.testing.contract import PersistenceContract`` with
nothing else to configure. It collects and runs nothing by itself.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long-running variants of a test")
