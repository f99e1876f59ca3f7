"""Never lose a student's work: before release/ is rebuilt, copy aside any notebook someone has worked in."""

import shutil
import time
from pathlib import Path

import nbformat
from nbgrader import utils

RESCUE_FOLDER = Path("mywork") / "rescued"


def has_student_work(path: Path) -> bool:
    """Return True when a release notebook holds outputs or answers that differ from the generated stub."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001  (an unreadable notebook is treated as work, to be safe)
        return True
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count")):
            return True
        if utils.is_solution(cell) and "raise NotImplementedError(" not in cell.source:
            return True
    return False


def rescue_worked_notebooks(root: Path, folder: Path) -> list[Path]:
    """Copy worked-in notebooks of a release folder to mywork/rescued/; return the copies made."""
    rescued: list[Path] = []
    if not folder.is_dir():
        return rescued
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for notebook in sorted(folder.glob("*.ipynb")):
        if has_student_work(notebook):
            target = root / RESCUE_FOLDER / folder.name / f"{notebook.stem}-{stamp}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(notebook, target)
            rescued.append(target)
    return rescued
