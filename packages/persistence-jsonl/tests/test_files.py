"""``FileSystem.read_all``: a whole file, read at once where it can be, read exactly."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from sessionledger_jsonl._files import FileSystem


@pytest.mark.parametrize("size", [0, 1, (1 << 16) - 1, 1 << 16, (3 << 20) + 7])
def test_read_all_returns_every_byte(tmp_path: Path, size: int) -> None:
    path = tmp_path / "log"
    path.write_bytes(os.urandom(size))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert FileSystem().read_all(fd) == path.read_bytes()
    finally:
        os.close(fd)


def test_read_all_reads_on_while_a_writer_appends(tmp_path: Path) -> None:
    # A writer keeps appending while the file is read; each read must be a prefix of
    # the final file at least as long as the file was when the read began.
    path = tmp_path / "log"
    path.write_bytes(b"x" * (1 << 20))
    stop = threading.Event()

    def writer() -> None:
        with open(path, "ab", buffering=0) as file:
            for _ in range(256):  # 4 MiB more at most
                if stop.is_set():
                    break
                file.write(os.urandom(1 << 14))

    thread = threading.Thread(target=writer)
    thread.start()
    reads = []
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            for _ in range(20):
                before = os.fstat(fd).st_size
                data = FileSystem().read_all(fd)
                reads.append((before, data))
        finally:
            os.close(fd)
    finally:
        stop.set()
        thread.join()
    final = path.read_bytes()
    for before, data in reads:
        assert len(data) >= before
        assert final.startswith(data)
