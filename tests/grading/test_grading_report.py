"""grades.csv, the class summary page and the faster feedback pages."""

import csv
import html
import io
from pathlib import Path

import pytest

from autograder.grading.report import csv_text, exercises, histogram_svg, number, summary_html
from autograder.grading.results import CellScore, StudentResult, zero_cells
from tests.spreadsheet import FORGING_NAMES, FORMULA_NOTEBOOKS, checked


def result(student, status="graded", scores=(2, 1), detail="", ran=True) -> StudentResult:
    cells = [CellScore("tiny.ipynb", "double-tests", scores[0], 2,
                       error="" if scores[0] == 2 else "AssertionError: x"),
             CellScore("tiny.ipynb", "square-tests", scores[1], 1)]
    return StudentResult(student, "tiny", status, detail, cells, ran=ran)


def test_numbers_are_written_as_people_write_them():
    assert [number(x) for x in (10.0, 7.5, 0.25, 0, 1 / 3)] == ["10", "7.5", "0.25", "0", "0.33"]


def test_grades_csv_has_the_header_one_sorted_row_per_student_and_one_line_details():
    text = csv_text([result("bob", detail="line one\nline two, with a comma"), result("ada")])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["student", "assignment", "score", "max_score", "late_penalty", "status", "detail",
                       "flags"]
    assert [r[0] for r in rows[1:]] == ["ada", "bob"]
    assert rows[2] == ["bob", "tiny", "3", "3", "0", "graded", "line one line two, with a comma", ""]


def test_grades_csv_gives_the_score_after_the_late_penalty_and_the_penalty_apart():
    late = result("cy")
    late.late_penalties = {"tiny.ipynb": 1.0}
    very_late = result("dee", scores=(0, 1))
    very_late.late_penalties = {"tiny.ipynb": 5.0}
    rows = {r[0]: r for r in csv.reader(io.StringIO(csv_text([late, very_late])))}
    assert rows["cy"][2:5] == ["2", "3", "1"]
    assert rows["dee"][2:5] == ["0", "3", "5"]  # never below zero, as `nbgrader export`


@pytest.mark.parametrize("notebook", FORMULA_NOTEBOOKS)
def test_a_notebook_named_like_a_formula_is_text_in_grades_csv(notebook):
    """A student names the file; its name comes back in the detail and the flags, and as the student's id."""
    named = result(notebook, status="invalid", detail=f"{notebook}: not valid JSON", ran=False)
    named.flags = [f"{notebook} sets a tracing hook"]
    header, *body = checked(csv_text([result("ada"), named]))
    (row,) = [r for r in body if r[0] != "ada"]
    assert len(row) == len(header) == 8
    bare = " ".join(notebook.split())
    assert row[0] == "'" + notebook.replace("\r", " ")
    assert row[5:] == ["invalid", f"'{bare}: not valid JSON", f"'{bare} sets a tracing hook"]
    assert row[2:5] == [3.0, 3.0, 0.0], "the scores stay numbers"


@pytest.mark.parametrize("name", FORGING_NAMES)
def test_a_name_with_commas_quotes_or_line_breaks_adds_no_column_to_grades_csv(name):
    _, row = checked(csv_text([result(name, detail=name)]))
    assert row[0] == " ".join(name.splitlines()) and row[2] == 3.0


def test_fractional_scores_stay_bare_numbers_in_grades_csv():
    late = result("cy", scores=(1, 0))
    late.late_penalties = {"tiny.ipynb": 0.5}
    line = csv_text([late]).splitlines()[1]
    assert line.startswith('"cy","tiny",0.5,3,0.5,"graded"'), line


