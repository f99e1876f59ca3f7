"""Put back the graded and read-only cells a student retyped, stripped or deleted, where nbgrader does not.

The worker turns on nbgrader's own `OverwriteCells.add_missing_cells` (off by default: then nbgrader leaves a
submission with a deleted test cell at "needs manual grading"), which re-inserts a deleted test cell after the
cell before it in the instructor's notebook. `RestoreCells` runs just before `OverwriteCells` in nbgrader's
sanitize pipeline and does only what that does not:

- a graded or read-only cell whose type or grading flags were changed becomes the instructor's again (nbgrader
  restores the type, the lock and the points, but fails the whole notebook when `grade` or `solution`
  changed);
- a deleted read-only cell (the imports) comes back: nbgrader re-inserts grade and task cells only;
- a deleted test cell that nbgrader cannot place (the cell before it is gone too, or is not graded: nbgrader
  would fail the notebook with a KeyError) is put back here;
- copies of graded cells and cells from other notebooks lose their grading metadata (they still run,
  ungraded);
- every change, nbgrader's re-insertions included, is said in plain words for the grades.csv `detail` column.

Answer cells are never invented: a deleted answer just leaves its tests failing (an answer graded by hand
comes back as released, so that it is graded, as nbgrader does).
"""

import copy
import json
from pathlib import Path

import nbformat
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from autograder.cells import grade_id
from autograder.str_enum import StrEnum

FLAGS = ("grade", "solution", "locked", "task", "points")


class Role(StrEnum):
    """What an instructor's cell is to the restorer, with how notes name it."""

    ANSWER = "answer cell"
    TEST = "test cell"
    READ_ONLY = "read-only cell"  # locked cells (imports, setup) and task cells


def _kind(cell) -> Role:
    if utils.is_solution(cell):
        return Role.ANSWER
    if utils.is_grade(cell):
        return Role.TEST
    return Role.READ_ONLY


def _flags(cell) -> tuple:
    meta = cell.metadata["nbgrader"]
    return tuple(float(meta.get(k) or 0) if k == "points" else bool(meta.get(k)) for k in FLAGS)


def _as_type(cell, cell_type: str):
    """Return a copy of `cell` converted to `cell_type`, keeping its source, id and metadata."""
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell,
            "raw": nbformat.v4.new_raw_cell}[cell_type]
    new = make(source=cell.get("source", ""), metadata=copy.deepcopy(cell.get("metadata", {})))
    if cell.get("id"):
        new["id"] = cell["id"]
    return new


def restore_cells(student: nbformat.NotebookNode, instructor: nbformat.NotebookNode
                  ) -> tuple[nbformat.NotebookNode, list[str]]:
    """Return the student's notebook with what nbgrader will not restore restored, and every change in words.
    """
    nb = copy.deepcopy(student)
    notes: list[str] = []
    wanted = [(grade_id(c), c) for c in instructor.cells if grade_id(c)]
    known = {gid for gid, _ in wanted}
    present: dict[str, object] = {}
    for cell in nb.cells:
        gid = grade_id(cell)
        if "nbgrader" in cell.get("metadata", {}) and (gid is None or gid not in known or gid in present):
            del cell.metadata["nbgrader"]  # a copy or a cell from elsewhere: it still runs, ungraded
            continue
        if gid is not None:
            present[gid] = cell
    placeable: set[str] = set()  # graded cells nbgrader can anchor a re-inserted test cell after
    for position, (gid, icell) in enumerate(wanted):
        kind = _kind(icell)
        scell = present.get(gid)
        if scell is None:
            if kind == Role.ANSWER and not utils.is_grade(icell):
                continue  # never invented; an answer graded by hand comes back as released, as nbgrader does
            notes.append(f"restored deleted {kind} '{gid}'")
            if utils.is_grade(icell) and (position == 0 or wanted[position - 1][0] in placeable):
                placeable.add(gid)  # nbgrader's add_missing_cells puts it back
                continue
            new = copy.deepcopy(icell)
            _insert(nb, new, [present.get(g) for g, _ in reversed(wanted[:position])],
                    [present.get(g) for g, _ in wanted[position + 1:]])
            present[gid] = new
        else:
            _restore_changed(nb, scell, icell, kind, gid, present, notes)
        if kind != Role.READ_ONLY and gid in present:
            placeable.add(gid)
    _unique_ids(nb)
    return nb, notes


def _restore_changed(nb, scell, icell, kind: Role, gid: str, present: dict, notes: list[str]) -> None:
    """Give a retyped or re-flagged cell back its instructor's type and flags (answers keep their code)."""
    retyped = scell.cell_type != icell.cell_type
    if not (retyped or _flags(scell) != _flags(icell)):
        return
    index = next(i for i, c in enumerate(nb.cells) if c is scell)
    if kind == Role.ANSWER:
        fixed = _as_type(scell, icell.cell_type) if retyped else scell
        fixed.metadata["nbgrader"] = copy.deepcopy(icell.metadata["nbgrader"])
        nb.cells[index] = fixed
        why = f"changed back from {scell.cell_type} to {icell.cell_type}" if retyped else "metadata restored"
        notes.append(f"{kind} '{gid}': {why}")
    else:
        nb.cells[index] = copy.deepcopy(icell)
        why = (f"it had been changed to {scell.cell_type}" if retyped
               else "its grading metadata had been edited")
        notes.append(f"restored {kind} '{gid}' ({why})")
    present[gid] = nb.cells[index]


def _insert(nb, new, before: list, after: list) -> None:
    """Insert `new` after the nearest earlier graded cell that exists, else before the nearest later one."""
    for anchor in before:
        if anchor is not None:
            index = next(i for i, c in enumerate(nb.cells) if c is anchor)
            nb.cells.insert(index + 1, new)
            return
    for anchor in after:
        if anchor is not None:
            index = next(i for i, c in enumerate(nb.cells) if c is anchor)
            nb.cells.insert(index, new)
            return
    nb.cells.append(new)


def _unique_ids(nb) -> None:
    """Give every cell a unique id (restored cells may repeat one the student reused)."""
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) < (4, 5):
        return
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        cid = cell.get("id")
        if not isinstance(cid, str) or not cid or cid in seen:
            suffix = index
            while f"cell-{suffix}" in seen:
                suffix += 1000
            cell["id"] = f"cell-{suffix}"
        seen.add(cell["id"])


class RestoreCells(NbGraderPreprocessor):
    """nbgrader sanitize step, just before OverwriteCells: restore what add_missing_cells does not; note
    changes.
    """

    release_folder = Unicode("", help="the assignment's released notebooks (the instructor's cells)").tag(
        config=True)
    notes_file = Unicode("", help="JSON lines file each change is appended to; empty: none").tag(config=True)

    def preprocess(self, nb: nbformat.NotebookNode, resources: dict) -> tuple[nbformat.NotebookNode, dict]:
        """Restore the notebook's cells from the released notebook of the same name."""
        notebook = resources["nbgrader"]["notebook"]
        instructor = nbformat.read(Path(self.release_folder) / f"{notebook}.ipynb", as_version=4)
        nb, notes = restore_cells(nb, instructor)
        if self.notes_file and notes:
            with open(self.notes_file, "a", encoding="utf-8") as handle:
                handle.writelines(json.dumps({"notebook": f"{notebook}.ipynb", "note": n}) + "\n"
                                  for n in notes)
        return nb, resources


def read_notes(path: Path) -> list[str]:
    """Return the changes RestoreCells wrote, in order."""
    if not path.is_file():
        return []
    return [json.loads(line)["note"] for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
