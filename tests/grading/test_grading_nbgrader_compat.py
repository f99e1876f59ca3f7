"""`python -m autograder grade --course` agrees with plain `nbgrader autograde` on nbgrader's own scenarios.

The scenarios are those of nbgrader's autograde tests (nbgrader/tests/apps/test_nbgrader_autograde.py) that
apply to grading a folder of submissions, built from the fixture notebooks nbgrader installs with itself
(nbgrader/tests/apps/files), plus the course of nbgrader's user guide. Each course is built twice; one copy
is graded by `nbgrader generate_assignment` and `nbgrader autograde` (nbgrader's own applications, run one
after the other in one Python per course, as nbgrader's own tests run them), the other by our grader, and
their gradebooks are compared student by student: scores, max scores, what needs manual grading, late
penalties. Nothing is hard-coded: whatever nbgrader gives is the expected answer.
"""

import csv
import io
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbgrader
import pytest

from tests.grade_commands import in_one_python as grade_in_one_python
from tests.nbgrader_commands import in_one_python
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook

FILES = Path(nbgrader.__file__).parent / "tests" / "apps" / "files"
USER_GUIDE = Path(nbgrader.__file__).parent / "docs" / "source" / "user_guide"
DUE = "2015-02-02 14:58:23.948203 America/Los_Angeles"
ON_TIME, HOUR_LATE, FOUR_HOURS_LATE = DUE, DUE.replace("14:58", "15:58"), DUE.replace("14:58", "18:58")
LATE_PLUGIN = '''from nbgrader.plugins import BasePlugin


class Blarg(BasePlugin):
    def late_submission_penalty(self, student_id, score, total_seconds_late):
        return int(total_seconds_late / 3600)  # one point per hour late
'''


@dataclass
class Course:
    """A course to grade both ways: config lines, course-root files, sources and submissions."""

    config: str | None = ""  # nbgrader_config.py body ("c = get_config()" is added); None: no file at all
    root_files: dict[str, str] = field(default_factory=dict)  # name -> text, in the course root
    sources: dict[str, dict[str, Path]] = field(default_factory=dict)  # assignment -> notebook -> file
    source_files: dict[str, dict[str, str]] = field(default_factory=dict)  # assignment -> name -> text
    submitted: dict[str, dict[str, dict[str, Path | str]]] = field(default_factory=dict)
    # assignment -> student -> {name: file to copy, or text (timestamp.txt)}
    duedate: str | None = DUE

    def write(self, folder: Path) -> None:
        """Write the course into `folder`."""
        folder.mkdir(parents=True)
        if self.config is not None:
            (folder / "nbgrader_config.py").write_text(f"c = get_config()\n{self.config}\n", encoding="utf-8")
        for name, text in self.root_files.items():
            (folder / name).write_text(text, encoding="utf-8")
        for assignment, notebooks in self.sources.items():
            (folder / "source" / assignment).mkdir(parents=True)
            for name, path in notebooks.items():
                shutil.copyfile(path, folder / "source" / assignment / name)
            for name, text in self.source_files.get(assignment, {}).items():
                (folder / "source" / assignment / name).write_text(text, encoding="utf-8")
        for assignment, students in self.submitted.items():
            for student, files in students.items():
                target = folder / "submitted" / student / assignment
                target.mkdir(parents=True)
                for name, content in files.items():
                    if isinstance(content, Path):
                        shutil.copyfile(content, target / name)
                    else:
                        (target / name).write_text(content, encoding="utf-8")


def f(name: str) -> Path:
    """Return one of nbgrader's fixture files."""
    return FILES / name


