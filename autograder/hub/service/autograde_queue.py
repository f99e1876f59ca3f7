"""The autograde service's durable queue: one sqlite file in the grader's course folder, or a schema of the
hub's PostgreSQL database (database.py).

A submission is keyed by (student, assignment, timestamp), nbgrader's own identity of a submission. Its state
moves queued -> grading -> done (or superseded when a newer one of the same student arrives first, or failed
when the service died grading it MAX_TRIES times). Each state change is one transaction, so a crash or SIGKILL
loses nothing: on start, what was `grading` is queued again, and the grader's own saved results make sure a
student recorded before the crash is not graded (or recorded) again.

Fair order: a student holds at most one place per assignment (a resubmission takes its queued predecessor's
place, never an extra one), a batch holds at most one submission per student and at most `size` of them, so a
later submission waits for those ahead of it and never for a whole class's batch.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import text

from autograder.grading.defaults import timeout_problem
from autograder.grading.results import Status
from autograder.hub.part_settings import AUTOGRADE_TIMEOUT, HiddenTests
from autograder.hub.stores.tables import Tables
from autograder.str_enum import StrEnum


class State(StrEnum):
    """Where a submission is in the queue."""

    QUEUED = "queued"
    GRADING = "grading"
    DONE = "done"
    SUPERSEDED = "superseded"  # a newer submission of the same student took its place
    FAILED = "failed"  # not graded: gone, refused, or the service died grading it MAX_TRIES times


MAX_TRIES = 3  # the service died this many times while grading a submission: it is failed, not retried
HOUR = 3600.0

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
    timeout: float = AUTOGRADE_TIMEOUT
    hidden_tests: HiddenTests = HiddenTests.PROTECTED

    def protects_hidden_tests(self, due: datetime | None, now: datetime) -> bool:
        """Return whether feedback given now must keep the hidden tests hidden (`due`, `now`: naive UTC).

        Protected until the due date has passed; with no due date, until the instructor says `shown`.
        """
        return self.hidden_tests != HiddenTests.SHOWN and (due is None or now <= due)


class Queue:
    """The queue: a sqlite file (a path), or any SQLAlchemy URL (PostgreSQL); its tables made or migrated when
    opened (stores/models.py, stores/migrations/autograde/).

    Every time it records or compares (a submission's place, when its grading started and ended, the hourly
    limit) is read from `clock` (seconds since the epoch), one clock for all of them: a test gives it a clock
    it moves itself, never a chosen time beside the real one.
    """

    def __init__(self, where: Path | str, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        url = f"sqlite:///{where}" if isinstance(where, Path) else where
        self.store = Tables(url, "autograde")

    def close(self) -> None:
        """Close its connections."""
        self.store.close()

    @contextmanager
    def transaction(self) -> Iterator["_Db"]:
        """Run the block as one transaction (all of it or nothing), no other writer in between."""
        with self.store.write() as conn:
            yield _Db(conn)

    def _read(self, sql: str, **params) -> list:
        with self.store.read() as conn:
            return list(_Db(conn).execute(sql, **params))

    # The instructor's switches
    def configure(self, assignment: str, enabled: bool, per_hour: int | None = None,
                  timeout: float | None = None,
                  hidden_tests: HiddenTests | str | None = None) -> AutogradeSetting:
        """Turn autograding of an assignment on or off (keeping its other settings unless given)."""
        if timeout_problem(timeout):
            raise ValueError(f"--timeout {timeout:g}: {timeout_problem(timeout)}")
        if hidden_tests is not None and hidden_tests not in set(HiddenTests):
            raise ValueError(f"hidden tests are {' or '.join(HiddenTests)}, not {hidden_tests!r}")
        old = self.setting(assignment)
        new = AutogradeSetting(assignment, enabled, old.per_hour if per_hour is None else per_hour,
                      old.timeout if timeout is None else timeout,
                      old.hidden_tests if hidden_tests is None else HiddenTests(hidden_tests))
        with self.transaction() as db:
            db.execute("INSERT INTO assignments (assignment, enabled, per_hour, timeout, hidden_tests) "
                       "VALUES (:a, :enabled, :per_hour, :timeout, :hidden) ON CONFLICT (assignment) DO "
                       "UPDATE SET enabled = excluded.enabled, per_hour = excluded.per_hour, timeout = "
                       "excluded.timeout, hidden_tests = excluded.hidden_tests",
                       a=assignment, enabled=int(new.enabled), per_hour=new.per_hour, timeout=new.timeout,
                       hidden=new.hidden_tests)
        return new

    def setting(self, assignment: str) -> AutogradeSetting:
        """Return the assignment's setting (off when never set)."""
        rows = self._read("SELECT * FROM assignments WHERE assignment = :a", a=assignment)
        if not rows:
            return AutogradeSetting(assignment, False)
        row = rows[0]
        return AutogradeSetting(row["assignment"], bool(row["enabled"]), row["per_hour"], row["timeout"],
                       HiddenTests(row["hidden_tests"]))

    def enabled(self) -> list[str]:
        """Return the assignments being autograded."""
        return [r["assignment"] for r in self._read("SELECT assignment FROM assignments WHERE enabled != 0 "
                                                    "ORDER BY assignment")]

    # Submissions
    def known(self, assignment: str) -> set[tuple[str, str]]:
        """Return the (student, timestamp) of every submission of the assignment already in the queue."""
        rows = self._read("SELECT student, timestamp FROM submissions WHERE assignment = :a", a=assignment)
        return {(r["student"], r["timestamp"]) for r in rows}

    def add(self, student: str, assignment: str, timestamp: str, folder: str, secret: str) -> str:
        """Queue a new submission; return its state (superseded at once when a newer one is known).

        A queued older submission of the same student and assignment is superseded, and the new one takes its
        place in the queue. Adding a known submission again changes nothing.
        """
        now = self.clock()
        key = {"student": student, "assignment": assignment, "stamp": timestamp}
        with self.transaction() as db:
            row = db.one("SELECT state FROM submissions WHERE student = :student AND assignment = "
                         ":assignment AND timestamp = :stamp", **key)
            if row is not None:
                return row["state"]
            newer = db.one("SELECT 1 FROM submissions WHERE student = :student AND assignment = "
                           ":assignment AND timestamp > :stamp AND state != :superseded", **key,
                           superseded=State.SUPERSEDED)
            older = db.one("SELECT place FROM submissions WHERE student = :student AND assignment = "
                           ":assignment AND state = :queued AND timestamp < :stamp ORDER BY place LIMIT 1",
                           **key,
                           queued=State.QUEUED)
            state = State.SUPERSEDED if newer else State.QUEUED
            place = older["place"] if older is not None and not newer else now
            if state == State.QUEUED:
                db.execute("UPDATE submissions SET state = :superseded, finished_at = :now, detail = :detail "
                           "WHERE student = :student AND assignment = :assignment AND state = :queued AND "
                           "timestamp < :stamp", **key, superseded=State.SUPERSEDED, now=now,
                           detail=f"replaced by the submission of {timestamp}", queued=State.QUEUED)
            db.execute("INSERT INTO submissions (student, assignment, timestamp, folder, secret, state, "
                       "place, seen_at, detail) VALUES (:student, :assignment, :stamp, :folder, :secret, "
                       ":state, :place, :now, :detail)", **key, folder=folder, secret=secret, state=state,
                       place=place, now=now, detail="a newer submission was already there" if newer else "")
        return state

    def recover(self) -> list[Entry]:
        """After a crash or restart: queue again what was being graded (fail what has died MAX_TRIES times).
        """
        now = self.clock()
        with self.transaction() as db:
            rows = [_entry(r) for r in db.execute("SELECT * FROM submissions WHERE state = :grading",
                                                  grading=State.GRADING)]
            for e in rows:
                if e.tries >= MAX_TRIES:
                    db.execute("UPDATE submissions SET state = :failed, finished_at = :now, status = "
                               f":status, detail = :detail WHERE {_KEY}", failed=State.FAILED, now=now,
                               status=Status.CRASHED, detail=_died(e.tries), **_key(e))
                else:
                    db.execute(f"UPDATE submissions SET state = :queued WHERE {_KEY}", queued=State.QUEUED,
                               **_key(e))
        return rows

    def waiting_until(self, entry: Entry, per_hour: int, now: float, db: "_Db | None" = None) -> float:
        """Return when the student may be graded again under the hourly limit (now or earlier: at once)."""
        if per_hour <= 0:
            return now
        sql = ("SELECT finished_at FROM submissions WHERE student = :student AND assignment = :assignment "
               "AND graded = 1 AND finished_at > :since ORDER BY finished_at")
        params = {"student": entry.student, "assignment": entry.assignment, "since": now - HOUR}
        times = [r["finished_at"] for r in (db.execute(sql, **params) if db else self._read(sql, **params))]
        return now if len(times) < per_hour else times[len(times) - per_hour] + HOUR

    def next_batch(self, size: int, joining: str | None = None,
                   grading: frozenset[str] = frozenset()) -> list[Entry]:
        """Pick the next batch (one assignment, one submission per student, first come first served) and mark
        it grading; empty when nothing may be graded now. `joining`: the assignment of a running batch, which
        takes more only while its assignment's turn lasts, and no student it is `grading` already."""
        now = self.clock()
        enabled = {a: self.setting(a) for a in self.enabled()}
        with self.transaction() as db:
            queued = [_entry(r) for r in db.execute("SELECT * FROM submissions WHERE state = :queued "
                                                    "ORDER BY place, student", queued=State.QUEUED)]
            ready = [e for e in queued if e.assignment in enabled and e.student not in grading
                     and self.waiting_until(e, enabled[e.assignment].per_hour, now, db) <= now]
            if not ready or (joining is not None and ready[0].assignment != joining):
                return []
            assignment, batch, students = ready[0].assignment, [], set()
            for e in ready:
                if e.assignment == assignment and e.student not in students and len(batch) < size:
                    batch.append(e)
                    students.add(e.student)
            for e in batch:
                _mark_grading(db, e, now)
        return batch

    def hand_out_ready(self) -> list[Entry]:
        """For grading workers: mark grading each queued submission of an enabled assignment that may be
        graded now (the hourly limit; one at a time per student and assignment), then return every submission
        being graded, first come first."""
        now = self.clock()
        enabled = {a: self.setting(a) for a in self.enabled()}
        with self.transaction() as db:
            rows = [_entry(r) for r in db.execute("SELECT * FROM submissions WHERE state IN (:queued, "
                                                  ":grading) ORDER BY place, student", queued=State.QUEUED,
                                                  grading=State.GRADING)]
            busy = {(e.student, e.assignment) for e in rows if e.state == State.GRADING}
            for e in rows:
                if (e.state == State.QUEUED and e.assignment in enabled
                        and (e.student, e.assignment) not in busy
                        and self.waiting_until(e, enabled[e.assignment].per_hour, now, db) <= now):
                    _mark_grading(db, e, now)
                    busy.add((e.student, e.assignment))
            grading = [_entry(r) for r in db.execute("SELECT * FROM submissions WHERE state = :grading "
                                                     "ORDER BY place, student", grading=State.GRADING)]
        return [e for e in grading if e.assignment in enabled]

    def record_outcome(self, entry: Entry, *, state: State = State.DONE, graded: bool, status: Status,
                       score: float | None, max_score: float | None, detail: str) -> None:
        """Record how a submission ended (one transaction)."""
        now = self.clock()
        with self.transaction() as db:
            db.execute("UPDATE submissions SET state = :state, finished_at = :now, graded = :graded, "
                       "status = :status, score = :score, max_score = :max_score, detail = :detail WHERE "
                       f"{_KEY}", state=state, now=now, graded=int(graded), status=status, score=score,
                       max_score=max_score, detail=detail[:2000], **_key(entry))

    def requeue(self, entries: list[Entry], detail: str) -> None:
        """Put a batch back (the grader could not start, e.g. the gradebook was in use); tries are kept."""
        with self.transaction() as db:
            for e in entries:
                db.execute("UPDATE submissions SET state = :queued, tries = CASE WHEN tries > 0 THEN "
                           f"tries - 1 ELSE 0 END, detail = :detail WHERE {_KEY}", queued=State.QUEUED,
                           detail=detail, **_key(e))

    def entries(self, assignment: str | None = None, state: State | None = None) -> list[Entry]:
        """Return the submissions (of one assignment, in one state), oldest first."""
        query, params = "SELECT * FROM submissions WHERE 1 = 1", {}
        if assignment:
            query, params = query + " AND assignment = :assignment", {**params, "assignment": assignment}
        if state:
            query, params = query + " AND state = :state", {**params, "state": state}
        return [_entry(r) for r in self._read(query + " ORDER BY seen_at, student", **params)]


