"""Small notebooks built in code, for tests of the course tooling."""

import nbformat


def solution_cell_meta(grade_id: str) -> dict:
    """Return nbgrader metadata for a solution cell."""
    return {"nbgrader": {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
                         "solution": True, "task": False}}


def graded_cell_meta(grade_id: str, points: float = 1) -> dict:
    """Return nbgrader metadata for a graded, locked test cell."""
    return {"nbgrader": {"grade": True, "grade_id": grade_id, "locked": True, "points": points,
                         "schema_version": 3, "solution": False, "task": False}}


def tiny_assignment(solution_body: str = "return 2 * x") -> nbformat.NotebookNode:
    """Return a one-exercise assignment notebook (`double`) with a visible and a hidden test."""
    v4 = nbformat.v4
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_markdown_cell("# Tiny\nWrite `double`."),
        v4.new_code_cell('def double(x):\n    """Return 2x."""\n    ### BEGIN SOLUTION\n'
                         f'    {solution_body}\n'
                         "    ### END SOLUTION", metadata=solution_cell_meta("double")),
        v4.new_code_cell("assert double(2) == 4, 'double(2) should be 4'\n### BEGIN HIDDEN TESTS\n"
                         "assert double(-3) == -6, 'negative numbers too'\n### END HIDDEN TESTS",
                         metadata=graded_cell_meta("double-tests", 2)),
    ]
    return nb
