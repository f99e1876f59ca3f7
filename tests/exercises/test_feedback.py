"""Instant feedback: check says correct / not attempted / incorrect, hints come in levels, nbgrader silences
it.
"""

import importlib
import re

import nbformat
import pytest
import torch
from nbgrader import utils

from autograder import COURSE_ROOT
from autograder.cells import grade_id
from autograder.course import lessons
from devicelab.feedback import Exercise, Outcome, checker, evaluate

LESSON_MODULES = sorted(p.stem for p in (COURSE_ROOT / "devicelab" / "exercises").glob("lesson*.py"))
# Lessons whose practice needs more than torch (simulated GPUs, loaders) test it in their own file, the same
# way: named here, since most lessons also have a test file of their own for what their text claims.
OWN_TEST_FILE = {"lesson07", "lesson08", "lesson09", "lesson10"} & set(LESSON_MODULES)

# A realistic wrong answer for each practice exercise.
WRONG = {
    "device_time": 'def device_time(device):\n'
    '    return "GPU time!" if device.type == "cuda" else "CPU time!"',
    "nbytes_for": "import math\ndef nbytes_for(shape, dtype):\n    return math.prod(shape) * 4",
    "device_label": ('def device_label(d):\n    if d.type != "cuda":\n        return d.type\n'
                     '    return f"cuda device number {d.index}" if d.index else "the current cuda device"'),
    "same_storage": "def same_storage(a, b):\n    return a.data_ptr() == b.data_ptr()",
    "fixed_detector": ("from devicelab.exercises.lesson04 import Detector\n"
                       "class Half(Detector):\n"
                       "    def __init__(self):\n"
                       "        super().__init__()\n"
                       "        del self.class_weight\n"
                       "        self.register_buffer('class_weight', torch.tensor([2.0]))\n"
                       "def fixed_detector():\n    return Half()"),
    "gpu_finish_time": "def gpu_finish_time(kernel_seconds, launch_s=5e-6):\n    return sum(kernel_seconds)",
    "effective_gbps": "def effective_gbps(nbytes, peak_gbps, latency_s):\n    return peak_gbps",
}


def _exercise_set(module_name):
    return importlib.import_module(f"devicelab.exercises.{module_name}")._exercises


def _namespace(source: str) -> dict:
    namespace = {"torch": torch}
    exec(source, namespace)
    return namespace


@pytest.mark.parametrize("module_name", sorted(set(LESSON_MODULES) - OWN_TEST_FILE))
def test_practice_solutions_are_correct_and_stubs_not_attempted(module_name):
    for name, exercise in _exercise_set(module_name).exercises.items():
        assert exercise.solution, f"practice exercise {name} needs a solution"
        assert evaluate(exercise, _namespace(exercise.solution)).outcome is Outcome.CORRECT
        stub = f"def {name}(*args):\n    raise NotImplementedError('your code here')"
        assert evaluate(exercise, _namespace(stub)).outcome is Outcome.NOT_ATTEMPTED
        wrong = evaluate(exercise, _namespace(WRONG[name]))
        assert wrong.outcome is Outcome.INCORRECT and "should" in wrong.message


@pytest.mark.parametrize("lesson", lessons(), ids=lambda p: p.stem)
def test_each_lesson_checks_its_practice_exercises(lesson):
    text = "\n".join(c.source for c in nbformat.read(lesson, as_version=4).cells)
    imported = re.search(r"from devicelab\.exercises\.(\w+) import ([\w, ]+)", text)
    assert imported and {"check", "hint", "solution"} <= {n.strip() for n in imported.group(2).split(",")}, (
        f"{lesson.name} imports check, hint and solution from its exercise module")
    for name in _exercise_set(imported.group(1)).exercises:
        assert f'check("{name}")' in text and f"def {name}(" in text


