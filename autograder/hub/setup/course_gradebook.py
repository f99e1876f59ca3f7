"""Students and due dates into the course gradebook, run as the grader account (`hub setup`, `add-user`,
`release --due`).

It writes what `nbgrader db student import` and `nbgrader db assignment add --duedate` write, with the same
Gradebook calls, in one short Python: without nbgrader's application start-up and the `alembic` process
nbgrader starts to read a gradebook's schema version.

    python -m autograder.hub.setup.course_gradebook students FILE.csv --course DIR --course-id ID
    python -m autograder.hub.setup.course_gradebook due ASSIGNMENT "2026-12-01 17:00:00 UTC" --course DIR \
        --course-id ID
"""

import argparse
import csv
import os
import sys
from pathlib import Path

from autograder.csv_cells import restored


def read_students(path: Path) -> list[dict[str, str | None]]:
    """Return the CSV's rows as `nbgrader db student import` reads them: the Student table's columns, '' as
    None."""
    from nbgrader.api import Student

    columns = set(Student.__table__.c.keys())
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        reader.fieldnames = [name.strip() for name in reader.fieldnames or []]
        if "id" not in reader.fieldnames:
            raise ValueError(f"{path} has no 'id' column")
        return [{k: v or None for k, v in restored(row).items() if k in columns} for row in reader]


def add_students(db_url: str, course_id: str, rows: list[dict[str, str | None]]) -> None:
    """Create or update each student (nbgrader's Gradebook.update_or_create_student)."""
    from nbgrader.api import Gradebook

    from autograder.grading.gradebook import ensure_schema

    ensure_schema(db_url)
    with Gradebook(db_url, course_id) as gb:
        for row in rows:
            fields = dict(row)
            gb.update_or_create_student(fields.pop("id"), **fields)


def set_due(db_url: str, course_id: str, assignment: str, due: str) -> None:
    """Create the assignment or set its due date (nbgrader's Gradebook.update_or_create_assignment)."""
    from nbgrader.api import Gradebook

    from autograder.grading.gradebook import ensure_schema

    ensure_schema(db_url)
    with Gradebook(db_url, course_id) as gb:
        gb.update_or_create_assignment(assignment, duedate=due)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course_gradebook", description=__doc__.splitlines()[0])
    actions = parser.add_subparsers(dest="action", required=True)
    students = actions.add_parser("students", help="create or update a CSV's students (id, names, email)")
    students.add_argument("csv", type=Path)
    due = actions.add_parser("due", help="create an assignment or set its due date")
    due.add_argument("assignment")
    due.add_argument("when", help="as nbgrader reads it, e.g. '2026-12-01 17:00:00 UTC'")
    for action in (students, due):
        action.add_argument("--course", required=True, type=Path)
        action.add_argument("--course-id", required=True)
    args = parser.parse_args(argv)
    os.umask(0o077)
    from autograder.grading.gradebook import course_db_url

    db_url = course_db_url(args.course)
    if args.action == "students":
        rows = read_students(args.course / args.csv)
        add_students(db_url, args.course_id, rows)
        print(f"{len(rows)} students in the gradebook")
    else:
        set_due(db_url, args.course_id, args.assignment, args.when)
        print(f"{args.assignment} due {args.when}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
