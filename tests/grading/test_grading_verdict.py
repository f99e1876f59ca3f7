"""Our verdict on test cells (autograder/grading/verdict.py), instead of nbgrader's reading of their outputs.

nbgrader gives full credit to a test cell whose first `execute_result` is not a number, even when an error
follows, and 0 to one that wrote to stderr. Here: the rules on hand-made cells, then one grading run where
students make a failing test display something first (they earn nothing for it) and honest students whose
code warns, prints to stderr or displays (full marks, no word of a failure), including a correct ps01 whose
functions issue a UserWarning in every test cell (0/10 under nbgrader's rule).
"""

import csv
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_output

from autograder import COURSE_ROOT
from autograder.grading.demo import solved
from autograder.grading.template import CACHE_FOLDER, cached_template
from autograder.grading.verdict import SaveVerdicts, ends_in_expression
from autograder.grading.verdict import score_test_cell as verdict
from autograder.grading.worker import GraderExecute
from tests.factories import graded_cell_meta
from tests.grade_commands import in_one_python
from tests.grading.test_grading_end_to_end import ROOMY, make_course, rows, write_class
from tests.grading.test_grading_tamper import flags_of, tampered
from tests.grading.test_grading_worker import make_worker
from tests.once_per_run import once_per_run

ASSERTING = "assert double(2) == 4"


def cell(source: str = ASSERTING, points: float = 2, *outputs) -> nbformat.NotebookNode:
    """Return a graded test cell with the given outputs."""
    return new_code_cell(source, metadata=graded_cell_meta("double-tests", points), outputs=list(outputs))


def result(text: str):
    return new_output("execute_result", data={"text/plain": text}, execution_count=1)


ERROR = new_output("error", ename="AssertionError", evalue="", traceback=[])
WARNING = new_output("stream", name="stderr", text="UserWarning: deprecated\n")
DISPLAY = new_output("display_data", data={"text/plain": "<IPython.core.display.HTML object>"})


# --- the rules ---------------------------------------------------------------------------------------------

def test_a_test_cell_that_ran_to_the_end_passes_whatever_it_printed_warned_or_displayed():
    assert verdict(cell(ASSERTING, 2, WARNING, DISPLAY, result("'done'")), "ok") == 2
    stdout = new_output("stream", name="stdout", text="hi\n")
    assert verdict(cell(ASSERTING, 2, stdout), "ok") == 2


def test_a_result_displayed_before_the_error_earns_nothing():
    assert verdict(cell(ASSERTING, 2, result("'ok'"), ERROR), "error") == 0
    assert verdict(cell(ASSERTING, 2, DISPLAY, ERROR), "error") == 0


def test_a_cell_without_an_ok_reply_or_with_an_error_output_earns_nothing():
    assert verdict(cell(ASSERTING, 2), None) == 0  # never ran (skipped, out of time)
    assert verdict(cell(ASSERTING, 2), "error") == 0  # an error reply, whatever the outputs
    assert verdict(cell(ASSERTING, 2, ERROR), "ok") == 0  # an error output, whatever the reply


def test_partial_credit_only_where_the_instructors_cell_ends_in_an_expression():
    partial = "score = 0.5 * passed\nscore"
    assert ends_in_expression(partial) and ends_in_expression("%time x = 1\nx")
    assert not ends_in_expression(ASSERTING) and not ends_in_expression("score;")
    assert verdict(cell(partial, 2, result("1.5")), "ok") == 1.5
    assert verdict(cell(partial, 2, result("'not a number'")), "ok") == 2  # as nbgrader
    assert verdict(cell(partial, 2), "ok") == 2  # no result: as nbgrader
    assert verdict(cell(partial, 2, result("2"), result("0.5")), "ok") == 0.5  # the lowest
    assert verdict(cell(partial, 2, result("7")), "ok") == 0  # more than its points
    assert verdict(cell(ASSERTING, 2, result("0.5")), "ok") == 2  # a number it was not written for


def test_the_worker_scores_with_our_verdict_and_our_execute(tmp_path):
    from nbgrader.preprocessors import Execute, SaveAutoGrades

    from autograder.grading.attempt import Job

    worker = make_worker(tmp_path)
    config = worker.config(Job(0, "ada", {}), tmp_path / "scratch")
    chain = config.Autograde.autograde_preprocessors
    assert SaveVerdicts in chain and GraderExecute in chain
    assert SaveAutoGrades not in chain and Execute not in chain


# --- graded: tricks that display first, honest code that warns -------------------------------------------

# student -> code appended to the (unsolved) first answer: `double` displays something, then the test fails
DISPLAY_FIRST = {
    "displayhook-result": "def double(x):\n    import sys\n    sys.displayhook('all good')\n    return 0",
    "shell-displayhook-html": ("def double(x):\n    from IPython.display import HTML\n"
                               "    get_ipython().displayhook(HTML('<b>passed</b>'))\n    return 0"),
    "iopub-execute-result": ("def double(x):\n    k = get_ipython().kernel\n"
                             "    k.session.send(k.iopub_socket, 'execute_result', "
                             "{'data': {'text/plain': 'ok'}, 'metadata': {}, 'execution_count': 1}, "
                             "parent=k.get_parent())\n    return 0"),
    "display-in-answer": ("def double(x):\n    from IPython.display import Markdown, display\n"
                          "    display(Markdown('**passed**'))\n    return 0"),
}
# The answer sends the kernel's success reply and idle status itself, before the test fails: the grader takes
# the first reply it gets, and stops reading the cell's outputs (the error) at the first idle status.
FORGED_SUCCESS = ("def double(x):\n    k = get_ipython().kernel\n    parent = k.get_parent()\n"
                  "    k.session.send(k.shell_stream, 'execute_reply', {'status': 'ok', "
                  "'execution_count': 1, 'user_expressions': {}, 'payload': []}, parent=parent, "
                  "ident=k._parent_ident['shell'])\n"
                  "    k.session.send(k.iopub_socket, 'status', {'execution_state': 'idle'}, parent=parent, "
                  "ident=k._topic('status'))\n    import time\n    time.sleep(0.5)\n    return 0")
