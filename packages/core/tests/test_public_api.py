"""The public surface of ``sessionledger``: exports and the error table (docs/errors.md)."""

from __future__ import annotations

import ast
import importlib
import pickle
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import sessionledger
from sessionledger import JsonValueError, LedgerError

#: Every error class and its codes, as docs/errors.md lists them.
CODES: dict[str, set[str]] = {
    "JsonValueError": {"NOT_JSON"},
    "EventEnvelopeError": {"BAD_ENVELOPE"},
    "HeaderError": {"BAD_HEADER"},
    "HistoryFormatError": {"BAD_HISTORY"},
    "MessageShapeError": {"BAD_MESSAGE"},
    "SeedError": {"SEQ_GAP"},
    "SurfaceError": {
        "MISSING_SURFACE_OP",
        "NOT_SURFACE_TYPE",
        "BAD_SURFACE_OP",
        "REPLACE_START_NOT_FOUND",
        "REPLACE_END_NOT_FOUND",
        "REPLACE_REVERSED",
        "BAD_SOURCES",
        "SOURCES_NOT_EARLIER",
        "SOURCES_DUPLICATE",
        "SOURCES_EMPTY",
        "REPLACE_NOT_COVERED",
        "TOOL_RESULT_REWRITE",
    },
    "ReentrantAppendError": {"REENTRANT"},
    "InvariantError": {"INVARIANT"},
    "ForkError": {"SESSION_NOT_FOUND", "SESSION_ALREADY_EXISTS", "INVALID_BOUNDARY", "OPEN_TURN"},
    "SessionExistsError": {"SESSION_ALREADY_EXISTS"},
    "SessionNotFoundError": {"SESSION_NOT_FOUND"},
    "NotLiveError": {"NOT_LIVE"},
    "QueryError": {"BAD_QUERY"},
    "ReadBackMismatchError": {"READ_BACK_MISMATCH"},
    "SeqMismatchError": {"SEQ_MISMATCH"},
    "CorruptLogError": {"CORRUPT"},
    "FormatUnsupportedError": {
        "FORMAT_NEWER",
        "FORMAT_OLDER",
        "UNKNOWN_EVENT_TYPE",
        "FOREIGN_STORE",
    },
    "StorageRowError": {"BAD_STORAGE_ROW"},
    "SessionLockedError": {"LOCKED"},
    "ConfigError": {"CONFIG"},
    "LedgerLoopError": {"LOOP_NOT_RUNNING", "LOOP_WOULD_BLOCK"},
    "EventDataError": {"BAD_DATA", "TOO_LARGE"},
    "BacklogFullError": {"BACKLOG_FULL"},
    "ResourceLimitError": {"RESOURCE_LIMIT"},
    "UnknownEventTypeError": {"UNKNOWN_EVENT_TYPE"},
    "SessionDeletedError": {"SESSION_DELETED"},
    "StoreUnavailableError": {"UNAVAILABLE"},
}

#: Names a user imports from ``sessionledger`` itself.
PUBLIC_NAMES = [
    "APPEND",
    "SESSION_FORMAT_VERSION",
    "Backlog",
    "EventType",
    "FrozenDict",
    "Ledger",
    "Replace",
    "Replacement",
    "Session",
    "SessionEvent",
    "SessionHeader",
    "SurfaceFold",
    "assistant_message",
    "fold_surface",
    "hookimpl",
    "messages_at",
    "snapshot",
    "thaw",
    "tool_call_block",
    "tool_result",
    "user_message",
    "FeedItem",
    "SessionFeed",
    "StoreFeed",
    *CODES,
    "LedgerError",
]


def subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


def library_errors() -> list[type[LedgerError]]:
    return sorted(
        {c for c in subclasses(LedgerError) if c.__module__.startswith("sessionledger")},
        key=lambda c: c.__name__,
    )


def test_every_name_in_all_is_importable() -> None:
    module = importlib.import_module("sessionledger")
    for name in sessionledger.__all__:
        assert getattr(module, name, None) is not None, name
    namespace: dict[str, object] = {}
    exec("from sessionledger import *", namespace)
    assert set(sessionledger.__all__) <= set(namespace)


def test_all_has_no_duplicates() -> None:
    assert len(sessionledger.__all__) == len(set(sessionledger.__all__))


