"""The hub writes students and due dates into the course gradebook as nbgrader's own `db` commands do."""

import shutil
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from autograder.course import with_venv_on_path
from autograder.hub.setup import course_gradebook
from autograder.hub.setup.roster import Member
from autograder.hub.setup.students import write_students_csv

COURSE = "device-lab"
MEMBERS = [Member("ann", 'Ann "Annie" Lee, Jr.', "student"), Member("bob", "Bob", "student"),
           Member("cy", "Cy Ng", "student")]


def course(folder):
    """Return a course folder with an nbgrader_config.py naming the course, and its gradebook's URL."""
    folder.mkdir()
    config = f"c = get_config()\nc.CourseDirectory.course_id = {COURSE!r}\n"
    (folder / "nbgrader_config.py").write_text(config)
    return folder, f"sqlite:///{folder / 'gradebook.db'}"


def students_of(db_url):
    with Gradebook(db_url, COURSE) as gb:
        return sorted((s.id, s.first_name, s.last_name, s.email, s.lms_user_id) for s in gb.students)


def due_of(db_url, assignment):
    with Gradebook(db_url, COURSE) as gb:
        return gb.find_assignment(assignment).duedate


def nbgrader(folder, *args):
    done = subprocess.run([shutil.which("nbgrader", path=with_venv_on_path()["PATH"]), *args], cwd=folder,
                          env=with_venv_on_path(), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def ours(folder, *args):
    done = subprocess.run([sys.executable, "-m", "autograder.hub.setup.course_gradebook", *args, "--course",
                           str(folder), "--course-id", COURSE], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_students_and_due_dates_are_written_as_nbgraders_db_commands_write_them(tmp_path):
    theirs, their_db = course(tmp_path / "nbgrader")
    mine, my_db = course(tmp_path / "ours")
    for folder in (theirs, mine):
        with (folder / "students.csv").open("w", newline="") as handle:
            write_students_csv(handle, MEMBERS, "dl-")
    nbgrader(theirs, "db", "student", "import", "students.csv")
    assert "3 students" in ours(mine, "students", "students.csv")
    assert students_of(my_db) == students_of(their_db)
    assert [s[0] for s in students_of(my_db)] == ["dl-ann", "dl-bob", "dl-cy"]

    nbgrader(theirs, "db", "assignment", "add", "ps01", "--duedate", "2026-12-01 17:00:00 UTC")
    ours(mine, "due", "ps01", "2026-12-01 17:00:00 UTC")
    assert due_of(my_db, "ps01") == due_of(their_db, "ps01") and due_of(my_db, "ps01").hour == 17

    # run again (a student added later, a due date moved): updated, nothing doubled
    more = [*MEMBERS, Member("dee", "Dee", "student")]
    with (mine / "students.csv").open("w", newline="") as handle:
        write_students_csv(handle, more, "dl-")
    ours(mine, "students", "students.csv")
    ours(mine, "due", "ps01", "2026-12-02 09:30:00 UTC")
    assert [s[0] for s in students_of(my_db)] == ["dl-ann", "dl-bob", "dl-cy", "dl-dee"]
    assert (due_of(my_db, "ps01").day, due_of(my_db, "ps01").hour) == (2, 9)


def test_a_csv_without_ids_is_refused(tmp_path):
    folder, _ = course(tmp_path / "c")
    (folder / "people.csv").write_text("name,email\nAnn,a@x\n")
    with pytest.raises(ValueError, match="no 'id' column"):
        course_gradebook.read_students(folder / "people.csv")