def test_flags_are_one_cell_of_grades_csv_and_flagged_students_lead_the_summary():
    flagged = result("zed")
    flagged.flags = ["answer cell 'double' installs an IPython input transformer",
                     "cell 4 sets a\ntracing hook"]
    rows = list(csv.reader(io.StringIO(csv_text([result("ada"), flagged]))))
    assert rows[2][
        -1] == "answer cell 'double' installs an IPython input transformer; cell 4 sets a tracing hook"
    assert rows[1][-1] == ""
    page = summary_html("tiny", [result("ada"), flagged], "none", Path("/nonexistent"))
    body = page.split("<h2>Students</h2>")[1]
    assert body.index("zed") < body.index("ada") and "1 flagged" in body
    assert "installs an IPython input transformer</li>" in body
    assert "No submission tried" in summary_html("tiny", [result("ada")], "none", Path("/nonexistent"))


def test_pass_rates_count_only_students_whose_notebook_ran():
    missing = StudentResult("cy", "tiny", "missing", cells=zero_cells({("tiny.ipynb", "double-tests"): 2,
                                                                         ("tiny.ipynb", "square-tests"): 1}))
    found = exercises([result("ada"), result("bob", scores=(0, 1)), missing])
    double = next(e for e in found if e.grade_id == "double-tests")
    assert (double.passed, double.attempted, double.rate) == (1, 2, 0.5)
    assert double.common_error == "AssertionError: x"


def test_the_histogram_has_one_bar_per_point_for_small_integer_scores():
    svg = histogram_svg([0, 3, 3, 1], 3)
    assert svg.count("<rect") == 4 and "2 students" in svg


def test_the_summary_page_escapes_what_students_wrote():
    page = summary_html("tiny", [result("<script>", detail="<b>x</b>")], "none", Path("/nonexistent"))
    assert "<script>" not in page.split("<body>")[1] and "&lt;b&gt;" in page


def test_the_not_graded_page_says_why_escapes_the_detail_and_forbids_scripts():
    from autograder.grading.report import not_graded_page
    from autograder.safe_html import STATIC_PAGE_CSP

    page = not_graded_page("ps01", "ps01", 10, "invalid",
                           "ps01.ipynb: not a notebook <script>alert(1)</script>")
    assert "(Score: 0.0 / 10)" in page and "could not be graded: <b>invalid</b>" in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert STATIC_PAGE_CSP in html.unescape(page)  # the attribute, as a browser reads it


def test_the_class_index_shows_each_assignment_and_the_students_to_look_at(tmp_path):
    """graded/index.html: one page over every assignment graded, with its histogram, pass rates, the students
    to look at (not graded, flagged, under half) first, each linked to its summary; what students wrote is
    text; a folder without results, or an unreadable result, is left out."""
    from autograder.grading.report import needs_attention, write_class_index, write_reports

    flagged = result("fay")
    flagged.flags = ["cell 4 sets a tracing hook"]
    classes = {"ps01": [result("ada"), result("bob", scores=(0, 1)), result("<img src=x>", "timeout",
                                                                             detail="ran past 300 s"),
                        flagged],
               "ps 02": [result("ada"), result("bob")]}
    for name, results in classes.items():
        write_reports(tmp_path / name, name, results, "bwrap")
        for r in results:
            (tmp_path / name / "results").mkdir(exist_ok=True)
            (tmp_path / name / "results" / f"{len(r.student)}-{r.student[:3]}.json").write_text(r.to_json())
    (tmp_path / "ps 02" / "results" / "broken.json").write_text("{not json")
    (tmp_path / "course").mkdir()  # the demo's scratch course: not an assignment
    index = write_class_index(tmp_path, "Next: hand out the feedback.")
    page = index.read_text(encoding="utf-8")
    assert 'href="ps01/summary.html"' in page and 'href="ps%2002/summary.html"' in page
    assert page.count("<svg") == 2 and "Next: hand out the feedback." in page
    assert "<img src=x>" not in page and "&lt;img src=x&gt;" in page
    attention = [(a.student, a.why) for a in needs_attention(classes["ps01"])]
    assert attention == [("<img src=x>", "timeout: ran past 300 s"),
                         ("fay", "flagged: cell 4 sets a tracing hook"), ("bob", "under half the points")]
    ps02 = page.split('href="ps%2002/summary.html"')[1]
    assert "Nobody:" in ps02 and "course" not in page.split("<h2>")[-1]
    assert write_class_index(tmp_path / "nothing", "x") is None
