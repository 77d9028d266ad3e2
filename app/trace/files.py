"""Opening the files a run or sweep directory names, safely: only regular files (a FIFO would
block the reader, a device such as /dev/urandom never ends), never more than a stated size.

Links are followed (a run directory may be reached through one, a copied run may link its
files); what they lead to must be a regular file. The checks are on the open descriptor, so a
name swapped between the check and the read cannot slip a FIFO or a device through.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotARegularFile(ValueError):
    """The path is a directory, FIFO, device or socket; the message says which."""


class TooLarge(ValueError):
    """The file is larger than its reader accepts."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a plain file")


def open_regular(path: Path) -> int:
    """A read-only descriptor of `path`, which must be a regular file (NotARegularFile if not).

    O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer.
    OSError (missing, permission, a loop of links) passes through for the caller to word.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(f"{path} is not a regular file ({_kind(mode)})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular(path: Path) -> int:
    """Raise NotARegularFile unless `path` is a regular file; return its size in bytes."""
    fd = open_regular(path)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them (TooLarge if more)."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise TooLarge(f"{path} is {size} bytes, at most {max_bytes} expected (damaged?)")
        chunks, total = [], 0
        while total <= max_bytes:  # the file may grow while we read: stop one past the limit
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise TooLarge(f"{path} grew past {max_bytes} bytes while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)
