"""ps01 graded by the real grader against the trick families that beat in-process grading (issue 61).

Each trick is appended to an unsolved `describe` (and `pick_device` stays unsolved), so every point it earns
is earned by tampering: filtering the kernel's transport on the socket objects (not flagged in-process), code
swapped through `ctypes` while the audit hook is installed (flagged, not undone), the guard found through the
garbage collector with its findings erased, and the rest of the families
tests/grading/test_grading_out_of_process.py grades on a tiny assignment. Before ps01's cells whose verdict is
a value under a fake ran out of process, the first three earned 7 of the 10 points (the guarded
`describe-tests-edge`, `describe-tests-meta` and `pick-device-*`); now every test cell of ps01 runs out of
process and each trick earns nothing. The solved notebook keeps its 10 points, unflagged.
"""

import csv
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbgrader import utils

from autograder import COURSE_ROOT
from autograder.cells import grade_id
from autograder.course import with_venv_on_path
from autograder.grading.demo import solved
from tests.grading.test_grading_out_of_process import GUARD_ERASED, SOCKET_FILTER
from tests.grading.test_grading_tamper_round2 import (
    CHANNEL_FORGE,
    CTYPES_CODE_SWAP,
    GUARD_GC,
    TRANSFORMER,
    ZMQ_PATCH,
)
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook

ASSIGNMENT = "ps01-tensors-and-devices"
TRICKS = {
    "socket-object-filter": SOCKET_FILTER,
    "ctypes-code-swap": CTYPES_CODE_SWAP,
    "guard-gc-erased": GUARD_ERASED,
    "guard-gc": GUARD_GC,
    "zmq-class-patch": ZMQ_PATCH,
    "channel-forge": CHANNEL_FORGE,
    "patched-ipython": TRANSFORMER,
}


def notebooks(assignment: str = ASSIGNMENT, answer_id: str = "describe") -> dict[str, nbformat.NotebookNode]:
    """Return student -> notebook: the solved one, and each trick appended to the unsolved answer `answer_id`
    (every answer left unsolved)."""
    name = f"{assignment}.ipynb"
    release = nbformat.read(COURSE_ROOT / "release" / assignment / name, as_version=4)
    source = nbformat.read(COURSE_ROOT / "source" / assignment / name, as_version=4)
    students = {"honest-solved": solved(release, source)}
    for trick, code in TRICKS.items():
        nb = nbformat.from_dict(json.loads(nbformat.writes(release)))
        answer = next(c for c in nb.cells if utils.is_solution(c) and grade_id(c) == answer_id)
        answer.source += "\n\n" + code
        students[trick] = nb
    return students


def cell_scores(course: Path, assignment: str = ASSIGNMENT) -> dict[str, dict[str, float]]:
    """Return student -> grade_id -> auto score, from the course gradebook."""
    from nbgrader.api import Gradebook

    from autograder.course import course_directory

    directory = course_directory(course)
    scores: dict[str, dict[str, float]] = {}
    with Gradebook(directory.db_url, directory.course_id) as gb:
        for student in gb.students:
            submission = gb.find_submission(assignment, student.id)
            scores[student.id] = {g.name: float(g.auto_score or 0) for nb in submission.notebooks
                                  for g in nb.grades}
    return scores


def grade_class_once(tmp_path_factory, name: str, assignment: str, students: Callable[[], dict],
                     *options: str) -> tuple[dict, dict]:
    """Grade the class `students()` (student -> notebook) of `assignment` once per test run with `--jobs 2`
    and `options`; return (student -> grades.csv row, cell_scores)."""
    notebook = f"{assignment}.ipynb"

    def grade_the_class(course: Path) -> dict:
        shutil.copyfile(COURSE_ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
        shutil.copytree(COURSE_ROOT / "source" / assignment, course / "source" / assignment)
        for student, nb in students().items():
            (course / "incoming" / student).mkdir(parents=True)
            nbformat.write(nb, course / "incoming" / student / notebook)
        cmd = [sys.executable, "-m", "autograder", "grade", assignment, str(course / "incoming"), "--course",
               str(course), "--jobs", "2", "--quiet", *options]
        done = subprocess.run(cmd, cwd=COURSE_ROOT, env=with_venv_on_path(), capture_output=True, text=True,
                              timeout=900, check=False)
        if done.returncode != 0:
            return {"returncode": done.returncode, "stderr": done.stderr[-3000:]}
        with (course / "graded" / assignment / "grades.csv").open(encoding="utf-8") as handle:
            table = {r["student"]: r for r in csv.DictReader(handle)}
        return {"returncode": 0, "rows": table, "cells": cell_scores(course, assignment)}

    _, record = once_per_run(tmp_path_factory, name, grade_the_class)
    assert record["returncode"] == 0, record["stderr"]
    return record["rows"], record["cells"]


def grade_with_tricks(tmp_path_factory, assignment: str = ASSIGNMENT, answer_id: str = "describe") -> tuple:
    """Grade the class of `notebooks(assignment, answer_id)` once per test run with `--sandbox bwrap`, as
    issue 61's bank was graded; return (student -> grades.csv row, cell_scores)."""
    return grade_class_once(tmp_path_factory, f"out-of-process-{assignment}", assignment,
                            lambda: notebooks(assignment, answer_id), "--timeout", "120", "--memory", "3000",
                            "--sandbox", "bwrap")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_with_tricks(tmp_path_factory)


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_no_trick_earns_a_point_of_ps01(graded, trick):
    table, cells = graded
    assert table[trick]["status"] == "graded", table[trick]
    assert {gid: score for gid, score in cells[trick].items() if score} == {}, (table[trick], cells[trick])


def test_the_solved_notebook_keeps_full_marks_unflagged(graded):
    table, _ = graded
    row = table["honest-solved"]
    assert (row["status"], float(row["score"]), row["flags"]) == ("graded", 10.0, ""), row
