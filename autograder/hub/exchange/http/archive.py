"""The tar stream a transfer travels in: packed from a folder, unpacked only within caps.

Unpacking reads the stream once, member by member, and refuses (ArchiveRefused) before writing anything out of
bounds: a link (symbolic or hard), a device, a FIFO or any other special member, an absolute path, a `..`, a
name with control characters, a path deeper than the cap, a member past the file-count cap, a file over its
cap or past the total, a name seen twice. Compressed streams are refused too: a small upload must not unpack
into a large header. Files are written afresh (O_EXCL, O_NOFOLLOW) into a folder the caller has just made.
"""

import hashlib
import io
import os
import stat
import tarfile
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from autograder.safe_copy import Limits

CHUNK = 1 << 16
DEFAULT_LIMITS = Limits()
# a member's header, its padding and a PAX header for a long name (a path of up to 8 folders of 255 bytes)
HEADER_BYTES = 4096
RECORD_BYTES = 2 * tarfile.RECORDSIZE  # the end of the stream, padded to tarfile's records


class ArchiveRefused(Exception):
    """A tar stream that is not unpacked; the message says which member and why."""


def upload_cap(limits: Limits) -> int:
    """Return the most bytes a tar stream within these limits can take (files, headers, padding, the end)."""
    return limits.total_bytes + limits.entries * HEADER_BYTES + RECORD_BYTES


@dataclass(frozen=True)
class Unpacked:
    """What an unpacked stream held: its files (relative paths, sorted) and their bytes in all."""

    files: tuple[str, ...]
    total_bytes: int


def check_name(name: str, depth: int) -> tuple[str, ...]:
    """Return a member's path parts, or raise ArchiveRefused for a name that could leave the folder."""
    if not name or name.startswith("/") or "\\" in name:
        raise ArchiveRefused(f"{name!r}: not a relative path")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in name):
        raise ArchiveRefused(f"{name!r}: control characters in the name")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if not parts or ".." in parts:
        raise ArchiveRefused(f"{name!r}: leaves the folder")
    if len(parts) > depth:
        raise ArchiveRefused(f"{name!r}: deeper than {depth} folders")
    if any(len(p.encode()) > 255 for p in parts):
        raise ArchiveRefused(f"{name!r}: a name longer than 255 bytes")
    return parts


def unpack(stream: BinaryIO, dest: Path, limits: Limits) -> Unpacked:
    """Unpack an uncompressed tar stream into the new, empty folder `dest`, member by member, within limits.
    """
    files, total, count = [], 0, 0
    try:
        archive = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 (closed by the with below)
    except tarfile.TarError as exc:
        raise ArchiveRefused(f"not an uncompressed tar stream ({exc})") from None
    with archive:
        try:
            for member in archive:
                count += 1
                if count > limits.entries:
                    raise ArchiveRefused(f"more than {limits.entries} entries")
                parts = check_name(member.name, limits.depth)
                if member.isdir():
                    _folder(dest, parts)
                    continue
                if not member.isreg() or member.type == tarfile.GNUTYPE_SPARSE:
                    raise ArchiveRefused(f"{member.name!r}: not a regular file or folder ({_kind(member)})")
                if member.size > limits.file_bytes:
                    raise ArchiveRefused(f"{member.name!r}: {member.size} bytes, over {limits.file_bytes}")
                if total + member.size > limits.total_bytes:
                    raise ArchiveRefused(f"{member.name!r}: past {limits.total_bytes} bytes in all")
                source = archive.extractfile(member)
                assert source is not None  # a regular member
                total += _write(source, _folder(dest, parts[:-1]) / parts[-1], member.size, member.name)
                files.append("/".join(parts))
        except tarfile.TarError as exc:
            raise ArchiveRefused(f"a damaged tar stream ({exc})") from None
    return Unpacked(tuple(sorted(files)), total)


def _kind(member: tarfile.TarInfo) -> str:
    names = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a device",
             tarfile.BLKTYPE: "a device", tarfile.FIFOTYPE: "a FIFO", tarfile.GNUTYPE_SPARSE: "a sparse file"}
    return names.get(member.type, f"type {member.type!r}")


def _folder(dest: Path, parts: tuple[str, ...]) -> Path:
    """Make (or reuse) the folders along parts under dest, refusing anything there that is not a folder."""
    folder = dest
    for part in parts:
        folder = folder / part
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if not stat.S_ISDIR(folder.lstat().st_mode):
                raise ArchiveRefused(f"{part!r}: a file and a folder of the same name") from None
    return folder


def _write(source: BinaryIO, path: Path, size: int, name: str) -> int:
    """Copy exactly `size` bytes to a new file (never through a link, never over a file); return them."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise ArchiveRefused(f"{name!r}: twice in the stream") from None
    done = 0
    with os.fdopen(fd, "wb") as out:
        while done < size:
            chunk = source.read(min(CHUNK, size - done))
            if not chunk:
                raise ArchiveRefused(f"{name!r}: the stream ends inside it")
            out.write(chunk)
            done += len(chunk)
    return done


def pack(folder: Path, skip: Callable[[str], bool] = lambda rel: False,
         limits: Limits = DEFAULT_LIMITS) -> bytes:
    """Return an uncompressed tar stream of a folder's regular files (links and special files left out).

    Raise ArchiveRefused when the folder holds more than the limits let through (the other end would refuse).
    """
    buffer, total, count = io.BytesIO(), 0, 0
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(_files(folder)):
            rel = path.relative_to(folder).as_posix()
            if skip(rel):
                continue
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                continue
            count += 1
            total += st.st_size
            if count > limits.entries or st.st_size > limits.file_bytes or total > limits.total_bytes:
                raise ArchiveRefused(f"{rel}: the folder is over the exchange's caps ({limits.entries} "
                                     f"files, {limits.file_bytes} bytes each, {limits.total_bytes} in all)")
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = st.st_size, 0o644, int(st.st_mtime)
            with path.open("rb") as handle:
                archive.addfile(info, handle)
    return buffer.getvalue()


def _files(folder: Path) -> list[Path]:
    """Return every entry under a folder, links to folders not followed."""
    return [Path(top) / name for top, dirs, names in os.walk(folder) for name in [*dirs, *names]]


def md5_file(path: Path) -> str:
    """Return a file's MD5 (how the service and nbgrader's list tell a changed feedback page)."""
    return hashlib.md5(path.read_bytes()).hexdigest()


def pack_files(files: dict[str, bytes]) -> bytes:
    """Return an uncompressed tar stream of these files (relative path -> bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
