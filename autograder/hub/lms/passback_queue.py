"""The grade passback queue, a row per student and assignment: one sqlite file in the grader's lti/ folder,
or a schema of the hub's PostgreSQL database (database.py).

A score is offered after each grading; the same score again changes nothing, a new one replaces what was not
sent yet. Each row is pending until the LMS took it (sent), retried with a growing wait when the LMS is down
or refuses (failed: the LMS said no; retried too). A score no LMS can take as it is (an assignment without
points) is unsendable: reported once, never tried again until a new score replaces it. A row is marked sent
only if it still holds the value that was posted, so a score that changed while it was posted is posted
again, once.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text

from autograder.hub.database import course_part_url
from autograder.hub.stores.tables import Tables
from autograder.str_enum import StrEnum

FIRST_WAIT_S = 30.0  # after the first failure; doubled after each next one
LONGEST_WAIT_S = 3600.0

class PassbackState(StrEnum):
    """Where a score is on its way to the LMS."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"  # the LMS refused it (or the student has no LMS id yet); retried later
    UNSENDABLE = "unsendable"  # no LMS can take it as it is (no points); not retried


@dataclass(frozen=True)
class Score:
    """One student's score of one assignment, as it goes to the LMS."""

    student: str  # the hub user name
    assignment: str
    score: float
    max_score: float
    status: str  # the grader's status of the submission (graded, timeout, ...)


@dataclass(frozen=True)
class Row:
    """A score in the queue, with where it stands."""

    score: Score
    state: PassbackState
    tries: int
    next_try: float
    updated_at: float
    sent_at: float | None
    posts: int  # how many times the LMS took a value of this row
    detail: str


def wait_after(tries: int) -> float:
    """Return how long to wait before the next try after `tries` failures."""
    return min(LONGEST_WAIT_S, FIRST_WAIT_S * 2 ** max(0, tries - 1))


class PassbackQueue:
    """The queue: a sqlite file (a path), or any SQLAlchemy URL (PostgreSQL); its table made or migrated when
    opened (stores/models.py, stores/migrations/passback/)."""

    def __init__(self, where: Path | str, clock: Callable[[], float] = time.time) -> None:
        self.store = Tables(f"sqlite:///{where}" if isinstance(where, Path) else where, "passback")
        self.clock = clock  # every time it records or compares (seconds since the epoch)

    @classmethod
    def of_course(cls, course: Path, sqlite_file: Path,
                  clock: Callable[[], float] = time.time) -> "PassbackQueue":
        """Open the course's queue: in its PostgreSQL database when its gradebook is there, else the file."""
        return cls(course_part_url(course, "passback", sqlite_file), clock)

    def close(self) -> None:
        """Close its connections."""
        self.store.close()

    def _run(self, conn, sql: str, **params):
        return conn.execute(text(sql), {k: str(v) if isinstance(v, str) else v for k, v in params.items()})

    def offer(self, score: Score) -> bool:
        """Queue a score unless the row already holds this very value; return whether it was queued."""
        now = self.clock()
        with self.store.write() as conn:
            old = self._run(conn, "SELECT score, max_score, status FROM scores WHERE student = :student AND "
                            "assignment = :assignment", **_key(score)).first()
            if old is not None and tuple(old) == (score.score, score.max_score, score.status):
                return False
            self._run(conn,
                "INSERT INTO scores (student, assignment, score, max_score, status, state, tries, next_try, "
                "updated_at) VALUES (:student, :assignment, :score, :max_score, :status, :pending, 0, :now, "
                ":now) ON CONFLICT (student, assignment) DO UPDATE SET score=excluded.score, "
                "max_score=excluded.max_score, status=excluded.status, state=excluded.state, tries=0, "
                "next_try=excluded.next_try, updated_at=excluded.updated_at, detail=''",
                **_value(score), pending=PassbackState.PENDING, now=now)
        return True

    def due(self) -> list[Row]:
        """Return the rows to post now (pending or failed, their wait over), oldest first."""
        now = self.clock()
        with self.store.read() as conn:
            found = self._run(conn, "SELECT * FROM scores WHERE state NOT IN (:sent, :unsendable) AND "
                              "next_try <= :now ORDER BY updated_at", sent=PassbackState.SENT,
                              unsendable=PassbackState.UNSENDABLE, now=now)
            return [_row(r._mapping) for r in found]

    def rows(self, assignment: str | None = None) -> list[Row]:
        """Return every row (of one assignment), by assignment and student."""
        where = "WHERE assignment = :assignment " if assignment is not None else ""
        with self.store.read() as conn:
            found = self._run(conn, f"SELECT * FROM scores {where}ORDER BY assignment, student",
                              **({"assignment": assignment} if assignment is not None else {}))
            return [_row(r._mapping) for r in found]

    def sent(self, score: Score) -> bool:
        """Mark the row sent if it still holds this value; return whether it did (else it stays due)."""
        now = self.clock()
        with self.store.write() as conn:
            done = self._run(conn, f"UPDATE scores SET state=:sent, sent_at=:now, posts=posts+1, detail='' "
                             f"WHERE {_MATCH}", sent=PassbackState.SENT, now=now, **_value(score))
            return done.rowcount == 1

    def unsendable(self, score: Score, detail: str) -> None:
        """Record that no LMS can take this score as it is: it stays, with why, and is not tried again."""
        with self.store.write() as conn:
            self._run(conn, "UPDATE scores SET state=:unsendable, tries=tries+1, detail=:detail WHERE "
                      f"{_MATCH}", unsendable=PassbackState.UNSENDABLE, detail=detail[:500], **_value(score))

    def failed(self, score: Score, detail: str, refused: bool) -> None:
        """Record a failed post (refused: the LMS said no; else it could not be reached); wait, then retry."""
        now = self.clock()
        with self.store.write() as conn:
            found = self._run(conn, f"SELECT tries FROM scores WHERE {_MATCH}", **_value(score)).first()
            if found is None:  # a new score took its place meanwhile: that one is due now
                return
            tries = found[0] + 1
            self._run(conn, f"UPDATE scores SET state=:state, tries=:tries, next_try=:next, detail=:detail "
                      f"WHERE {_MATCH}", state=PassbackState.FAILED if refused else PassbackState.PENDING,
                      tries=tries, next=now + wait_after(tries), detail=detail[:500], **_value(score))


_MATCH = ("student=:student AND assignment=:assignment AND score=:score AND max_score=:max_score AND "
          "status=:status")


def _key(score: Score) -> dict:
    return {"student": score.student, "assignment": score.assignment}


def _value(score: Score) -> dict:
    return {**_key(score), "score": score.score, "max_score": score.max_score, "status": score.status}


def _row(r) -> Row:
    return Row(Score(r["student"], r["assignment"], r["score"], r["max_score"], r["status"]),
               PassbackState(r["state"]), r["tries"], r["next_try"], r["updated_at"], r["sent_at"],
               r["posts"], r["detail"])
