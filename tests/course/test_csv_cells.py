"""Every CSV the project writes: text quoted, on one line and never a formula; numbers bare; our own readers
get back what was written (grades.csv, the roster, the students file nbgrader imports)."""

import io
from pathlib import Path

import pytest

from autograder.csv_cells import figure, restore, restored, rows_text, spreadsheet_safe, write_rows
from autograder.grading.report import csv_text
from autograder.grading.results import StudentResult
from autograder.hub.instructor import read_grades
from autograder.hub.lms.passback import read_scores
from autograder.hub.setup import course_gradebook
from autograder.hub.setup.roster import Member, read_roster, write_roster
from autograder.hub.setup.students import write_students_csv
from tests.spreadsheet import FORGING_NAMES, FORMULA_NOTEBOOKS, checked, sheet


@pytest.mark.parametrize(("text", "safe"), [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-2", "'-2"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"),
    ("\r=1", "' =1"), ("  =1+1", "'  =1+1"), ("'=1+1", "''=1+1"),
    ("Ada", "Ada"), ("", ""), ("O'Neil", "O'Neil"), ("'Ohana", "'Ohana"), ("a-b", "a-b"),
    ("line one\nline two", "line one line two"), ("a\r\nb\u2028c", "a b c"),
])
def test_text_cells_never_start_a_formula_and_stay_on_one_line(text, safe):
    assert spreadsheet_safe(text) == safe


@pytest.mark.parametrize("text", ["=x", "'=x", "''=x", "-x", " -x", "\tx", "'\tx", "ann", "'ann", "", "@",
                                  "'", "O'Neil"])
def test_what_is_read_back_is_exactly_what_was_written(text):
    assert restore(spreadsheet_safe(text)) == text


def test_texts_that_differ_stay_apart_once_made_safe():
    texts = ["=x", "'=x", "''=x", "x", "'x", "-1", "'-1", "\t1", "'\t1"]
    assert len({spreadsheet_safe(t) for t in texts}) == len(texts)


def test_a_cell_we_did_not_make_safe_is_read_as_it_is():
    assert restore("'ann") == "'ann", "a quote before text that is no formula was not ours"


def test_numbers_stay_bare_numbers_and_text_is_quoted():
    text = rows_text([["name", "score", "penalty"], ["-1", -1.5, 0], ["Ada", 7.25, figure(3.0)]])
    assert text == '"name","score","penalty"\n"\'-1",-1.5,0\n"Ada",7.25,3\n'
    assert sheet(text)[1:] == [["'-1", -1.5, 0.0], ["Ada", 7.25, 3.0]]


def test_figure_writes_a_whole_number_without_a_point():
    assert [figure(x) for x in (10.0, 7.5, -2.0, 0.0)] == [10, 7.5, -2, 0]
    assert [type(figure(x)) for x in (10.0, 7.5)] == [int, float]


@pytest.mark.parametrize("name", [*FORGING_NAMES, *FORMULA_NOTEBOOKS])
def test_a_hostile_name_is_one_quoted_cell(name):
    handle = io.StringIO()
    write_rows(handle, [["id", "name", "score"], ["ann", name, 8]])
    _, row = checked(handle.getvalue())
    assert row == ["ann", spreadsheet_safe(name), 8.0]


def test_restored_gives_every_text_cell_of_a_row_back():
    assert restored({"student": "'=x", "score": "8", None: ["extra"]}) == {"student": "=x", "score": "8",
                                                                           None: ["extra"]}


# grades.csv, read back by the hub's `grade` (loop.read_grades) and the LMS passback (passback.read_scores)

def test_grades_csv_gives_each_student_id_back_exactly_and_apart(tmp_path: Path):
    ids = ["dl-ann", "=x", "'=x", "-x", "@x", "\tx", "'ann"]
    path = tmp_path / "grades.csv"
    path.write_text(csv_text([StudentResult(i, "ps01", "graded", detail=f"=detail of {i}") for i in ids]),
                    encoding="utf-8")
    checked(path.read_text(encoding="utf-8"))
    assert sorted(s.student for s in read_scores(path, "ps01")) == sorted(ids)
    grades = read_grades(path)
    assert sorted(g.student for g in grades) == sorted(ids)
    assert {g.student: g.detail for g in grades}["=x"] == "=detail of =x"
    assert {g.status for g in grades} == {"graded"}


# roster.csv: names from the instructor's roster or an LMS launch; the hub reads its own roster back

def test_the_roster_keeps_hostile_names_in_their_cell_and_reads_them_back(tmp_path: Path):
    members = [Member("ann", "Ann Lee", "student"), Member("mal", "Mallory,100,100", "student"),
               Member("eve", 'Eve\n"x",100', "student"), Member("hyp", '=HYPERLINK("http://x","click")',
                                                                "student"),
               Member("-x", "-1+1", "grader")]  # `dl--x` is a usable account name
    path = tmp_path / "roster.csv"
    write_roster(path, members)
    rows = checked(path.read_text(encoding="utf-8"))
    assert rows[0] == ["id", "name", "role"] and len(rows) == 6
    assert rows[4] == ["hyp", "'=HYPERLINK(\"http://x\",\"click\")", "student"]
    back = read_roster(path, "dl-")
    assert [m.id for m in back] == ["ann", "mal", "eve", "hyp", "-x"]
    assert [m.name for m in back] == ["Ann Lee", "Mallory,100,100", 'Eve "x",100',
                                      '=HYPERLINK("http://x","click")', "-1+1"]
    write_roster(path, back)
    assert read_roster(path, "dl-") == back, "a second round changes nothing"


def test_an_instructor_s_roster_cell_that_we_did_not_write_is_read_as_it_is(tmp_path: Path):
    path = tmp_path / "roster.csv"
    path.write_text("id,name\nann,'Ohana\n", encoding="utf-8")
    assert read_roster(path, "") == [Member("ann", "'Ohana", "student")]


# the students file that `nbgrader db student import` (and course_gradebook.read_students) reads

def test_the_students_file_keeps_hostile_names_in_their_cell_and_our_import_reads_them_back(tmp_path: Path):
    pytest.importorskip("nbgrader")
    members = [Member("ann", "Ann Lee", "student"), Member("mal", "Mallory,100,100 Smith", "student"),
               Member("eve", 'Eve\n"x",100', "student"), Member("hyp", "=1+1 -2", "student")]
    path = tmp_path / "students.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        write_students_csv(handle, members, "dl-")
    rows = checked(path.read_text(encoding="utf-8"))
    assert rows[0] == ["id", "first_name", "last_name", "email"] and len(rows) == 5
    read = course_gradebook.read_students(path)
    assert [r["id"] for r in read] == ["dl-ann", "dl-mal", "dl-eve", "dl-hyp"]
    assert [(r["first_name"], r["last_name"]) for r in read] == [
        ("Ann", "Lee"), ("Mallory,100,100", "Smith"), ('Eve "x",100', None), ("=1+1", "-2")]