def test_all_is_sorted() -> None:
    # The isort-style order ruff's RUF022 applies: CONSTANTS, then Classes, then functions.
    def key(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert sessionledger.__all__ == sorted(sessionledger.__all__, key=key)


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_names_are_exported(name: str) -> None:
    assert name in sessionledger.__all__


def test_open_store_is_exported() -> None:
    assert "open_store" in sessionledger.__all__


def test_every_ledger_error_is_exported_with_its_documented_code() -> None:
    found = library_errors()
    assert {c.__name__ for c in found} == set(CODES)
    for cls in found:
        assert cls.__name__ in sessionledger.__all__
        assert getattr(sessionledger, cls.__name__) is cls
        codes = CODES[cls.__name__]
        assert cls.code in codes, (cls.__name__, cls.code)
        assert cls("message").code == cls.code


def test_single_code_classes_have_exactly_that_code() -> None:
    for name, codes in CODES.items():
        if len(codes) == 1:
            assert getattr(sessionledger, name).code == next(iter(codes))


def test_ledger_error_base_is_exported() -> None:
    assert "LedgerError" in sessionledger.__all__
    assert issubclass(sessionledger.LedgerError, Exception)


def test_json_value_error_is_a_type_error() -> None:
    assert issubclass(JsonValueError, TypeError)
    assert issubclass(JsonValueError, LedgerError)
    with pytest.raises(TypeError):
        sessionledger.snapshot({1, 2})


def test_session_not_found_is_a_lookup_error() -> None:
    assert issubclass(sessionledger.SessionNotFoundError, LookupError)


@pytest.mark.parametrize("cls", library_errors(), ids=lambda c: c.__name__)
def test_errors_pickle_round_trip_keeps_code_and_context(cls: type[LedgerError]) -> None:
    codes = CODES[cls.__name__]
    code = sorted(codes)[-1]
    context = {"path": "data.x", "line": 7, "index": 3, "rule": "turn-open"}
    error = cls("something failed", code=code, session_id="s-1", seq=12, **context)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert back.code == code
    assert back.session_id == "s-1"
    assert back.seq == 12
    for name, value in context.items():
        assert getattr(back, name) == value
    assert str(back) == str(error)
    assert back.args == error.args


@pytest.mark.parametrize("cls", library_errors(), ids=lambda c: c.__name__)
def test_errors_pickle_round_trip_with_defaults(cls: type[LedgerError]) -> None:
    back = pickle.loads(pickle.dumps(cls("plain")))
    assert back.code == cls.code
    assert back.session_id is None
    assert str(back) == "plain"


def test_error_message_names_session_and_seq() -> None:
    error = sessionledger.SurfaceError("bad op", code="BAD_SURFACE_OP", session_id="abc", seq=4)
    assert "abc" in str(error)
    assert "4" in str(error)
    assert error.code == "BAD_SURFACE_OP"
    assert sessionledger.SurfaceError.code == "BAD_SURFACE_OP"


def test_per_instance_code_does_not_change_the_class_code() -> None:
    sessionledger.ForkError("x", code="OPEN_TURN")
    assert sessionledger.ForkError.code == "INVALID_BOUNDARY"


def test_hookimpl_marks_for_the_sessionledger_project() -> None:
    assert sessionledger.hookimpl.project_name == "sessionledger"
    assert sessionledger.hookspec.project_name == "sessionledger"


def test_package_is_typed() -> None:
    from importlib.resources import files

    assert files("sessionledger").joinpath("py.typed").is_file()


# -- the public surface, as docs/api.md lists it -----------------------------------------

API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def documented_names(heading: str) -> set[str]:
    """The backquoted names in the section of docs/api.md under *heading*."""
    text = API_DOC.read_text()
    section = text.split(f"\n## `{heading}`\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", section))


@pytest.mark.parametrize("namespace", ["sessionledger", "sessionledger.storage"])
def test_the_public_surface_is_what_the_api_page_lists(namespace: str) -> None:
    exported = set(importlib.import_module(namespace).__all__)
    documented = documented_names(namespace)
    assert exported - documented == set(), "exported, not in docs/api.md"
    assert documented - exported == set(), "in docs/api.md, not exported"


def test_the_names_type_checkers_see_are_the_names_the_package_exports() -> None:
    """``sessionledger/__init__`` lists each public name twice: once in ``_EXPORTS`` (what
    runs) and once under ``TYPE_CHECKING`` (what type checkers read); they must agree."""
    source = Path(sessionledger.__file__).read_text()
    seen: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module != "typing":
                    for alias in statement.names:
                        assert alias.asname == alias.name, "re-exported as itself"
                        seen[alias.name] = statement.module or ""
    assert seen == sessionledger._MODULE_OF


def test_every_internal_module_is_private_and_every_name_resolves() -> None:
    for name, module in sessionledger._MODULE_OF.items():
        assert module.rpartition(".")[2].startswith("_"), module
        assert getattr(importlib.import_module(module), name) is getattr(sessionledger, name)