def basic(extra: dict | None = None) -> dict:
    """Return ps1 submissions of nbgrader's test_grade and test_showtraceback_exploit, with lateness."""
    return {"foo": {"p1.ipynb": f("submitted-unchanged.ipynb")},
            "bar": {"p1.ipynb": f("submitted-changed.ipynb")},
            "spam": {"p1.ipynb": f("submitted-cheat-attempt.ipynb")},
            "eggs": {"p1.ipynb": f("submitted-cheat-attempt-alternative.ipynb")},
            "grade-cell-changed": {"p1.ipynb": f("submitted-grade-cell-changed.ipynb")},
            "locked-cell-changed": {"p1.ipynb": f("submitted-locked-cell-changed.ipynb")},
            "on-time": {"p1.ipynb": f("submitted-unchanged.ipynb"), "timestamp.txt": ON_TIME},
            "hour-late": {"p1.ipynb": f("submitted-changed.ipynb"), "timestamp.txt": HOUR_LATE},
            "empty-timestamp": {"p1.ipynb": f("submitted-unchanged.ipynb"), "timestamp.txt": ""},
            "extra-notebook": {"p1.ipynb": f("submitted-changed.ipynb"),
                               "p1 copy.ipynb": f("submitted-unchanged.ipynb")},
            **(extra or {})}


def user_guide() -> Course:
    """Return the course of nbgrader's user guide (no nbgrader_config.py, autotests.yml in the root)."""
    course = Course(config=None, root_files={"autotests.yml": (USER_GUIDE / "autotests.yml").read_text()})
    for assignment in ("ps1", "ps1_autotest"):
        course.sources[assignment] = {p.name: p
                                      for p in sorted((USER_GUIDE / "source" / assignment).glob("*.ipynb"))}
    course.submitted["ps1"] = {
        student.name: {p.name: (p if p.suffix != ".txt" else p.read_text())
                       for p in sorted((student / "ps1").iterdir())}
        for student in sorted((USER_GUIDE / "submitted").iterdir())}
    return course


COURSES = {
    # test_grade, test_showtraceback_exploit, test_grade_timestamp, test_grade_empty_timestamp,
    # test_late_submission_penalty_none, test_skip_extra_notebooks; no course_id set; and test_grade_autotest
    # with autotests.yml in the assignment folder
    "basic": Course(sources={"ps1": {"p1.ipynb": f("submitted-unchanged.ipynb")},
                             "simple": {"p1.ipynb": f("autotest-simple.ipynb")}},
                    source_files={"simple": {"autotests.yml": f("autotests.yml").read_text()}},
                    submitted={"ps1": basic(),
                               "simple": {"foo": {"p1.ipynb": f("autotest-simple-unchanged.ipynb")},
                                          "bar": {"p1.ipynb": f("autotest-simple-changed.ipynb")}}}),
    # test_late_submission_penalty_zero, with a course_id
    "zero-penalty": Course(config="c.CourseDirectory.course_id = 'course101'\n"
                                  "c.LateSubmissionPlugin.penalty_method = 'zero'",
                           sources={"ps1": {"p1.ipynb": f("submitted-unchanged.ipynb")}},
                           submitted={"ps1": {"on-time": basic()["on-time"],
                                              "hour-late": basic()["hour-late"]}}),
    # test_late_submission_penalty_plugin: the plugin lives beside nbgrader_config.py
    "plugin": Course(config="c.AssignLatePenalties.plugin_class = 'late_plugin.Blarg'",
                     root_files={"late_plugin.py": LATE_PLUGIN},
                     sources={"ps1": {"p1.ipynb": f("submitted-unchanged.ipynb")}},
                     submitted={"ps1": {"foo": {"p1.ipynb": f("submitted-unchanged.ipynb"),
                                                "timestamp.txt": FOUR_HOURS_LATE},
                                        "bar": {"p1.ipynb": f("submitted-changed.ipynb"),
                                                "timestamp.txt": HOUR_LATE}}}),
    # test_grade_autotest, test_grade_hashed_autotest, test_grade_complex_autotest,
    # test_hidden_tests_autotest: autotests.yml in the course root
    "autotest-root": Course(
        config="c.ClearSolutions.code_stub = dict(python='# YOUR CODE HERE')",
        root_files={"autotests.yml": f("autotests.yml").read_text()},
        sources={"simple": {"p1.ipynb": f("autotest-simple.ipynb")},
                 "hashed": {"p1.ipynb": f("autotest-hashed.ipynb")},
                 "multi": {"p1.ipynb": f("autotest-multi.ipynb")},
                 "hidden": {"p1.ipynb": f("autotest-hidden.ipynb")}},
        submitted={kind: {"foo": {"p1.ipynb": f(f"autotest-{kind}-unchanged.ipynb")},
                          "bar": {"p1.ipynb": f(f"autotest-{kind}-changed.ipynb")}}
                   for kind in ("simple", "hashed", "multi")}
        | {"hidden": {"foo": {"p1.ipynb": f("autotest-hidden-unchanged.ipynb")},
                      "bar": {"p1.ipynb": f("autotest-hidden-changed-wrong.ipynb")},
                      "baz": {"p1.ipynb": f("autotest-hidden-changed-right.ipynb")}}}),
    # test_hidden_tests_single_notebook, test_grade_missing_notebook, test_side_effects,
    # test_grade_with_validating_envvar, test_infinite_loop and test_autograde_timeout (a 1 s cell limit)
    "hidden-and-missing": Course(
        config="c.ClearSolutions.code_stub = dict(python='# YOUR CODE HERE')\nc.Execute.timeout = 1",
        sources={"hidden": {"p1.ipynb": f("test-hidden-tests.ipynb")},
                 "two": {"p1.ipynb": f("submitted-unchanged.ipynb"),
                         "p2.ipynb": f("submitted-unchanged.ipynb")},
                 "effects": {"p1.ipynb": f("side-effects.ipynb")},
                 "envvar": {"p1.ipynb": f("validating-environment-variable.ipynb")},
                 "loop": {"p1.ipynb": f("infinite-loop.ipynb")}, "slow": {"p1.ipynb": f("timeout.ipynb")}},
        submitted={"two": {"foo": {"p1.ipynb": f("submitted-changed.ipynb")}},
                   "effects": {"foo": {"p1.ipynb": f("side-effects.ipynb")}},
                   "envvar": {"foo": {"p1.ipynb": f("validating-environment-variable.ipynb")}},
                   "loop": {"foo": {"p1.ipynb": f("infinite-loop.ipynb")}},
                   "slow": {"foo": {"p1.ipynb": f("timeout.ipynb")}}}),
    "user-guide": user_guide(),
}
# test_hidden_tests_single_notebook: the student hands in the released notebook (made by generate_assignment)
RELEASED = {("hidden-and-missing", "hidden"): ("foo", "p1.ipynb")}


