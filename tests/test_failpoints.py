"""The failpoint switch: read once, on first use; ``name:N`` counts hits; blocks for real, or
sends SIGINT with the ``interrupt`` action."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from sessionledger import _failpoints
from sessionledger._errors import ConfigError
from sessionledger._failpoints import (
    ACTION_VARIABLE,
    ENVIRONMENT_VARIABLE,
    failpoint,
    failpoint_armed,
)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    _failpoints._reset()
    yield monkeypatch
    _failpoints._reset()


def test_without_the_variable_every_point_returns_at_once(fresh: pytest.MonkeyPatch) -> None:
    fresh.delenv(ENVIRONMENT_VARIABLE, raising=False)
    for _ in range(3):
        failpoint("jsonl.append.mid-write")
    assert not failpoint_armed("jsonl.append.mid-write")


def test_the_variable_is_read_on_first_use_and_then_cached(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv(ENVIRONMENT_VARIABLE, "some.point:2")
    assert _failpoints._armed is None  # importing read nothing
    failpoint("other.point")
    fresh.setenv(ENVIRONMENT_VARIABLE, "other.point")  # too late: already read
    failpoint("other.point")
    assert not failpoint_armed("some.point")  # armed for its 2nd hit, not the next one
    assert not failpoint_armed("other.point")


def test_name_colon_n_blocks_only_at_the_nth_hit(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv(ENVIRONMENT_VARIABLE, "core.repair.begin:3")
    assert not failpoint_armed("core.repair.begin")
    failpoint("core.repair.begin")  # hit 1
    failpoint("core.repair.begin")  # hit 2
    assert failpoint_armed("core.repair.begin")  # hit 3 would block
    assert not failpoint_armed("core.repair.after-truncate")


@pytest.mark.parametrize("spec", ["name:0", "name:x", ":3", "name:-1"])
def test_a_malformed_setting_is_a_config_error(spec: str, fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv(ENVIRONMENT_VARIABLE, spec)
    with pytest.raises(ConfigError):
        failpoint("name")


def test_an_armed_point_announces_itself_and_blocks_until_killed() -> None:
    code = (
        "from sessionledger._failpoints import failpoint\n"
        "failpoint('a.point'); failpoint('a.point')\n"
        "print('passed the point', flush=True)\n"
    )
    env = dict(os.environ, **{ENVIRONMENT_VARIABLE: "a.point:2"})
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert child.stderr is not None
        assert child.stdout is not None
        ready, _, _ = select.select([child.stderr], [], [], 60)
        assert ready, "the child never reached the failpoint"
        assert child.stderr.readline().decode() == f"FAILPOINT a.point {child.pid}\n"
        ready, _, _ = select.select([child.stdout], [], [], 0.3)
        assert not ready
        assert child.poll() is None
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
        assert child.stdout.read() == b""
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def test_the_interrupt_action_sends_sigint_there_and_carries_on() -> None:
    code = (
        "import signal, sys\n"
        "from sessionledger._failpoints import failpoint\n"
        "signal.signal(signal.SIGINT, lambda *_: print('SIGINT', flush=True))\n"
        "failpoint('a.point'); print('passed once', flush=True)\n"
        "failpoint('a.point'); print('passed twice', flush=True)\n"
    )
    env = dict(os.environ, **{ENVIRONMENT_VARIABLE: "a.point:2", ACTION_VARIABLE: "interrupt"})
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "passed once\nSIGINT\npassed twice\n"
    assert done.stderr.startswith("FAILPOINT a.point ")


def test_an_unknown_action_is_a_config_error(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv(ENVIRONMENT_VARIABLE, "name")
    fresh.setenv(ACTION_VARIABLE, "explode")
    with pytest.raises(ConfigError):
        failpoint("name")
