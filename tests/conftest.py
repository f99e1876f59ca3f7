"""Shared fixtures: the course root and scratch copies of a course for build and validate tests."""

import shutil
from pathlib import Path

import nbformat
import pytest

from autograder import COURSE_ROOT
from tests.factories import tiny_assignment


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run an assignment's per-exercise contract test (tests/assignment_support.py) once per exercise."""
    if "exercise_done" in metafunc.fixturenames:
        metafunc.parametrize("exercise_done", list(metafunc.cls.CELLS_OF))
