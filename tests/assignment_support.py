"""Checks shared by the tests of the graded assignments (tests/exercises/test_ps0*.py).

Each takes the assignment's notebook path and its tables:
- CELLS_OF: exercise (its solution cell's grade_id) -> the grade_ids of the graded cells that check it;
- POINTS_OF: exercise -> its points, and TOTAL, their sum;
- HEADS: exercise -> the first lines of its solution cell, `def name(...):` and a one-line docstring.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

import nbformat
import pytest
from nbgrader import utils

from autograder import COURSE_ROOT
from autograder.cells import grade_id
from autograder.checks import source_problems
from tests.harness import run_graded_cells, score, solution_ids

CellsOf = Mapping[str, Sequence[str]]
IMPORTS_METADATA = {"grade": False, "grade_id": "imports", "locked": True, "schema_version": 3,
                    "solution": False, "task": False}


# ----------------------------------------------------------------------------------------------------------
# Writing answers


def function_cell(head: str, body: str) -> str:
    """Return a solution cell: `head` (signature and docstring), then `body` (written flush left) indented."""
    return head + "".join(f"    {line}\n" if line else "\n" for line in body.strip("\n").split("\n"))


def signature(head: str) -> str:
    """Return the `def name(...):` line of a solution cell's head."""
    return head.split("\n")[0]


def correct_cases(correct: Mapping[str, Mapping[str, str]], heads: Mapping[str, str]) -> list:
    """Return a test case (exercise, cell source) for each {exercise: {name: body}} of `correct`."""
    return [pytest.param(gid, function_cell(heads[gid], body), id=f"{gid}-{name}")
            for gid, answers in correct.items() for name, body in answers.items()]


def mistake_cases(mistakes: Mapping[tuple[str, str, str], str], heads: Mapping[str, str]) -> list:
    """Return a test case (exercise, cell source, catching cell) for each (exercise, name, cell): body."""
    return [pytest.param(gid, function_cell(heads[gid], body), cell, id=f"{gid}-{name}")
            for (gid, name, cell), body in mistakes.items()]


# ----------------------------------------------------------------------------------------------------------
# Grading results


def failing(results: dict) -> list[str]:
    """Return the grade_ids of the graded cells that failed."""
    return [gid for gid, r in results.items() if not r.passed]


def report(results: dict) -> str:
    """Return one line per graded cell: ok, or its error."""
    return "; ".join(f"{gid}: {'ok' if r.passed else r.error}" for gid, r in results.items())


def assert_all_pass(results: dict) -> None:
    """Check that every graded cell passed."""
    assert failing(results) == [], report(results)


def assert_runs(source: str, results: dict) -> None:
    """Check that a mistake fails for its own reasons, not because the cell itself is broken."""
    compile(source, "<mistake>", "exec")
    broken = [r.error for r in results.values() if r.error.startswith("NameError")]
    assert broken == [], f"the mistake's cell did not define its function: {broken}"


def graded_cell_ids(cells_of: CellsOf) -> list[str]:
    """Return the grade_ids of all the graded cells, exercise by exercise."""
    return [g for cells in cells_of.values() for g in cells]


def cells_outside(cells_of: CellsOf, exercise: str) -> list[str]:
    """Return the grade_ids of the graded cells of every exercise except `exercise`."""
    return [g for other, cells in cells_of.items() if other != exercise for g in cells]


# ----------------------------------------------------------------------------------------------------------
# The notebook itself


def code_cells(notebook: Path) -> list:
    """Return the notebook's code cells."""
    return [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]


def solution_sources(code: list) -> dict[str, str]:
    """Return each solution cell's source by grade_id."""
    return {grade_id(c): c.source for c in code if utils.is_solution(c)}


def graded_cells(code: list) -> list:
    """Return the graded (test) cells, in order."""
    return [c for c in code if utils.is_grade(c)]


def points_by_cell(graded: list) -> dict[str, float]:
    """Return each graded cell's points by grade_id."""
    return {grade_id(c): c.metadata["nbgrader"]["points"] for c in graded}


def imports_cell(code: list) -> nbformat.NotebookNode:
    """Return the first code cell, not counting the Colab set-up cell that `make build` adds."""
    return next(c for c in code if "colab-setup" not in c.metadata.get("tags", []))


def assert_well_formed_cells(notebook: Path, code: list, cells_of: CellsOf, heads: Mapping[str, str],
                             visible_checks: tuple[str, ...] = ("assert ",)) -> list:
    """Check the imports cell, plain Python, solution signatures and graded cells; return the graded cells."""
    assert source_problems(notebook) == []
    assert imports_cell(code).metadata["nbgrader"] == IMPORTS_METADATA
    assert not any(line.lstrip().startswith(("%", "!")) for c in code for line in c.source.splitlines()), (
        "assignment notebooks are plain Python (the harness runs them in-process)"
    )
    assert solution_ids(notebook) == list(cells_of)
    solutions = solution_sources(code)
    for exercise, head in heads.items():
        opening = signature(head) + '\n    """'
        assert solutions[exercise].startswith(opening), f"{exercise}: the signature, then a docstring"
    graded = graded_cells(code)
    assert [grade_id(c) for c in graded] == graded_cell_ids(cells_of)
    for cell in graded:
        visible, hidden = cell.source.split("### BEGIN HIDDEN TESTS")
        assert any(check in visible for check in visible_checks), f"{grade_id(cell)} needs a visible check"
        assert "### END HIDDEN TESTS" in hidden
    return graded


