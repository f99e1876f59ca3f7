"""Both directions for every assignment, fast and in-process: solutions pass every test, stubs fail every one.
"""

import pytest

from autograder import COURSE_ROOT
from autograder.course import assignment_notebooks, assignments
from tests.harness import run_graded_cells, score

SOURCES = [nb for a in assignments() for nb in assignment_notebooks(a)]


def _id(path):
    return path.name


@pytest.mark.parametrize("source", SOURCES, ids=_id)
def test_solution_earns_full_marks(source):
    results = run_graded_cells(source)
    assert results, f"{source.name} has no graded cells"
    failing = {gid: r.error for gid, r in results.items() if not r.passed}
    assert not failing, f"the instructor solution fails: {failing}"


@pytest.mark.parametrize("source", SOURCES, ids=_id)
def test_release_stub_fails_every_graded_cell(source):
    release = COURSE_ROOT / "release" / source.parent.name / source.name
    results = run_graded_cells(release)
    passing = [gid for gid, r in results.items() if r.passed]
    assert not passing, f"these test cells pass on the untouched student version: {passing}"
    assert score(results)[0] == 0
