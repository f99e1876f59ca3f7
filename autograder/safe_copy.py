"""Copy a folder someone else controls: regular files only, no link followed, nothing read past a cap.

Every entry is opened relative to its folder's descriptor with O_NOFOLLOW|O_NONBLOCK and checked with fstat
after opening, so a file swapped for a link (or a FIFO) between listing and copying is refused, never followed
and never waited on. Sizes come from fstat and are checked before a byte is read; reads stop at that size.
Copies are new files (O_CREAT|O_EXCL|O_NOFOLLOW) in folders this copy made.
"""

import errno
import os
import stat
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1 << 20
CHUNK = 1 << 16
OPEN_ENTRY = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Limits:
    """Caps on what one copy takes: each file, all files together, how many entries, how deep."""

    file_bytes: int = 20 * MiB
    total_bytes: int = 100 * MiB
    entries: int = 1000
    depth: int = 8


class Refusal(Exception):
    """An entry (or a whole folder) that is not copied; the message says why."""


@dataclass(frozen=True)
class Refused:
    """One entry left behind and why."""

    path: str  # relative to the copied folder
    reason: str


@dataclass
class CopyReport:
    """What a copy took and left: copied files, refused entries, the reason it stopped (None: it finished)."""

    copied: list[str] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    stopped: str | None = None
    total_bytes: int = 0
    newest_change: float = 0.0  # the newest st_ctime of the folder and every entry seen (seconds since epoch)

    def summary(self) -> str:
        """Return one line naming what was refused and why (empty when nothing was)."""
        parts = [f"{r.path}: {r.reason}" for r in self.refused]
        return "; ".join(([f"not copied: {self.stopped}"] if self.stopped else []) + parts)


def bad_name(name: str) -> str | None:
    """Return why a file name is refused (control or undecodable characters), None when it is fine."""
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in name):
        return "its name holds control characters or bytes that are not UTF-8"
    return None


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "not a regular file"


def open_entry(dir_fd: int, name: str, owner: int | None = None) -> tuple[int, os.stat_result]:
    """Open an entry of a folder without following links or blocking; return its descriptor and fstat.

    Raise Refusal unless it is a regular file or a folder (owned by `owner` when given).
    """
    try:
        seen = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise Refusal(f"cannot be read ({exc.strerror})") from None
    if not (stat.S_ISREG(seen.st_mode) or stat.S_ISDIR(seen.st_mode)):
        raise Refusal(f"{_kind(seen.st_mode)}, not copied")
    try:
        fd = os.open(name, OPEN_ENTRY, dir_fd=dir_fd)
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"
        raise Refusal(f"{why}, not copied") from None
    st = os.fstat(fd)
    problem = None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        problem = f"{_kind(st.st_mode)}, not copied"
    elif owner is not None and st.st_uid != owner:
        problem = f"owned by user id {st.st_uid}, not by the submission's owner ({owner})"
    if problem:
        os.close(fd)
        raise Refusal(problem)
    return fd, st


