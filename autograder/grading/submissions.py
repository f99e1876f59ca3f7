"""Find each student's notebooks: a folder or a .zip of student folders, flat or in nbgrader's layout.

Accepted layouts (one folder per student id):

    SUBMISSIONS/<student>/<notebook>.ipynb                 a plain export (anything nested is searched too)
    SUBMISSIONS/<student>/<assignment>/<notebook>.ipynb    nbgrader's submitted/ layout (timestamp.txt is
    kept) SUBMISSIONS.zip                                        either of the above, optionally inside one
    wrapper folder

A notebook is matched to the assignment by its file name, or, when the name is wrong, by the nbgrader
grade_ids inside it, so "Copy of ps01.ipynb" is graded as ps01.ipynb while somebody else's homework is not.

Every notebook is read through `read_notebook_json`, which refuses, before anything else parses it, a file
that is not a regular file (a link, a FIFO), larger than MAX_NOTEBOOK_BYTES (32 MiB), with more than MAX_CELLS
cells or nested deeper than MAX_NESTING levels: such a student is `invalid`, with the reason, and the class
goes on.
"""

import json
import os
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from autograder.cells import grade_id
from autograder.grading.errors import SubmissionsError
from autograder.grading.results import Status

MAX_NOTEBOOK_BYTES = 32 * 2**20
MAX_CELLS = 10_000
# levels of JSON objects and lists; real notebooks (widget state included) use about a dozen
MAX_NESTING = 100
MAX_ZIP_BYTES = 4 * 2**30
MAX_ZIP_FILES = 100_000
SKIPPED_NAMES = {"__MACOSX", ".ipynb_checkpoints", "__pycache__", ".DS_Store", ".git", "Thumbs.db"}


@dataclass
class Submission:
    """One student folder: the notebooks to grade, or the reason there is nothing to grade."""

    student: str
    folder: Path
    notebooks: dict[str, Path] = field(default_factory=dict)  # expected file name -> the student's file
    status: str | None = None  # None when there is something to grade, else Status.MISSING or Status.INVALID
    detail: str = ""
    notes: list[str] = field(default_factory=list)
    timestamp: str | None = None


def _skipped(path: Path) -> bool:
    return path.name in SKIPPED_NAMES or path.name.startswith(".")


def open_submissions(path: Path, scratch: Path, assignment: str) -> Path:
    """Return the folder that holds one subfolder per student; a .zip is unpacked into `scratch` first."""
    if not path.exists():
        raise SubmissionsError(f"{path} does not exist: give a folder of student folders or a .zip of one")
    if path.is_dir():
        try:
            next(path.iterdir(), None)
        except OSError as exc:
            raise SubmissionsError(f"cannot read {path}: {exc}") from exc
        return path
    if zipfile.is_zipfile(path):
        target = scratch / "unzipped"
        extract_zip(path, target)
        return _unwrap(target, assignment)
    raise SubmissionsError(f"{path} is neither a folder nor a .zip file")


def extract_zip(archive: Path, target: Path) -> None:
    """Unpack a zip safely: no paths outside `target`, no links, bounded total size and file count."""
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if len(members) > MAX_ZIP_FILES:
                raise SubmissionsError(f"{archive} holds {len(members)} files; more than {MAX_ZIP_FILES}")
            total = sum(m.file_size for m in members)
            if total > MAX_ZIP_BYTES:
                raise SubmissionsError(f"{archive} unpacks to {total >> 20} MiB; more than "
                                       f"{MAX_ZIP_BYTES >> 20} MiB")
            for member in members:
                name = PurePosixPath(member.filename.replace("\\", "/"))
                if name.is_absolute() or ".." in name.parts or not name.parts:
                    continue  # a path that would land outside the target: skipped
                if stat.S_ISLNK(member.external_attr >> 16):
                    continue
                dest = target.joinpath(*name.parts)
                if member.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, dest.open("wb") as out:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        out.write(block)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SubmissionsError(f"cannot unpack {archive}: {exc}") from exc