def define_assignments(folder: Path, course: Course) -> None:
    """Define the course's assignments (with the due date) in a new gradebook, as `nbgrader db assignment add`
    does (the same Gradebook call, in this process: no Python and no `alembic heads` process per course)."""
    from nbgrader.api import Gradebook

    from autograder.course import course_directory
    from autograder.grading.gradebook import ensure_schema

    directory = course_directory(folder)
    ensure_schema(directory.db_url)
    with Gradebook(directory.db_url, directory.course_id) as gb:
        for assignment in course.sources:
            gb.update_or_create_assignment(assignment, duedate=course.duedate)


def prepare(name: str, folder: Path) -> None:
    """Write a course and define its assignments (with the due date) in its gradebook."""
    course = COURSES[name]
    course.write(folder)
    define_assignments(folder, course)
    released = {assignment: where for (course_name, assignment), where in RELEASED.items()
                if course_name == name}
    commands = [["generate_assignment", assignment, "--force"] for assignment in released]
    for args, (code, log) in zip(commands, in_one_python(folder, *commands), strict=True):
        assert code == 0, f"nbgrader {' '.join(args)}: {log[-2000:]}"
    for assignment, (student, notebook) in released.items():
        target = folder / "submitted" / student / assignment
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "release" / assignment / notebook, target / notebook)
    if released:
        shutil.rmtree(folder / "release")


