"""The instructor's loop: release, status, collect, grade (with our grader), feedback, export."""

import csv
import datetime
import fnmatch
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from nbgrader.utils import parse_utc

from autograder.hub import accounts
from autograder.hub.arrival import recheck_collected
from autograder.hub.install import grader_env, nbgrader
from autograder.hub.roster import read_roster
from autograder.hub.settings import HubError, HubSettings

SUBMISSION_FILES = ("timestamp.txt", "submission_secret.txt")


@dataclass(frozen=True)
class Handin:
    """One student's state for an assignment: when they last submitted (None: never), whether it was collected."""

    student: str
    submitted: str | None
    collected: bool


@dataclass(frozen=True)
class Grade:
    """One row of our grader's grades.csv."""

    student: str
    score: float
    max_score: float
    status: str
    detail: str


def _known(s: HubSettings, assignment: str) -> None:
    if not (s.paths.course / "release" / assignment).is_dir():
        have = sorted(p.name for p in (s.paths.course / "release").iterdir() if p.is_dir())
        raise HubError(f"no assignment {assignment!r} in {s.paths.course / 'release'} (have: {', '.join(have)})")


def release(s: HubSettings, assignment: str, force: bool = False, due: str | None = None) -> str:
    """Put the student version into the exchange for every student to fetch; record its due date when given."""
    due_utc = parse_due(due) if due else None
    _known(s, assignment)
    done = nbgrader(s, "release_assignment", assignment, *(["--force"] if force else []))
    said = (done.stdout + done.stderr).strip()
    if due_utc is None:
        return said
    dated = nbgrader(s, "db", "assignment", "add", assignment, "--duedate", f"{due_utc:%Y-%m-%d %H:%M:%S} UTC")
    if dated.returncode != 0:
        raise HubError(f"released, but the due date was not recorded: {(dated.stdout + dated.stderr).strip()}")
    return (f"{said}\ndue {due_utc:%Y-%m-%d %H:%M:%S} UTC; a later submission is late, and nbgrader's "
            "LateSubmissionPlugin.penalty_method (nbgrader_config.py; default 'none': marked late, no penalty) "
            "decides what it costs")


def parse_due(text: str) -> datetime.datetime:
    """Return a due date as naive UTC, read as nbgrader reads it (a time without a zone or offset is UTC)."""
    try:
        return parse_utc(text)
    except (ValueError, OverflowError) as exc:
        raise HubError(f"cannot read the due date {text!r} ({exc}); write it like '2026-12-01 17:00:00 UTC' "
                       "or '2026-12-01T17:00:00-05:00'") from None


def status(s: HubSettings, assignment: str) -> list[Handin]:
    """Return every student on the roster with their latest submission in the exchange."""
    inbound = s.paths.exchange / s.course_id / "inbound"
    latest: dict[str, str] = {}
    for entry in (inbound.iterdir() if inbound.is_dir() else []):
        parts = entry.name.split("+")
        if len(parts) >= 3 and parts[1] == assignment:
            latest[parts[0]] = max(latest.get(parts[0], ""), parts[2])
    students = [m.username(s.prefix) for m in read_roster(s.paths.roster, s.prefix) if m.role == "student"]
    collected = s.paths.course / "submitted"
    return [Handin(u, latest.get(u), (collected / u / assignment).is_dir())
            for u in sorted(set(students) | set(latest))]


def _ignore(s: HubSettings) -> list[str]:
    """Return the course's ignore patterns less those that would drop nbgrader's own submission files.

    A course may ignore `*.txt` to keep notes out of release/; collecting must still keep timestamp.txt (late
    penalties) and submission_secret.txt (feedback goes back through it).
    """
    from autograder.course import course_directory

    patterns = course_directory(s.paths.course).ignore
    return [p for p in patterns if not any(fnmatch.fnmatch(name, p) for name in SUBMISSION_FILES)] or [".ipynb_checkpoints"]


