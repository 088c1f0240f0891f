"""Test configuration for the whole repository (every package's tests and ``tests/``).

- hypothesis profiles: ``dev`` (default), ``ci`` (more examples; chosen by ``CI`` or
  ``HYPOTHESIS_PROFILE``) and ``sanitize`` (fewer, for ``nox -s sanitize``).
- The invariants plugin is on for every test (docs/plugins.md, "the invariants plugin"):
  every ledger gets an ``InvariantsPlugin`` unless the test carries the
  ``invariants_off`` marker. Child processes inherit ``SESSIONLEDGER_INVARIANTS=1``.
- ``pg_url``: a PostgreSQL database for the tests; ``publish_event_type``: a plugin
  published as a real entry point for one test.
"""

from __future__ import annotations

import os
import textwrap
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import sessionledger.runtime._opening
from sessionledger_invariants import InvariantsPlugin
from sessionledger_postgres.testing import PG_URL_ENV, ServerUnavailable, ThrowawayServer

settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# `nox -s sanitize`: every allocation through AddressSanitizer is several times slower.
settings.register_profile(
    "sanitize", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(autouse=True)
def invariants_on(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    if request.node.get_closest_marker("invariants_off"):
        monkeypatch.setenv("SESSIONLEDGER_INVARIANTS", "0")
        yield
        return
    monkeypatch.setenv("SESSIONLEDGER_INVARIANTS", "1")
    original = sessionledger.runtime._opening.make_plugin_manager

    def with_invariants(plugins: Iterable[object] = (), **options: Any) -> Any:
        chosen = list(plugins)
        if not any(isinstance(plugin, InvariantsPlugin) for plugin in chosen):
            chosen.append(InvariantsPlugin())
        return original(chosen, **options)

    monkeypatch.setattr(sessionledger.runtime._opening, "make_plugin_manager", with_invariants)
    yield


def started_server() -> ThrowawayServer:
    """A throwaway PostgreSQL server, started; the test is skipped when none can start
    here (and fails in CI, which must run the PostgreSQL tests)."""
    server = ThrowawayServer()
    try:
        server.start()
    except ServerUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL tests, but no server could start: {error}")
        pytest.skip(f"no PostgreSQL server could be started: {error}")
    return server


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """The URL of a PostgreSQL database the tests may create schemas in."""
    named = os.environ.get(PG_URL_ENV, "").strip()
    if named:
        yield named
        return
    server = started_server()
    try:
        assert server.url is not None
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def own_pg_server() -> Iterator[ThrowawayServer]:
    """A PostgreSQL server of the test's own, for a test that restarts it or reads its
    files (``url`` and ``data_directory``); stopped after the test."""
    server = started_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def publish_event_type(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str | None], str]:
    """Publish, for one test, a real distribution on ``sys.path`` whose ``sessionledger``
    entry point is a module declaring one event type; return the type's name (a fresh
    one when none is given). Entry-point discovery finds it like any installed plugin."""

    def publish(name: str | None = None) -> str:
        token = uuid.uuid4().hex[:8]
        name = name or f"fake/autoloaded-{token}"
        module = f"fake_sessionledger_plugin_{token}"
        directory: Path = tmp_path_factory.mktemp("dist")
        (directory / f"{module}.py").write_text(
            textwrap.dedent(
                f"""
                from sessionledger import EventType, hookimpl

                @hookimpl
                def ledger_event_types():
                    return [EventType({name!r})]
                """
            )
        )
        dist = directory / f"{module}-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text(f"[sessionledger]\nfake-{token} = {module}\n")
        monkeypatch.syspath_prepend(str(directory))
        return name

    return publish
