"""Grades out of the course gradebook as CSV: per assignment or per question, plain or as an LMS imports it.

`hub export --by-question` or `--format` writes one row per student (plain `hub export` keeps nbgrader's own
layout, a row per student and assignment: `nbgrader_csv`). The columns are each assignment's score, after any
late penalty (nbgrader's `score`: 0 for a student who submitted nothing, as `nbgrader export` gives), and with
`--by-question` one column per graded cell and task before it, with its points. Three layouts:

- `table`: student id, names and email, then `<column> (max N)` headers;
- `canvas`: the layout of Canvas's gradebook export, which its import reads back: `Student` ("Last, First"),
  `ID`, `SIS User ID`, `SIS Login ID`, `Section`, one column per score (a column Canvas does not know becomes
  a new assignment), and the `Points Possible` row under the header. `SIS Login ID` holds the hub's student
  id, so the course's accounts must be the students' Canvas login ids for Canvas to match them;
- `moodle`: the layout of Moodle's CSV grade export: `First name`, `Last name`, `ID number`, `Email address`,
  then one column per score; on import map `ID number` (the hub's student id) or `Email address` to the user.

Names and emails come from the roster or an LMS launch, so every layout is written through csv_cells: each
text cell quoted, on one line and neutralised against spreadsheet formula injection; scores bare numbers.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from autograder.cells import grade_id
from autograder.csv_cells import Cell, figure, rows_text
from autograder.str_enum import StrEnum

# `nbgrader export`'s columns (nbgrader.plugins.export.CsvExportPlugin), in its order.
NBGRADER_COLUMNS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
                    "raw_score", "late_submission_penalty", "score", "max_score")


class ExportFormat(StrEnum):
    """The CSV layouts `hub export` writes."""

    TABLE = "table"
    CANVAS = "canvas"
    MOODLE = "moodle"


@dataclass(frozen=True)
class ScoreColumn:
    """One column of scores: an assignment's total, or one graded cell or task of one of its notebooks."""

    assignment: str
    notebook: str | None  # None: the assignment's total
    cell: str | None
    max_score: float

    @property
    def title(self) -> str:
        """The column's name: the assignment, or `assignment notebook:cell`."""
        return self.assignment if self.cell is None else f"{self.assignment} {self.notebook}:{self.cell}"


@dataclass(frozen=True)
class StudentScores:
    """One student's row."""

    student: str
    first_name: str
    last_name: str
    email: str
    scores: tuple[float, ...]  # in the order of the table's columns


@dataclass(frozen=True)
class GradeTable:
    """Every student's scores, in columns."""

    columns: tuple[ScoreColumn, ...]
    rows: tuple[StudentScores, ...]


def _cell_order(course: Path, assignment: str, notebook: str) -> list[str]:
    """Return the graded cells' ids in the order of the instructor's source notebook (empty if unreadable)."""
    try:
        nb = json.loads((course / "source" / assignment / f"{notebook}.ipynb").read_text(encoding="utf-8"))
        return [i for i in (grade_id(c) for c in nb.get("cells", [])) if i]
    except (OSError, ValueError, AttributeError, TypeError):
        return []


def read_table(course: Path, course_id: str, by_question: bool = False) -> GradeTable:
    """Read the course gradebook (its nbgrader_config.py's: `course`/gradebook.db, or PostgreSQL) into a
    GradeTable."""
    from nbgrader.api import Gradebook

    from autograder.grading.gradebook import course_db_url

    with Gradebook(course_db_url(course), course_id) as gb:
        columns: list[ScoreColumn] = []
        for assignment in gb.assignments:
            if by_question:
                for notebook in sorted(assignment.notebooks, key=lambda n: n.name):
                    cells = {c.name: c for c in [*notebook.grade_cells, *notebook.task_cells]}
                    order = _cell_order(course, assignment.name, notebook.name)
                    place = {name: at for at, name in enumerate(order)}
                    for name in sorted(cells, key=lambda n: (place.get(n, len(order)), n)):
                        columns.append(ScoreColumn(assignment.name, notebook.name, name,
                                                   float(cells[name].max_score)))
            columns.append(ScoreColumn(assignment.name, None, None, float(assignment.max_score)))
        rows = [StudentScores(s.id, s.first_name or "", s.last_name or "", s.email or "",
                              tuple(_score(gb, column, s.id) for column in columns)) for s in gb.students]
    return GradeTable(tuple(columns), tuple(sorted(rows, key=lambda r: r.student)))


def _score(gb, column: ScoreColumn, student: str) -> float:
    from nbgrader.api import MissingEntry

    try:
        if column.cell is None:
            submission = gb.find_submission(column.assignment, student)
            return max(0.0, float(submission.score) - float(submission.late_submission_penalty or 0.0))
        return float(gb.find_grade(column.cell, column.notebook, column.assignment, student).score or 0.0)
    except MissingEntry:  # nothing submitted: 0, as nbgrader's own export says
        return 0.0


def _number(value: float) -> str:
    return f"{value:g}"


def _figure(value: float) -> int | float:
    """Return a score as its cell holds it: the number `_number` writes, bare."""
    return figure(float(_number(value)))


def write_csv(table: GradeTable, layout: ExportFormat) -> str:
    """Return the table as CSV text in one of the layouts."""
    scores = [c.title for c in table.columns]
    rows: list[list[Cell]]
    if layout is ExportFormat.CANVAS:
        rows = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *scores],
                ["    Points Possible", "", "", "", "", *(_figure(c.max_score) for c in table.columns)]]
        for row in table.rows:
            name = ", ".join(p for p in (row.last_name, row.first_name) if p) or row.student
            rows.append([name, "", "", row.student, "", *map(_figure, row.scores)])
    elif layout is ExportFormat.MOODLE:
        rows = [["First name", "Last name", "ID number", "Email address", *scores]]
        rows += [[row.first_name, row.last_name, row.student, row.email, *map(_figure, row.scores)]
                 for row in table.rows]
    else:
        rows = [["student_id", "first_name", "last_name", "email",
                 *(f"{c.title} (max {_number(c.max_score)})" for c in table.columns)]]
        rows += [[row.student, row.first_name, row.last_name, row.email, *map(_figure, row.scores)]
                 for row in table.rows]
    return rows_text(rows)


def _as_nbgrader_writes(value) -> Cell:
    """Return a value as `nbgrader export` writes it: a number as it is, None as empty, else its str()."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return "" if value is None else str(value)


def nbgrader_csv(course: Path, course_id: str) -> str:
    """Return `nbgrader export`'s rows and values, read from the gradebook and written safely (csv_cells)."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograder.grading.gradebook import course_db_url

    rows: list[list[Cell]] = [list(NBGRADER_COLUMNS)]
    with Gradebook(course_db_url(course), course_id) as gb:
        for assignment in gb.assignments:
            for student in gb.students:
                try:
                    submission = gb.find_submission(assignment.name, student.id)
                except MissingEntry:  # nothing submitted: 0, as nbgrader's export says
                    timestamp, raw, penalty, score = "", 0.0, 0.0, 0.0
                else:
                    timestamp, raw = submission.timestamp, submission.score
                    penalty = submission.late_submission_penalty
                    score = max(0.0, raw - penalty)
                values = (assignment.name, assignment.duedate, timestamp, student.id, student.last_name,
                          student.first_name, student.email, raw, penalty, score, assignment.max_score)
                rows.append([_as_nbgrader_writes(v) for v in values])
    return rows_text(rows)


