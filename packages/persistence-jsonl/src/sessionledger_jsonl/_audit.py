"""The audit log: ``ROOT/audit.jsonl``, one JSON object a line, append-only.

docs/formats.md, "the audit log". ``prune`` records what it deletes here before the first
deletion and after the last, so a record must be durable before ``append`` returns: one
``write`` with ``O_APPEND`` (concurrent processes' records never overlap), then ``fsync``
of the file, and of the root directory when this call created the file. Nothing in the
library removes a record. A crash in the middle of a ``write`` can leave a torn last line:
reading skips it (logged), and the next append starts on a new line, so it never makes
the record after it unreadable. Everything here is blocking; the store runs it in worker
threads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Final

from sessionledger.model import _jsoncodec as jsoncodec
from sessionledger_jsonl._files import FileSystem
from sessionledger_jsonl._format import parse_line

__all__ = ["AUDIT_NAME", "AuditLog"]

logger = logging.getLogger("sessionledger")

#: The audit log in the store root (never a project key, which starts with ``--`` or ``_``).
AUDIT_NAME: Final = "audit.jsonl"


class AuditLog:
    """The audit log of the store at *root*."""

    def __init__(self, system: FileSystem, root: str, *, fsync: bool) -> None:
        self._system: Final = system
        self._root: Final = root
        self._fsync: Final = fsync

    @property
    def path(self) -> str:
        return os.path.join(self._root, AUDIT_NAME)

    def append(self, record: Mapping[str, Any]) -> None:
        """Append *record* durably (OSErrors propagate: an unrecorded prune must not go on)."""
        line = jsoncodec.dumps(dict(record)) + b"\n"
        system = self._system
        system.make_root(self._root, fsync=self._fsync)
        root = system.open_root(self._root)
        try:
            created = system.append_line(
                AUDIT_NAME, root, line, fsync=self._fsync, point="jsonl.audit.mid-write"
            )
            if created and self._fsync:
                system.fsync(root)
        finally:
            system.close(root)

    def read(self) -> list[Mapping[str, Any]]:
        """Return every record, oldest first, skipping (and logging) lines that are not
        JSON objects: a torn last line, or a line a crashed writer tore mid-file."""
        system = self._system
        try:
            root = system.open_root(self._root)
        except FileNotFoundError:
            return []
        try:
            try:
                fd = system.open_file(AUDIT_NAME, root)
            except FileNotFoundError:
                return []
        finally:
            system.close(root)
        try:
            data = system.read_all(fd)
        finally:
            system.close(fd)
        lines = data.split(b"\n")
        records: list[Mapping[str, Any]] = []
        last = len(lines) - 1
        for number, line in enumerate(lines):
            if number == last and not line:
                break  # after the final newline
            value = parse_line(line)
            if type(value) is dict:
                records.append(value)
            elif number == last or (number == last - 1 and not lines[last]):
                logger.warning("%s: skipping a torn last line (line %d)", self.path, number + 1)
            elif line:
                logger.warning("%s: skipping line %d, which is not a record", self.path, number + 1)
        return records
