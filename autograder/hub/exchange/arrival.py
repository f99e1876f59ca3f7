"""When a submission really reached the exchange, for late penalties a student cannot dodge.

nbgrader takes a submission's time from its `timestamp.txt`, which the student writes (any student may create
folders in the exchange's inbound, with any name and any files). The file system's change time (ctime) of the
folder and its files is set by the kernel on every write and cannot be set back by their owner: a submission
that claims to be older than its files is graded as made when its files were written.
"""

import contextlib
import datetime
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from autograder.safe_copy import Refusal, read_small, write_new

# nbgrader's submit writes the time first, then copies the files: allow for a slow copy and clock skew
TOLERANCE = datetime.timedelta(minutes=2)
STAMP_FILE = "timestamp.txt"


def write_stamp(folder: Path, timestamp: str, mode: int = 0o644) -> None:
    """Write `timestamp` (the exchange's time) as the folder's timestamp.txt, first removing whatever the
    student's upload put under that name: a file, a link (never followed) or a folder. Only the exchange's
    time counts, so nothing of theirs there is worth keeping, and nothing there may stop the stamping."""
    target = folder / STAMP_FILE
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(target.lstat().st_mode):
            shutil.rmtree(target)
        else:
            target.unlink()
    write_new(folder, STAMP_FILE, timestamp.encode(), mode)


def parse_utc(text: str) -> datetime.datetime:
    """Return a time as nbgrader reads one (naive UTC), with nbgrader's own parser, imported on first use:
    importing nbgrader costs over a second, which most hub commands need not pay."""
    from nbgrader.utils import parse_utc as nbgrader_parse_utc

    return nbgrader_parse_utc(text)


def nbgrader_time(moment: datetime.datetime) -> str:
    """Return a naive UTC time written as nbgrader writes timestamps."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


@dataclass(frozen=True)
class Arrival:
    """What a submission says about its time, and when its files were last written."""

    claimed: str | None  # timestamp.txt as written, None when missing or unreadable
    written: datetime.datetime  # naive UTC

    @property
    def trusted(self) -> bool:
        """Return whether the stated time can stand: present, readable, and not before the files were written.
        """
        if self.claimed is None:
            return False
        try:
            return parse_utc(self.claimed) >= self.written - TOLERANCE
        except (ValueError, OverflowError):
            return False

    @property
    def timestamp(self) -> str:
        """Return the time to grade the submission as: the stated one if trusted, else when its files were
        written.
        """
        return self.claimed if self.trusted and self.claimed is not None else nbgrader_time(self.written)

    def note(self) -> str:
        """Return what the instructor is told when the stated time was not used (empty when it was)."""
        if self.trusted:
            return ""
        said = f"claims {self.claimed}" if self.claimed is not None else "has no readable timestamp.txt"
        return f"the submission {said}; graded as submitted at {self.timestamp}, when its files were written"


def written_at(folder: Path) -> datetime.datetime:
    """Return the newest change time of a folder and everything in it (links not followed), as naive UTC."""
    newest = folder.lstat().st_ctime
    for parent, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(parent, name)).st_ctime)
    return datetime.datetime.fromtimestamp(newest, datetime.timezone.utc).replace(tzinfo=None)


def arrival(folder: Path) -> Arrival:
    """Read a submission folder: its stated time (a small regular file, no link followed) and when it was
    written.
    """
    try:
        claimed = read_small(folder, STAMP_FILE).decode("utf-8", errors="strict").strip()
    except (Refusal, UnicodeDecodeError):
        claimed = None
    return Arrival(claimed or None, written_at(folder))
