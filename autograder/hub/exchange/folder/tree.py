"""nbgrader's exchange in one place: folder names, paths, owners, safe copies, feedback, the tree's modes.

Students may create folders in the inbound with any name and any files (nbgrader lets everyone write there).
Nothing in a submission is trusted: its name is parsed here, its owner must be the student it names
(checked on the opened folder and every file), and it is copied with `autograder.safe_copy` (regular files
only, no link followed, caps checked before reading). `hub collect` and the autograde service both go
through this module.

    devicelab-exchange collect|feedback --course DIR --exchange DIR --course-id ID ASSIGNMENT
"""

import argparse
import datetime
import fnmatch
import json
import os
import pwd
import shutil
import stat
import sys
import tempfile
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autograder.hub.exchange.arrival import STAMP_FILE, Arrival, parse_utc, write_stamp
from autograder.hub.exchange.interfaces import BadName, Collected, CollectReport
from autograder.hub.text import printable
from autograder.safe_copy import CopyReport, Limits, Refusal, copy_tree, read_small, write_new

SECRET_FILE = "submission_secret.txt"
SUBMISSION_FILES = (STAMP_FILE, SECRET_FILE)
FUTURE = datetime.timedelta(minutes=10)  # a name this far ahead of the clock is not a real submission
LIMITS = Limits()
INBOUND_MODE = 0o1753  # root's; the grader's group may list; students may write, not list, nor touch others'
OPEN_MODE = 0o755  # exchange/<course> and outbound
FEEDBACK_MODE = 0o711  # students may not list it (nbgrader's release_feedback makes it so too)
EXCHANGE_MODE = 0o1777  # nbgrader's submit and fetch need the root writable by all (sticky: own entries only)


@dataclass(frozen=True)
class InboundName:
    """The name of a submission folder in the inbound: `student+assignment+timestamp[+random]`."""

    student: str
    assignment: str
    timestamp: str
    suffix: str = ""

    @property
    def when(self) -> datetime.datetime:
        """Return the time in the name as naive UTC (the name was checked to parse)."""
        return parse_utc(self.timestamp)

    def format(self) -> str:
        """Return the folder name."""
        parts = [self.student, self.assignment, self.timestamp, *([self.suffix] if self.suffix else [])]
        return "+".join(parts)

    @classmethod
    def parse(cls, name: str) -> "InboundName | BadName":
        """Read a folder name; a BadName says what is wrong with a malformed one."""
        if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in name):
            return BadName(name, "its name holds control characters")
        parts = name.split("+")
        if len(parts) not in (3, 4) or not all(parts[:3]):
            return BadName(name, "not named student+assignment+time[+random]")
        try:
            parse_utc(parts[2])
        except (ValueError, OverflowError, TypeError) as exc:
            return BadName(name, f"its time {parts[2]!r} cannot be read ({exc})")
        return cls(*parts)


@dataclass(frozen=True)
class Submission:
    """A folder of the inbound whose name parses and whose owner (links not followed) is the student named."""

    name: InboundName
    folder: Path
    uid: int


@dataclass
class Inbox:
    """The inbound's folders of an assignment: the submissions, and the folders skipped with their reasons."""

    submissions: list[Submission] = field(default_factory=list)
    skipped: list[BadName] = field(default_factory=list)

    def newest(self) -> dict[str, Submission]:
        """Return each student's newest submission (by the time in its name)."""
        best: dict[str, Submission] = {}
        for sub in self.submissions:
            if sub.name.student not in best or sub.name.when > best[sub.name.student].name.when:
                best[sub.name.student] = sub
        return best


