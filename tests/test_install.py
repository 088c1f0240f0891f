"""The README's install lines and its two commands work as written, on a fresh virtual
environment, also with a Python whose pip refuses system-wide installs (PEP 668).

These tests run the real lines in a shell (the virtual environment moved into a temporary
directory, the store under a temporary ``XDG_DATA_HOME``), install from this checkout and
from the package index, and then run the commands the demo suggests in a shell that only
has what the user's own shell would have.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def bash_block(after_heading: str) -> list[str]:
    """Return the lines of the first ```bash block after *after_heading* (comments cut)."""
    section = README[README.index(after_heading) :]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, f"no bash block after {after_heading!r}"
    return [line.split("   #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def run_shell(script: str, *, cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


def user_env(tmp_path: Path) -> dict[str, str]:
    """An environment like a user's shell: system PATH only, a private data directory."""
    keep = {key: os.environ[key] for key in ("HOME", "LANG", "TERM") if key in os.environ}
    return {
        **keep,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "COLUMNS": "160",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def suggested_commands(output: str) -> list[str]:
    """Return the commands the demo printed under "Try next"."""
    tail = output[output.index("Try next") :]
    return [line.split("  #")[0].strip() for line in tail.splitlines()[1:] if "  #" in line]


def test_ci_runs_the_readmes_test_command() -> None:
    demo, suite = bash_block("## Two commands")
    assert demo.endswith("-m nox -s demo")
    assert suite.endswith("-m nox -s lint typecheck tests")
    assert suite in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


@pytest.mark.slow
def test_install_from_a_checkout_gives_a_working_command(tmp_path: Path) -> None:
    lines = bash_block("### Install from a checkout")
    venv = tmp_path / "venv"
    script = "\n".join(line.replace(".venv", shlex.quote(str(venv))) for line in lines)
    env = user_env(tmp_path)
    output = run_shell(script, cwd=ROOT, env=env)
    assert "resumed demo-" in output
    # What the demo suggests runs as printed in the user's shell (no venv on its PATH).
    commands = suggested_commands(output)
    assert commands
    assert all(command.startswith(str(venv / "bin" / "sessionledger")) for command in commands)
    listing = run_shell(commands[0], cwd=tmp_path, env=env)
    assert "demo-" in listing


def _externally_managed_python() -> str | None:
    """Return a Python whose pip refuses system-wide installs, with venv available."""
    probe = (
        "import os, sysconfig, ensurepip, sys; "
        "marker = os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED'); "
        "sys.exit(0 if os.path.exists(marker) and sys.prefix == sys.base_prefix else 1)"
    )
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if not Path(candidate).exists():
            continue
        done = subprocess.run([candidate, "-c", probe], capture_output=True, check=False)
        if done.returncode == 0:
            return candidate
    return None


@pytest.mark.slow
def test_the_main_job_works_where_pip_refuses_system_wide_installs(tmp_path: Path) -> None:
    python = _externally_managed_python()
    if python is None:
        pytest.skip("no Python here refuses system-wide installs (PEP 668) and has venv")
    env = user_env(tmp_path)
    # Self-check: this interpreter really refuses the old README line.
    refused = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "nox"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert refused.returncode != 0
    assert "externally-managed-environment" in refused.stdout + refused.stderr
    demo, _ = bash_block("## Two commands")
    venv = tmp_path / "venv"
    line = demo.replace("python3 ", f"{python} ", 1).replace(".venv", shlex.quote(str(venv)))
    # nox's own environments go under the temporary directory, not the checkout's .nox.
    line = line.replace("-m nox ", f"-m nox --envdir {shlex.quote(str(tmp_path / 'nox'))} ")
    output = run_shell(line, cwd=ROOT, env=env)
    assert "resumed demo-" in output
    commands = suggested_commands(output)
    assert commands
    assert all(command.startswith(str(tmp_path / "nox" / "demo" / "bin")) for command in commands)
    listing = run_shell(commands[0], cwd=ROOT, env=env)
    assert "demo-" in listing


def _core_wheel(tmp_path: Path, env: dict[str, str]) -> tuple[Path, list[str]]:
    """Build the core's wheel from a copy of its sources alone (so no extension built
    earlier in this checkout, which an editable install leaves in ``build/`` and ``src/``,
    can slip in) and unpack it; return where, and the compiled modules it holds."""
    source = tmp_path / "core"
    shutil.copytree(
        ROOT / "packages" / "core",
        source,
        ignore=shutil.ignore_patterns("build", "*.so", "*.pyd", "*.egg-info", "__pycache__"),
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            *("-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels)),
            str(source),
        ],
        env={**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("sessionledger-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        compiled = [name for name in archive.namelist() if name.endswith((".so", ".pyd"))]
        archive.extractall(site)
    return site, compiled


def _fast_path_of(site: Path) -> list[str]:
    """Import the unpacked core in a fresh interpreter; say which fast path it chose."""
    probe = (
        "import importlib, sys; sys.path.insert(0, sys.argv[1]); "
        "import sessionledger; s = importlib.import_module('sessionledger._accelerator'); "
        "assert sessionledger.__file__.startswith(sys.argv[1]), sessionledger.__file__; "
        "v = sessionledger.snapshot({'a': [1, {'b': 'c'}]}); "
        "print(s.ACCELERATED, type(v).__name__, type(v['a']).__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(site)], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def test_the_core_installs_and_runs_without_a_c_compiler(tmp_path: Path) -> None:
    """The compiled fast path is optional: with no working compiler the wheel still
    builds, holds no extension, and the pure-Python path is chosen by itself."""
    site, compiled = _core_wheel(tmp_path, {**os.environ, "CC": "false"})
    assert compiled == []
    assert _fast_path_of(site) == ["False", "FrozenDict", "tuple"]


def test_the_core_builds_its_accelerator_where_a_compiler_is_there(tmp_path: Path) -> None:
    """The other half of the automatic choice: a build failure of the optional extension
    is silent by design, so this is what notices one where a compiler and the headers are
    there (as on the CI machine)."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which(compiler) is None or not headers.exists():
        pytest.skip(f"no C compiler ({compiler}) or no Python headers ({headers}) here")
    site, compiled = _core_wheel(tmp_path, dict(os.environ))
    assert [Path(name).name.split(".")[0] for name in compiled] == ["_freeze"]
    assert _fast_path_of(site) == ["True", "FrozenDict", "tuple"]
