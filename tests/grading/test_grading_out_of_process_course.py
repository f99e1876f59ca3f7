"""The course's own out-of-process test cells: which they are, and that each passes on the solution and fails
on the released stub when it runs out of process (the student's side here run in this process, through the
same call the kernel answers)."""

import os
from pathlib import Path
from unittest import mock

import nbformat
import pytest
from nbgrader import utils

from autograder import COURSE_ROOT
from autograder.grading.remote_calls import Plan, is_marked, run_test
from tests.grading.test_grading_out_of_process_units import answer

# The cells docs/security.md lists as running out of process; every other test cell runs in the kernel.
OUT_OF_PROCESS = {
    "ps01-tensors-and-devices": {"describe-tests-basic", "describe-tests-edge", "describe-tests-views",
                                 "describe-tests-meta", "pick-device-tests-default",
                                 "pick-device-tests-prefer", "pick-device-tests-unavailable"},
    "ps02-moving-tensors": {"to-is-noop-tests"},
    "ps03-device-mismatch": {"check-same-device-tests", "check-same-device-tests-scalars",
                             "check-same-device-tests-errors"},
    "ps04-async-timing": {"bandwidth-gbps-tests-basic", "bandwidth-gbps-tests-errors"},
    "ps06-streams-and-profiling": {"copy-totals-tests-basic", "copy-totals-tests-filtering",
                                   "overlap-fraction-tests-basic", "overlap-fraction-tests-once",
                                   "overlap-fraction-tests-devices", "overlap-fraction-tests-edges",
                                   "sync-ops-tests-basic", "sync-ops-tests-threads"},
}


def notebook(folder: str, assignment: str) -> Path:
    return COURSE_ROOT / folder / assignment / f"{assignment}.ipynb"


def students_namespace(path: Path, replace: dict[str, str] | None = None) -> dict:
    """Run a notebook's cells but its tests, as the kernel would before a test, each answer whose grade_id
    `replace` names replaced by its source there; return the namespace."""
    nb = nbformat.read(path, as_version=4)
    space: dict = {"__name__": "__main__"}
    with mock.patch.dict(os.environ, {"NBGRADER_EXECUTION": "autograde"}):
        for cell in nb.cells:
            if cell.cell_type == "code" and not (utils.is_grade(cell) and not utils.is_solution(cell)):
                source = (replace or {}).get(cell.metadata.get("nbgrader", {}).get("grade_id"), cell.source)
                exec(compile(source, str(path), "exec"), space)
    return space


def test_the_tagged_cells_are_the_documented_ones():
    tagged = {}
    for path in sorted((COURSE_ROOT / "source").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cells = {c.metadata.nbgrader.grade_id for c in nb.cells if is_marked(c)}
        if cells:
            tagged[path.parent.name] = cells
    assert tagged == OUT_OF_PROCESS
    docs = (COURSE_ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    assert all(f"`{gid}`" in docs for cells in OUT_OF_PROCESS.values() for gid in cells)


@pytest.mark.parametrize("assignment", sorted(OUT_OF_PROCESS))
def test_each_tagged_cell_passes_on_the_solution_and_fails_on_the_stub_out_of_process(assignment):
    plan = Plan.read(notebook("source", assignment))
    assert set(plan.tests) == OUT_OF_PROCESS[assignment]
    for folder, passes in (("source", True), ("release", False)):
        space = students_namespace(notebook(folder, assignment))

        def call(name: str, payload: bytes, space: dict = space) -> str:
            return answer(space, name, payload)

        for gid, source in sorted(plan.tests.items()):
            run = run_test(source, plan.namespace(), call, gid)
            assert (run.status == "ok") is passes, (folder, gid, run.outputs)