def read_bounded(fd: int, size: int) -> bytes:
    """Read at most `size` bytes from an open file (less if it shrank; never more, even if it grew)."""
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(CHUNK, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_small(folder: Path, name: str, limit: int = 4096, owner: int | None = None) -> bytes:
    """Read a small regular file of a folder (no link followed, no FIFO waited on, at most `limit` bytes)."""
    try:
        dir_fd = os.open(folder, OPEN_DIR)
    except OSError as exc:
        raise Refusal(f"{folder.name}: cannot be opened ({exc.strerror})") from None
    try:
        fd, st = open_entry(dir_fd, name, owner)
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(st.st_mode):
            raise Refusal("a folder, not a file")
        if st.st_size > limit:
            raise Refusal(f"{st.st_size} bytes, more than the {limit} allowed")
        return read_bounded(fd, st.st_size)
    finally:
        os.close(fd)


class _Copier:
    """One copy's walk: caps, counters and the report."""

    def __init__(self, limits: Limits, owner: int | None, skip: Callable[[str], bool],
                 file_mode: int, dir_mode: int) -> None:
        self.limits, self.owner, self.skip = limits, owner, skip
        self.file_mode, self.dir_mode = file_mode, dir_mode
        self.report = CopyReport()
        self.entries = 0

    def refuse(self, rel: str, reason: str) -> None:
        self.report.refused.append(Refused(rel, reason))

    def folder(self, src_fd: int, dest_fd: int, prefix: str, depth: int) -> None:
        """Copy the entries of one open folder into another."""
        for name in sorted(os.listdir(src_fd)):
            if self.report.stopped:
                return
            rel = prefix + name
            if self.skip(rel):
                continue
            self.entries += 1
            if self.entries > self.limits.entries:
                self.report.stopped = f"more than {self.limits.entries} files and folders"
                return
            why = bad_name(name)
            if why:
                self.refuse(ascii(rel), why)
                continue
            try:
                fd, st = open_entry(src_fd, name, self.owner)
            except Refusal as exc:
                self.refuse(rel, str(exc))
                continue
            try:
                self.report.newest_change = max(self.report.newest_change, st.st_ctime)
                if stat.S_ISDIR(st.st_mode):
                    self.subfolder(fd, dest_fd, name, rel, depth)
                else:
                    self.file(fd, st, dest_fd, name, rel)
            finally:
                os.close(fd)

    def subfolder(self, fd: int, dest_fd: int, name: str, rel: str, depth: int) -> None:
        if depth + 1 > self.limits.depth:
            self.refuse(rel, f"folders nested deeper than {self.limits.depth}, not copied")
            return
        os.mkdir(name, self.dir_mode, dir_fd=dest_fd)
        sub = os.open(name, OPEN_DIR, dir_fd=dest_fd)
        try:
            self.folder(fd, sub, rel + "/", depth + 1)
        finally:
            os.close(sub)

    def file(self, fd: int, st: os.stat_result, dest_fd: int, name: str, rel: str) -> None:
        size = st.st_size
        if size > self.limits.file_bytes:
            cap = self.limits.file_bytes / MiB
            self.refuse(rel, f"{size / MiB:.1f} MiB, more than the {cap:g} MiB allowed")
            return
        if self.report.total_bytes + size > self.limits.total_bytes:
            self.report.stopped = f"more than {self.limits.total_bytes / MiB:g} MiB in all"
            return
        data = read_bounded(fd, size)
        out = os.open(name, CREATE, self.file_mode, dir_fd=dest_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
        finally:
            os.close(out)
        self.report.total_bytes += len(data)
        self.report.copied.append(rel)


def copy_tree(src: Path, dest: Path, limits: Limits = Limits(), owner: int | None = None,
              skip: Callable[[str], bool] = lambda rel: False, file_mode: int = 0o644,
              dir_mode: int = 0o755) -> CopyReport:
    """Copy the folder `src` to the new folder `dest` safely; return what was copied and what was refused.

    `owner`: when given, `src` and every entry in it must belong to this user id (else refused; for `src`
    itself, Refusal is raised). `skip(relative path)` leaves entries out without a word (e.g. checkpoints).
    Raise Refusal when `src` is not a folder that can be opened without following a link.
    """
    try:
        src_fd = os.open(src, OPEN_DIR)
    except OSError as exc:
        why = f"{src.name}: not a folder that opens without following a link ({exc.strerror})"
        raise Refusal(why) from None
    try:
        st = os.fstat(src_fd)
        if owner is not None and st.st_uid != owner:
            raise Refusal(f"{src.name}: owned by user id {st.st_uid}, not {owner}")
        copier = _Copier(limits, owner, skip, file_mode, dir_mode)
        copier.report.newest_change = st.st_ctime
        os.mkdir(dest, dir_mode)
        dest_fd = os.open(dest, OPEN_DIR)
        try:
            copier.folder(src_fd, dest_fd, "", 0)
        finally:
            os.close(dest_fd)
        return copier.report
    finally:
        os.close(src_fd)


def write_new(folder: Path, name: str, data: bytes, mode: int = 0o644) -> None:
    """Write a file afresh: a new temporary file (never through a link), then renamed over `name`."""
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, CREATE, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, folder / name)
