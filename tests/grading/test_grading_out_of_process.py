"""Out-of-process test cells (issue 53): a verdict computed where student code cannot reach.

One class of students hands in an assignment whose tests of `double` and `ones` are tagged `out-of-process`
(the grader runs them and calls the student's functions in the kernel with plain data across) and whose test
of `square` is not (it runs in the kernel, under the guard). Each trick below comes with unsolved or wrong
answers: on the out-of-process cells it must earn exactly what the same answers earn without it (nothing),
whatever it does in the student's process: the kernel's message transport filtered (at the class and at the
socket object), the guard reached through the garbage collector and erased, code swapped through ctypes
while the audit hook is installed, answers that lie, stand-ins for torch, builtins or IPython. The same
tricks against the in-process `square` test show what the guard still does there
(tests/grading/test_grading_tamper* hold its promises).
"""

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder import COURSE_ROOT
from tests.factories import graded_cell_meta, solution_cell_meta
from tests.grading.test_grading_end_to_end import grade, rows, write_class
from tests.grading.test_grading_tamper_round2 import (
    CHANNEL_FORGE,
    CTYPES_CODE_SWAP,
    GUARD_GC,
    LIAR,
    PATCHED_EQUAL,
    STAND_IN_TORCH,
    TRANSFORMER,
    ZMQ_PATCH,
)
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook

UNSOLVED = "raise NotImplementedError()"
OUTSIDE = {"double-tests": 2.0, "ones-tests": 1.0}  # the out-of-process cells and their points
INSIDE = {"square-tests": 1.0}
DOUBLE_TESTS = ("assert double(2) == 4, 'double(2) should be 4'\n### BEGIN HIDDEN TESTS\n"
                "assert double(-3) == -6, 'negative numbers too'\n"
                "assert double(torch.ones(2)).tolist() == [2.0, 2.0], 'tensors too'\n### END HIDDEN TESTS")
ONES_TESTS = ("t = ones(3)\nassert isinstance(t, torch.Tensor), 'ones should return a tensor'\n"
              "assert len(t) == 3, 'three of them'\nassert all(x == 1 for x in t.tolist()), 'all ones'\n"
              "### BEGIN HIDDEN TESTS\nassert torch.equal(t, torch.ones(3)), 'exactly torch.ones(3)'\n"
              "### END HIDDEN TESTS")


def tagged(grade_id: str, points: float) -> dict:
    """Return a test cell's metadata, tagged to run out of process."""
    return graded_cell_meta(grade_id, points) | {"tags": ["out-of-process"]}


def assignment(double: str = UNSOLVED, ones: str = UNSOLVED, square: str = UNSOLVED) -> nbformat.NotebookNode:
    """Return the assignment: locked imports, `double` (2 points) and `ones` (1) tested out of process,
    `square` (1) tested in the kernel."""
    v4 = nbformat.v4
    nb = v4.new_notebook()
    imports = {"nbgrader": {"grade": False, "grade_id": "imports", "locked": True, "schema_version": 3,
                            "solution": False, "task": False}}

    def answer(name: str, body: str) -> nbformat.NotebookNode:
        return v4.new_code_cell(f'def {name}(x):\n    """The answer."""\n    ### BEGIN SOLUTION\n    {body}\n'
                                "    ### END SOLUTION", metadata=solution_cell_meta(name))

    nb.cells = [
        v4.new_markdown_cell("# Tiny"),
        v4.new_code_cell("import torch", metadata=imports),
        answer("double", double), v4.new_code_cell(DOUBLE_TESTS, metadata=tagged("double-tests", 2)),
        answer("ones", ones), v4.new_code_cell(ONES_TESTS, metadata=tagged("ones-tests", 1)),
        answer("square", square),
        v4.new_code_cell("assert square(3) == 9, 'square(3) should be 9'",
                         metadata=graded_cell_meta("square-tests")),
    ]
    return nb


def solved() -> nbformat.NotebookNode:
    """Return the assignment with every answer right."""
    return assignment("return 2 * x", "return torch.ones(x)", "return x * x")


def appended(code: str, nb: nbformat.NotebookNode | None = None) -> nbformat.NotebookNode:
    """Return the (unsolved) assignment with `code` appended to its first answer cell."""
    nb = nb or assignment()
    nb.cells[2].source += "\n\n" + code
    return nb


