"""Per-student extensions of an assignment's due date, kept where nbgrader keeps them (the gradebook).

`hub extend STUDENT ASSIGNMENT --until WHEN | --by HOURS | --remove` runs this module as the grader account
(the gradebook is the grader's). Extensions do not stack, as in nbgrader: each one replaces the last, counted
from the assignment's due date. The grader (`hub grade`, the autograde service) gives each student's
scratch gradebook their extension, so nbgrader's late penalty counts from the extended date, and the
student's feedback page says which date applied.

    devicelab-due-dates ASSIGNMENT [STUDENT [--until W | --by H | --remove]] \
        --course C --course-id ID
"""

import argparse
import datetime
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from autograder.grading.gradebook import extensions, set_extension, student_due_date
from autograder.hub.exchange.arrival import parse_utc


class ExtensionError(Exception):
    """An extension that cannot be given (no such student, no due date to count from, a date before it)."""


@dataclass(frozen=True)
class Extension:
    """One student's extension: the assignment's due date and the student's own (UTC, ISO 8601)."""

    student: str
    assignment: str
    due: str | None
    extended_due: str | None
    hours: float  # 0: none

    def line(self) -> str:
        """Say it in one line."""
        if not self.hours:
            return f"{self.student}: no extension for {self.assignment} (due {self.due or 'no date set'})"
        return (f"{self.student}: {self.assignment} due {self.extended_due} UTC, an extension of "
                f"{self.hours:g} h (everyone else: {self.due} UTC)")


def is_student(db_url: str, course_id: str, student: str) -> bool:
    """Return True when the gradebook knows the student."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course_id) as gb:
        try:
            gb.find_student(student)
        except MissingEntry:
            return False
        return True


def describe(student: str, assignment: str, due: datetime.datetime | None,
             seconds: float | None) -> Extension:
    """Return what a student's extension amounts to."""
    extended = due + datetime.timedelta(seconds=seconds) if due is not None and seconds else None
    return Extension(student, assignment, due.isoformat(" ") if due else None,
                     extended.isoformat(" ") if extended else None, round((seconds or 0) / 3600, 4))


def seconds_of(db_url: str, course_id: str, assignment: str, student: str, *, until: str | None = None,
               hours: float | None = None) -> float | None:
    """Return the extension asked for, in seconds (None: take it back), or say why it cannot be given."""
    if not is_student(db_url, course_id, student):
        raise ExtensionError(f"no student {student!r} in the gradebook (add them with `hub add-user`)")
    due = student_due_date(db_url, assignment)
    if until is not None:
        if due is None:
            raise ExtensionError(f"{assignment} has no due date to extend: set one with `hub release --due`, "
                                 "or give --by HOURS")
        try:
            when = parse_utc(until).replace(tzinfo=None)
        except (ValueError, OverflowError) as exc:
            raise ExtensionError(f"not a date: {until!r} ({exc})") from None
        seconds = (when - due).total_seconds()
        if seconds <= 0:
            raise ExtensionError(f"{until} is not after the due date ({due} UTC)")
        return seconds
    if hours is not None:
        if not 0 < hours <= 24 * 366:
            raise ExtensionError("--by takes a number of hours above 0 (a year at most)")
        return hours * 3600
    return None


def extend(db_url: str, course_id: str, assignment: str, student: str, *, until: str | None = None,
           hours: float | None = None) -> Extension:
    """Give `student` an extension until a date or by some hours (neither: take it back); return it."""
    seconds = seconds_of(db_url, course_id, assignment, student, until=until, hours=hours)
    set_extension(db_url, course_id, assignment, student, seconds)
    return describe(student, assignment, student_due_date(db_url, assignment), seconds)


def give(course: Path, assignment: str, student: str, *, until: str | None = None,
         hours: float | None = None, wait_s: float = 120.0) -> Extension:
    """Extend (or take back) in the course's gradebook, as the grader: with the gradebook locked against a
    grading run, and the assignment defined there first as the grader defines it (nbgrader refuses to define
    an assignment again once a submission exists, and an extension lives on a submission)."""
    import tempfile
    import time

    from autograder.grading import gradebook as gbook
    from autograder.grading.errors import GradebookBusy
    from autograder.grading.session import CACHE_FOLDER
    from autograder.grading.template import cached_template, register

    db_url, course_id = gbook.course_db_url(course), gbook.course_id(course)
    seconds_of(db_url, course_id, assignment, student, until=until, hours=hours)  # refused before any work
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with gbook.locked(db_url), tempfile.TemporaryDirectory(prefix="extend-") as scratch:
                cache = course / "graded" / assignment / CACHE_FOLDER  # hub grade's and the service's
                template, _ = cached_template(course, assignment, cache, Path(scratch) / "template")
                register(course, assignment, template, db_url, course_id, Path(scratch) / "register")
                return extend(db_url, course_id, assignment, student, until=until, hours=hours)
        except GradebookBusy:
            if time.monotonic() > deadline:
                raise ExtensionError("a grading run has held the gradebook for too long: try again") from None
            time.sleep(1.0)


def listed(db_url: str, course_id: str, assignment: str) -> list[Extension]:
    """Return every extension of the assignment."""
    due = student_due_date(db_url, assignment)
    return [describe(s, assignment, due, seconds)
            for s, seconds in sorted(extensions(db_url, course_id, assignment).items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="extensions", description=__doc__.splitlines()[0])
    parser.add_argument("assignment")
    parser.add_argument("student", nargs="?")
    parser.add_argument("--course", required=True, type=Path)
    parser.add_argument("--course-id", required=True)
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--until")
    how.add_argument("--by", type=float, dest="hours")
    how.add_argument("--remove", action="store_true")
    args = parser.parse_args(argv)
    from autograder.grading import gradebook as gbook

    db_url = gbook.course_db_url(args.course)
    try:
        if args.student is None:
            print(json.dumps([asdict(e) for e in listed(db_url, args.course_id, args.assignment)]))
        else:
            found = give(args.course, args.assignment, args.student, until=args.until,
                         hours=None if args.remove else args.hours)
            print(json.dumps(asdict(found)))
    except ExtensionError as exc:
        print(json.dumps({"error": str(exc)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