@dataclass(frozen=True)
class Exchange:
    """The exchange's folders for one course."""

    root: Path
    course_id: str

    @property
    def course(self) -> Path:
        return self.root / self.course_id

    @property
    def inbound(self) -> Path:
        return self.course / "inbound"

    @property
    def outbound(self) -> Path:
        return self.course / "outbound"

    @property
    def feedback(self) -> Path:
        return self.course / "feedback"

    def submission(self, entry: str, now: datetime.datetime | None = None) -> "Submission | BadName":
        """Check one folder of the inbound: its name parses, its student made it, its time is not ahead."""
        parsed = InboundName.parse(entry)
        if isinstance(parsed, BadName):
            return parsed
        uid = _uid(parsed.student)
        why = _not_theirs(self.inbound / entry, parsed.student, uid)
        latest = (now or datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)) + FUTURE
        if why is None and parsed.when > latest:
            why = f"named for a time in the future ({parsed.timestamp})"
        if why or uid is None:
            return BadName(entry, why or "no owner")
        return Submission(parsed, self.inbound / entry, uid)

    def read_inbox(self, assignments: set[str] | None = None, now: datetime.datetime | None = None) -> Inbox:
        """List the inbound: submissions of these assignments (all when None) owned by their student."""
        inbox = Inbox()
        try:
            names = sorted(os.listdir(self.inbound))
        except OSError:
            return inbox  # nothing released yet
        for entry in names:
            found = self.submission(entry, now)
            named = found.name if isinstance(found, Submission) else InboundName.parse(entry)
            if isinstance(named, InboundName):
                if assignments is not None and named.assignment not in assignments:
                    continue
            elif assignments is not None and not any(f"+{a}+" in entry for a in assignments):
                continue
            if isinstance(found, Submission):
                inbox.submissions.append(found)
            else:
                inbox.skipped.append(found)
        return inbox


def _uid(account: str) -> int | None:
    try:
        return pwd.getpwnam(account).pw_uid
    except KeyError:
        return None


def _not_theirs(folder: Path, student: str, uid: int | None) -> str | None:
    """Return why a folder is not the named student's own submission (None when it is)."""
    if uid is None:
        return f"no account named {student}"
    try:
        st = folder.lstat()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder (a link or a file)"
    if st.st_uid != uid:
        try:
            by = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            by = f"user id {st.st_uid}"
        return f"claims to be {student}'s but was made by {by}: not graded as {student}"
    return None


def ignored(patterns: list[str]) -> Callable[[str], bool]:
    """Return the predicate of entries a copy leaves out: these patterns, never nbgrader's own files."""
    kept = [p for p in patterns if not any(fnmatch.fnmatch(n, p) for n in SUBMISSION_FILES)]
    kept = kept or [".ipynb_checkpoints"]
    return lambda rel: any(fnmatch.fnmatch(part, p) for part in rel.split("/") for p in kept)


def course_ignore(course: Path) -> Callable[[str], bool]:
    """Return the copy's skip predicate for a course (its nbgrader CourseDirectory.ignore)."""
    from autograder.course import course_directory

    return ignored(list(course_directory(course).ignore))


@dataclass
class Taken:
    """A submission copied out of the exchange: what the copy did, the time it is graded as, its secret."""

    report: CopyReport
    arrival: Arrival
    secret: str


