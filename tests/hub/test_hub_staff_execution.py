"""Staff never run a submission outside the sandbox (issue 49.1), without root or a running hub.

A class is set up as `hub setup` sets it up: the grader's generated configuration (the grader service's and
the grader's commands') and the course folder with the nbgrader_config.py that setup writes. A hostile
student's collected submission copies the instructor's solutions into a file in the course, which only the
grader account can write. formgrader's Autograde, `nbgrader autograde` typed in the course folder and the
grader server's Validate must run none of it and say what to use instead; our grader still grades the course.
"""

import os
import pwd
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from autograder.course import course_config, course_directory, venv_on_path
from autograder.hub.settings import HubSettings
from autograder.hub.setup import accounts
from autograder.hub.setup.install import install_course
from autograder.hub.setup.render import render_all, write_all
from autograder.hub.setup.roster import Member
from autograder.hub.spawning.staff_execution import StaffExecutionRefused
from tests.grading.test_grading_end_to_end import assignment, grade, rows

ROOT = Path(__file__).resolve().parents[2]
STUDENT = "dl-cat"
MEMBERS = [Member("cat", "Cat Hostile", "student"), Member("ivy", "Ivy Teach", "instructor")]


@dataclass(frozen=True)
class Course:
    """A hub's course folder, set up without a hub, with one hostile submission collected."""

    settings: HubSettings
    marker: Path  # where the hostile code copies the solutions: only the grader account can write there

    @property
    def folder(self) -> Path:
        return self.settings.paths.course

    @property
    def submitted(self) -> Path:
        return self.folder / "submitted" / STUDENT / "tiny" / "tiny.ipynb"


def hostile(marker: Path, solutions: Path) -> nbformat.NotebookNode:
    """Return a right answer whose first answer cell copies the instructor's notebook to `marker`."""
    nb = assignment()
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    cell.source = (f"import pathlib\npathlib.Path({str(marker)!r}).write_text("
                   f"pathlib.Path({str(solutions)!r}).read_text())\n\n{cell.source}")
    return nb


@pytest.fixture
def course(tmp_path: Path) -> Course:
    """Write the grader's configuration and install the course as `hub setup` does (its files owned by this
    account, as they are the grader's on a hub), add the assignment `tiny`, collect a hostile submission."""
    from nbgrader.apps import NbGraderAPI

    from autograder.grading.gradebook import ensure_schema

    s = HubSettings(root=str(tmp_path / "root"), course_id="device-lab", course_source=str(ROOT),
                    prefix="dl-", python=sys.executable, proxy=sys.executable)
    write_all(render_all(s, MEMBERS))
    me = accounts.lookup(pwd.getpwuid(os.getuid()).pw_name)
    assert me is not None
    install_course(s, me)
    folder = s.paths.course
    (folder / "source" / "tiny").mkdir(parents=True)
    nbformat.write(assignment(), folder / "source" / "tiny" / "tiny.ipynb")
    config = course_config(folder)
    ensure_schema(course_directory(folder).db_url)
    with venv_on_path():
        made = NbGraderAPI(config=config).generate_assignment("tiny", force=True, create=True)
    assert made["success"], made
    c = Course(s, folder / "solutions-copied-by-the-student.txt")
    c.submitted.parent.mkdir(parents=True)
    nbformat.write(hostile(c.marker, folder / "source" / "tiny" / "tiny.ipynb"), c.submitted)
    (c.submitted.parent / "timestamp.txt").write_text("2026-01-01 10:00:00.000000 UTC")
    return c


def as_the_grader_service(c: Course, monkeypatch, tmp_path: Path) -> None:
    """Give this process the grader service's configuration: its JUPYTER_CONFIG_PATH, the course as its
    working folder (nbgrader reads nbgrader_config.py there too), none of this account's Jupyter config."""
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(c.settings.paths.grader_etc))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "jupyter-config"))
    monkeypatch.chdir(c.folder)


def test_formgraders_autograde_runs_nothing_and_names_hub_grade(course: Course, monkeypatch,
                                                                 tmp_path: Path) -> None:
    from nbgrader.apps import NbGrader, NbGraderAPI
    from nbgrader.auth import NoAuthPlugin

    as_the_grader_service(course, monkeypatch, tmp_path)
    app = NbGrader()  # formgrader's own way of reading its configuration (FormgradeExtension.load_config)
    app.load_config_file()
    config = app.config
    assert config.CourseDirectory.root == str(course.folder)
    config.Authenticator.plugin_class = NoAuthPlugin  # no hub here to ask for the grader's groups
    with venv_on_path():
        done = NbGraderAPI(config=config).autograde("tiny", STUDENT)  # the Autograde button's call
    assert not course.marker.exists(), "formgrader's Autograde ran the student's code as the grader"
    assert not done["success"], done
    log = done.get("log", "")
    assert "outside the grading sandbox" in log, log
    assert f"sudo python -m autograder hub grade tiny --root {course.settings.root}" in log, log
    assert not list((course.folder / "autograded").rglob("*.ipynb")), "a half-made autograded notebook stayed"


def test_nbgrader_autograde_typed_in_the_course_folder_runs_nothing(course: Course, tmp_path: Path) -> None:
    """A grader's login shell: nbgrader reads only the course folder's nbgrader_config.py (no
    JUPYTER_CONFIG_PATH, no PYTHONPATH)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]), "HOME": str(home),
           "LANG": "C.UTF-8"}
    done = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "autograde", "tiny", "--student",
                           STUDENT], cwd=course.folder, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    said = done.stdout + done.stderr
    assert not course.marker.exists(), "nbgrader autograde ran the student's code as the grader"
    assert done.returncode != 0, said
    assert f"sudo python -m autograder hub grade tiny --root {course.settings.root}" in said, said


def test_validate_in_the_grader_server_runs_nothing(course: Course, monkeypatch, tmp_path: Path) -> None:
    from nbgrader.server_extensions.validate_assignment.handlers import ValidateAssignmentHandler
    from nbgrader.validator import Validator

    as_the_grader_service(course, monkeypatch, tmp_path)
    config = ValidateAssignmentHandler.load_config(None)  # what the Validate button reads, read its way
    with venv_on_path(), pytest.raises(StaffExecutionRefused) as refused:
        Validator(config=config).validate(str(course.submitted))
    assert not course.marker.exists(), "Validate ran the student's code as the grader"
    said = str(refused.value)
    assert "outside the grading sandbox" in said and "python -m autograder validate" in said, said
    assert f"sudo python -m autograder hub grade ASSIGNMENT --root {course.settings.root}" in said, said


def test_our_grader_still_grades_the_installed_course(course: Course, tmp_path: Path) -> None:
    """The course's nbgrader_config.py keeps what our grader reads; its own preprocessors run the kernel in
    the sandbox."""
    honest = tmp_path / "submissions" / "dl-ann"
    honest.mkdir(parents=True)
    nbformat.write(assignment(), honest / "tiny.ipynb")
    done = grade(course.folder, tmp_path / "submissions")
    assert done.returncode == 0, done.stderr
    row = rows(course.folder)["dl-ann"]
    assert float(row["score"]) == float(row["max_score"]) == 3, row


def test_formgraders_generate_feedback_executes_nothing() -> None:
    """Feedback pages are made from the autograded notebook as it is: none of nbgrader's preprocessors runs
    code."""
    from nbconvert.preprocessors import ExecutePreprocessor
    from nbgrader.converters import GenerateFeedback

    chain = GenerateFeedback.class_traits()["preprocessors"].default()
    assert chain and not [p for p in chain if issubclass(p, ExecutePreprocessor)], chain
