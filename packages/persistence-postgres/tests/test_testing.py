"""The throwaway-server launcher's refusals (``sessionledger_postgres.testing``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionledger_postgres.testing import (
    ServerUnavailable,
    ThrowawayServer,
    find_bindir,
    with_options,
)


def test_missing_binaries_make_the_server_unavailable_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SESSIONLEDGER_PG_BIN", str(tmp_path))
    assert find_bindir() is None
    server = ThrowawayServer()
    with pytest.raises(ServerUnavailable, match="apt-get install -y postgresql"):
        server.start()
    server.stop()  # nothing was started; stopping is still safe


def test_with_options_appends_query_parameters() -> None:
    assert with_options("postgresql://u@h/d", schema="x") == "postgresql://u@h/d?schema=x"
    assert (
        with_options("postgresql://u@/d?host=/tmp/s", schema="x", exclusive=True)
        == "postgresql://u@/d?host=/tmp/s&schema=x&exclusive=True"
    )
