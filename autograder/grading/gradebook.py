"""The course gradebook: define the assignment in it, then record each student's result, one at a time.

Only the grader's main process writes here, never a worker and never two students at once (nbgrader's
sqlite gradebook is not safe for concurrent writers); a lock keeps a second `grade` run out. Recording is
idempotent: grading the same student again updates the same rows. Scores follow nbgrader's own rules
(SaveAutoGrades): a cell that a person has already scored by hand is flagged for review instead of
silently keeping the old total.
"""

import contextlib
import datetime
import functools
import os
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from autograder.course import course_config, course_directory, error_line, venv_on_path
from autograder.grading.errors import GenerateFailed, GradebookBusy
from autograder.grading.results import Status, StudentResult

AUTOTESTS = "autotests.yml"


def share_engines() -> None:
    """Make nbgrader's Gradebooks in this process share one SQLAlchemy engine per database and process.

    nbgrader opens a Gradebook a dozen times for one student's autograde, each with an engine of its own, and
    an engine's cache of compiled SQL dies with it: a quarter of a worker's CPU went into compiling the same
    queries again. `Gradebook.close` still disposes of the engine's connections, so no file stays open.
    """
    import nbgrader.api

    if getattr(nbgrader.api.create_engine, "shared", False):
        return
    create = nbgrader.api.create_engine

    @functools.lru_cache(maxsize=8)  # a worker's scratch gradebooks come one student after another
    def engine_of(pid: int, url: str, options: tuple) -> object:
        return create(url, **dict(options))

    def shared_engine(url, **kwargs):
        return engine_of(os.getpid(), str(url), tuple(sorted(kwargs.items())))  # a forked worker: its own

    shared_engine.shared = True
    nbgrader.api.create_engine = shared_engine


def course_db_url(root: Path) -> str:
    """Return the course gradebook's database URL (nbgrader's default: gradebook.db in the course root)."""
    return course_directory(root).db_url


def course_id(root: Path) -> str:
    """Return the course id as nbgrader reads it (empty when nbgrader_config.py does not set one)."""
    return course_directory(root).course_id


@contextlib.contextmanager
def locked(db_url: str) -> Iterator[None]:
    """Hold an exclusive lock beside a sqlite gradebook, or PostgreSQL's advisory lock of a gradebook there,
    for the whole run (other URLs are not locked).

    GradebookBusy at once when another run holds it (the lock file, `<gradebook>.lock`, stays; only the
    lock held on it counts).
    """
    if db_url.startswith(("postgresql:", "postgresql+")):
        with _advisory_lock(db_url):
            yield
        return
    if not db_url.startswith("sqlite:///"):
        yield
        return
    path = Path(db_url[len("sqlite:///"):])
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(f"{path}.lock", blocking=False):
            yield
    except Timeout:
        raise GradebookBusy(f"another grading run is using {path}; wait for it to finish") from None


@contextlib.contextmanager
def _advisory_lock(db_url: str) -> Iterator[None]:
    """Hold PostgreSQL's session lock of the gradebook (its database and search_path; the connection's end
    releases it)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            got = conn.execute(text("SELECT pg_try_advisory_lock(hashtext('devicelab-gradebook:' || "
                                    "current_setting('search_path')))")).scalar()
            conn.commit()
            if not got:
                raise GradebookBusy(f"another grading run is using the gradebook in {engine.url.database}; "
                                    "wait for it to finish")
            yield
    finally:
        engine.dispose()


def alembic_head() -> str:
    """Return the revision of nbgrader's newest gradebook schema (read in-process, not via `alembic heads`).
    """
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()


def ensure_schema(db_url: str) -> None:
    """Create nbgrader's tables in an empty gradebook, as nbgrader's Gradebook does on first use.

    nbgrader asks a fresh `alembic` process for the schema version, which costs seconds; reading it
    in-process gives the same database.
    """
    from nbgrader.api import Base
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(db_url)
    try:
        if inspect(engine).get_table_names():
            return
        Base.metadata.create_all(bind=engine)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
            conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": alembic_head()})
    finally:
        engine.dispose()


def backup(db_url: str, dest: Path) -> None:
    """Copy a sqlite gradebook (consistently: the run holds its lock) before this run changes it."""
    path = Path(db_url[len("sqlite:///"):]) if db_url.startswith("sqlite:///") else None
    if path is not None and path.is_file() and path.stat().st_size:
        shutil.copyfile(path, dest)


def generate_apart(root: Path, assignment: str, scratch: Path, db_url: str | None = None) -> Path:
    """Run `generate` in a child process, so that what it starts (kernels for AUTOTEST directives, their
    event loop and sockets) never lives in the grader, whose workers are forked from it."""
    return run_apart(generate, root, assignment, scratch, db_url)


def run_apart(function, *args):
    """Return function(*args), called in a forked process of its own (which ends with it)."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1, initializer=_quiet_end) as pool:
        return pool.apply(function, args)


