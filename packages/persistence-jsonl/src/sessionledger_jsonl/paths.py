"""Name the directories of the JSONL store: project keys and encoded session ids.

Layout (docs/formats.md): ``<root>/<project-key>/<encoded-id>/session.jsonl``. Both names are
built from ``[A-Za-z0-9._-]`` plus ``~XXXX`` escapes (four uppercase hex digits of one
UTF-16 code unit, so a character outside the Basic Multilingual Plane takes two escapes),
which makes every name a single safe path component on any file system: no separator, no
NUL, never ``.`` or ``..``, at most 255 bytes.

- A session id is encoded injectively, so the name identifies the id. An id whose encoding
  would exceed 255 bytes gets a *hashed name*: a readable prefix of the encoding, ``~~``,
  then the SHA-256 of the id in 64 lowercase hex digits. Plain names never contain ``~~``
  (a ``~`` always starts an escape), so the two forms cannot collide; two long ids share a
  name only if SHA-256 collides, and the store checks the header id anyway. A hashed name
  cannot be decoded: the id is in the session header.
- A project key is lossy by design (``/a/b-c`` and ``/a-b/c`` share a directory); it only
  groups sessions by working directory, and session ids are unique across the whole store.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Final

from sessionledger._errors import ConfigError

__all__ = [
    "MAX_NAME_BYTES",
    "NO_CWD_KEY",
    "decode_session_id",
    "encode_session_id",
    "is_hashed_name",
    "project_key",
    "session_dir",
]

#: Longest file name (in bytes) common file systems accept; every name here is ASCII.
MAX_NAME_BYTES: Final = 255
#: Project directory of sessions whose header has no ``cwd``. Never a project key, since
#: those always start with ``--``.
NO_CWD_KEY: Final = "_no-cwd"

_SLUG_MAX: Final = MAX_NAME_BYTES - 4  # room for the "--" on each side
_HASH_MARK: Final = "~~"
_HASH_HEX: Final = 64  # SHA-256
_HASHED_HEAD_MAX: Final = MAX_NAME_BYTES - len(_HASH_MARK) - _HASH_HEX

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")
_SEPARATOR_RUN: Final = re.compile(r"[/\\:]+")
_PLAIN_NAME: Final = re.compile(r"(?:[A-Za-z0-9._-]|~[0-9A-F]{4})+")
_HASHED_NAME: Final = re.compile(r"(?:[A-Za-z0-9._-]|~[0-9A-F]{4})*~~[0-9a-f]{64}")
_ESCAPE_RUN: Final = re.compile(r"(?:~[0-9A-F]{4})+")
_HIGH_SURROGATES: Final = frozenset({"D8", "D9", "DA", "DB"})  # first hex pair of ~D800-~DBFF


def _escape(match: re.Match[str]) -> str:
    point = ord(match.group())
    if point > 0xFFFF:  # a surrogate pair in UTF-16
        point -= 0x10000
        return f"~{0xD800 + (point >> 10):04X}~{0xDC00 + (point & 0x3FF):04X}"
    return f"~{point:04X}"


def _unescape(match: re.Match[str]) -> str:
    run = match.group()
    units = bytes.fromhex(run.replace("~", ""))
    try:
        return units.decode("utf-16-be")
    except UnicodeDecodeError:
        raise ValueError(f"escapes {run!r} contain a lone surrogate") from None


def _cut(escaped: str, limit: int) -> str:
    """Shorten *escaped* to at most *limit* characters without splitting a ``~XXXX``
    escape or the two escapes of one astral character."""
    if len(escaped) <= limit:
        return escaped
    end = limit
    start = escaped.rfind("~", max(0, end - 4), end)
    if start != -1:  # the cut falls inside this escape: drop it whole
        end = start
    if end >= 5 and escaped[end - 5] == "~" and escaped[end - 4 : end - 2] in _HIGH_SURROGATES:
        end -= 5  # a high surrogate whose low half was cut off
    return escaped[:end]


def _hashed(escaped: str, session_id: str) -> str:
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()
    return f"{_cut(escaped, _HASHED_HEAD_MAX)}{_HASH_MARK}{digest}"


def encode_session_id(session_id: str) -> str:
    """Return the directory name of a session id (docs/formats.md, "session directory names").

    ``[A-Za-z0-9._-]`` is kept, every other character becomes ``~XXXX`` per UTF-16 code
    unit (``a/b`` → ``a~002Fb``, ``~`` → ``~007E``), and the ids ``.`` and ``..`` become
    ``~002E`` and ``~002E~002E``. The result is a single path component of at most 255
    bytes; longer encodings are replaced by the hashed form described in the module
    docstring. Raises ``ConfigError`` for an empty id or one with a lone surrogate (such
    an id cannot be written to a log, and would make the encoding ambiguous).
    """
    if type(session_id) is not str or not session_id:
        raise ConfigError(f"session id must be a non-empty string, got {session_id!r}")
    if not session_id.isascii():
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                f"session id {session_id!r} contains a lone surrogate; it cannot name a file"
            ) from None
    if session_id == ".":
        return "~002E"
    if session_id == "..":
        return "~002E~002E"
    escaped = _UNSAFE.sub(_escape, session_id)
    if len(escaped) <= MAX_NAME_BYTES:
        return escaped
    return _hashed(escaped, session_id)


def is_hashed_name(name: str) -> bool:
    """Tell whether *name* is the hashed form ``encode_session_id`` gives long ids."""
    return len(name) <= MAX_NAME_BYTES and _HASHED_NAME.fullmatch(name) is not None


def decode_session_id(name: str) -> str:
    """Return the session id whose directory name is *name*.

    The inverse of ``encode_session_id`` for plain names: ``decode_session_id(
    encode_session_id(x)) == x``. Raises ``ValueError`` for a name that
    ``encode_session_id`` never produces (bad characters, lowercase or short escapes, a
    lone surrogate, an escaped safe character, a literal ``.`` or ``..``) and for a
    hashed name, whose id is only recorded in its session header.
    """
    if is_hashed_name(name):
        raise ValueError(
            f"{name!r} is the hashed name of a long session id; read the id from its header"
        )
    if _PLAIN_NAME.fullmatch(name) is None:
        raise ValueError(f"{name!r} is not an encoded session id")
    session_id = _ESCAPE_RUN.sub(_unescape, name)
    if encode_session_id(session_id) != name:
        raise ValueError(f"{name!r} is not the canonical encoding of {session_id!r}")
    return session_id


def project_key(cwd: str | None) -> str:
    """Return the project directory name for a session's working directory.

    ``None`` gives ``_no-cwd``. Otherwise each run of ``/``, ``\\`` and ``:`` becomes one
    ``-``, characters outside ``[A-Za-z0-9._-]`` become ``~XXXX`` UTF-16 escapes, leading
    ``-`` are stripped, an empty slug becomes ``root``, and the slug is cut to 251
    characters and wrapped as ``--slug--`` (docs/formats.md, "project keys"): ``/srv/app`` →
    ``--srv-app--``, ``C:\\Users\\x`` → ``--C-Users-x--``, ``/`` → ``--root--``. The cut
    never splits an escape (nor the two escapes of one astral character), so a long slug
    may stop up to 9 characters short of 251. Raises ``ConfigError`` for an empty cwd.
    """
    if cwd is None:
        return NO_CWD_KEY
    if type(cwd) is not str or not cwd:
        raise ConfigError(f"cwd must be None or a non-empty string, got {cwd!r}")
    slug = _UNSAFE.sub(_escape, _SEPARATOR_RUN.sub("-", cwd)).lstrip("-") or "root"
    return f"--{_cut(slug, _SLUG_MAX)}--"


def session_dir(root: str | os.PathLike[str], cwd: str | None, session_id: str) -> Path:
    """Return ``root / project_key(cwd) / encode_session_id(session_id)``.

    Pure path arithmetic: nothing is resolved or touched on disk. Both added components
    are single safe names, so the result always lies directly inside *root*'s tree.
    """
    return Path(root) / project_key(cwd) / encode_session_id(session_id)
