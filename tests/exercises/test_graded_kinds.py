"""What the graded work asks of a student: most of the points go to applying a lesson to a new situation or
diagnosing a problem in given code, not to turning a precise docstring into code.

Each graded part's solution cell carries one tag saying what its prompt asks (CONTRIBUTING, "What a part
asks"): `asks-recall` (repeats a lesson line), `asks-specification` (the prompt says exactly what to code),
`asks-application` (a new situation that needs the lesson's idea) or `asks-diagnosis` (find the problem in
given code, a traceback or a trace). A part's points are those of its test cells.
"""

from collections import Counter
from pathlib import Path

import nbformat
import pytest

from autograder import COURSE_ROOT
from autograder.course import assignment_notebooks, assignments

KINDS = ("recall", "specification", "application", "diagnosis")
SHARE_APPLIED = 0.6  # of all points, at least, for application and diagnosis (issue 59)


def graded_parts(root: Path = COURSE_ROOT) -> dict[str, tuple[str | None, float]]:
    """Return {assignment/part: (what it asks, its points)} over every source notebook of the course at
    `root`."""
    parts: dict[str, tuple[str | None, float]] = {}
    points: Counter = Counter()
    for assignment in assignments(root):
        for path in assignment_notebooks(assignment, root):
            for cell in nbformat.read(path, as_version=4).cells:
                grading = cell.metadata.get("nbgrader", {})
                name = grading.get("grade_id", "")
                if grading.get("solution") and not grading.get("grade"):
                    tags = cell.metadata.get("tags", [])
                    asks = [t.removeprefix("asks-") for t in tags if t.startswith("asks-")]
                    parts[f"{assignment}/{name}"] = (asks[0] if len(asks) == 1 else ",".join(asks) or None, 0)
                if grading.get("grade") and grading.get("points"):
                    points[f"{assignment}/{name.split('-tests')[0]}"] += grading["points"]
    return {part: (asks, points[part]) for part, (asks, _) in parts.items() if points[part]}


def test_every_graded_part_says_what_it_asks():
    parts = graded_parts()
    assert parts, "no graded parts found"
    unsaid = sorted(part for part, (asks, _) in parts.items() if asks not in KINDS)
    assert not unsaid, (f"tag each part's solution cell with one of {['asks-' + k for k in KINDS]}: "
                        f"{unsaid}")


def test_most_points_go_to_application_and_diagnosis():
    parts = graded_parts()
    by_kind = Counter()
    for asks, points in parts.values():
        by_kind[asks] += points
    total = sum(by_kind.values())
    applied = by_kind["application"] + by_kind["diagnosis"]
    assert applied >= SHARE_APPLIED * total, (
        f"{applied:g} of {total:g} points ({applied / total:.0%}) ask for application or diagnosis; "
        f"at least {SHARE_APPLIED:.0%} should: {dict(by_kind)}")


@pytest.mark.parametrize("kind", ["application", "diagnosis"])
def test_the_count_reads_the_tags_and_the_test_cells_points(kind, tmp_path):
    """A made-up course of two parts, one of `kind` and one not: each part gets its tag and its points."""
    folder = tmp_path / "source" / "ps99-made-up"
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    for name, asks, points in (("a", kind, 3), ("b", "specification", 2)):
        nb.cells.append(nbformat.v4.new_code_cell(f"def {name}():\n    pass", metadata={
            "nbgrader": {"solution": True, "grade": False, "grade_id": name}, "tags": [f"asks-{asks}"]}))
        for part in ("basic", "edges"):
            nb.cells.append(nbformat.v4.new_code_cell("assert True", metadata={
                "nbgrader": {"solution": False, "grade": True, "grade_id": f"{name}-tests-{part}",
                             "points": points}}))
    nbformat.write(nb, folder / "ps99-made-up.ipynb")
    assert graded_parts(tmp_path) == {"ps99-made-up/a": (kind, 6), "ps99-made-up/b": ("specification", 4)}
