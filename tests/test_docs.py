"""The user documentation in ``docs/`` is complete, linked and runnable, and the
repository cites it rather than anything outside the repository.

- no tracked file names a document that lives outside the repository;
- every error class and code of ``sessionledger._errors`` is in ``docs/errors.md``, every
  core event type and chunk kind in ``docs/events.md``;
- every relative link of ``docs/*.md`` and the root README reaches a file (and a heading);
- every ```python block of ``docs/*.md`` runs in a fresh process (a block whose first line
  names a ``test_*.py`` file runs under pytest), and so does the example in
  ``help(sessionledger)``.
"""

from __future__ import annotations

import ast
import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sessionledger
from sessionledger import LedgerError
from sessionledger.cli._app import CommandError
from sessionledger.model import _repair as repair
from sessionledger.model._vocabulary import CORE_EVENT_TYPES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")

#: Strings that cite a document outside the repository, built so this file does not
#: contain them itself.
FOREIGN = ("SPEC" + " §", "SPEC" + ".md", "../" + "shared", "shared" + "/reference")

#: The kinds ``docs/events.md`` must describe (the shapes have no constant in the code).
CHUNK_KINDS = (
    "block-start",
    "text-delta",
    "reasoning-delta",
    "tool-call-delta",
    "block-end",
    "usage",
    "finish",
)
TURN_END_KINDS = ("completed", "aborted", "error", "max-tokens", "blocked", "interrupted")


# -- (a) nothing cites a document outside the repository ---------------------------------


def _tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_no_tracked_file_cites_a_document_outside_the_repository() -> None:
    found = []
    for path in _tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            found.extend(
                f"{path.relative_to(ROOT)}:{number}: {needle}"
                for needle in FOREIGN
                if needle in line
            )
    assert not found, "\n".join(found)


# -- (b) every error class and code is in docs/errors.md ---------------------------------


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


def _error_classes() -> list[type[LedgerError]]:
    found = {LedgerError, *_subclasses(LedgerError)}
    return sorted(
        (cls for cls in found if cls.__module__.startswith("sessionledger")),
        key=lambda cls: cls.__name__,
    )


def _codes_raised_in_sources() -> set[str]:
    """Codes the sources pass to an error: ``code="X"`` keywords, and the codes the
    surface gives its ``_error`` helper."""
    codes: set[str] = set()
    for path in ROOT.glob("packages/*/src/**/*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg == "code" and isinstance(keyword.value, ast.Constant):
                    codes.add(str(keyword.value.value))
            name = node.func.id if isinstance(node.func, ast.Name) else ""
            if name == "_error" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                codes.add(str(node.args[1].value))
    return codes


def test_every_error_class_and_code_is_documented() -> None:
    page = (DOCS / "errors.md").read_text(encoding="utf-8")
    classes = _error_classes()
    assert len(classes) > 20
    codes = {cls.code for cls in classes} | _codes_raised_in_sources()
    codes |= {repair.TOOL_NOT_STARTED, repair.TOOL_OUTCOME_UNKNOWN}
    codes |= {cls.code for cls in (CommandError, *_subclasses(CommandError))}
    missing = [f"class {cls.__name__}" for cls in classes if f"`{cls.__name__}`" not in page]
    missing += [f"code {code}" for code in sorted(codes) if f"`{code}`" not in page]
    assert not missing, missing


# -- (c) every core event type and chunk kind is in docs/events.md -----------------------


def test_every_core_type_and_chunk_kind_is_documented() -> None:
    page = (DOCS / "events.md").read_text(encoding="utf-8")
    names = [*CORE_EVENT_TYPES, *CHUNK_KINDS, *TURN_END_KINDS, *sessionledger.SURFACE_TYPES]
    missing = [name for name in names if f"`{name}`" not in page]
    assert not missing, missing


# -- (d) every relative link resolves ----------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for match in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE):
        slug, n = _slug(match.group(1)), 1
        candidate = slug
        while candidate in anchors:
            candidate, n = f"{slug}-{n}", n + 1
        anchors.add(candidate)
    return anchors


@pytest.mark.parametrize("page", [*PAGES, ROOT / "README.md"], ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        where, _, anchor = target.partition("#")
        path = (page.parent / where).resolve() if where else page
        anchored = not anchor or (path.suffix == ".md" and anchor in _anchors(path))
        if not path.exists() or not anchored:
            broken.append(target)
    assert not broken, broken


def test_the_index_links_every_page_and_the_examples() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        if page.name != "README.md":
            assert f"({page.name}" in index, page.name
    assert "(../examples/quickstart.py)" in index


# -- (e) every Python block runs ---------------------------------------------------------


def _blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for number, code in enumerate(BLOCK.findall(page.read_text(encoding="utf-8")), 1):
            found.append((f"{page.stem}-{number}", code))
    return found


@pytest.mark.parametrize(("name", "code"), _blocks(), ids=[name for name, _ in _blocks()])
def test_every_python_block_runs(name: str, code: str, tmp_path: Path) -> None:
    module = re.match(r"# (test_\w+\.py)", code)
    script = module.group(1) if module else "example.py"
    (tmp_path / script).write_text(code, encoding="utf-8")
    command = [sys.executable, script]
    if module:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", script]
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_package_docstring_example_runs() -> None:
    assert sessionledger.__doc__ is not None
    assert "docs/" in sessionledger.__doc__
    parser = doctest.DocTestParser()
    test = parser.get_doctest(sessionledger.__doc__, {}, "sessionledger", None, 0)
    assert test.examples, "help(sessionledger) shows no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_the_core_readme_maps_every_module_of_the_tree() -> None:
    """Every internal module of the core's layer folders (and the base) is named in the
    core README's table, and the table names no module that is gone."""
    source = ROOT / "packages" / "core" / "src" / "sessionledger"
    table = (ROOT / "packages" / "core" / "README.md").read_text(encoding="utf-8")
    table = table.split("## How the core is laid out", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(_[a-z][a-z_]*)`", table))
    layers = ("model", "views", "plugins", "storage", "runtime")
    present = {path.stem for layer in layers for path in (source / layer).glob("_[a-z]*.py")}
    present |= {path.stem for path in source.glob("_[a-z]*.py")} | {"_freeze"}
    assert present - named == set(), "modules the core README's table does not name"
    assert named - present - {"_app"} == set(), "named in the table, not in the tree"
