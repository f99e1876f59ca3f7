"""The autograde service's durable queue: one sqlite file in the grader's course folder.

A submission is keyed by (student, assignment, timestamp), nbgrader's own identity of a submission. Its state
moves queued -> grading -> done (or superseded when a newer one of the same student arrives first, or failed
when the service died grading it MAX_TRIES times). Each state change is one transaction, so a crash or SIGKILL
loses nothing: on start, what was `grading` is queued again, and the grader's own saved results make sure a
student recorded before the crash is not graded (or recorded) again.

Fair order: a student holds at most one place per assignment (a resubmission takes its queued predecessor's
place, never an extra one), a batch holds at most one submission per student and at most `size` of them, so a
later submission waits for those ahead of it and never for a whole class's batch.
"""

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from autograder.grading.results import Status
from autograder.words import Word


class State(Word):
    """Where a submission is in the queue."""

    QUEUED = "queued"
    GRADING = "grading"
    DONE = "done"
    SUPERSEDED = "superseded"  # a newer submission of the same student took its place
    FAILED = "failed"  # not graded: gone, refused, or the service died grading it MAX_TRIES times


class HiddenTests(Word):
    """What feedback on submit shows of the hidden tests before the due date: only each one's score and the
    instructor's message (protected, the default), or everything, as nbgrader's feedback does (shown)."""

    PROTECTED = "protected"
    SHOWN = "shown"