# The kernel's transport filtered on the socket objects themselves (not their class): every reply says "ok",
# every error message is dropped.
SOCKET_FILTER = ("import json\n_k = get_ipython().kernel\n_session = _k.session\n\n"
                 "def _lie(parts):\n    parts = [p if isinstance(p, bytes) else bytes(p) for p in parts]\n"
                 "    if b'<IDS|MSG>' not in parts:\n        return parts\n"
                 "    i = parts.index(b'<IDS|MSG>')\n    header = json.loads(parts[i + 2])\n"
                 "    if header.get('msg_type') == 'error':\n        return None\n"
                 "    if header.get('msg_type') == 'execute_reply':\n"
                 "        content = json.loads(parts[i + 5])\n        content['status'] = 'ok'\n"
                 "        content.setdefault('user_expressions', {})\n"
                 "        parts[i + 5] = json.dumps(content).encode()\n"
                 "        sig = _session.sign(parts[i + 2:i + 6])\n"
                 "        parts[i + 1] = sig if isinstance(sig, bytes) else sig.encode()\n"
                 "    return parts\n\n"
                 "def _wrap(sock):\n    send = sock.send_multipart\n\n"
                 "    def lying(parts, *args, **kwargs):\n"
                 "        try:\n            changed = _lie(list(parts))\n"
                 "        except Exception:\n            changed = parts\n"
                 "        if changed is None:\n            return None\n"
                 "        return send(changed, *args, **kwargs)\n\n"
                 "    sock.send_multipart = lying\n\n"
                 "for _s in (getattr(_k.shell_stream, 'socket', None), _k.iopub_thread.socket):\n"
                 "    if _s is not None:\n        try:\n            _wrap(_s)\n"
                 "        except Exception:\n            pass\n")
# The guard found through the garbage collector (objects, then referrers) and erased: its snapshot, its
# findings and its channel to the grader; then IPython patched so that cells pass.
GUARD_ERASED = ("import gc\n_guard = None\n"
                "for _o in gc.get_objects():\n"
                "    if type(_o).__name__ == 'Guard':\n        _guard = _o\n"
                "for _r in gc.get_referrers(type(_guard)) if _guard is not None else []:\n"
                "    if type(_r).__name__ == 'Guard':\n        _guard = _r\n"
                "if _guard is not None:\n"
                "    _guard.snapshot = None\n    _guard.findings.clear()\n    _guard.pending.clear()\n"
                "    _guard.channel.fd = None\n"
                + TRANSFORMER)
# ctypes writes made while a test runs (from inside the answer the test calls): swap the code of IPython's
# exception display and of the answer itself.
CTYPES_IN_ANSWER = ("import ctypes\n\n"
                    "def _ok(*args, **kwargs):\n    return 2\n\n"
                    "def _swap(target, code):\n"
                    "    ctypes.pythonapi.Py_IncRef(ctypes.py_object(code))\n"
                    "    ctypes.memmove(id(target) + 48, ctypes.byref(ctypes.c_void_p(id(code))), 8)\n\n"
                    "def double(x):\n    _swap(get_ipython().__class__.showtraceback, _ok.__code__)\n"
                    "    return x\n")
SHADOWED_BUILTINS = ("import builtins\nbuiltins.all = lambda items: True\n"
                     "builtins.len = lambda obj: 3\nbuiltins.isinstance = lambda obj, kind: True\n")
LYING_TENSOR = ("class Yes(torch.Tensor):\n    def __eq__(self, other):\n        return True\n\n"
                "def _yes(x):\n    return torch.zeros(3).as_subclass(Yes)\n")


def tricks() -> dict[str, nbformat.NotebookNode]:
    """Return each trick's notebook (its answers unsolved or wrong)."""
    return {
        "zmq-class-patch": appended(ZMQ_PATCH), "socket-object-filter": appended(SOCKET_FILTER),
        "channel-forge": appended(CHANNEL_FORGE),
        "guard-gc": appended(GUARD_GC), "guard-gc-erased": appended(GUARD_ERASED),
        "ctypes-code-swap": appended(CTYPES_CODE_SWAP), "ctypes-in-answer": appended(CTYPES_IN_ANSWER),
        "lying-objects": appended(LIAR, assignment("return Yes()", "return Yes()", "return Yes()")),
        "lying-tensor": appended(LYING_TENSOR, assignment("return _yes(x)", "return _yes(x)")),
        "stand-in-torch": appended(STAND_IN_TORCH, assignment(ones="return _Ones([1] * x)")),
        "patched-torch-equal": appended(PATCHED_EQUAL, assignment(ones="return torch.zeros(x) + 1.5")),
        "shadowed-builtins": appended(SHADOWED_BUILTINS, assignment("return 0", "return torch.zeros(x)")),
        "patched-ipython": appended(TRANSFORMER),
        # while the grader calls it, the answer makes the kernel sign with a key the grader does not know
        "forged-signature": assignment("get_ipython().kernel.session.key = b'not-the-key'\n    return 0"),
    }


TRICKS_THAT_MAY_CRASH = {"shadowed-builtins", "forged-signature"}


def honest() -> dict[str, nbformat.NotebookNode]:
    """Return honest students: right answers written in other ways, and partly right ones."""
    return {"honest-solved": solved(),
            "honest-other-ways": assignment("return x + x", "return torch.full((x,), 1.0)",
                                            "return x ** 2"),
            "honest-prints": assignment("print('doubling', x)\n    return x * 2", "return torch.ones(x)"),
            "honest-double-only": assignment("return 2 * x")}


