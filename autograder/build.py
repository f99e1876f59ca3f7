"""Generate release/ from source/ with nbgrader, in a scratch course, so a failure leaves release/ untouched.
"""

import shutil
import tempfile
from pathlib import Path

from autograder.checks import source_problems
from autograder.colab_cells import decorate_file, load_repository, update_badge_page, update_install_lines
from autograder.course import assignment_notebooks, lessons
from autograder.course import assignments as all_assignments
from autograder.grading import gradebook
from autograder.grading.errors import GradebookError
from autograder.rescue import rescue_worked_notebooks
from autograder.tidy import tidy_file


class BuildError(RuntimeError):
    """The release could not be built; the message names the file and cell."""


def generate(root: Path, scratch: Path, assignment: str) -> Path:
    """Run nbgrader's generate_assignment for one assignment in `scratch`; return its tidied release folder.
    """
    try:
        gradebook.generate(root, assignment, scratch)
    except GradebookError as exc:
        raise BuildError(str(exc)) from exc
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
    update_badge_page(root, repo)
    update_install_lines(root, repo)
    return written


def _remove_stale(root: Path, current: set[str]) -> None:
    """Drop release folders whose assignment no longer exists in source/."""
    release = root / "release"
    if release.is_dir():
        for folder in release.iterdir():
            if folder.is_dir() and folder.name not in current:
                shutil.rmtree(folder)
