"""Catch malformed source notebooks before nbgrader does, and say which file and cell are wrong."""

import re
from pathlib import Path

import nbformat

GRADE_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MARKER_PAIRS = (("### BEGIN SOLUTION", "### END SOLUTION"),
                ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"))


def _where(path: Path, index: int, meta: dict) -> str:
    grade_id = meta.get("grade_id")
    return f"{path}: cell {index}" + (f" (grade_id {grade_id!r})" if grade_id else "")


def source_problems(path: Path) -> list[str]:
    """Return what is wrong with one source notebook, each naming the file and the cell."""
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001  (any unreadable file is reported, not raised)
        return [f"{path}: not a valid notebook ({type(exc).__name__}: {exc})"]
    problems: list[str] = []
    seen: dict[str, int] = {}
    graded = 0
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader")
        source = cell.source
        for begin, end in MARKER_PAIRS:
            if source.count(begin) != source.count(end):
                problems.append(f"{_where(path, index, meta or {})}: '{begin}' and '{end}' do not pair up")
        if meta is None:
            if "### BEGIN SOLUTION" in source or "### BEGIN HIDDEN TESTS" in source:
                problems.append(f"{_where(path, index, {})}: has nbgrader markers but no nbgrader metadata")
            continue
        where = _where(path, index, meta)
        grade_id = meta.get("grade_id")
        if not isinstance(grade_id, str) or not GRADE_ID.match(grade_id):
            problems.append(f"{where}: grade_id must be kebab-case, e.g. 'to-device-tests'")
        elif grade_id in seen:
            problems.append(f"{where}: grade_id also used by cell {seen[grade_id]}")
        else:
            seen[grade_id] = index
        if meta.get("grade"):
            graded += 1
            points = meta.get("points")
            if not isinstance(points, int | float) or isinstance(points, bool) or points < 0:
                problems.append(f"{where}: a graded cell needs 'points', a number >= 0")
        if meta.get("solution") and cell.cell_type == "code" and "### BEGIN SOLUTION" not in source:
            problems.append(f"{where}: a solution cell needs '### BEGIN SOLUTION' ... '### END SOLUTION'")
        if "### BEGIN HIDDEN TESTS" in source and not meta.get("grade"):
            problems.append(f"{where}: hidden tests belong in a graded (grade: true) cell")
    if graded == 0:
        problems.append(f"{path}: no graded test cell")
    return problems
