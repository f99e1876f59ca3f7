"""Shared fixtures: the course root and scratch copies of a course for build and validate tests."""

import os
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder import COURSE_ROOT
from tests.factories import tiny_assignment
from tests.markers import mark_by_use
from tests.schedule import longest_first, module_of


def share_cores_between_workers() -> None:
    """Under xdist, give each worker (and the kernels and graders it starts) its share of the cores.

    Torch's OpenMP threads busy-wait; with every worker's processes asking for all cores, a CPU-bound lesson
    ran ten times slower in the full suite than alone (05: 132 s against 12 s on 2 cores).
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        share = str(max(1, cores // workers))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(name, share)


share_cores_between_workers()


@pytest.fixture(scope="module")
def machine_of_its_own():
    """For a module whose hubs change the machine's network (nodes' addresses and links): a machine of its
    own (`network_of_its_own`), so that no other test's browser sees the changes."""
    from tests.hub_support import hub_tests_or_skip, network_of_its_own  # (1 s of imports: only where used)

    hub_tests_or_skip()
    with network_of_its_own():
        yield


@pytest.fixture
def course_root() -> Path:
    """The real course root (the repository)."""
    return COURSE_ROOT


@pytest.fixture
def scratch_course(tmp_path: Path) -> Path:
    """A scratch course with the real nbgrader_config.py and pyproject.toml and one tiny assignment `tiny`."""
    for name in ("nbgrader_config.py", "pyproject.toml"):
        shutil.copy(COURSE_ROOT / name, tmp_path / name)
    folder = tmp_path / "source" / "tiny"
    folder.mkdir(parents=True)
    nbformat.write(tiny_assignment(), folder / "tiny.ipynb")
    return tmp_path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the hub's tests `hub` (`make hub-test` selects them), every test `browser` or `notebook` by what
    it and its fixtures run (tests/markers.py), and put the longest modules first, so that the parallel run
    starts them first (tests/schedule.py)."""
    for item in items:
        if module_of(item.nodeid).startswith("test_hub_"):
            item.add_marker(pytest.mark.hub)
    mark_by_use(items)
    items[:] = [items[i] for i in longest_first([item.nodeid for item in items])]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run an assignment's per-exercise contract test (tests/assignment_support.py) once per exercise."""
    if "exercise_done" in metafunc.fixturenames:
        metafunc.parametrize("exercise_done", list(metafunc.cls.CELLS_OF))