# student -> code appended to the solved first answer: honest code that warns, writes to stderr or displays
HONEST = {
    "warns": ("import warnings\n_double = double\n\ndef double(x):\n"
              "    warnings.warn('double will move to another module', UserWarning)\n    return _double(x)"),
    "stderr-in-tests": ("import sys\n_double = double\n\ndef double(x):\n"
                        "    print('called', file=sys.stderr)\n    return _double(x)"),
    "displays": ("from IPython.display import display\n_double = double\n\ndef double(x):\n"
                 "    display({'x': x})\n    return _double(x)"),
}
PS01 = "ps01-tensors-and-devices"
# A correct ps01 whose functions warn on every call (each message differs, so Python shows each one).
WARNING_PS01 = {
    "describe": "import warnings\n_describe = describe\n\ndef describe(t):\n"
                "    warnings.warn(f'describe{tuple(t.shape)}: results will be a dataclass', UserWarning)\n"
                "    return _describe(t)",
    "pick-device": "import warnings\n_pick = pick_device\n\ndef pick_device(prefer=None):\n"
                   "    warnings.warn(f'pick_device({prefer!r}): the order may change', UserWarning)\n"
                   "    return _pick(prefer)",
}


def warning_ps01(course: Path) -> nbformat.NotebookNode:
    """Return ps01 solved, with every answer wrapped so that it issues a UserWarning when called."""
    # the template the grader makes, in the cache its run looks in
    generated, _ = cached_template(course, PS01, course / "graded" / PS01 / CACHE_FOLDER,
                                   course.parent / "generated-ps01")
    name = f"{PS01}.ipynb"
    nb = solved(nbformat.read(generated / "release" / PS01 / name, as_version=4),
                nbformat.read(course / "source" / PS01 / name, as_version=4))
    for cell in nb.cells:
        extra = WARNING_PS01.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
        if extra and cell.metadata["nbgrader"].get("solution"):
            cell.source += "\n\n" + extra
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the tiny class and the warning ps01 (once per test run, even across xdist workers)."""

    def grade_both(course: Path) -> dict:
        make_course(course)
        students = {name: ({"tiny.ipynb": tampered(code)},) for name, code in DISPLAY_FIRST.items()}
        students["forged-success"] = ({"tiny.ipynb": tampered(FORGED_SUCCESS)},)
        students.update({name: ({"tiny.ipynb": tampered(code, True)},) for name, code in HONEST.items()})
        write_class(course / "incoming", students, course)
        shutil.copytree(COURSE_ROOT / "source" / PS01, course / "source" / PS01)
        (course / "ps01" / "warns").mkdir(parents=True)
        nbformat.write(warning_ps01(course), course / "ps01" / "warns" / f"{PS01}.ipynb")
        # both classes graded one after the other in one Python (tests/grade_commands.py)
        tiny, ps01 = in_one_python(
            course, ["grade", "tiny", str(course / "incoming"), "--course", str(course), "--jobs", "2",
                     "--timeout", str(ROOMY), "--memory", "3000", "--quiet"],
            ["grade", PS01, str(course / "ps01"), "--course", str(course), "--jobs", "1", "--timeout", "240",
             "--quiet"])
        return {"tiny": [tiny[0], tiny[1][-3000:]], "ps01": [ps01[0], ps01[1][-3000:]]}

    course, record = once_per_run(tmp_path_factory, "verdict-class", grade_both)
    assert record["tiny"][0] == 0, record["tiny"][1]
    assert record["ps01"][0] == 0, record["ps01"][1]
    return course, rows(course)


@pytest.mark.notebook
@pytest.mark.parametrize("student", sorted(DISPLAY_FIRST))
def test_displaying_something_before_a_failing_test_earns_nothing(graded, student):
    _, table = graded
    assert (table[student]["status"], float(table[student]["score"])) == ("graded", 0.0), table[student]
    assert "failed 2 of 2 tests" in table[student]["detail"]


@pytest.mark.notebook
def test_a_success_reply_sent_by_the_answer_itself_earns_nothing_and_is_flagged(graded):
    _, table = graded
    row = table["forged-success"]
    assert (row["status"], float(row["score"])) == ("graded", 0.0), row
    assert any("sent the grader a reply of its own" in f for f in flags_of(row)), row


@pytest.mark.notebook
@pytest.mark.parametrize("student", sorted(HONEST))
def test_code_that_warns_writes_to_stderr_or_displays_keeps_full_marks(graded, student):
    _, table = graded
    row = table[student]
    assert (row["status"], float(row["score"]), row["detail"], flags_of(row)) == ("graded", 3.0, "", []), row


@pytest.mark.notebook
def test_a_correct_ps01_that_warns_in_every_test_gets_full_marks_and_no_word_of_failure(graded):
    course, _ = graded
    with (course / "graded" / PS01 / "grades.csv").open(encoding="utf-8") as handle:
        row = next(csv.DictReader(handle))
    assert (row["status"], float(row["score"]), float(row["max_score"])) == ("graded", 10.0, 10.0), row
    assert "failed" not in row["detail"] and "Warning" not in row["detail"] and row["flags"] == "", row
    page = (course / "graded" / PS01 / "feedback" / "warns" / f"{PS01}.html").read_text(encoding="utf-8")
    assert "(Score: 10.0 / 10.0)" in page
