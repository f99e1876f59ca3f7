"""`hub export --by-question` and `--format canvas|moodle`: a real nbgrader gradebook, read into the layouts
Canvas's and Moodle's gradebook imports read (the columns of their own CSV exports)."""

import csv
import io
import json
import shutil
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from autograder import COURSE_ROOT
from autograder.course import with_venv_on_path
from autograder.grading.gradebook import ensure_schema
from autograder.hub import instructor as loop
from autograder.hub.grade_export import NBGRADER_COLUMNS, ExportFormat, nbgrader_csv, read_table, write_csv
from autograder.hub.settings import HubSettings
from tests.spreadsheet import FORGING_NAMES, checked

COURSE_ID = "devicelab-test"


def graded_cell(grade: str, source: str = "pass") -> dict:
    return {"cell_type": "code", "source": source,
            "metadata": {"nbgrader": {"grade_id": grade, "grade": True}}}


@pytest.fixture
def course(tmp_path):
    """A course whose gradebook holds one assignment of two graded cells and a task, and three students."""
    (tmp_path / "source" / "ps01").mkdir(parents=True)
    cells = [graded_cell("test-b"), graded_cell("test-a"), graded_cell("task-explain")]
    (tmp_path / "source" / "ps01" / "ps01.ipynb").write_text(json.dumps({"cells": cells}))
    ensure_schema(f"sqlite:///{tmp_path / 'gradebook.db'}")
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}", COURSE_ID) as gb:
        gb.update_or_create_assignment("ps01")
        gb.update_or_create_notebook("ps01", "ps01")
        gb.update_or_create_grade_cell("test-b", "ps01", "ps01", max_score=3, cell_type="code")
        gb.update_or_create_grade_cell("test-a", "ps01", "ps01", max_score=2, cell_type="code")
        gb.update_or_create_task_cell("task-explain", "ps01", "ps01", max_score=5, cell_type="markdown")
        gb.update_or_create_student("ada", first_name="Ada", last_name="Lovelace", email="ada@example.org")
        gb.update_or_create_student("bob", first_name="=HYPERLINK(\"http://evil\")", last_name="Smith, Jr",
                                    email="bob@example.org")
        gb.update_or_create_student("cy", first_name="Cy", last_name="", email="")
        for student, scores in (("ada", {"test-b": 3, "test-a": 1, "task-explain": 4}),
                                ("bob", {"test-b": 0, "test-a": 2, "task-explain": 0})):
            gb.add_submission("ps01", student)
            for cell, score in scores.items():
                grade = gb.find_grade(cell, "ps01", "ps01", student)
                grade.auto_score = score
            gb.db.commit()
        submission = gb.find_submission("ps01", "bob")
        submission.notebooks[0].late_submission_penalty = 1.0
        gb.db.commit()
    return tmp_path


def rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_by_question_has_a_column_per_graded_cell_and_task_in_notebook_order_then_the_total(course):
    table = read_table(course, COURSE_ID, by_question=True)
    assert [c.title for c in table.columns] == ["ps01 ps01:test-b", "ps01 ps01:test-a",
                                                "ps01 ps01:task-explain", "ps01"]
    assert [c.max_score for c in table.columns] == [3, 2, 5, 10]
    got = {r.student: r.scores for r in table.rows}
    assert got["ada"] == (3, 1, 4, 8)
    assert got["bob"] == (0, 2, 0, 1), "the total is after bob's late penalty of 1"
    assert got["cy"] == (0, 0, 0, 0), "nothing submitted: 0, as nbgrader export says"


def test_the_table_layout_names_each_column_with_its_points(course):
    text = write_csv(read_table(course, COURSE_ID, by_question=True), ExportFormat.TABLE)
    header, *body = rows(text)
    assert header == ["student_id", "first_name", "last_name", "email", "ps01 ps01:test-b (max 3)",
                      "ps01 ps01:test-a (max 2)", "ps01 ps01:task-explain (max 5)", "ps01 (max 10)"]
    assert body[0] == ["ada", "Ada", "Lovelace", "ada@example.org", "3", "1", "4", "8"]
    assert body[1][1] == "'=HYPERLINK(\"http://evil\")", "a formula in a name is shown as text"


def test_canvas_layout_is_its_gradebook_export_s(course):
    """Canvas: Student, ID, SIS User ID, SIS Login ID, Section, a column per score, Points Possible."""
    header, points, *body = rows(write_csv(read_table(course, COURSE_ID), ExportFormat.CANVAS))
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps01"]
    assert points == ["    Points Possible", "", "", "", "", "10"]
    by_login = {r[3]: r for r in body}
    assert by_login["ada"] == ["Lovelace, Ada", "", "", "ada", "", "8"]
    assert by_login["bob"][0] == 'Smith, Jr, =HYPERLINK("http://evil")', "starts with S: no formula"
    assert by_login["cy"][0] == "Cy"


