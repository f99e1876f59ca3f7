"""nbgrader's own Validator agrees: source notebooks pass, release notebooks fail every graded cell."""

import os

import nbformat
import pytest

from autograder import COURSE_ROOT
from autograder.build import build_release
from autograder.course import assignment_notebooks, assignments
from autograder.validate import validate_course, validate_notebook
from book.warm_kernels import warm_kernels
from tests.factories import tiny_assignment

pytestmark = pytest.mark.notebook

@pytest.fixture(autouse=True)
def warm_python3(monkeypatch):
    """nbgrader's Validator starts the notebooks' python3 kernel: found here first, forked warm."""
    env = warm_kernels().with_python3(dict(os.environ))
    if "JUPYTER_PATH" in env:
        monkeypatch.setenv("JUPYTER_PATH", env["JUPYTER_PATH"])


SOURCES = [nb for a in assignments() for nb in assignment_notebooks(a)]
RELEASES = [nb for a in assignments() for nb in assignment_notebooks(a, folder="release")]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_source_notebook_passes_all_its_tests(path):
    check = validate_notebook(path, "solution", COURSE_ROOT)
    assert check.ok, "\n".join(check.problems)


@pytest.mark.parametrize("path", RELEASES, ids=lambda p: p.name)
def test_release_notebook_fails_every_graded_cell(path):
    check = validate_notebook(path, "release", COURSE_ROOT)
    assert check.graded_cells > 0
    assert check.ok, "\n".join(check.problems)


def test_validation_catches_a_test_that_passes_on_the_stub(scratch_course):
    nb = tiny_assignment()
    nb.cells[2].source = "assert True  # a test that checks nothing"
    nbformat.write(nb, scratch_course / "source" / "tiny" / "tiny.ipynb")
    build_release(scratch_course)
    report = validate_course(scratch_course)
    assert not report.ok
    release_check = next(c for c in report.checks if c.direction == "release")
    assert any("passes on the student stub" in p for p in release_check.problems)


def test_validation_catches_a_wrong_solution(scratch_course):
    nbformat.write(tiny_assignment(solution_body="return x + 2"),
                   scratch_course / "source" / "tiny" / "tiny.ipynb")
    report = validate_course(scratch_course, ["tiny"])
    source_check = next(c for c in report.checks if c.direction == "solution")
    assert any("fails on the solution" in p and "negative numbers too" in p for p in source_check.problems)


def test_validation_waits_for_replies_in_slices(scratch_course, monkeypatch):
    from autograder.grading.channels import SlicedChannel

    waits = []
    real = SlicedChannel.get_msg

    async def counted(self, timeout=None):
        waits.append(timeout)
        return await real(self, timeout)

    monkeypatch.setattr(SlicedChannel, "get_msg", counted)
    check = validate_notebook(scratch_course / "source" / "tiny" / "tiny.ipynb", "solution", scratch_course)
    assert check.ok, check.problems
    assert waits, "nbgrader's Validator did not wait through the sliced channels"


def test_validation_kernels_talk_over_ipc_in_a_folder_of_their_own(scratch_course, capfd):
    """`make validate` printed ipykernel's "Kernel is running over TCP without encryption" once per notebook
    into its progress bar: a loopback TCP kernel any local user reaches. Its kernels use IPC now."""
    build_release(scratch_course)
    assert validate_course(scratch_course).ok
    said = capfd.readouterr().err
    assert "without encryption" not in said and "validating" in said, said[-2000:]