def collect(s: HubSettings, assignment: str) -> str:
    """Copy the latest submissions from the exchange into the course's submitted/ (newer ones replace older)."""
    _known(s, assignment)
    done = nbgrader(s, "collect", assignment, "--update", *(f"--CourseDirectory.ignore={p}" for p in _ignore(s)))
    changed = recheck_collected(s.paths.course, s.paths.exchange / s.course_id / "inbound", assignment)
    return "\n".join([(done.stdout + done.stderr).strip(), *changed]).strip()


def grade(s: HubSettings, assignment: str, extra: list[str]) -> list[Grade]:
    """Grade the collected submissions with `python -m autograder grade`, as the grader account."""
    _known(s, assignment)
    course = s.paths.course
    if not any((course / "submitted").glob(f"*/{assignment}")):
        raise HubError(f"nothing collected for {assignment}: run `hub collect {assignment}` first")
    out = course / "graded" / assignment
    command = [s.python, "-m", "autograder", "grade", assignment, str(course / "submitted"), "--course",
               str(course), "--out", str(out), "--hide", str(s.paths.exchange), "--quiet", *extra]
    accounts.run_as(s.grader, command, cwd=course, env=grader_env(s), timeout=None)
    return read_grades(out / "grades.csv")


def read_grades(path: Path) -> list[Grade]:
    """Read our grader's grades.csv."""
    with path.open(newline="", encoding="utf-8") as handle:
        return [Grade(r["student"], float(r["score"] or 0), float(r["max_score"] or 0), r["status"], r["detail"])
                for r in csv.DictReader(handle)]


def feedback(s: HubSettings, assignment: str) -> list[str]:
    """Release the grader's feedback pages to the students who were graded; return those students."""
    _known(s, assignment)
    course, grader = s.paths.course, accounts.lookup(s.grader)
    assert grader is not None
    pages = course / "graded" / assignment / "feedback"
    released = []
    for student_dir in sorted(p for p in pages.iterdir() if p.is_dir()) if pages.is_dir() else []:
        submitted = course / "submitted" / student_dir.name / assignment
        html = sorted(student_dir.glob("*.html"))
        if not html or not (submitted / "submission_secret.txt").is_file():
            continue  # not a submission from the exchange (nothing to hand it back through)
        target = course / "feedback" / student_dir.name / assignment
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for page in html:
            shutil.copyfile(page, target / page.name)
        for name in ("timestamp.txt", "submission_secret.txt"):
            shutil.copyfile(submitted / name, target / name)
        for folder in (course / "feedback", target.parent, target):
            os.chown(folder, grader.uid, grader.gid)
        for path in target.iterdir():
            os.chown(path, grader.uid, grader.gid)
        released.append(student_dir.name)
    if not released:
        raise HubError(f"no graded submissions of {assignment} to give feedback on: run `hub grade` first")
    nbgrader(s, "release_feedback", assignment)
    return released


def autograde(s: HubSettings, mode: str, assignment: str, per_hour: int | None = None,
              timeout: float | None = None) -> str:
    """Turn autograde-on-submit on or off for an assignment, or list its queue (as the grader account)."""
    _known(s, assignment)
    options = [*(["--per-hour", str(per_hour)] if per_hour is not None and mode == "on" else []),
               *(["--timeout", str(timeout)] if timeout is not None and mode == "on" else [])]
    done = accounts.run_as(s.grader, [s.python, "-m", "autograder.hub.autograde_service", mode, "--course",
                                      str(s.paths.course), assignment, *options],
                           cwd=s.paths.course, env=grader_env(s), timeout=120)
    return done.stdout


def export(s: HubSettings, to: Path) -> Path:
    """Write the course gradebook's grades (every assignment) as CSV with `nbgrader export`."""
    nbgrader(s, "export", "--to", "grades-export.csv")
    shutil.copyfile(s.paths.course / "grades-export.csv", to)
    return to
