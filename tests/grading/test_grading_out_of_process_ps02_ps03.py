"""ps02 and ps03 graded by the real grader against the trick families that beat in-process grading (issue 61).

Each trick of tests/grading/test_grading_out_of_process_ps01.py is appended to an unsolved answer (every
answer stays unsolved), so every point it earns is earned by tampering. Before the cells whose verdict is a
value under a fake moved out of process (ps02's `to-is-noop-tests` on a faked machine with tensors that report
GPUs, ps03's `check-same-device-tests-errors` with tensors that report GPUs), they ran guarded and the
socket-object filter (unflagged), the ctypes code swap and the guard reached through gc earned them; now no
trick earns a point of any out-of-process cell. The cells that must be observed inside the student's process
stay guarded (docs/security.md's table says why), and what a trick earns there is the guarded path's round to
win or flag, not this test's. The solved notebooks keep full marks, unflagged.
"""

import nbformat
import pytest
from nbgrader import utils

from autograder import COURSE_ROOT
from autograder.cells import grade_id
from autograder.grading.remote_calls import Plan, run_test
from tests.exercises import test_ps02_moving_tensors, test_ps03_device_mismatch
from tests.grading.test_grading_out_of_process_course import OUT_OF_PROCESS, students_namespace
from tests.grading.test_grading_out_of_process_ps01 import TRICKS, grade_with_tricks
from tests.grading.test_grading_out_of_process_units import answer

pytestmark = pytest.mark.notebook

# assignment -> the unsolved answer each trick is appended to
ANSWER = {"ps02-moving-tensors": "to-is-noop", "ps03-device-mismatch": "check-same-device"}
MOVED = {"ps02-moving-tensors": {"to-is-noop-tests"},
         "ps03-device-mismatch": {"check-same-device-tests-errors"}}


# each mistake of the assignments' own tests that a moved cell catches: (exercise, answer, cell, notebook)
MOVED_MISTAKES = [pytest.param(*case.values, module.NOTEBOOK, id=case.id)
                  for module in (test_ps02_moving_tensors, test_ps03_device_mismatch)
                  for case in module.MISTAKE_CASES
                  if case.values[2] in MOVED[module.NOTEBOOK.parent.name]]


def full_marks(assignment: str) -> float:
    nb = nbformat.read(COURSE_ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    return sum(float(c.metadata.nbgrader.get("points", 0)) for c in nb.cells if utils.is_grade(c))


def test_the_moved_cells_run_out_of_process():
    for assignment, cells in MOVED.items():
        assert cells <= OUT_OF_PROCESS[assignment]
        nb = nbformat.read(COURSE_ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
        assert cells <= {grade_id(c) for c in nb.cells if utils.is_grade(c)}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("exercise", "source", "cell", "path"), MOVED_MISTAKES)
def test_a_moved_cell_fails_each_mistake_it_catches_out_of_process(exercise, source, cell, path):
    space = students_namespace(path, {exercise: source})

    def call(name: str, payload: bytes) -> str:
        return answer(space, name, payload)

    plan = Plan.read(path)
    run = run_test(plan.tests[cell], plan.namespace(), call, cell)
    assert run.status == "error" and run.outputs[-1]["ename"] == "AssertionError", run.outputs


@pytest.mark.parametrize("assignment", sorted(ANSWER))
@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_no_trick_earns_a_point_of_an_out_of_process_cell(tmp_path_factory, assignment, trick):
    table, cells = grade_with_tricks(tmp_path_factory, assignment, ANSWER[assignment])
    assert table[trick]["status"] == "graded", table[trick]
    out_of_process = OUT_OF_PROCESS[assignment]
    earned = {gid: score for gid, score in cells[trick].items() if gid in out_of_process and score}
    assert earned == {}, (table[trick], cells[trick])


@pytest.mark.parametrize("assignment", sorted(ANSWER))
def test_the_solved_notebook_keeps_full_marks_unflagged(tmp_path_factory, assignment):
    table, _ = grade_with_tricks(tmp_path_factory, assignment, ANSWER[assignment])
    row = table["honest-solved"]
    assert (row["status"], float(row["score"]), row["flags"]) == ("graded", full_marks(assignment), ""), row
