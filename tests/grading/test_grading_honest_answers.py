"""No false flags on the course's own answers: graded by `python -m autograder grade` in the guarded kernel,
every assignment's solved notebook and every other correct answer the assignment tests know get full marks and
no flag.

Student k of an assignment answers every exercise with that exercise's k-th other correct answer (the
reference solution where an exercise has fewer), so each assignment is one small class, graded in one run.
"""

import csv
import json
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder import COURSE_ROOT
from autograder.grading.demo import solved
from autograder.grading.template import CACHE_FOLDER, cached_template
from tests.assignment_support import correct_cases
from tests.exercises import test_ps01_tensors_and_devices as ps01
from tests.exercises import test_ps02_moving_tensors as ps02
from tests.exercises import test_ps03_device_mismatch as ps03
from tests.exercises import test_ps04_async_timing as ps04
from tests.exercises import test_ps05_pinned_memory as ps05
from tests.exercises import test_ps06_streams_and_profiling as ps06
from tests.exercises import test_ps07_devices_in_real_code as ps07
from tests.exercises import test_ps08_several_devices as ps08
from tests.grade_commands import in_one_python
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook


def _by_exercise(cases) -> dict[str, dict[str, str]]:
    """Return {exercise: {case id: cell source}} from pytest params of (exercise, source)."""
    found: dict[str, dict[str, str]] = {}
    for case in cases:
        exercise, source = case.values
        found.setdefault(exercise, {})[case.id] = source
    return found


ALTERNATIVES = {
    "ps01-tensors-and-devices": {"describe": ps01.CORRECT_DESCRIBE, "pick-device": ps01.CORRECT_PICK_DEVICE},
    "ps02-moving-tensors": _by_exercise(ps02.CORRECT_CASES),
    "ps03-device-mismatch": _by_exercise(ps03.CORRECT_CASES),
    "ps04-async-timing": {"measure": ps04.CORRECT_MEASURE, "bandwidth-gbps": ps04.CORRECT_BANDWIDTH},
    "ps05-pinned-memory": {"make-loader": ps05.CORRECT_MAKE_LOADER, "train-epoch": ps05.CORRECT_TRAIN_EPOCH},
    "ps06-streams-and-profiling": _by_exercise(correct_cases(ps06.CORRECT, ps06.HEADS)),
    "ps07-devices-in-real-code": ps07.CORRECT,
    "ps08-several-devices": ps08.CORRECT,
}


def class_of(release: nbformat.NotebookNode, source: nbformat.NotebookNode,
             alternatives: dict[str, dict[str, str]]) -> dict[str, nbformat.NotebookNode]:
    """Return student -> notebook: 'solved', then one student per rank of other correct answers."""
    right = solved(release, source)
    students = {"solved": right}
    for k in range(max(len(a) for a in alternatives.values())):
        nb = nbformat.from_dict(json.loads(nbformat.writes(right)))
        for cell in nb.cells:
            answers = list(alternatives.get(cell.metadata.get("nbgrader", {}).get("grade_id"), {}).values())
            if cell.metadata.get("nbgrader", {}).get("solution") and k < len(answers):
                cell.source = answers[k]
        students[f"other-{k + 1}"] = nb
    return students


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every assignment's class once (once per test run, even across xdist workers)."""

    def grade_every_assignment(course: Path) -> dict:
        shutil.copyfile(COURSE_ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
        for assignment, alternatives in ALTERNATIVES.items():
            shutil.copytree(COURSE_ROOT / "source" / assignment, course / "source" / assignment)
            # the template the grader makes, in the cache its run looks in (as the hub makes it ahead)
            generated, _ = cached_template(course, assignment, course / "graded" / assignment / CACHE_FOLDER,
                                           course.parent / f"generated-{assignment}")
            name = f"{assignment}.ipynb"
            release = nbformat.read(generated / "release" / assignment / name, as_version=4)
            source = nbformat.read(course / "source" / assignment / name, as_version=4)
            for student, nb in class_of(release, source, alternatives).items():
                (course / "incoming" / assignment / student).mkdir(parents=True)
                nbformat.write(nb, course / "incoming" / assignment / student / name)
        # one class per assignment, graded one after the other in one Python (tests/grade_commands.py)
        commands = [["grade", assignment, str(course / "incoming" / assignment), "--course", str(course),
                     "--jobs", "2", "--timeout", "240", "--quiet"] for assignment in ALTERNATIVES]
        return {args[1]: {"returncode": code, "stderr": err[-3000:]}
                for args, (code, err) in zip(commands, in_one_python(course, *commands), strict=True)}

    return once_per_run(tmp_path_factory, "honest-answers", grade_every_assignment)


@pytest.mark.parametrize("assignment", sorted(ALTERNATIVES))
def test_every_correct_answer_gets_full_marks_and_no_flag(graded, assignment):
    course, runs = graded
    assert runs[assignment]["returncode"] == 0, runs[assignment]["stderr"]
    with (course / "graded" / assignment / "grades.csv").open(encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 1 + max(len(a) for a in ALTERNATIVES[assignment].values())
    for row in table:
        assert (row["status"], row["score"], row["flags"]) == ("graded", row["max_score"], ""), row