def take(sub: Submission, dest: Path, skip: Callable[[str], bool] = lambda rel: False,
         limits: Limits = LIMITS) -> Taken:
    """Copy a submission safely to the new folder `dest`, with a timestamp.txt its student cannot fake.

    Raise Refusal when the folder cannot be copied or the copy stopped at a cap (dest is removed then).
    """
    try:
        report = copy_tree(sub.folder, dest, limits, owner=sub.uid, skip=skip, file_mode=0o600,
                           dir_mode=0o700)
    except (Refusal, OSError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise Refusal(str(exc)) from None
    if report.stopped:
        shutil.rmtree(dest, ignore_errors=True)
        raise Refusal(f"not copied: {report.stopped}")
    claimed, secret = _text(dest, STAMP_FILE), _text(dest, SECRET_FILE)
    written = datetime.datetime.fromtimestamp(report.newest_change, datetime.timezone.utc)
    when = Arrival(claimed or None, written.replace(tzinfo=None))
    write_stamp(dest, when.timestamp, 0o600)
    return Taken(report, when, secret)


def _text(folder: Path, name: str) -> str:
    """Return a small file of a copy we made, stripped ('' when missing, too big or not UTF-8)."""
    try:
        return read_small(folder, name).decode("utf-8", errors="strict").strip()
    except (Refusal, UnicodeDecodeError):
        return ""


def notebook_ids(course: Path, assignment: str, submitted: Path) -> dict[str, str]:
    """Return the assignment's notebook names -> the names the student gave them, as the grader matched them.

    A renamed notebook (`Copy of ps01 (2).ipynb`) is graded as the assignment's notebook, but nbgrader's
    fetch_feedback looks feedback up by the name of the student's own file.
    """
    from autograder.cells import grade_id
    from autograder.grading.submissions import match_submission, read_notebook_json

    expected: dict[str, set[str]] = {}
    instructor = course / "release" / assignment  # the grader generates it from source/ when it is missing
    for nb in sorted((instructor if instructor.is_dir() else course / "source" / assignment).glob("*.ipynb")):
        raw, _ = read_notebook_json(nb)
        expected[nb.name] = {gid for cell in (raw or {}).get("cells", []) if (gid := grade_id(cell))}
    if not submitted.is_dir():
        return {}
    matched = match_submission(submitted.parent.name, submitted, expected, assignment)
    return {Path(name).stem: path.stem for name, path in matched.notebooks.items()}


def release_feedback(ex: Exchange, course: Path, student: str, assignment: str, timestamp: str, secret: str,
                     pages: dict[str, str], ids: dict[str, str] | None = None) -> None:
    """Give feedback pages back as `nbgrader release_feedback` does: course feedback/ and the exchange's.

    `ids` maps a page's notebook to the student's own name for it (notebook_ids): the exchange's copy goes
    under that name, which is what the student's fetch_feedback looks for.
    """
    mine = course / "feedback" / student / assignment
    shutil.rmtree(mine, ignore_errors=True)
    mine.mkdir(parents=True)
    write_new(mine, STAMP_FILE, timestamp.encode())
    write_new(mine, SECRET_FILE, secret.encode())
    if not ex.feedback.is_dir():
        ex.feedback.mkdir()
        ex.feedback.chmod(FEEDBACK_MODE)
    from nbgrader.utils import notebook_hash

    for notebook, text in pages.items():
        write_new(mine, f"{notebook}.html", text.encode())
        checksum = notebook_hash(secret=secret, notebook_id=(ids or {}).get(notebook, notebook))
        write_new(ex.feedback, f"{checksum}.html", text.encode(), 0o644)


def collect(course: Path, ex: Exchange, assignment: str, course_id: str) -> CollectReport:
    """Copy each student's newest own submission to submitted/<student>/<assignment>/ (as the grader)."""
    from nbgrader.api import Gradebook

    from autograder.grading.gradebook import course_db_url

    inbox = ex.read_inbox({assignment})
    report = CollectReport(skipped=list(inbox.skipped))
    skip = course_ignore(course)
    (course / "submitted").mkdir(exist_ok=True)
    for student, sub in sorted(inbox.newest().items()):
        staging = Path(tempfile.mkdtemp(prefix=".collect-", dir=course))
        try:
            outcome = _collect_one(course, sub, staging / assignment, skip)
        except Refusal as exc:
            report.skipped.append(BadName(sub.name.format(), str(exc)))
            continue
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if outcome is None:
            report.unchanged.append(student)
            continue
        with Gradebook(course_db_url(course), course_id) as gb:  # sqlite or PostgreSQL, as the course says
            gb.update_or_create_student(student)
        report.collected.append(outcome)
    return report


def _collect_one(course: Path, sub: Submission, staging: Path,
                 skip: Callable[[str], bool]) -> Collected | None:
    """Copy one submission to staging, then put it in submitted/ in place of an older one (None: same one)."""
    taken = take(sub, staging, skip)
    target = course / "submitted" / sub.name.student / sub.name.assignment
    if target.is_dir() and not target.is_symlink() and _text(target, STAMP_FILE) == taken.arrival.timestamp:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    else:
        target.unlink(missing_ok=True)
    os.rename(staging, target)
    notes = "; ".join(n for n in (taken.arrival.note(), taken.report.summary()) if n)
    return Collected(sub.name.student, taken.arrival.timestamp, notes)


def graded_feedback(course: Path, ex: Exchange, assignment: str) -> list[str]:
    """Release the grader's feedback pages of every graded submission that came from the exchange."""
    pages_root = course / "graded" / assignment / "feedback"
    released = []
    for student_dir in sorted(p for p in pages_root.iterdir() if p.is_dir()) if pages_root.is_dir() else []:
        submitted = course / "submitted" / student_dir.name / assignment
        secret, timestamp = _text(submitted, SECRET_FILE), _text(submitted, STAMP_FILE)
        pages = {p.stem: p.read_text(encoding="utf-8")
                 for p in sorted(student_dir.glob("*.html")) if p.is_file() and not p.is_symlink()}
        if not pages or not secret:
            continue  # not a submission from the exchange (nothing to hand it back through)
        release_feedback(ex, course, student_dir.name, assignment, timestamp, secret, pages,
                         notebook_ids(course, assignment, submitted))
        released.append(student_dir.name)
    return released


@dataclass(frozen=True)
class Folder:
    """One folder of the exchange's tree as it must be: owner, group and mode."""

    path: Path
    uid: int
    gid: int
    mode: int


def tree(ex: Exchange, grader_uid: int, grader_gid: int) -> list[Folder]:
    """Return the exchange's folders, parents first, with the owner and mode each must have."""
    return [Folder(ex.root, 0, 0, EXCHANGE_MODE), Folder(ex.course, 0, 0, OPEN_MODE),
            Folder(ex.inbound, 0, grader_gid, INBOUND_MODE), Folder(ex.outbound, 0, 0, OPEN_MODE),
            Folder(ex.feedback, grader_uid, grader_gid, FEEDBACK_MODE)]


def secure_tree(ex: Exchange, grader_uid: int, grader_gid: int) -> list[str]:
    """Make the exchange's tree root's (the feedback folder the grader's), repairing what anyone else planted.

    A folder that is a link, not a folder, or owned by someone else is removed and made again; a wrong mode or
    owner of our own folders is set right; entries of the outbound not made by root are removed. Return a line
    per repair.
    """
    trusted = {0, grader_uid}
    done = []
    for want in tree(ex, grader_uid, grader_gid):
        try:
            st = want.path.lstat()
        except FileNotFoundError:
            st = None
        if st is not None and (not stat.S_ISDIR(st.st_mode) or st.st_uid not in trusted):
            _remove(want.path, st)
            done.append(f"removed {printable(str(want.path))}: planted by user id {st.st_uid}")
            st = None
        if st is None:
            want.path.mkdir()
        os.lchown(want.path, want.uid, want.gid)
        os.chmod(want.path, want.mode, follow_symlinks=False)
        if st is not None and (st.st_mode & 0o7777, st.st_uid, st.st_gid) != (want.mode, want.uid, want.gid):
            done.append(f"set {want.path} to mode {want.mode:o}, owner {want.uid}:{want.gid}")
    for entry in sorted(ex.outbound.iterdir()):
        st = entry.lstat()
        if st.st_uid not in trusted or not stat.S_ISDIR(st.st_mode):
            _remove(entry, st)
            done.append(f"removed {printable(str(entry))} from the outbound: planted by user id {st.st_uid}")
    return done


def _remove(path: Path, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)  # removes links inside, never follows them
    else:
        path.unlink()


def release(ex: Exchange, source: Path, assignment: str, force: bool) -> None:
    """Publish the student version in outbound/<assignment> (root's, readable by all) as nbgrader does."""
    dest = ex.outbound / assignment
    if dest.exists() or dest.is_symlink():
        if not force:
            raise FileExistsError(f"{assignment} is already released: add --force to release it again")
        _remove(dest, dest.lstat())
    staging = Path(tempfile.mkdtemp(prefix=f".{assignment}-", dir=ex.outbound))
    try:
        report = copy_tree(source, staging / assignment, Limits(total_bytes=1 << 30), skip=ignored([]))
        if report.stopped or report.refused:
            raise Refusal(f"the release of {assignment} was not copied whole: {report.summary()}")
        for folder, _, files in os.walk(staging / assignment):
            os.chmod(folder, OPEN_MODE)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        os.rename(staging / assignment, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="exchange", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["collect", "feedback"])
    parser.add_argument("assignment")
    parser.add_argument("--course", required=True)
    parser.add_argument("--exchange", required=True)
    parser.add_argument("--course-id", required=True)
    args = parser.parse_args(argv)
    os.umask(0o077)
    course, ex = Path(args.course), Exchange(Path(args.exchange), args.course_id)
    if args.action == "collect":
        print(collect(course, ex, args.assignment, args.course_id).to_json())
    else:
        print(json.dumps(graded_feedback(course, ex, args.assignment)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
