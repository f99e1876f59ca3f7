"""The assignment as nbgrader generates it: made once per version of what it is made of, reused by later runs.

A grading run needs the assignment generated twice: into a template course the workers copy (its gradebook and
release/), and into the course gradebook (the cells each student's scores are recorded against). Both cost
an nbgrader run in a child process. The template is kept in the output folder under the digest of everything
it is made of (the assignment's source folder, nbgrader_config.py, autotests.yml, nbgrader's version); the
course gradebook is generated into again only when its definition of the assignment differs from the
template's.
"""

import os
import shutil
from pathlib import Path

import nbgrader

from autograder.course import CONFIG_FILE
from autograder.grading import gradebook as gbook
from autograder.grading.results import fingerprint, hash_tree
from autograder.grading.submissions import regular_files

CACHE_FOLDER = ".template-cache"
COMPLETE = "complete"  # written last: a folder without it was interrupted while being made


def template_key(root: Path, assignment: str) -> str:
    """Return the digest of everything the generated assignment is made of."""
    source = root / "source" / assignment
    extras = [root / name for name in (CONFIG_FILE, gbook.AUTOTESTS) if (root / name).is_file()]
    return fingerprint(hash_tree(regular_files(source), source), hash_tree(extras, root),
                       nbgrader.__version__)


def cached_template(root: Path, assignment: str, cache: Path, dest: Path) -> tuple[Path, bool]:
    """Copy the generated assignment into `dest` (generating it first when the cache has no current copy).

    Return (dest, reused). Older versions in the cache are removed.
    """
    key = template_key(root, assignment)
    kept = cache / key
    reused = (kept / COMPLETE).is_file()
    if not reused:
        cache.mkdir(parents=True, exist_ok=True)
        making = cache / f".{key}.{os.getpid()}"
        shutil.rmtree(making, ignore_errors=True)
        gbook.generate_apart(root, assignment, making)
        (making / COMPLETE).write_text(key, encoding="utf-8")
        shutil.rmtree(kept, ignore_errors=True)
        os.replace(making, kept)
        for old in cache.iterdir():
            if old.name != key:
                shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(kept, dest, ignore=shutil.ignore_patterns(COMPLETE))
    return dest, reused


def definition(db_url: str, course: str, assignment: str) -> dict | None:
    """Return how a gradebook defines an assignment (its notebooks' cells, points and checksums), or None."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course) as gb:
        try:
            found = gb.find_assignment(assignment)
        except MissingEntry:
            return None
        return {nb.name: {"grade": sorted((c.name, float(c.max_score or 0), c.cell_type)
                                          for c in nb.grade_cells),
                          "solution": sorted(c.name for c in nb.solution_cells),
                          "task": sorted((c.name, float(c.max_score or 0)) for c in nb.task_cells),
                          "source": sorted((c.name, c.cell_type, c.locked, c.checksum or "")
                                           for c in nb.source_cells)}
                for nb in found.notebooks}


def copy_definition(source_url: str, target_url: str, course: str, assignment: str) -> None:
    """Give the target gradebook the assignment's notebooks and cells as the source has them (what nbgrader's
    SaveCells writes), through nbgrader's API; the assignment's own row, with its due date, is kept."""
    from nbgrader.api import Gradebook

    with Gradebook(source_url, course) as source, Gradebook(target_url, course) as target:
        target.update_or_create_assignment(assignment)
        for nb in source.find_assignment(assignment).notebooks:
            target.add_notebook(nb.name, assignment, kernelspec=nb.kernelspec)
            for c in nb.grade_cells:
                target.update_or_create_grade_cell(c.name, nb.name, assignment, max_score=c.max_score,
                                                   cell_type=c.cell_type)
            for c in nb.solution_cells:
                target.update_or_create_solution_cell(c.name, nb.name, assignment)
            for c in nb.task_cells:
                target.update_or_create_task_cell(c.name, nb.name, assignment, max_score=c.max_score,
                                                  cell_type=c.cell_type)
            for c in nb.source_cells:
                target.update_or_create_source_cell(c.name, nb.name, assignment, cell_type=c.cell_type,
                                                    locked=c.locked, source=c.source, checksum=c.checksum)


def register(root: Path, assignment: str, template: Path, db_url: str, course: str, scratch: Path) -> bool:
    """Define the assignment in the course gradebook as the template does; return False if it already was.

    A gradebook without the assignment's notebooks gets the template's definition copied (no second nbgrader
    run); one that defines them otherwise is generated into by nbgrader, which knows what may change once
    students have submitted.
    """
    template_url = f"sqlite:///{template / 'gradebook.db'}"
    wanted = definition(template_url, course, assignment)
    gbook.ensure_schema(db_url)  # a new gradebook: made here, not by nbgrader's `alembic heads` (1.2 s)
    have = definition(db_url, course, assignment)
    if wanted is not None and have == wanted:
        return False
    if wanted is not None and not have:  # not in the gradebook, or only its name and due date
        copy_definition(template_url, db_url, course, assignment)
        if definition(db_url, course, assignment) == wanted:
            return True
    gbook.generate_apart(root, assignment, scratch, db_url=db_url)
    return True
