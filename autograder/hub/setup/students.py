"""The course gradebook's students, written by the grader account (course_gradebook.py) from the roster."""


import os
import subprocess
import tempfile
from pathlib import Path

from autograder.csv_cells import write_rows
from autograder.hub.settings import (
    COURSE_GRADEBOOK,
    HubSettings,
)
from autograder.hub.setup import accounts
from autograder.hub.setup.accounts import GraderAccount
from autograder.hub.setup.roster import Member


def course_gradebook(grader: GraderAccount, course_id: str, *args: str,
                     check: bool = True) -> subprocess.CompletedProcess:
    """Write students or a due date into the course gradebook as the grader account (course_gradebook.py)."""
    return grader.command(COURSE_GRADEBOOK, *args, "--course", str(grader.course),
                         "--course-id", course_id, check=check)


def write_students_csv(handle, students: list[Member], prefix: str) -> None:
    """Write students as a CSV that `nbgrader db student import` and course_gradebook.read_students read."""
    write_rows(handle, [["id", "first_name", "last_name", "email"],
                        *([m.username(prefix), *m.first_last, ""] for m in students)])


def register_students(s: HubSettings, members: list[Member]) -> None:
    """Put the students into the course gradebook (ids are their hub user names)."""
    students = [m for m in members if m.role == "student"]
    if not students:
        return
    grader = accounts.lookup(s.grader)
    assert grader is not None
    with tempfile.NamedTemporaryFile("w", suffix=".csv", dir=s.paths.course, delete=False,
                                     newline="") as handle:
        write_students_csv(handle, students, s.prefix)
    path = Path(handle.name)
    os.chown(path, grader.uid, grader.gid)
    try:
        course_gradebook(GraderAccount.of(s), s.course_id, "students", path.name)
    finally:
        path.unlink(missing_ok=True)