def _unwrap(folder: Path, assignment: str) -> Path:
    """Descend through wrapper folders (`export/`, `submitted/`) down to the folder of student folders."""
    while True:
        entries = [p for p in folder.iterdir() if not _skipped(p)]
        dirs = [p for p in entries if p.is_dir()]
        if len(entries) != 1 or len(dirs) != 1:
            return folder
        inner = dirs[0]
        inner_entries = [p for p in inner.iterdir() if not _skipped(p)]
        holds_work = (inner / assignment).is_dir() or any(p.suffix == ".ipynb" for p in inner_entries)
        if holds_work or not any(p.is_dir() for p in inner_entries):
            return folder  # `inner` is a student (a class of one)
        folder = inner


def student_folders(root: Path) -> tuple[list[Path], list[str]]:
    """Return the student folders under `root` (sorted) and the names of top-level files that were ignored."""
    folders, ignored = [], []
    for entry in sorted(root.iterdir()):
        if is_student_folder(entry):
            folders.append(entry)
        elif not _skipped(entry):
            ignored.append(entry.name)
    return folders, ignored


def is_student_folder(entry: Path) -> bool:
    """Return True for an entry that holds one student's files: a folder, not a link, hidden or system one."""
    return not _skipped(entry) and entry.is_dir() and not entry.is_symlink()


def work_folder(folder: Path, assignment: str) -> Path:
    """Return where a student's files are: `folder/<assignment>/` in nbgrader's layout, else `folder`."""
    inner = folder / assignment
    return inner if inner.is_dir() and not inner.is_symlink() else folder


def regular_files(folder: Path) -> list[Path]:
    """Return every regular file under `folder` (no links, no system or hidden folders), shallowest first."""
    found: list[Path] = []
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = sorted(current.iterdir())
        except OSError:
            continue
        for entry in entries:
            if _skipped(entry) or entry.is_symlink():
                continue
            if entry.is_dir():
                stack.append(entry)
            elif entry.is_file():
                found.append(entry)
    return sorted(found, key=lambda p: (len(p.relative_to(folder).parts), str(p)))


class NotARegularFile(OSError):
    """The path is a link, a FIFO, a device or a folder: never read."""


def read_regular_file(path: Path, limit: int) -> bytes | None:
    """Return a regular file's bytes (not following a link), or None when it is larger than `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotARegularFile(path)
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None


def nesting_depth(value: object, limit: int) -> int:
    """Return how deeply JSON objects and lists nest in `value`, counting no further than `limit` + 1."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def read_notebook_json(path: Path) -> tuple[dict | None, str]:
    """Return (the notebook as JSON, '') or (None, what is wrong with the file); caps are checked first."""
    try:
        data = read_regular_file(path, MAX_NOTEBOOK_BYTES)
        if data is None:
            size = os.lstat(path).st_size
            return None, f"too large ({size >> 20} MiB; the limit is {MAX_NOTEBOOK_BYTES >> 20} MiB)"
        if not data:
            return None, "empty file"
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not a notebook (not UTF-8 text)"
    except json.JSONDecodeError as exc:
        return None, f"not a notebook (not valid JSON: {exc.msg} at line {exc.lineno})"
    except RecursionError:
        return None, f"nested too deeply (more than {MAX_NESTING} levels)"
    except MemoryError:
        return None, "too large to read"
    except NotARegularFile:
        return None, "not a regular file"
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: O_NOFOLLOW met a link
            return None, "not a regular file"
        return None, f"cannot be read ({exc.strerror})"
    cells = raw.get("cells", raw.get("worksheets")) if isinstance(raw, dict) else None
    if not isinstance(cells, list):
        return None, "not a notebook (JSON without a list of cells)"
    if len(cells) > MAX_CELLS:
        return None, f"too many cells ({len(cells):,}; the limit is {MAX_CELLS:,})"
    if nesting_depth(raw, MAX_NESTING) > MAX_NESTING:
        return None, f"nested too deeply (more than {MAX_NESTING} levels)"
    return raw, ""


