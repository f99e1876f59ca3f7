"""Find the course's notebooks and assignments."""

from collections.abc import Iterator
from pathlib import Path

from autograder import COURSE_ROOT, NOTEBOOK_DIRS


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
    return sorted(p.name for p in base.iterdir() if p.is_dir() and any(p.glob("*.ipynb"))) if base.is_dir() else []


def assignment_notebooks(assignment: str, root: Path = COURSE_ROOT, folder: str = "source") -> list[Path]:
    """Return the notebooks of one assignment, sorted."""
    return sorted((root / folder / assignment).glob("*.ipynb"))


def iter_code_cells(nb) -> Iterator[tuple[int, dict]]:
    """Yield (index, cell) for every code cell of a notebook node."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            yield index, cell