_KEY = "student = :k_student AND assignment = :k_assignment AND timestamp = :k_stamp"


def _mark_grading(db: "_Db", entry: Entry, now: float) -> None:
    """Mark a submission as being graded (one more try)."""
    db.execute(f"UPDATE submissions SET state = :grading, started_at = :now, tries = tries + 1 WHERE {_KEY}",
               grading=State.GRADING, now=now, **_key(entry))


def _key(e: Entry) -> dict[str, str]:
    return {"k_student": e.student, "k_assignment": e.assignment, "k_stamp": e.timestamp}


class _Db:
    """A connection in a transaction that runs SQL with named parameters and returns rows as mappings."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def execute(self, sql: str, **params) -> list:
        result = self.conn.execute(text(sql), {k: _plain(v) for k, v in params.items()})
        return [r._mapping for r in result] if result.returns_rows else []

    def one(self, sql: str, **params):
        rows = self.execute(sql, **params)
        return rows[0] if rows else None


def _plain(value):
    return str(value) if isinstance(value, str) else value  # a StrEnum as its spelling, for any driver


def _died(tries: int) -> str:
    return f"the autograde service stopped {tries} times while grading it; grade it with `hub grade`"


def _entry(row) -> Entry:
    return Entry(**{**dict(row), "state": State(row["state"])})
