"""Tests for the JSONL store's directory names (sessionledger_jsonl.paths)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionledger._errors import ConfigError
from sessionledger_jsonl.paths import (
    MAX_NAME_BYTES,
    NO_CWD_KEY,
    decode_session_id,
    encode_session_id,
    is_hashed_name,
    project_key,
    session_dir,
)

ROOT = Path("/srv/sessionledger-test-root")
NAME_CHARS = re.compile(r"[A-Za-z0-9._~-]+")

# Valid ids: any Unicode text without lone surrogates, weighted towards the characters
# that need care (separators, dots, tildes, NUL, astral characters).
session_ids = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("./\\~:-_ \x00aA0é😀")),
        st.characters(codec="utf-8"),
    ),
    min_size=1,
    max_size=80,
) | st.sampled_from([".", "..", "...", "~", "~~", "-", "x" * 255, "x" * 256, "😀" * 26])


def escaped_length(session_id: str) -> int:
    """Length of the plain encoding: 1 per safe character, 5 per UTF-16 code unit else."""
    safe = re.compile(r"[A-Za-z0-9._-]")
    return sum(1 if safe.fullmatch(char) else 5 * (1 + (ord(char) > 0xFFFF)) for char in session_id)


def assert_single_safe_component(name: str) -> None:
    assert NAME_CHARS.fullmatch(name)
    assert name not in (".", "..")
    assert len(name.encode("utf-8")) <= MAX_NAME_BYTES
    assert PurePosixPath(name).name == name
    assert PureWindowsPath(name).name == name
    assert (ROOT / name).resolve().parent == ROOT.resolve()


# --- session ids ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "name"),
    [
        ("plain-ID_1.2", "plain-ID_1.2"),
        ("a/b", "a~002Fb"),
        ("/etc/passwd", "~002Fetc~002Fpasswd"),
        ("../../etc/pwn", "..~002F..~002Fetc~002Fpwn"),
        ("..", "~002E~002E"),
        (".", "~002E"),
        ("...", "..."),
        (".hidden", ".hidden"),
        ("~", "~007E"),
        ("a~b", "a~007Eb"),
        ("~002F", "~007E002F"),
        ("a\x00b", "a~0000b"),
        ("a\\b", "a~005Cb"),
        ("C:x", "C~003Ax"),
        ("a b", "a~0020b"),
        ("é", "~00E9"),
        ("中文", "~4E2D~6587"),
        ("😀", "~D83D~DE00"),
        ("x😀y", "x~D83D~DE00y"),
        ("\uffff", "~FFFF"),
        ("\U0010ffff", "~DBFF~DFFF"),
    ],
)
def test_session_ids_encode_exactly(session_id: str, name: str) -> None:
    assert encode_session_id(session_id) == name
    assert decode_session_id(name) == session_id


def test_an_encoding_of_exactly_255_bytes_stays_plain() -> None:
    assert encode_session_id("x" * 255) == "x" * 255
    assert encode_session_id("x" * 250 + "/") == "x" * 250 + "~002F"
    assert decode_session_id("x" * 255) == "x" * 255


def test_long_ids_get_a_hashed_name() -> None:
    long_id = "x" * 256
    name = encode_session_id(long_id)
    digest = hashlib.sha256(long_id.encode()).hexdigest()
    assert name == "x" * 189 + "~~" + digest
    assert len(name) == MAX_NAME_BYTES
    assert is_hashed_name(name)
    assert not is_hashed_name("x" * 255)
    with pytest.raises(ValueError, match="hashed"):
        decode_session_id(name)


def test_hashed_prefix_never_splits_an_escape() -> None:
    # 187 safe characters, then escapes: the prefix limit (189) falls inside "~002F".
    name = encode_session_id("a" * 187 + "/" * 20)
    assert name.startswith("a" * 187 + "~~")
    # An astral character straddling the limit is dropped whole (both of its escapes).
    name = encode_session_id("a" * 182 + "😀" * 20)
    assert name.startswith("a" * 182 + "~~")
    name = encode_session_id("a" * 179 + "😀" * 20)
    assert name.startswith("a" * 179 + "~D83D~DE00~~")
    assert len(name) == 179 + 10 + 2 + 64


def test_distinct_long_ids_get_distinct_hashed_names() -> None:
    prefix = "é" * 60  # 300 characters once escaped
    first = encode_session_id(prefix + "a")
    second = encode_session_id(prefix + "b")
    assert first != second
    assert first[:-64] == second[:-64]  # same readable prefix, different digest


@pytest.mark.parametrize("session_id", ["", "\ud800", "a\udc00b", "\ud83d\ude00"])
def test_unencodable_ids_are_refused(session_id: str) -> None:
    with pytest.raises(ConfigError):
        encode_session_id(session_id)


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "a/b",
        "a b",
        "é",
        "~",
        "a~",
        "~12",
        "~002f",
        "~00G0",
        "~0041",
        "~002D",
        "...~002E",
        "~002E~002E~002E",
        "~D800",
        "~DC00",
        "~DE00~D83D",
        "~D83Dx~DE00",
        "x" * 256,
        "x~~" + "0" * 64 + "0",
        "x~~" + "A" * 64,
    ],
)
def test_names_encode_never_produces_are_rejected(name: str) -> None:
    with pytest.raises(ValueError):
        decode_session_id(name)


@given(session_ids)
def test_encoding_is_a_single_safe_component_inside_the_root(session_id: str) -> None:
    assert_single_safe_component(encode_session_id(session_id))
    assert_single_safe_component(project_key("/" + session_id))


@given(session_ids)
def test_plain_names_decode_to_their_id(session_id: str) -> None:
    name = encode_session_id(session_id)
    assert encode_session_id(session_id) == name  # deterministic
    if is_hashed_name(name):
        assert escaped_length(session_id) > MAX_NAME_BYTES
    else:
        assert decode_session_id(name) == session_id


@given(session_ids, session_ids)
def test_distinct_ids_get_distinct_names(first: str, second: str) -> None:
    if first != second:
        assert encode_session_id(first) != encode_session_id(second)


@given(st.text(alphabet=st.sampled_from(list("aZ09._-~DE8F3")), max_size=20))
def test_decode_accepts_exactly_the_names_encode_produces(name: str) -> None:
    try:
        session_id = decode_session_id(name)
    except ValueError:
        return
    assert encode_session_id(session_id) == name


# --- project keys --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cwd", "key"),
    [
        (None, "_no-cwd"),
        ("/srv/app", "--srv-app--"),
        ("/", "--root--"),
        ("//", "--root--"),
        ("C:\\", "--C---"),
        ("C:\\Users\\x", "--C-Users-x--"),
        ("C:\\work\\agent", "--C-work-agent--"),
        ("/Users/someone/src/deepseek-harness", "--Users-someone-src-deepseek-harness--"),
        ("/开发/~agent", "--~5F00~53D1-~007Eagent--"),
        ("/home/me/my project", "--home-me-my~0020project--"),
        ("/srv/app/", "--srv-app---"),
        ("/a//b", "--a-b--"),
        ("/-lead/x", "--lead-x--"),
        ("/tmp/😀", "--tmp-~D83D~DE00--"),
        ("/a/..", "--a-..--"),
        ("\\\\server\\share", "--server-share--"),
    ],
)
def test_project_keys_for_typical_cwds(cwd: str | None, key: str) -> None:
    assert project_key(cwd) == key


def test_project_keys_are_lossy_by_design() -> None:
    assert project_key("/a/b-c") == project_key("/a-b/c") == "--a-b-c--"


def test_no_cwd_key_is_never_a_project_key() -> None:
    assert NO_CWD_KEY == "_no-cwd"
    assert project_key("/_no-cwd") == "--_no-cwd--"


def test_long_cwd_is_cut_to_251_characters() -> None:
    key = project_key("/" + "a" * 1000)
    assert key == "--" + "a" * 251 + "--"
    assert len(key) == MAX_NAME_BYTES


def test_cut_never_splits_an_escape() -> None:
    # 249 safe characters then escapes: 251 falls inside the first "~00E9".
    key = project_key("/" + "a" * 249 + "é" * 10)
    assert key == "--" + "a" * 249 + "--"
    key = project_key("/" + "a" * 246 + "é" * 10)
    assert key == "--" + "a" * 246 + "~00E9" + "--"
    # Both escapes of an astral character go, or neither.
    key = project_key("/" + "a" * 246 + "😀" * 3)
    assert key == "--" + "a" * 246 + "--"
    key = project_key("/" + "a" * 241 + "😀" * 3)
    assert key == "--" + "a" * 241 + "~D83D~DE00" + "--"


@given(st.text(alphabet=st.sampled_from(list("/\\:a-é😀~ .")), min_size=1, max_size=400))
def test_project_keys_are_bounded_and_well_formed(cwd: str) -> None:
    key = project_key(cwd)
    assert key.startswith("--")
    assert key.endswith("--")
    slug = key[2:-2]
    assert slug
    assert not slug.startswith("-")
    assert len(slug) <= 251
    assert re.fullmatch(r"(?:[A-Za-z0-9._-]|~[0-9A-F]{4})+", slug)
    assert not re.search(r"~D[89AB][0-9A-F]{2}$", slug)  # no half of a surrogate pair
    assert_single_safe_component(key)


def test_empty_cwd_is_refused() -> None:
    with pytest.raises(ConfigError):
        project_key("")


# --- session directories -------------------------------------------------------------------


def test_session_dir_joins_project_key_and_encoded_id(tmp_path: Path) -> None:
    assert session_dir(tmp_path, "/srv/app", "a/b") == tmp_path / "--srv-app--" / "a~002Fb"
    assert session_dir(tmp_path, None, "..") == tmp_path / "_no-cwd" / "~002E~002E"
    assert session_dir(str(tmp_path), "/", "s1") == tmp_path / "--root--" / "s1"


@given(st.one_of(st.none(), session_ids.map(lambda text: "/" + text)), session_ids)
def test_session_dirs_stay_two_levels_below_the_root(cwd: str | None, session_id: str) -> None:
    directory = session_dir(ROOT, cwd, session_id)
    assert directory.resolve().parent.parent == ROOT.resolve()
    assert directory.relative_to(ROOT).parts == (project_key(cwd), encode_session_id(session_id))
