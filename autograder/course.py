"""The course: where it is, its notebooks and assignments, its nbgrader settings, and how nbgrader is run for
it.
"""

import contextlib
import copy
import functools
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

COURSE_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIRS = ("notebooks", "source", "release")
CONFIG_FILE = "nbgrader_config.py"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: |$)")


def course_notebooks(root: Path = COURSE_ROOT, dirs: tuple[str, ...] = NOTEBOOK_DIRS) -> list[Path]:
    """Return every committed-style notebook under the course folders, sorted."""
    found: list[Path] = []
    for name in dirs:
        found += [p for p in (root / name).rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts]
    return sorted(found)


def lessons(root: Path = COURSE_ROOT) -> list[Path]:
    """Return the lesson notebooks in reading order."""
    return sorted((root / "notebooks").glob("*.ipynb"))


def assignments(root: Path = COURSE_ROOT, folder: str = "source") -> list[str]:
    """Return the assignment ids that have a folder under `folder`, sorted."""
    base = root / folder
    return sorted(p.name for p in base.iterdir() if p.is_dir()
                  and any(p.glob("*.ipynb"))) if base.is_dir() else []


def assignment_notebooks(assignment: str, root: Path = COURSE_ROOT, folder: str = "source") -> list[Path]:
    """Return the notebooks of one assignment, sorted."""
    return sorted((root / folder / assignment).glob("*.ipynb"))


@functools.lru_cache(maxsize=16)
def _load_config(folder: str, version: tuple[int, int, int] | None) -> Config:
    """Execute a course's nbgrader_config.py once per version of the file (`version`: None when there is
    none).
    """
    return PyFileConfigLoader(CONFIG_FILE, path=folder).load_config() if version is not None else Config()


def course_config(root: Path, scratch: Path | None = None) -> Config:
    """Return the course's nbgrader_config.py (none is fine, as for nbgrader), optionally pointed at a scratch
    root.

    The file is executed once per process and version (a grading run's workers, forked from it, inherit it);
    each caller gets its own copy. The course root is the folder given, as nbgrader's is the folder it runs
    in, unless the file says otherwise.
    """
    try:
        stat = (root / CONFIG_FILE).stat()
        version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    except FileNotFoundError:
        version = None
    config = copy.deepcopy(_load_config(str(root), version))
    if "root" not in config.CourseDirectory:
        config.CourseDirectory.root = str(root)
    if scratch is not None:
        config.CourseDirectory.root = str(scratch)
        config.CourseDirectory.db_url = f"sqlite:///{scratch / 'gradebook.db'}"
    return config


def course_directory(root: Path, scratch: Path | None = None):
    """Return nbgrader's CourseDirectory for the course: its settings with nbgrader's own defaults filled in.
    """
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=course_config(root, scratch))


def with_venv_on_path() -> dict[str, str]:
    """Return os.environ with this interpreter's bin/ first on PATH (nbgrader runs `alembic`)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@contextlib.contextmanager
def venv_on_path() -> Iterator[None]:
    """Put this interpreter's bin/ first on PATH for the duration of the block (nbgrader runs `alembic`)."""
    with mock.patch.dict(os.environ, {"PATH": with_venv_on_path()["PATH"]}):
        yield


def error_line(text: str, default: str = "failed") -> str:
    """Return the line of nbgrader's log or a traceback that says what went wrong ("AssertionError: ...")."""
    lines = [ANSI.sub("", ln).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("[INFO]", "File "))]
    if lines and EXCEPTION_LINE.match(lines[-1]):  # a traceback ends with the exception
        return lines[-1]
    return next((ln for ln in reversed(lines) if "Error" in ln or "Cannot" in ln),
                lines[-1] if lines else default)
