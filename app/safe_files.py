"""Output into run, report and sweep directories without writing through another user's links.

A directory gicbench writes into must be one no other user can plant files in: a directory (not
a symbolic link), owned by this user or root, and not writable by group or others unless the
sticky bit is set (a user's private group, named after the user with no other members, may
write). It is checked on a descriptor opened O_DIRECTORY|O_NOFOLLOW, and files are made through
that descriptor, so a path swapped after the check changes nothing.

A file is written whole or not at all: a temporary created O_EXCL|O_NOFOLLOW beside the target,
written, fsynced and renamed over it. The rename replaces whatever has the target's name (a
planted link is replaced, never followed; a FIFO is never opened); a failed write removes the
temporary and leaves the target as it was, and raises WriteError naming the path and the cause.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import ConfigError

NEW_DIR_MODE = 0o755  # (less the umask) directories made here are never group/other-writable
FILE_MODE = 0o666  # less the umask, as open() makes files
_TEMP_TRIES = 16


class WriteError(OSError):
    """An output file could not be written (full disk, quota, a directory at its name ...)."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def describe(path: str | Path) -> str:
    """What is at `path`, for messages: "a symbolic link (dangling)", "a file", "a FIFO" ..."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"unreachable ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            return "a symbolic link"
        dangling = not os.path.exists(path)
        return f"a symbolic link to {target}" + (" (dangling)" if dangling else "")
    kinds = (
        (stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a file"), (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
    )  # fmt: skip
    return next((what for test, what in kinds if test(st.st_mode)), "not a regular file")


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _private_group(gid: int) -> bool:
    """The user-private-group convention (umask 002 sites): the group is named after this user
    and has no other members, so group write lets no one else in."""
    try:
        me = pwd.getpwuid(os.geteuid()).pw_name
        g = grp.getgrgid(gid)
    except KeyError:
        return False
    return g.gr_name == me and set(g.gr_mem) <= {me}


def refusal(st: os.stat_result) -> str | None:
    """Why a directory with this stat is not safe to write into (None: it is)."""
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        return (
            f"it is owned by {_user(st.st_uid)}, not by {_user(me)}: its owner could swap the "
            "files written there for links"
        )
    if st.st_mode & stat.S_ISVTX:
        return None
    if st.st_mode & stat.S_IWOTH:
        return "every user can write it and it has no sticky bit (chmod o-w, or +t)"
    if st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid):
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = f"gid {st.st_gid}"
        return f"group {group} can write it and it has no sticky bit (chmod g-w, or +t)"
    return None


def make_dir(path: str | Path) -> bool:
    """Create `path` (and missing parents) if absent; True when this call created it. The
    directory itself gets NEW_DIR_MODE, so no other user can write it whatever the umask."""
    path = Path(path)
    if path.parent != path:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, NEW_DIR_MODE)
    except FileExistsError:
        return False
    return True


def open_dir(path: str | Path, label: str, *, create: bool = False) -> int:
    """A descriptor of the directory `path`, checked as the module docstring says; ConfigError
    naming `label` and why otherwise. create: make it first when absent (make_dir)."""
    path = Path(path)
    if create:
        try:
            make_dir(path)
        except OSError as e:
            raise ConfigError(
                label, str(path), f"a directory that can be created ({e.strerror or e})"
            ) from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        what = describe(path)
        if what.startswith("a symbolic link"):
            why = f"a directory, not {what}: give the directory itself"
        elif what == "a directory":
            why = f"a directory this user can open ({e.strerror})"
        elif what == "missing" or what.startswith("unreachable"):
            why = f"an existing directory ({e.strerror})"
        else:
            why = f"a directory ({path} is {what})"
        raise ConfigError(label, str(path), why) from None
    problem = refusal(os.fstat(fd))
    if problem is not None:
        os.close(fd)
        raise ConfigError(label, str(path), f"a directory no other user can write: {problem}")
    return fd


@contextlib.contextmanager
def opened_dir(path: str | Path, label: str, *, create: bool = False) -> Iterator[int]:
    fd = open_dir(path, label, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def write_at(
    dir_fd: int,
    name: str,
    data: bytes,
    shown: str | Path,
    mode: int = FILE_MODE,
    *,
    exclusive: bool = False,
) -> None:
    """Atomically replace `name` in the directory `dir_fd` with `data` (see the module
    docstring); `shown` is the path named in a WriteError. `exclusive`: never replace, the
    whole file appears under `name` only if nothing has that name (FileExistsError else)."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"write_at needs a file name, got {name!r}")
    tmp: str | None = None
    try:
        fd = -1
        for _ in range(_TEMP_TRIES):
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
                break
            except FileExistsError:
                tmp = None
        if fd < 0:
            raise FileExistsError(errno.EEXIST, "no free temporary name", name)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:  # a hard link fails on any existing name (a link there is not followed)
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            os.unlink(tmp, dir_fd=dir_fd)
        else:
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = None
    except FileExistsError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
        raise
    except OSError as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
        raise WriteError(e.errno, e.strerror or str(e), str(shown)) from None
    with contextlib.suppress(OSError):  # the rename survives a crash where the filesystem can
        os.fsync(dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_bytes(
    path: str | Path,
    data: bytes,
    label: str,
    *,
    create_dir: bool = False,
    mode: int = FILE_MODE,
    exclusive: bool = False,
) -> Path:
    """Replace the file `path` with `data` (`exclusive`: only create it): its directory checked
    (ConfigError naming `label`), the file written atomically (WriteError)."""
    path = Path(path)
    with opened_dir(path.parent, label, create=create_dir) as dir_fd:
        write_at(dir_fd, path.name, data, path, mode, exclusive=exclusive)
    return path


def write_text(path: str | Path, text: str, label: str, *, create_dir: bool = False) -> Path:
    return write_bytes(path, text.encode("utf-8"), label, create_dir=create_dir)