def assert_locked_and_marked(notebook: Path, code: list, cells_of: CellsOf,
                             points_of: Mapping[str, float]) -> None:
    """Check one-line docstrings, END markers, locked graded cells and the points in each heading."""
    for exercise, source in solution_sources(code).items():
        docstring, body = source.split("### BEGIN SOLUTION")
        assert docstring.count('"""') == 2, f"{exercise}: a one-line docstring above the solution"
        assert body.rstrip().endswith("### END SOLUTION")
    graded = graded_cells(code)
    for cell in graded:
        assert cell.metadata["nbgrader"]["locked"] is True
        assert cell.source.split("### BEGIN HIDDEN TESTS")[1].rstrip().endswith("### END HIDDEN TESTS")
    points = points_by_cell(graded)
    markdown = [c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown"]
    for exercise, cells in cells_of.items():
        assert sum(points[g] for g in cells) == points_of[exercise]
        heading = next(source for source in markdown
                       if source.startswith("## ") and f"`{exercise.replace('-', '_')}`" in source)
        assert f"({points_of[exercise]} points)" in heading.splitlines()[0]


# ----------------------------------------------------------------------------------------------------------
# Marks


def student_stubs(notebook: Path) -> dict[str, str]:
    """Return each solution cell as nbgrader's ClearSolutions gives it to students, with the course's stub."""
    from nbgrader.preprocessors import ClearSolutions
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(COURSE_ROOT)).load_config()
    nb, _ = ClearSolutions(config=config).preprocess(nbformat.read(notebook, as_version=4), {})
    return {grade_id(c): c.source for c in nb.cells
            if c.cell_type == "code" and utils.is_solution(c)}


def assert_reference_solutions_get_full_marks(notebook: Path, cells_of: CellsOf, total: float) -> None:
    """Check that the notebook as written passes every graded cell and earns `total`."""
    results = run_graded_cells(notebook)
    assert set(results) == set(graded_cell_ids(cells_of))
    assert_all_pass(results)
    assert score(results) == (total, total)


def assert_stubs_fail_every_graded_cell(notebook: Path, stubs: dict[str, str],
                                        heads: Mapping[str, str]) -> dict:
    """Check that the stubs keep the signatures in `heads`, raise NotImplementedError and earn nothing."""
    for source in stubs.values():
        assert "raise NotImplementedError(" in source and "### BEGIN SOLUTION" not in source
    for exercise, head in heads.items():
        assert stubs[exercise].startswith(signature(head)), "the signature stays visible"
    results = run_graded_cells(notebook, replace=stubs)
    assert [gid for gid, r in results.items() if r.passed] == [], report(results)
    assert score(results)[0] == 0
    return results


def assert_one_exercise_earns_its_points_alone(notebook: Path, done: str, cells_of: CellsOf,
                                               points_of: Mapping[str, float]) -> None:
    """Check that with every other exercise left as a stub, `done` passes its own cells for its points."""
    stubs = student_stubs(notebook)
    del stubs[done]
    results = run_graded_cells(notebook, replace=stubs)
    assert sorted(gid for gid, r in results.items() if r.passed) == sorted(cells_of[done]), report(results)
    assert score(results)[0] == points_of[done]


class AssignmentContract:
    """What every assignment satisfies. A test module subclasses it as `TestContract` and sets the attributes;
    conftest.py runs the last test once per exercise."""

    NOTEBOOK: Path
    CELLS_OF: CellsOf
    POINTS_OF: Mapping[str, float]
    HEADS: Mapping[str, str]  # each solution's signature (and a docstring line)
    # the signatures the students' stubs must keep (default: HEADS)
    STUB_HEADS: Mapping[str, str] | None = None
    VISIBLE_CHECKS: tuple[str, ...] = ("assert ",)  # what a visible test looks like

    def test_notebook_is_a_well_formed_assignment(self):
        code = code_cells(self.NOTEBOOK)
        assert_well_formed_cells(self.NOTEBOOK, code, self.CELLS_OF, self.HEADS, self.VISIBLE_CHECKS)
        assert_locked_and_marked(self.NOTEBOOK, code, self.CELLS_OF, self.POINTS_OF)

    def test_reference_solutions_get_full_marks(self):
        assert_reference_solutions_get_full_marks(self.NOTEBOOK, self.CELLS_OF, sum(self.POINTS_OF.values()))

    def test_student_stubs_fail_every_graded_cell(self):
        stubs = student_stubs(self.NOTEBOOK)
        assert set(stubs) == set(self.CELLS_OF)
        results = assert_stubs_fail_every_graded_cell(self.NOTEBOOK, stubs, self.STUB_HEADS or self.HEADS)
        assert all("NotImplementedError" in r.error for r in results.values()), report(results)

    def test_one_exercise_done_earns_its_points_alone(self, exercise_done):
        assert_one_exercise_earns_its_points_alone(self.NOTEBOOK, exercise_done, self.CELLS_OF,
                                                   self.POINTS_OF)


def assert_mistake_loses_points(notebook: Path, exercise: str, source: str, cells_of: CellsOf,
                                total: float, caught_by: str | None = None) -> None:
    """Check that `source` as `exercise` fails `caught_by` (or one of its cells) and no other exercise's."""
    results = run_graded_cells(notebook, replace={exercise: source})
    assert_runs(source, results)
    catching = cells_of[exercise] if caught_by is None else (caught_by,)
    assert [gid for gid in catching if not results[gid].passed], (
        f"not caught by {' or '.join(catching)}: {report(results)}")
    assert score(results)[0] < total
    assert all(results[g].passed for g in cells_outside(cells_of, exercise)), (
        f"other exercises' points must not depend on {exercise}: {report(results)}"
    )
