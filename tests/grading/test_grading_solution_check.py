"""Before a class is graded, the assignment's own solution must earn full marks where the class is graded.

The incident: a sandbox that could not import the course's package made every imports cell fail, and the
student with every answer right scored 11 of 14 under the status "graded", with no warning. Here the sandbox
is made unable to import `devicelab` (the folders it shows leave the package out), and the run must refuse
before any student is graded, naming the cell and the error.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import COURSE_ROOT
from autograder.course import with_venv_on_path
from autograder.grading.attempt import AttemptReport, Failure, FailureKind, Outcome
from autograder.grading.results import CellScore
from autograder.grading.solution_check import SOLUTION, first_error, refusal
from tests.factories import tiny_assignment

pytestmark = pytest.mark.notebook

IMPORTS = "from devicelab.units import KiB  # the course's package, as the problem sets import it"
RUN = """
import json, sys
from pathlib import Path
import autograder.grading.session as session
from autograder.grading.errors import BrokenGradingEnvironment
from autograder.grading.session import GradeOptions, grade_class

course, hide_course_package, timeout = Path(sys.argv[1]), sys.argv[2] == "hide", float(sys.argv[3])
if hide_course_package:  # the sandbox shows Python and its packages, but not the course's own
    session.student_package_folders = lambda: []
said = []
try:
    summary = grade_class(course, "tiny", course / "incoming", GradeOptions(
        jobs=1, timeout=timeout, memory_mib=900, sandbox="bwrap", progress=False), echo=said.append)
except BrokenGradingEnvironment as exc:
    print(json.dumps({"refused": str(exc), "said": said}))
else:
    print(json.dumps({"rows": {r.student: [r.status, r.final_score] for r in summary.results}, "said": said}))
"""


def _course(folder: Path) -> Path:
    """A course whose assignment imports the course's package first, as every problem set does."""
    folder.mkdir()
    shutil.copyfile(COURSE_ROOT / "nbgrader_config.py", folder / "nbgrader_config.py")
    nb = tiny_assignment("return 2 * x * (KiB // 1024)")  # the answer uses what the imports cell imports
    nb.cells.insert(1, nbformat.v4.new_code_cell(IMPORTS))
    (folder / "source" / "tiny").mkdir(parents=True)
    nbformat.write(nb, folder / "source" / "tiny" / "tiny.ipynb")
    (folder / "incoming" / "ada").mkdir(parents=True)
    nbformat.write(nb, folder / "incoming" / "ada" / "tiny.ipynb")  # every answer right
    return folder


def _grade(course: Path, cache: Path, *, hide: bool, timeout: float = 120) -> dict:
    done = subprocess.run([sys.executable, "-c", RUN, str(course), "hide" if hide else "show", str(timeout)],
                          cwd=COURSE_ROOT, capture_output=True, text=True, timeout=900, check=False,
                          env={**with_venv_on_path(), "XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def bwrap():
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")


def test_a_sandbox_that_cannot_import_the_course_refuses_before_grading_anyone(tmp_path, bwrap):
    course = _course(tmp_path / "course")
    ran = _grade(course, tmp_path / "cache", hide=True)
    assert "refused" in ran, f"the run graded with a broken environment: {ran}"
    refused = ran["refused"]
    assert "nothing was graded" in refused and "earned 0 of 2 points" in refused
    assert "tiny.ipynb cell 1: ModuleNotFoundError: No module named 'devicelab'" in refused, refused
    assert not (course / "graded" / "tiny" / "grades.csv").exists(), "no grades for anyone"
    assert not (course / "graded" / "tiny" / "results").exists() or not any(
        (course / "graded" / "tiny" / "results").iterdir()), "no student's result saved"
    assert not list((tmp_path / "cache").rglob("*")) or not any(
        p.is_file() for p in (tmp_path / "cache").rglob("*")), "a refusal is never remembered as a pass"


def test_a_working_sandbox_grades_and_remembers_the_pass_for_what_it_proved(tmp_path, bwrap):
    course, cache = _course(tmp_path / "course"), tmp_path / "cache"
    first = _grade(course, cache, hide=False)
    assert first["rows"] == {"ada": ["graded", 2.0]}, first
    assert "tiny: its own solution earns full marks in this sandbox" in first["said"]
    again = _grade(course, cache, hide=False)
    assert not any("its own solution" in line for line in again["said"]), "checked again with nothing changed"
    other_limit = _grade(course, cache, hide=False, timeout=100)
    assert "tiny: its own solution earns full marks in this sandbox" in other_limit["said"], (
        "a pass under one time limit proves nothing for another")
    broken = _grade(course, cache, hide=True)
    assert "refused" in broken, "a pass in one sandbox proves nothing for a sandbox that shows less"


def _report(scores: list[tuple[str, float]], scratch: str | None = None) -> AttemptReport:
    return AttemptReport(Outcome.COMPLETED, cells=[CellScore("tiny.ipynb", gid, got, 2.0, error="" if got else
                                                             "AssertionError: double(2) should be 4")
                                                   for gid, got in scores], scratch=scratch)


def test_the_refusal_says_what_the_solution_earned_which_cell_failed_and_why(tmp_path):
    points = {("tiny.ipynb", "double-tests"): 2.0, ("tiny.ipynb", "square-tests"): 2.0}
    assert refusal(_report([("double-tests", 2.0), ("square-tests", 2.0)]), points) is None
    autograded = tmp_path / "autograded" / SOLUTION / "tiny"
    autograded.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    failed = nbformat.v4.new_code_cell("import missing")
    failed.outputs = [nbformat.v4.new_output("error", ename="ModuleNotFoundError",
                                             evalue="No module named 'missing'", traceback=[])]
    nb.cells = [nbformat.v4.new_markdown_cell("# Tiny"), failed]
    nbformat.write(nb, autograded / "tiny.ipynb")
    why = refusal(_report([("double-tests", 2.0), ("square-tests", 0.0)], str(tmp_path)), points)
    assert why.startswith("it earned 2 of 4 points")
    assert "tiny.ipynb cell 1: ModuleNotFoundError: No module named 'missing'" in why
    assert "tiny.ipynb test 'square-tests': AssertionError: double(2) should be 4" in why
    missing = refusal(_report([("double-tests", 2.0)]), points)
    assert missing.startswith("it earned 2 of 4 points"), "a test cell never scored counts as failed"
    by_hand = _report([("double-tests", 2.0)])
    by_hand.cells.append(CellScore("tiny.ipynb", "essay", 0.0, 2.0, needs_manual_grade=True))
    assert refusal(by_hand, {**points, ("tiny.ipynb", "essay"): 2.0}).startswith("it earned 2 of 4 points")
    by_hand.cells.append(CellScore("tiny.ipynb", "square-tests", 2.0, 2.0))
    assert refusal(by_hand, {**points, ("tiny.ipynb", "essay"): 2.0}) is None, "graded by hand: not counted"
    crashed = AttemptReport(Outcome.FAILED, failure=Failure(FailureKind.CRASHED, "the kernel died (SIGKILL)"))
    assert refusal(crashed, points) == "its grading did not complete (the kernel died (SIGKILL))"


def test_a_huge_or_linked_autograded_notebook_is_not_read(tmp_path):
    autograded = tmp_path / "autograded" / SOLUTION / "tiny"
    autograded.mkdir(parents=True)
    (tmp_path / "elsewhere.ipynb").write_text("{}")
    (autograded / "tiny.ipynb").symlink_to(tmp_path / "elsewhere.ipynb")
    assert first_error(tmp_path) is None