def test_moodle_layout_is_its_csv_export_s(course):
    header, *body = rows(write_csv(read_table(course, COURSE_ID, by_question=True), ExportFormat.MOODLE))
    assert header[:4] == ["First name", "Last name", "ID number", "Email address"]
    assert header[4:] == ["ps01 ps01:test-b", "ps01 ps01:test-a", "ps01 ps01:task-explain", "ps01"]
    assert body[0] == ["Ada", "Lovelace", "ada", "ada@example.org", "3", "1", "4", "8"]


@pytest.fixture
def hostile_course(course):
    """The course, with students whose names (from the roster or an LMS launch) try to add columns, rows and
    formulas."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        for at, name in enumerate(FORGING_NAMES):
            gb.update_or_create_student(f"z{at}", first_name=name, last_name=f"-{name}",
                                        email=f"=HYPERLINK(\"http://x\",\"{name}\")")
        gb.update_or_create_student("-x", first_name="@SUM(A1)", last_name="+1", email="\tx")
    return course


LAYOUTS = [*(lambda course, layout=layout: write_csv(read_table(course, COURSE_ID), layout)
             for layout in ExportFormat),
           lambda course: write_csv(read_table(course, COURSE_ID, by_question=True), ExportFormat.TABLE),
           lambda course: nbgrader_csv(course, COURSE_ID)]


@pytest.mark.parametrize("export", LAYOUTS, ids=[*ExportFormat, "by-question", "nbgrader"])
def test_no_name_adds_a_column_a_row_or_a_formula_in_any_layout(hostile_course, export):
    table = checked(export(hostile_course))  # every row as wide as the header, no formula
    for name in FORGING_NAMES:
        one_line = " ".join(name.splitlines())
        assert len([r for r in table if any(isinstance(c, str) and one_line in c for c in r)]) == 1, name
    assert not any(cell == 100 for row in table for cell in row), "no score of 100 was forged"


def test_the_nbgrader_layout_is_nbgrader_export_s_own(course):
    """Plain `hub export`: nbgrader export's columns and values, row for row, only quoted and made safe."""
    theirs = course / "theirs.csv"
    config = f"c = get_config()\nc.CourseDirectory.course_id = {COURSE_ID!r}\n"
    (course / "nbgrader_config.py").write_text(config)
    nbgrader = shutil.which("nbgrader", path=with_venv_on_path()["PATH"])
    done = subprocess.run([nbgrader, "export", "--to", str(theirs)], cwd=course, env=with_venv_on_path(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    their_rows = rows(theirs.read_text())
    ours = checked(nbgrader_csv(course, COURSE_ID))
    assert ours[0] == their_rows[0] == list(NBGRADER_COLUMNS)
    bob = next(r for r in their_rows if r[3] == "bob")
    assert len(bob) == len(NBGRADER_COLUMNS) + 1, "nbgrader writes 'Smith, Jr' unquoted: one column too many"
    honest = [r for r in their_rows[1:] if r[3] != "bob"]
    assert [[str(c) for c in r] for r in ours[1:] if r[3] != "bob"] == honest
    assert [r for r in ours if r[3] == "bob"] == [
        ["ps01", "", bob[2], "bob", "Smith, Jr", "'=HYPERLINK(\"http://evil\")", "bob@example.org", 2.0, 1.0,
         1.0, 10.0]]


@pytest.mark.parametrize("layout", [None, *ExportFormat])
def test_hub_export_writes_every_layout_safely(hostile_course, tmp_path, layout):
    """`hub export` (loop.export), plain (nbgrader's layout) or in a layout, on a hostile class."""
    (tmp_path / "hub-root").mkdir()
    (tmp_path / "hub-root" / "course").symlink_to(hostile_course)
    s = HubSettings(root=str(tmp_path / "hub-root"), course_id=COURSE_ID, course_source=str(COURSE_ROOT))
    written = loop.export(s, tmp_path / "grades.csv", layout).read_text(encoding="utf-8")
    checked(written)
    if layout is None:
        assert written == nbgrader_csv(hostile_course, COURSE_ID)


def test_the_command_line_offers_the_layouts_and_by_question():
    run = subprocess.run([sys.executable, "-m", "autograder", "hub", "export", "--help"], cwd=COURSE_ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert "--by-question" in run.stdout and "canvas" in run.stdout and "moodle" in run.stdout