def grade_ids(raw: dict) -> set[str]:
    """Return the nbgrader grade_ids found in a notebook's JSON."""
    cells = raw.get("cells")
    if cells is None:  # nbformat 3
        cells = [c for ws in raw.get("worksheets", []) if isinstance(ws, dict)
                 for c in (ws.get("cells") if isinstance(ws.get("cells"), list) else [])]
    return {gid for gid in map(grade_id, cells) if gid is not None}


def _listing(paths: list[Path], base: Path, limit: int = 5) -> str:
    names = [str(p.relative_to(base)) for p in paths]
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def match_submission(student: str, folder: Path, expected: dict[str, set[str]], assignment: str,
                     other_assignments: frozenset[str] = frozenset()) -> Submission:
    """Match a student's files to the assignment's notebooks (file name -> grade_ids of that notebook).

    In nbgrader's layout, a folder that holds only other assignments of the course has nothing of this one.
    """
    base = work_folder(folder, assignment)
    sub = Submission(student, base)
    elsewhere = sorted(a for a in other_assignments if (folder / a).is_dir()) if base == folder else []
    if elsewhere:
        sub.status = Status.MISSING
        sub.detail = f"no submission of {assignment}; found {', '.join(a + '/' for a in elsewhere[:5])}"
        return sub
    try:
        stamp = read_regular_file(base / "timestamp.txt", 200)
    except OSError:
        stamp = None  # none, a link or a special file: not read
    if stamp:
        sub.timestamp = stamp.decode("utf-8", errors="replace").strip() or None
    files = regular_files(base)
    candidates = [p for p in files if p.suffix.lower() == ".ipynb"]
    if not candidates:
        sub.status = Status.MISSING
        others = [p for p in files if p.name != "timestamp.txt"]
        sub.detail = (f"no notebook in the folder; found {_listing(others, base)}" if others
                      else "the folder is empty")
        return sub
    parsed = {p: read_notebook_json(p) for p in candidates}
    used: set[Path] = set()
    broken: dict[str, tuple[Path, str]] = {}
    for name in sorted(expected):
        exact = [p for p in candidates if p.name == name and p not in used]
        if exact:
            used.add(exact[0])
            raw, problem = parsed[exact[0]]
            if raw is None:
                broken[name] = (exact[0], problem)
            else:
                sub.notebooks[name] = exact[0]
    for name in sorted(set(expected) - set(sub.notebooks) - set(broken)):
        scored = [(len(grade_ids(raw) & expected[name]), p) for p, (raw, _) in parsed.items()
                  if raw is not None and p not in used]
        scored = [(n, p) for n, p in scored if n > 0]
        if scored:
            best = max(scored, key=lambda item: (item[0], -len(item[1].parts)))[1]
            used.add(best)
            sub.notebooks[name] = best
            sub.notes.append(f"graded '{best.relative_to(base)}' as {name}")
    unmatched = [n for n in expected if n not in sub.notebooks and n not in broken]
    unreadable = [p for p in candidates if p not in used and parsed[p][0] is None]
    if len(unmatched) == 1 and len(unreadable) == 1 and not sub.notebooks and not broken:
        broken[unmatched[0]] = (unreadable[0], parsed[unreadable[0]][1])
    if not sub.notebooks:
        if broken:
            sub.status = Status.INVALID
            sub.detail = "; ".join(f"{p.relative_to(base)}: {problem}" for p, problem in broken.values())
        else:
            sub.status = Status.MISSING
            found = [f"{p.relative_to(base)} "
                     f"({'not readable' if parsed[p][0] is None else 'none of its cells'}"
                     f"{'' if parsed[p][0] is None else ' belong to ' + assignment})" for p in candidates]
            sub.detail = "no notebook of this assignment; found " + ", ".join(found[:5])
        return sub
    for name, (path, problem) in sorted(broken.items()):
        sub.notes.append(f"{path.relative_to(base)}: {problem}; {name} scored 0")
    for name in sorted(set(expected) - set(sub.notebooks) - set(broken)):
        sub.notes.append(f"{name} not found; scored 0")
    return sub
