"""Where the exchange service keeps released assignments, submissions and feedback: one small interface.

A tree is named by a key of checked parts: ("released", assignment), ("submitted", assignment, student,
timestamp), ("feedback", assignment, student, timestamp); with grading workers also ("results", ...) and
("held-feedback", ...), a worker's result and the pages held until the autograde service records it
(work.py). `FolderStore` keeps each tree as a folder under a root only the service's account can enter. An
S3-compatible store would implement the same Protocol by keeping each tree as one object (its tar stream,
checked by `archive.unpack` into a scratch folder before it is written) and listing keys by prefix; none is
written yet.
"""

import contextlib
import os
import shutil
import stat
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from autograder.hub.exchange.http.archive import ArchiveRefused, Unpacked, md5_file, pack, unpack
from autograder.safe_copy import Limits

Key = tuple[str, ...]
RELEASED, SUBMITTED, FEEDBACK = "released", "submitted", "feedback"


class Store(Protocol):
    """Trees of files by key: put from a tar stream (checked), read back as one, list, look inside."""

    def put(self, key: Key, upload: BinaryIO, limits: Limits, replace: bool = False) -> Unpacked:
        """Unpack a tar stream as the tree at key (FileExistsError when there is one and not replace)."""

    def get(self, key: Key) -> bytes:
        """Return the tree at key as a tar stream (KeyError when there is none)."""

    def children(self, key: Key) -> list[str]:
        """Return the names one level under key, sorted ([] when there are none)."""

    def files(self, key: Key) -> dict[str, str]:
        """Return the tree's files (relative paths) and the MD5 of each ({} when there is no tree)."""

    def remove(self, key: Key) -> None:
        """Remove the tree at key, whole (nothing when there is none)."""


def check_part(part: str) -> str:
    """Return a key's part, or raise ArchiveRefused for one that is not a plain file name."""
    if (not part or part in (".", "..") or part.startswith(".") or "/" in part or "\\" in part
            or len(part.encode()) > 255
            or any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in part)):
        raise ArchiveRefused(f"{part!r} is not a name the exchange keeps")
    return part


class FolderStore:
    """A Store in a folder of the service's account (0700): one folder per tree, put in place by rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._md5: dict[Path, tuple[tuple[int, int, int], str]] = {}  # a file -> (inode, size, mtime), MD5
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.chmod(0o700)

    def _path(self, key: Key) -> Path:
        return self.root.joinpath(*map(check_part, key))

    def put(self, key: Key, upload: BinaryIO, limits: Limits, replace: bool = False) -> Unpacked:
        target = self._path(key)
        if target.exists() and not replace:
            raise FileExistsError("/".join(key))
        with self._staging("put") as staging:
            (staging / "tree").mkdir(mode=0o700)
            done = unpack(upload, staging / "tree", limits)
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if target.exists():
                os.rename(target, staging / "old")
            os.rename(staging / "tree", target)
        return done

    def get(self, key: Key) -> bytes:
        path = self._path(key)
        if not path.is_dir() or path.is_symlink():
            raise KeyError("/".join(key))
        return pack(path, limits=Limits(total_bytes=1 << 30, entries=100_000, depth=64))

    def children(self, key: Key) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self._path(key)) if not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def files(self, key: Key) -> dict[str, str]:
        path, found = self._path(key), {}
        for top, _, names in os.walk(path):
            for name in names:
                file = Path(top) / name
                st = file.lstat()
                if stat.S_ISREG(st.st_mode):
                    found[file.relative_to(path).as_posix()] = self._hash(file, st)
        return dict(sorted(found.items()))

    def remove(self, key: Key) -> None:
        """Take the tree out of its place by one rename, as put puts one in (a reader sees all of it or none),
        then delete it; nothing when there is no tree."""
        path = self._tree(key)
        if path is None:
            return
        with self._staging("remove") as staging, contextlib.suppress(FileNotFoundError):  # (taken first)
            os.rename(path, staging / "old")

    @contextlib.contextmanager
    def _staging(self, purpose: str) -> Iterator[Path]:
        """A folder of the store's own for one put or remove, deleted with whatever it holds at the end."""
        staging = Path(tempfile.mkdtemp(prefix=f".{purpose}-", dir=self.root))
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _tree(self, key: Key) -> Path | None:
        """Return the real folder of the tree at key, or None: a link planted at the key or above it makes
        the path resolve elsewhere (outside the root, or to another key's tree), and that is no tree to
        touch."""
        path, real = self._path(key), self.root.resolve().joinpath(*key)
        if path.is_symlink() or not path.is_dir() or path.resolve() != real:
            return None
        return real

    def _hash(self, file: Path, st: os.stat_result) -> str:
        """Return a file's MD5, read again only when the file is another (trees are replaced, not edited)."""
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._md5.get(file)
        if cached is None or cached[0] != seen:
            cached = self._md5[file] = (seen, md5_file(file))
        return cached[1]
