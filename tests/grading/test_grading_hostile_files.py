"""One bad notebook is one student's problem: strange files get a clear status, the rest of the class is
graded.

Hole 6 of issue 24 (the grader's side): a deeply nested JSON notebook raised RecursionError and failed the
whole batch. One `grade` run takes two honest students and one of each bad file; every honest one gets full
marks and feedback, every bad one `invalid` with a detail that says why, and the run exits 0.
"""

import json
import os
import re

import nbformat
import pytest

from autograder.grading.submissions import MAX_CELLS, MAX_NESTING, MAX_NOTEBOOK_BYTES, read_notebook_json
from tests.grading.test_grading_end_to_end import ROOMY, assignment, grade, make_course, rows, write_class
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook

HEAD = '{"nbformat": 4, "nbformat_minor": 5, '


def nested(depth: int) -> str:
    """Return JSON text of objects nested `depth` deep."""
    return '{"a": ' * depth + "1" + "}" * depth


def huge_notebook(mib: int) -> str:
    nb = assignment()
    nb.cells.append(nbformat.v4.new_markdown_cell("x" * (mib * 2**20)))
    return nbformat.writes(nb)


# student -> (the bytes of their tiny.ipynb, pattern the detail must match)
BAD = {
    "deep": (HEAD + '"metadata": ' + nested(100_000) + ', "cells": []}', r"tiny.ipynb: nested too deeply"),
    "deep-cells": (HEAD + '"metadata": {}, "cells": ' + "[" * 100_000 + "]" * 100_000 + "}",
                   r"tiny.ipynb: nested too deeply"),
    "huge": (huge_notebook(50), r"tiny.ipynb: too large \(50 MiB; the limit is 32 MiB\)"),
    "million-cells": (HEAD + '"metadata": {}, "cells": [' + ",".join(["{}"] * 1_000_000) + "]}",
                      r"tiny.ipynb: too many cells \(1,000,000; the limit is 10,000\)"),
    "garbage": (os.urandom(8192), r"tiny.ipynb: not a notebook \(not UTF-8 text\)"),
    "deep-metadata": (HEAD + '"metadata": {"widgets": ' + nested(900) + '}, "cells": []}',
                      r"tiny.ipynb: nested too deeply"),
    "odd-worksheets": ('{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": 5}]}',
                       r"tiny.ipynb: not a valid notebook"),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade two honest students and every bad file in one run; return (course, record)."""

    def grade_it(course):
        make_course(course)
        write_class(course / "incoming", {"honest-1": ({"tiny.ipynb": assignment()},),
                                          "honest-2": ({"tiny.ipynb": assignment()},)}, course)
        for student, (content, _) in BAD.items():
            (course / "incoming" / student).mkdir()
            path = course / "incoming" / student / "tiny.ipynb"
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        done = grade(course, course / "incoming", "--timeout", str(ROOMY))
        return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-5000:]}

    return once_per_run(tmp_path_factory, "grading-hostile-files", grade_it)


def test_the_run_exits_0_and_every_honest_student_gets_full_marks_and_feedback(graded):
    course, record = graded
    assert record["returncode"] == 0, record["stderr"]
    table = rows(course)
    assert set(table) == {"honest-1", "honest-2", *BAD}
    for student in ("honest-1", "honest-2"):
        assert (table[student]["status"], float(table[student]["score"])) == ("graded", 3), table[student]
        assert (course / "graded" / "tiny" / "feedback" / student / "tiny.html").is_file()


@pytest.mark.parametrize("student", sorted(BAD))
def test_each_bad_file_is_invalid_with_a_reason(graded, student):
    course, _ = graded
    row = rows(course)[student]
    assert (row["status"], float(row["score"])) == ("invalid", 0), row
    assert re.search(BAD[student][1], row["detail"]), row["detail"]


def test_the_reader_caps_size_cells_and_nesting_before_anything_else_reads_the_notebook(tmp_path):
    assert (MAX_NOTEBOOK_BYTES, MAX_CELLS, MAX_NESTING) == (32 * 2**20, 10_000, 100)
    path = tmp_path / "n.ipynb"
    path.write_text(HEAD + '"metadata": ' + nested(MAX_NESTING - 2) + ', "cells": []}')
    assert read_notebook_json(path)[1] == ""
    path.write_text(HEAD + '"metadata": ' + nested(MAX_NESTING + 1) + ', "cells": []}')
    assert read_notebook_json(path) == (None, "nested too deeply (more than 100 levels)")
    os.mkfifo(tmp_path / "fifo.ipynb")
    assert read_notebook_json(tmp_path / "fifo.ipynb") == (None, "not a regular file")
    (tmp_path / "link.ipynb").symlink_to(path)
    assert read_notebook_json(tmp_path / "link.ipynb") == (None, "not a regular file")
    assert json.loads(nested(3)) == {"a": {"a": {"a": 1}}}


def test_a_student_who_cannot_be_installed_is_invalid_and_the_next_student_is_recorded(tmp_path, monkeypatch):
    from autograder.grading import session
    from autograder.grading.results import CellScore, StudentResult
    from autograder.grading.sandbox import Isolation
    from autograder.grading.submissions import Submission

    course = make_course(tmp_path)
    prepared = session.Assignment(tmp_path / "template", {"tiny.ipynb": {"double-tests"}},
                                  {("tiny.ipynb", "double-tests"): 2.0})
    announced = []
    run = session.ClassRun(course, "tiny", course / "incoming", course / "graded" / "tiny", tmp_path / "run",
                           prepared, Isolation("none"), session.GradeOptions(jobs=1, timeout=10), print,
                           lambda result: announced.append((result.student, result.status)))
    recorded = []
    monkeypatch.setattr(session.gbook, "record", lambda db, c, a, result: recorded.append((result.student,
                                                                                          result.status)))

    def install(root, assignment, student, scratch, keep_submitted):
        if student == "bad":
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(session.gbook, "install", install)
    for name in ("bad", "good"):
        run.prints[name] = "print"
        run.finish(Submission(name, tmp_path / name), StudentResult(
            name, "tiny", "graded", cells=[CellScore("tiny.ipynb", "double-tests", 2, 2)], ran=True),
                   tmp_path)
    assert run.results["bad"].status == "invalid" and "No space left on device" in run.results["bad"].detail
    assert run.results["bad"].score == 0 and run.results["good"].status == "graded"
    assert recorded == [("bad", "graded"), ("bad", "invalid"), ("good", "graded")]
    assert announced == [("bad", "invalid"), ("good", "graded")]  # each once, after they are recorded