def _graded_names() -> set[str]:
    """The functions the problem sets grade (def names in their solution cells)."""
    names: set[str] = set()
    for path in sorted((COURSE_ROOT / "source").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if utils.is_solution(cell):
                names.update(re.findall(r"^def (\w+)\(", cell.source, re.MULTILINE))
    return names


@pytest.mark.parametrize("lesson", lessons(), ids=lambda p: p.stem)
def test_lesson_practice_never_reuses_a_graded_function_name(lesson):
    cells = nbformat.read(lesson, as_version=4).cells
    defined = r"^def (\w+)\("
    asked = {name for c in cells if c.cell_type == "code"
             for name in re.findall(defined, c.source, re.MULTILINE)}
    asked |= {name for c in cells if c.cell_type == "markdown"
              for name in re.findall(r"Write `(\w+)\(", c.source)}
    clash = asked & _graded_names()
    assert not clash, (f"{lesson.name} asks for {sorted(clash)}, which a problem set grades under the same "
                       "name")


def _toy():
    def expectations(fn):
        assert fn(2) == 4, "double(2) should be 4"

    return checker(Exercise("double", expectations, hints=("one", "two"),
                            solution="def double(x): return 2 * x"))


def test_missing_function_and_non_callable_are_explained():
    exercise = _toy().exercises["double"]
    assert evaluate(exercise, {}).outcome is Outcome.NOT_ATTEMPTED
    assert evaluate(exercise, {"double": 3}).outcome is Outcome.INCORRECT
    crashed = evaluate(exercise, {"double": lambda x: x / "a"})
    assert crashed.outcome is Outcome.INCORRECT and "TypeError" in crashed.message


def test_check_reads_the_callers_namespace(capsys):
    toy = _toy()

    def double(x):
        return x + x

    namespace = {"double": double}
    toy.check("double", namespace)
    assert "Correct: double" in capsys.readouterr().out


def test_hints_come_in_levels_and_stop_at_the_last(capsys):
    toy = _toy()
    toy.hint("double")
    toy.hint("double")
    toy.hint("double")
    out = capsys.readouterr().out
    assert "Hint 1 of 2" in out and out.count("Hint 2 of 2") == 2 and "that was the last hint" in out


def test_unknown_exercise_names_the_known_ones():
    with pytest.raises(KeyError, match="'double'"):
        _toy().check("tripple", {})


def test_everything_is_silent_under_nbgrader(monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    toy = _toy()
    toy.check("double", {"double": lambda x: 0})
    toy.hint("double")
    toy.solution("double")
    assert capsys.readouterr().out == ""


def test_graded_exercises_have_no_solution(capsys):
    from devicelab.exercises.ps01 import _exercises

    for name, exercise in _exercises.exercises.items():
        assert exercise.solution is None
        _exercises.solution(name)
        assert "graded: no solution here" in capsys.readouterr().out


def test_feedback_renders_as_html_with_escaping():
    html = evaluate(_toy().exercises["double"], {"double": lambda x: "<b>"}).__class__(
        "double", Outcome.INCORRECT, "<script>")._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html


def _assignment_namespaces(source_path):
    """Namespaces with the instructor's and with the released student's definitions."""
    release_path = COURSE_ROOT / "release" / source_path.parent.name / source_path.name
    spaces = []
    for path in (source_path, release_path):
        namespace: dict = {}
        for cell in nbformat.read(path, as_version=4).cells:
            if grade_id(cell) == "imports" or utils.is_solution(cell):
                exec(cell.source, namespace)
        spaces.append(namespace)
    return spaces


SOURCES = sorted((COURSE_ROOT / "source").glob("*/*.ipynb"))


@pytest.mark.parametrize("source_path", SOURCES, ids=lambda p: p.stem)
def test_assignment_checks_agree_with_the_solution_and_the_stub(source_path):
    text = "\n".join(c.source for c in nbformat.read(source_path, as_version=4).cells)
    module = re.search(r"from devicelab\.exercises\.(\w+) import [^\n]*\bcheck\b", text)
    assert module, f"{source_path.name} imports check and hint from its exercise module"
    exercises = _exercise_set(module.group(1)).exercises
    solved, stub = _assignment_namespaces(source_path)
    for name, exercise in exercises.items():
        assert f'check("{name}")' in text, f"{source_path.name} lacks a check({name!r}) cell"
        assert exercise.solution is None, "graded exercises never ship a solution"
        assert len(exercise.hints) >= 2, f"{name} needs hints in levels"
        assert evaluate(exercise, solved).outcome is Outcome.CORRECT, evaluate(exercise, solved)
        assert evaluate(exercise, stub).outcome is Outcome.NOT_ATTEMPTED


def test_a_stub_is_not_attempted_but_pytorchs_own_not_implemented_error_is_a_bug():
    exercise = _toy().exercises["double"]
    for stub in ("def double(x):\n    raise NotImplementedError()",
                 "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError('replace me')"):
        assert evaluate(exercise, _namespace(stub)).outcome is Outcome.NOT_ATTEMPTED
    meta_bug = "def double(x):\n    return torch.full((), 2 * x, device='meta').cpu()"
    found = evaluate(exercise, _namespace(meta_bug))
    assert (found.outcome is Outcome.INCORRECT and "NotImplementedError" in found.message
            and "meta" in found.message)
    deeper = ("def helper():\n    raise NotImplementedError('not written')\n\ndef double(x):\n"
              "    return helper()")
    assert evaluate(exercise, _namespace(deeper)).outcome is Outcome.INCORRECT


def test_a_withheld_solution_prints_why_not_the_code(capsys):
    exercise = Exercise("stopwatch", lambda f: None, hints=("sync first",), solution="def stopwatch(): ...",
                        withheld="No worked solution here: it is graded in ps04.")
    checker(exercise).solution("stopwatch")
    out = capsys.readouterr().out
    assert "graded in ps04" in out and "hint('stopwatch')" in out and "def stopwatch" not in out


def test_lessons_with_their_own_practice_tests_check_solutions_stubs_and_wrong_answers():
    for module_name in OWN_TEST_FILE:
        (found,) = (COURSE_ROOT / "tests").rglob(f"test_{module_name}.py")
        text = found.read_text()
        assert "NOT_ATTEMPTED" in text and "INCORRECT" in text and ".solution" in text, module_name