def gradebook_view(folder: Path, assignments: list[str]) -> dict:
    """Return (assignment, student) -> what the gradebook says of that submission."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograder.course import course_directory

    course = course_directory(folder)
    view = {}
    with Gradebook(course.db_url, course.course_id) as gb:
        for assignment in assignments:
            for student in gb.students:
                try:
                    sub = gb.find_submission(assignment, student.id)
                except MissingEntry:
                    continue
                view[f"{assignment}/{student.id}"] = {
                    "score": sub.score, "max_score": sub.max_score,
                    "needs_manual_grade": sub.needs_manual_grade,
                    "late": sub.total_seconds_late > 0, "penalty": sub.late_submission_penalty,
                    "notebooks": {nb.name: [nb.score, nb.needs_manual_grade] for nb in sub.notebooks}}
    return view


def written_files(folder: Path) -> dict[str, str]:
    """Return what lies in a course's autograded folder besides the notebooks and timestamps (read from the
    submission, not written): relative path -> text."""
    autograded = folder / "autograded"
    found = sorted(autograded.rglob("*")) if autograded.is_dir() else []
    return {str(p.relative_to(autograded)): p.read_text(errors="replace") for p in found
            if p.is_file() and p.suffix != ".ipynb" and p.name != "timestamp.txt"}


def grade_both(name: str, base: Path) -> dict:
    """Grade one course with nbgrader and with our grader; return both views and each command's outcome."""
    plain, ours = base / "plain", base / "ours"
    prepare(name, plain)
    shutil.copytree(plain, ours)  # the same course and gradebook (preparing it again runs the same commands)
    assignments = list(COURSES[name].sources)
    commands = [[command, assignment, *(["--force"] if command == "generate_assignment" else [])]
                for assignment in assignments for command in ("generate_assignment", "autograde")]
    plain_outcomes = in_one_python(plain, *commands)
    outcome = {"plain": [[args[0], args[1], code, log[-1500:]]
                         for args, (code, log) in zip(commands, plain_outcomes, strict=True)],
               "ours": []}
    # ours too, one command after another in one Python (tests/grade_commands.py)
    # nbgrader's test courses hold students' notebooks in source/, not solutions: no solution check
    ours_commands = [["grade", assignment, str(ours / "submitted"), "--course", str(ours), "--jobs", "1",
                      "--timeout", "120", "--quiet", "--no-solution-check"]
                     for assignment in assignments if (ours / "submitted").is_dir()]
    for args, (code, err) in zip(ours_commands, grade_in_one_python(ours, *ours_commands), strict=True):
        outcome["ours"].append(["grade", args[1], code, err[-1500:]])
    return {"plain": gradebook_view(plain, assignments), "ours": gradebook_view(ours, assignments),
            "files": {"plain": written_files(plain), "ours": written_files(ours)}, "outcome": outcome,
            "csv": {a: (ours / "graded" / a / "grades.csv").read_text() for a in assignments
                    if (ours / "graded" / a / "grades.csv").exists()}}


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """Grade every course both ways (once per test run, even across xdist workers)."""

    def grade_every_course(base: Path) -> dict:
        # two courses at a time: most of the time goes into starting programs
        with ThreadPoolExecutor(2) as pool:
            done = pool.map(lambda name: grade_both(name, base / name), COURSES)
            return dict(zip(COURSES, done, strict=True))

    return once_per_run(tmp_path_factory, "nbgrader-compat", grade_every_course)[1]


@pytest.mark.parametrize("name", sorted(COURSES))
def test_the_grader_agrees_with_nbgrader(compared, name):
    result = compared[name]
    for command, assignment, code, err in result["outcome"]["ours"]:
        assert code == 0, f"{command} {assignment}: {err}"
    assert result["plain"], "nbgrader graded nobody: the scenario is broken"
    assert result["ours"] == result["plain"]


def test_files_a_notebook_writes_appear_in_autograded_as_under_nbgrader(compared):
    # test_side_effects: side-effects.ipynb writes side-effect.txt, found beside the autograded notebook
    files = compared["hidden-and-missing"]["files"]
    assert files["plain"].get("foo/effects/side-effect.txt") == "a side effect", files["plain"]
    for name, result in compared.items():
        assert result["files"]["ours"] == result["files"]["plain"], name


def test_grades_csv_shows_the_score_after_the_late_penalty(compared):
    rows = {row[0]: row for row in list(csv.reader(io.StringIO(compared["plugin"]["csv"]["ps1"])))[1:]}
    plain = compared["plugin"]["plain"]
    for student in ("foo", "bar"):
        view = plain[f"ps1/{student}"]
        assert float(rows[student][2]) == max(0.0, view["score"] - view["penalty"])
        assert float(rows[student][4]) == view["penalty"] > 0
