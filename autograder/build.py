"""Generate release/ from source/ with nbgrader, in a scratch course, so a failure leaves release/ untouched."""

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograder.checks import source_problems
from autograder.colab import decorate_file, load_repository, update_readme
from autograder.notebooks import assignment_notebooks, lessons
from autograder.notebooks import assignments as all_assignments
from autograder.rescue import rescue_worked_notebooks
from autograder.tidy import tidy_file


class BuildError(RuntimeError):
    """The release could not be built; the message names the file and cell."""


def course_config(root: Path, scratch: Path | None = None) -> Config:
    """Load the course's nbgrader_config.py (none is fine, as for nbgrader), optionally pointed at a scratch root.

    The course root is the folder given, as nbgrader's is the folder it runs in, unless the file says otherwise.
    """
    config = (PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
              if (root / "nbgrader_config.py").is_file() else Config())
    if "root" not in config.CourseDirectory:
        config.CourseDirectory.root = str(root)
    if scratch is not None:
        config.CourseDirectory.root = str(scratch)
        config.CourseDirectory.db_url = f"sqlite:///{scratch / 'gradebook.db'}"
    return config


def course_directory(root: Path, scratch: Path | None = None):
    """Return nbgrader's CourseDirectory for the course: its settings with nbgrader's own defaults filled in."""
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


def generate(root: Path, scratch: Path, assignment: str) -> Path:
    """Run nbgrader's generate_assignment for one assignment in `scratch`; return its release folder."""
    from nbgrader.apps import NbGraderAPI

    shutil.copytree(root / "source" / assignment, scratch / "source" / assignment)
    with venv_on_path():
        api = NbGraderAPI(config=course_config(root, scratch))
        result = api.generate_assignment(assignment, force=True, create=True)
    if not result.get("success"):
        detail = (result.get("error") or "") + (result.get("log") or "")
        raise BuildError(f"nbgrader could not generate {assignment}:\n{detail.strip()}")
    release = scratch / "release" / assignment
    for notebook in release.glob("*.ipynb"):
        tidy_file(notebook)
    return release


def build_release(root: Path, assignments: list[str] | None = None) -> list[Path]:
    """Rebuild release/<id>/ for the given assignments (all by default); return the notebooks written."""
    wanted = assignments or all_assignments(root)
    unknown = [a for a in wanted if not (root / "source" / a).is_dir()]
    if unknown:
        raise BuildError(f"no such assignment in source/: {', '.join(unknown)} "
                         f"(have: {', '.join(all_assignments(root))})")
    sources = [nb for a in wanted for nb in assignment_notebooks(a, root)]
    problems = [p for nb in sources for p in source_problems(nb)]
    if problems:
        raise BuildError("malformed source notebook:\n  " + "\n  ".join(problems))
    repo = load_repository(root)
    for notebook in lessons(root) + sources:
        decorate_file(notebook, root, repo)
    with tempfile.TemporaryDirectory(prefix="devicelab-build-") as tmp:
        built = {a: generate(root, Path(tmp), a) for a in wanted}
        written: list[Path] = []
        for assignment, folder in built.items():
            target = root / "release" / assignment
            for copy in rescue_worked_notebooks(root, target):
                print(f"kept your work: {copy.relative_to(root)} (release/ is regenerated; work in mywork/)")
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(folder, target)
            written += sorted(target.glob("*.ipynb"))
    for notebook in written:
        decorate_file(notebook, root, repo)
    if assignments is None:
        _remove_stale(root, set(wanted))
    update_readme(root, repo)
    return written


def _remove_stale(root: Path, current: set[str]) -> None:
    """Drop release folders whose assignment no longer exists in source/."""
    release = root / "release"
    if release.is_dir():
        for folder in release.iterdir():
            if folder.is_dir() and folder.name not in current:
                shutil.rmtree(folder)