def _quiet_end() -> None:
    """In run_apart's process: end quietly when the pool ends it. The grader's command turns SIGTERM
    into KeyboardInterrupt (an interrupted run saves its students), and the pool's end is a SIGTERM: its
    process printed a KeyboardInterrupt traceback before grading began. Ctrl-C is the grader's to handle."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def generate(root: Path, assignment: str, scratch: Path, db_url: str | None = None) -> Path:
    """Run nbgrader generate_assignment on a copy of source/<assignment> in `scratch`; return `scratch`.

    The gradebook written is the scratch course's own, or `db_url` (used to define the assignment in the
    course gradebook without touching the course's release/ folder).
    """
    from nbgrader.apps import NbGraderAPI

    target = scratch / "source" / assignment
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(root / "source" / assignment, target,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    if (root / AUTOTESTS).is_file():  # nbgrader looks in the assignment folder, then in the course root
        shutil.copyfile(root / AUTOTESTS, scratch / AUTOTESTS)
    config = course_config(root, scratch)
    if db_url is not None:
        config.CourseDirectory.db_url = db_url
    ensure_schema(config.CourseDirectory.db_url)
    with venv_on_path():
        result = NbGraderAPI(config=config).generate_assignment(assignment, force=True, create=True)
    if not result.get("success"):
        text = (result.get("error") or "") + "\n" + (result.get("log") or "")
        raise GenerateFailed(f"nbgrader could not generate {assignment}: "
                             f"{error_line(text, 'no reason given')}")
    return scratch


def copy_due_date(source_url: str, target_url: str, course: str, assignment: str) -> None:
    """Give the template gradebook the course's due date, so that nbgrader computes late penalties."""
    from nbgrader.api import Gradebook

    with Gradebook(source_url, course) as gb:
        duedate = gb.find_assignment(assignment).duedate
    if duedate is not None:
        with Gradebook(target_url, course) as gb:
            gb.update_or_create_assignment(assignment, duedate=duedate)


def set_due_date(db_url: str, course: str, assignment: str, due: "datetime.datetime | None") -> None:
    """Give the gradebook's assignment this due date (None: none), so that nbgrader grades lateness by it: a
    grading worker's own course copy, told each student's due date as it grades them."""
    from nbgrader.api import Gradebook

    ensure_schema(db_url)
    with Gradebook(db_url, course) as gb:
        gb.update_or_create_assignment(assignment, duedate=due)


def record(db_url: str, course: str, assignment: str, result: StudentResult) -> None:
    """Write one student's result into the gradebook (creating the student and submission if needed)."""
    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    with Gradebook(db_url, course) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission trips SQLAlchemy 2's autoflush
        gb.update_or_create_student(result.student)
        if result.status == Status.MISSING:
            return
        gb.update_or_create_submission(assignment, result.student, timestamp=result.timestamp)
        for cell in result.cells:
            grade = gb.find_grade(cell.grade_id, Path(cell.notebook).stem, assignment, result.student)
            grade.auto_score = cell.score
            grade.needs_manual_grade = grade.manual_score is not None or cell.needs_manual_grade
        for notebook, comments in result.comments.items():
            for name, text in comments.items():
                gb.find_comment(name, Path(notebook).stem, assignment, result.student).auto_comment = text
        for notebook, penalty in result.late_penalties.items():
            found = gb.find_submission_notebook(Path(notebook).stem, assignment, result.student)
            found.late_submission_penalty = penalty
        gb.db.commit()


def has_submission(db_url: str, course: str, assignment: str, student: str) -> bool:
    """Return True when the gradebook already holds this student's submission of the assignment (a row made
    only to hold an extension, with no time and no score, is none)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course) as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return False
        return submission.timestamp is not None or any(
            grade.auto_score is not None or grade.manual_score is not None
            for notebook in submission.notebooks for grade in notebook.grades)


def student_due_date(db_url: str, assignment: str, student: str | None = None) -> datetime.datetime | None:
    """Return the assignment's due date (naive UTC, as nbgrader keeps it), or None; with a student, their
    own: the due date plus their extension, if any."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            due = gb.find_assignment(assignment).duedate
        except MissingEntry:
            return None
        if student is None or due is None:
            return due
        try:
            return gb.find_submission(assignment, student).duedate
        except MissingEntry:
            return due


def due_dates(db_url: str, course: str, assignment: str) -> "DueDates":
    """Return the assignment's due date and each student's own, extensions included, in one read."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course) as gb:
        try:
            found = gb.find_assignment(assignment)
        except MissingEntry:
            return DueDates(None, {})
        due = found.duedate
        return DueDates(due, {s.student.id: s.duedate for s in found.submissions if due and s.extension})


@dataclass(frozen=True)
class DueDates:
    """An assignment's due date (naive UTC, as nbgrader keeps it; None: none) and the students' own where an
    extension moves it."""

    due: datetime.datetime | None
    extended: dict[str, datetime.datetime]

    def of(self, student: str) -> datetime.datetime | None:
        """Return the student's due date."""
        return self.extended.get(student, self.due)


def extensions(db_url: str, course: str, assignment: str) -> dict[str, float]:
    """Return each student's extension of the assignment's due date, in seconds (students with one only)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course) as gb:
        try:
            found = gb.find_assignment(assignment)
        except MissingEntry:
            return {}
        return {s.student.id: s.extension.total_seconds() for s in found.submissions if s.extension}


def set_extension(db_url: str, course: str, assignment: str, student: str, seconds: float | None) -> None:
    """Give a student an extension of the due date (None: take it back), where nbgrader keeps extensions: on
    the student's submission of the assignment, made (with no time and no score) when there is none yet."""
    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    with Gradebook(db_url, course) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission trips SQLAlchemy 2's autoflush
        gb.update_or_create_student(student)
        submission = gb.update_or_create_submission(assignment, student)
        submission.extension = datetime.timedelta(seconds=seconds) if seconds else None
        gb.db.commit()


def install(root: Path, assignment: str, student: str, scratch: Path, keep_submitted: bool) -> None:
    """Copy a graded attempt's autograded (and, unless told not to, submitted) folders into the course."""
    parts = [("autograded", True), ("submitted", not keep_submitted)]
    for folder, wanted in parts:
        src = scratch / folder / student / assignment
        dest = root / folder / student / assignment
        if not wanted or not src.is_dir():
            continue
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dest)