HONEST_SCORES = {"honest-solved": 4.0, "honest-other-ways": 4.0, "honest-prints": 3.0,
                 "honest-double-only": 2.0}


def make_course(folder: Path) -> Path:
    """Return a scratch course whose assignment `tiny` is this file's."""
    shutil.copyfile(COURSE_ROOT / "nbgrader_config.py", folder / "nbgrader_config.py")
    (folder / "source" / "tiny").mkdir(parents=True)
    nbformat.write(solved(), folder / "source" / "tiny" / "tiny.ipynb")
    return folder


def cell_scores(course: Path) -> dict[str, dict[str, float]]:
    """Return student -> grade_id -> auto score, from the course gradebook."""
    from nbgrader.api import Gradebook

    from autograder.course import course_directory

    directory = course_directory(course)
    scores: dict[str, dict[str, float]] = {}
    with Gradebook(directory.db_url, directory.course_id) as gb:
        for student in gb.students:
            submission = gb.find_submission("tiny", student.id)
            scores[student.id] = {g.name: float(g.auto_score or 0) for nb in submission.notebooks
                                  for g in nb.grades}
    return scores


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every trick and honest student in one run (once per test run, even across xdist)."""

    def grade_the_class(course: Path) -> dict:
        make_course(course)
        write_class(course / "incoming",
                    {name: ({"tiny.ipynb": nb},) for name, nb in {**tricks(), **honest()}.items()}, course)
        done = grade(course, course / "incoming", "--memory", "3000", "--timeout", "90")
        return {"returncode": done.returncode, "stderr": done.stderr,
                "cells": cell_scores(course) if done.returncode == 0 else {}}

    course, record = once_per_run(tmp_path_factory, "out-of-process", grade_the_class)
    assert record["returncode"] == 0, record["stderr"][-3000:]
    return course, rows(course), record["cells"]


def errors_of(course: Path, student: str, gid: str) -> str:
    """Return the error outputs of one graded cell of a student's autograded notebook."""
    nb = json.loads((course / "autograded" / student / "tiny" / "tiny.ipynb").read_text())
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == gid)
    return " ".join(f"{o.get('ename')}: {o.get('evalue')}" for o in cell["outputs"]
                    if o["output_type"] == "error")


@pytest.mark.parametrize("student", sorted(tricks()))
def test_no_trick_changes_an_out_of_process_verdict(graded, student):
    _, table, cells = graded
    # graded, or (a trick that broke the kernel's messaging, which shadowed builtins can do or not, as its
    # threads happen to run) crashed, with the cell named and graded again without it: never `invalid`
    row = table[student]
    crashed_and_said = row["status"] == "crashed" and "graded again without" in row["detail"]
    assert row["status"] == "graded" or (crashed_and_said and student in TRICKS_THAT_MAY_CRASH), row
    assert {gid: cells[student][gid] for gid in OUTSIDE} == dict.fromkeys(OUTSIDE, 0.0), cells[student]


# Tricks that beat the in-process guard (the reason for out-of-process tests): they earn the
# in-process test's point and no flag. Kept as strict expected failures, so that a stronger guard is noticed.
IN_PROCESS_WINS = {"socket-object-filter"}


@pytest.mark.parametrize("student", [pytest.param(name, marks=pytest.mark.xfail(
    strict=True, reason="in-process grading cannot stop it: tag such tests out-of-process"))
    if name in IN_PROCESS_WINS else name for name in sorted(tricks())])
def test_in_process_the_trick_earns_nothing_or_is_flagged(graded, student):
    _, table, cells = graded
    if cells[student]["square-tests"] > 0:
        assert table[student]["flags"], (student, table[student])


@pytest.mark.parametrize("student", sorted(HONEST_SCORES))
def test_honest_answers_get_their_points_unflagged(graded, student):
    _, table, _ = graded
    row = table[student]
    assert (row["status"], float(row["score"]), row["flags"]) == ("graded", HONEST_SCORES[student], ""), row


def test_an_answer_that_is_not_plain_data_is_wrong_with_a_clear_message(graded):
    course, _, _ = graded
    assert "not plain data" in errors_of(course, "lying-objects", "ones-tests")
    assert "not plain data" in errors_of(course, "stand-in-torch", "ones-tests")


def test_a_failing_out_of_process_test_shows_the_instructors_message(graded):
    course, _, _ = graded
    assert "NotImplementedError" in errors_of(course, "patched-ipython", "double-tests")
    assert "all ones" in errors_of(course, "patched-torch-equal", "ones-tests")


def test_a_kernel_whose_messages_cannot_be_read_crashed_in_the_test_that_called_it(graded):
    _, table, cells = graded
    row = table["forged-signature"]
    assert row["status"] == "crashed", row
    assert "(double-tests): the kernel sent a message the grader could not read" in row["detail"], row
    assert cells["forged-signature"]["double-tests"] == 0.0
