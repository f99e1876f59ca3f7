"""A notebook cell's nbgrader identity; its kind comes from nbgrader.utils (is_grade, is_solution, is_locked).
"""


def grade_id(cell) -> str | None:
    """Return the cell's nbgrader grade_id, or None (also for malformed metadata in a student's raw JSON)."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    nbgrader = meta.get("nbgrader") if isinstance(meta, dict) else None
    gid = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    return gid if isinstance(gid, str) else None
