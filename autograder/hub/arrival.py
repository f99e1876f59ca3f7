"""When a submission really reached the exchange, for late penalties a student cannot dodge.

nbgrader takes a submission's time from its `timestamp.txt`, which the student writes (any student may create
folders in the exchange's inbound, with any name and any files). The file system's change time (ctime) of the
folder and its files is set by the kernel on every write and cannot be set back by their owner: a submission
that claims to be older than its files is graded as made when its files were written.
"""

import datetime
import pwd
from dataclasses import dataclass
from pathlib import Path

from nbgrader.utils import parse_utc

# nbgrader's submit writes the time first, then copies the files: allow for a slow copy and clock skew
TOLERANCE = datetime.timedelta(minutes=2)
STAMP_FILE = "timestamp.txt"


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
        """Return whether the stated time can stand: present, readable, and not before the files were written."""
        if self.claimed is None:
            return False
        try:
            return parse_utc(self.claimed) >= self.written - TOLERANCE
        except (ValueError, OverflowError):
            return False

    @property
    def timestamp(self) -> str:
        """Return the time to grade the submission as: the stated one if trusted, else when its files were written."""
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
    for path in folder.rglob("*"):
        try:
            newest = max(newest, path.lstat().st_ctime)
        except OSError:
            continue
    return datetime.datetime.fromtimestamp(newest, datetime.timezone.utc).replace(tzinfo=None)


def arrival(folder: Path) -> Arrival:
    """Read a submission folder in the exchange: its stated time and when its files were written."""
    stamp = folder / STAMP_FILE
    try:
        claimed = stamp.read_text(encoding="utf-8", errors="strict").strip() if not stamp.is_symlink() else None
    except (OSError, UnicodeDecodeError):
        claimed = None
    return Arrival(claimed or None, written_at(folder))


def owner(path: Path) -> str | None:
    """Return the account that owns a path (links not followed), None when unknown."""
    try:
        return pwd.getpwuid(path.lstat().st_uid).pw_name
    except (KeyError, OSError):
        return None


def recheck_collected(course: Path, inbound: Path, assignment: str) -> list[str]:
    """Give each collected submission of `assignment` a time it cannot fake; return a line per one changed.

    `nbgrader collect` copies the newest folder of each student (by the time in its name, owned by the
    student) with its timestamp.txt; this finds that folder again and checks it as the autograde service does.
    """
    newest: dict[str, tuple[str, Path]] = {}
    for folder in inbound.iterdir() if inbound.is_dir() else []:
        parts = folder.name.split("+")
        if len(parts) >= 3 and parts[1] == assignment and owner(folder) == parts[0] and not folder.is_symlink():
            newest[parts[0]] = max(newest.get(parts[0], ("", folder)), (parts[2], folder), key=lambda x: x[0])
    changed = []
    for student, (_, folder) in sorted(newest.items()):
        collected = course / "submitted" / student / assignment
        if not collected.is_dir():
            continue
        when, stamp = arrival(folder), collected / STAMP_FILE
        if when.note() and _read(stamp) != when.timestamp:
            stamp.unlink(missing_ok=True)
            stamp.write_text(when.timestamp, encoding="utf-8")
            changed.append(f"{student}: {when.note()}")
    return changed


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
