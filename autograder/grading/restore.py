"""Put back graded and locked cells that a student deleted, retyped or stripped of their metadata.

By default nbgrader leaves such a submission at "needs manual grading" (its OverwriteCells.add_missing_cells
option re-inserts deleted grade cells, but not retyped or stripped ones, nor read-only cells). Restoring the
instructor's cell first means the test simply runs: it passes when the student's code is right and fails
(0 points) when it is not. Answer cells are never invented: a deleted answer just leaves its tests failing.
Every change is reported in plain words for the grades.csv `detail` column.
"""

import copy

import nbformat

FLAGS = ("grade", "solution", "locked", "task", "points")


def _nbgrader(cell) -> dict | None:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else None


def grade_id(cell) -> str | None:
    """Return the cell's nbgrader grade_id, or None."""
    meta = _nbgrader(cell)
    gid = meta.get("grade_id") if meta else None
    return gid if isinstance(gid, str) else None


def _kind(meta: dict) -> str:
    if meta.get("solution"):
        return "answer"
    if meta.get("grade"):
        return "test"
    return "locked"  # locked read-only cells (imports, setup) and task cells


def _flags(meta: dict) -> tuple:
    return tuple(float(meta.get(k) or 0) if k == "points" else bool(meta.get(k)) for k in FLAGS)


def _as_type(cell, cell_type: str):
    """Return a copy of `cell` converted to `cell_type`, keeping its source, id and metadata."""
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell,
            "raw": nbformat.v4.new_raw_cell}[cell_type]
    new = make(source=cell.get("source", ""), metadata=copy.deepcopy(cell.get("metadata", {})))
    if cell.get("id"):
        new["id"] = cell["id"]
    return new


def _label(kind: str) -> str:
    return {"test": "test cell", "locked": "read-only cell", "answer": "answer cell"}[kind]


def restore_cells(student: nbformat.NotebookNode, instructor: nbformat.NotebookNode
                  ) -> tuple[nbformat.NotebookNode, list[str]]:
    """Return the student's notebook with the instructor's graded and locked cells restored, and what changed."""
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
    for position, (gid, icell) in enumerate(wanted):
        imeta = _nbgrader(icell)
        kind = _kind(imeta)
        scell = present.get(gid)
        if scell is None:
            if kind == "answer":
                continue
            new = copy.deepcopy(icell)
            _insert(nb, new, [present.get(g) for g, _ in reversed(wanted[:position])],
                    [present.get(g) for g, _ in wanted[position + 1:]])
            present[gid] = new
            notes.append(f"restored deleted {_label(kind)} '{gid}'")
            continue
        smeta = _nbgrader(scell)
        retyped = scell.cell_type != icell.cell_type
        edited = _flags(smeta) != _flags(imeta)
        if not (retyped or edited):
            continue
        index = next(i for i, c in enumerate(nb.cells) if c is scell)
        if kind == "answer":
            fixed = _as_type(scell, icell.cell_type) if retyped else scell
            fixed.metadata["nbgrader"] = copy.deepcopy(imeta)
            nb.cells[index] = fixed
            present[gid] = fixed
            why = f"changed back from {scell.cell_type} to {icell.cell_type}" if retyped else "metadata restored"
            notes.append(f"{_label(kind)} '{gid}': {why}")
        else:
            nb.cells[index] = copy.deepcopy(icell)
            present[gid] = nb.cells[index]
            why = f"it had been changed to {scell.cell_type}" if retyped else "its grading metadata had been edited"
            notes.append(f"restored {_label(kind)} '{gid}' ({why})")
    _unique_ids(nb)
    return nb, notes


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
