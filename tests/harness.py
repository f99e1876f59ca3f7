"""Run an assignment notebook's code in-process, cell by cell, and report which graded test cells pass.

Much faster than a kernel: used to prove that solutions pass, that stubs fail, and that realistic
mistakes lose points. Assignment notebooks therefore hold plain Python (no magics).
"""

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import nbformat
from nbgrader import utils

from autograder.cells import grade_id


@dataclass(frozen=True)
class CellResult:
    """The outcome of one graded test cell."""

    grade_id: str
    points: float
    passed: bool
    error: str = ""


def solution_ids(path: Path) -> list[str]:
    """Return the grade_ids of the solution (answer) code cells, in order."""
    nb = nbformat.read(path, as_version=4)
    return [grade_id(c) for c in nb.cells if c.cell_type == "code" and utils.is_solution(c)]


def run_graded_cells(path: Path, replace: dict[str, str] | None = None,
                     env: str = "validate") -> dict[str, CellResult]:
    """Execute the notebook's code cells in order; return each graded cell's result by grade_id.

    `replace` maps a solution cell's grade_id to new source (for example a student's wrong answer).
    """
    replace = dict(replace or {})
    nb = nbformat.read(path, as_version=4)
    namespace: dict = {"__name__": "__main__"}
    results: dict[str, CellResult] = {}
    with mock.patch.dict(os.environ, {"NBGRADER_EXECUTION": env}):
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            gid = grade_id(cell)
            source = replace.pop(gid, cell.source) if utils.is_solution(cell) else cell.source
            error = _execute(source, namespace, f"<{path.name} cell {index}>")
            if utils.is_grade(cell):
                results[gid] = CellResult(gid, float(cell.metadata.nbgrader.get("points", 0)), error == "",
                                          error)
    if replace:
        raise KeyError(f"no solution cell with grade_id {sorted(replace)} in {path.name}")
    return results


def _execute(source: str, namespace: dict, filename: str) -> str:
    """Run one cell's source; return '' on success or 'ExcType: message'."""
    try:
        code = compile(source, filename, "exec")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(code, namespace)
    except Exception as exc:  # noqa: BLE001  (a failing cell is a result, not a crash)
        return f"{type(exc).__name__}: {exc}"
    return ""


def score(results: dict[str, CellResult]) -> tuple[float, float]:
    """Return (points earned, points possible)."""
    return (sum(r.points for r in results.values() if r.passed), sum(r.points for r in results.values()))