MAX_TRIES = 3  # the service died this many times while grading a submission: it is failed, not retried
DEFAULT_TIMEOUT = 120  # seconds per notebook, unless the instructor sets --timeout
HOUR = 3600.0

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS assignments (
    assignment TEXT PRIMARY KEY,
    enabled INTEGER NOT NULL,
    per_hour INTEGER NOT NULL DEFAULT 0,
    timeout REAL NOT NULL DEFAULT 120,
    hidden_tests TEXT NOT NULL DEFAULT '{HiddenTests.PROTECTED}'
);
CREATE TABLE IF NOT EXISTS submissions (
    student TEXT NOT NULL,
    assignment TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    folder TEXT NOT NULL,
    secret TEXT NOT NULL,
    state TEXT NOT NULL,
    place REAL NOT NULL,
    seen_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    tries INTEGER NOT NULL DEFAULT 0,
    graded INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT '',
    score REAL,
    max_score REAL,
    detail TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (student, assignment, timestamp)
);
CREATE INDEX IF NOT EXISTS by_state ON submissions (state, place);
"""


@dataclass(frozen=True)
class Entry:
    """One submission in the queue."""

    student: str
    assignment: str
    timestamp: str
    folder: str  # its folder's name in the exchange's inbound
    secret: str  # nbgrader's submission_secret.txt: the feedback goes back through it
    state: State
    place: float
    seen_at: float
    started_at: float | None
    finished_at: float | None
    tries: int
    graded: int  # 1 when this service ran the grader on it (0: a result saved before a restart was reused)
    status: str  # a Status once graded or refused; empty before
    score: float | None
    max_score: float | None
    detail: str

    @property
    def key(self) -> tuple[str, str, str]:
        """Return (student, assignment, timestamp)."""
        return self.student, self.assignment, self.timestamp


@dataclass(frozen=True)
class AutogradeSetting:
    """Autograding of one assignment: on or off, the limit of graded submissions per student per hour, and
    whether feedback on submit protects the hidden tests."""

    assignment: str
    enabled: bool
    per_hour: int = 0  # 0: no limit
    timeout: float = DEFAULT_TIMEOUT
    hidden_tests: HiddenTests = HiddenTests.PROTECTED

    def protects_hidden_tests(self, due: datetime | None, now: datetime) -> bool:
        """Return whether feedback given now must keep the hidden tests hidden (`due`, `now`: naive UTC).

        Protected until the due date has passed; with no due date, until the instructor says `shown`.
        """
        return self.hidden_tests != HiddenTests.SHOWN and (due is None or now <= due)


class Queue:
    """The queue in one sqlite file (made on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.executescript(SCHEMA)
        columns = {r["name"] for r in self.db.execute("PRAGMA table_info(assignments)")}
        if "hidden_tests" not in columns:  # a queue made before the setting existed: protected, the default
            self.db.execute("ALTER TABLE assignments ADD COLUMN hidden_tests TEXT NOT NULL DEFAULT "
                            f"'{HiddenTests.PROTECTED}'")

    def close(self) -> None:
        """Close the file."""
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Run the block as one transaction (all of it or nothing)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # The instructor's switches
    def configure(self, assignment: str, enabled: bool, per_hour: int | None = None,
                  timeout: float | None = None,
                  hidden_tests: HiddenTests | str | None = None) -> AutogradeSetting:
        """Turn autograding of an assignment on or off (keeping its other settings unless given)."""
        if hidden_tests is not None and hidden_tests not in set(HiddenTests):
            raise ValueError(f"hidden tests are {' or '.join(HiddenTests)}, not {hidden_tests!r}")
        old = self.setting(assignment)
        new = AutogradeSetting(assignment, enabled, old.per_hour if per_hour is None else per_hour,
                      old.timeout if timeout is None else timeout,
                      old.hidden_tests if hidden_tests is None else HiddenTests(hidden_tests))
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO assignments (assignment, enabled, per_hour, timeout, "
                       "hidden_tests) VALUES (?, ?, ?, ?, ?)",
                       (assignment, int(new.enabled), new.per_hour, new.timeout, new.hidden_tests))
        return new

    def setting(self, assignment: str) -> AutogradeSetting:
        """Return the assignment's setting (off when never set)."""
        row = self.db.execute("SELECT * FROM assignments WHERE assignment = ?", (assignment,)).fetchone()
        if row is None:
            return AutogradeSetting(assignment, False)
        return AutogradeSetting(row["assignment"], bool(row["enabled"]), row["per_hour"], row["timeout"],
                       HiddenTests(row["hidden_tests"]))

    def enabled(self) -> list[str]:
        """Return the assignments being autograded."""
        return [r[0] for r in self.db.execute("SELECT assignment FROM assignments WHERE enabled ORDER BY 1")]

    # Submissions
    def known(self, assignment: str) -> set[tuple[str, str]]:
        """Return the (student, timestamp) of every submission of the assignment already in the queue."""
        rows = self.db.execute("SELECT student, timestamp FROM submissions WHERE assignment = ?",
                               (assignment,))
        return {(r[0], r[1]) for r in rows}

    def add(self, student: str, assignment: str, timestamp: str, folder: str, secret: str,
            now: float | None = None) -> str:
        """Queue a new submission; return its state (superseded at once when a newer one is known).

        A queued older submission of the same student and assignment is superseded, and the new one takes its
        place in the queue. Adding a known submission again changes nothing.
        """
        now = time.time() if now is None else now
        with self.transaction() as db:
            row = db.execute("SELECT state FROM submissions WHERE student = ? AND assignment = ? "
                             "AND timestamp = ?", (student, assignment, timestamp)).fetchone()
            if row is not None:
                return row["state"]
            newer = db.execute("SELECT 1 FROM submissions WHERE student = ? AND assignment = ? "
                               "AND timestamp > ? AND state != ?",
                               (student, assignment, timestamp, State.SUPERSEDED)).fetchone()
            older = db.execute("SELECT place FROM submissions WHERE student = ? AND assignment = ? "
                               "AND state = ? AND timestamp < ? ORDER BY place LIMIT 1",
                               (student, assignment, State.QUEUED, timestamp)).fetchone()
            state = State.SUPERSEDED if newer else State.QUEUED
            place = older["place"] if older is not None and not newer else now
            if state == State.QUEUED:
                db.execute("UPDATE submissions SET state = ?, finished_at = ?, detail = ? WHERE student = ? "
                           "AND assignment = ? AND state = ? AND timestamp < ?",
                           (State.SUPERSEDED, now, f"replaced by the submission of {timestamp}", student,
                            assignment, State.QUEUED, timestamp))
            db.execute("INSERT INTO submissions (student, assignment, timestamp, folder, secret, state, "
                       "place, seen_at, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (student, assignment, timestamp, folder, secret, state, place, now,
                        "a newer submission was already there" if newer else ""))
        return state

    def recover(self, now: float | None = None) -> list[Entry]:
        """After a crash or restart: queue again what was being graded (fail what has died MAX_TRIES times).
        """
        now = time.time() if now is None else now
        with self.transaction() as db:
            rows = [_entry(r)
                    for r in db.execute("SELECT * FROM submissions WHERE state = ?", (State.GRADING,))]
            for e in rows:
                if e.tries >= MAX_TRIES:
                    db.execute("UPDATE submissions SET state = ?, finished_at = ?, status = ?, detail = ? "
                               "WHERE student = ? AND assignment = ? AND timestamp = ?",
                               (State.FAILED, now, Status.CRASHED, _died(e.tries), *e.key))
                else:
                    db.execute("UPDATE submissions SET state = ? WHERE student = ? AND assignment = ? AND "
                               "timestamp = ?", (State.QUEUED, *e.key))
        return rows

    def waiting_until(self, entry: Entry, per_hour: int, now: float) -> float:
        """Return when the student may be graded again under the hourly limit (now or earlier: at once)."""
        if per_hour <= 0:
            return now
        times = [r[0] for r in self.db.execute(
            "SELECT finished_at FROM submissions WHERE student = ? AND assignment = ? AND graded = 1 AND "
            "finished_at > ? ORDER BY finished_at", (entry.student, entry.assignment, now - HOUR))]
        return now if len(times) < per_hour else times[len(times) - per_hour] + HOUR

    def next_batch(self, size: int, now: float | None = None, joining: str | None = None,
                   grading: frozenset[str] = frozenset()) -> list[Entry]:
        """Pick the next batch (one assignment, one submission per student, first come first served) and mark
        it grading; empty when nothing may be graded now. `joining`: the assignment of a running batch, which
        takes more only while its assignment's turn lasts, and no student it is `grading` already."""
        now = time.time() if now is None else now
        enabled = {a: self.setting(a) for a in self.enabled()}
        with self.transaction() as db:
            queued = [_entry(r) for r in db.execute("SELECT * FROM submissions WHERE state = ? ORDER BY "
                                                    "place, student", (State.QUEUED,))]
            ready = [e for e in queued if e.assignment in enabled and e.student not in grading
                     and self.waiting_until(e, enabled[e.assignment].per_hour, now) <= now]
            if not ready or (joining is not None and ready[0].assignment != joining):
                return []
            assignment, batch, students = ready[0].assignment, [], set()
            for e in ready:
                if e.assignment == assignment and e.student not in students and len(batch) < size:
                    batch.append(e)
                    students.add(e.student)
            for e in batch:
                db.execute("UPDATE submissions SET state = ?, started_at = ?, tries = tries + 1 WHERE "
                           "student = ? AND assignment = ? AND timestamp = ?", (State.GRADING, now, *e.key))
        return batch

    def record_outcome(self, entry: Entry, *, state: State = State.DONE, graded: bool, status: Status,
                       score: float | None,
               max_score: float | None, detail: str, now: float | None = None) -> None:
        """Record how a submission ended (one transaction)."""
        now = time.time() if now is None else now
        with self.transaction() as db:
            db.execute("UPDATE submissions SET state = ?, finished_at = ?, graded = ?, status = ?, score = "
                       "?, max_score = ?, detail = ? WHERE student = ? AND assignment = ? AND timestamp = ?",
                       (state, now, int(graded), status, score, max_score, detail[:2000], *entry.key))

    def requeue(self, entries: list[Entry], detail: str) -> None:
        """Put a batch back (the grader could not start, e.g. the gradebook was in use); tries are kept."""
        with self.transaction() as db:
            for e in entries:
                db.execute("UPDATE submissions SET state = ?, tries = MAX(tries - 1, 0), detail = ? WHERE "
                           "student = ? AND assignment = ? AND timestamp = ?", (State.QUEUED, detail, *e.key))

    def entries(self, assignment: str | None = None, state: State | None = None) -> list[Entry]:
        """Return the submissions (of one assignment, in one state), oldest first."""
        query, args = "SELECT * FROM submissions WHERE 1", []
        if assignment:
            query, args = query + " AND assignment = ?", [*args, assignment]
        if state:
            query, args = query + " AND state = ?", [*args, state]
        return [_entry(r) for r in self.db.execute(query + " ORDER BY seen_at, student", args)]


def _died(tries: int) -> str:
    return f"the autograde service stopped {tries} times while grading it; grade it with `hub grade`"


def _entry(row: sqlite3.Row) -> Entry:
    fields = {k: row[k] for k in row.keys()}  # noqa: SIM118  (sqlite3.Row has no __iter__ of keys)
    return Entry(**{**fields, "state": State(fields["state"])})
