"""The grade passback queue: one sqlite file in the grader's lti/ folder, a row per student and assignment.

A score is offered after each grading; the same score again changes nothing, a new one replaces what was not
sent yet. Each row is pending until the LMS took it (sent), retried with a growing wait when the LMS is down
or refuses (failed: the LMS said no; retried too). A score no LMS can take as it is (an assignment without
points) is unsendable: reported once, never tried again until a new score replaces it. A row is marked sent
only if it still holds the value that was posted, so a score that changed while it was posted is posted
again, once.
"""

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from autograder.words import Word

FIRST_WAIT_S = 30.0  # after the first failure; doubled after each next one
LONGEST_WAIT_S = 3600.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS scores (
    student TEXT NOT NULL,
    assignment TEXT NOT NULL,
    score REAL NOT NULL,
    max_score REAL NOT NULL,
    status TEXT NOT NULL,
    state TEXT NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    next_try REAL NOT NULL,
    updated_at REAL NOT NULL,
    sent_at REAL,
    posts INTEGER NOT NULL DEFAULT 0,
    detail TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (student, assignment)
);
"""


class PassbackState(Word):
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
    """The queue in one sqlite file (made on first use)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        """Close the file."""
        self.db.close()

    def offer(self, score: Score, now: float | None = None) -> bool:
        """Queue a score unless the row already holds this very value; return whether it was queued."""
        now = time.time() if now is None else now
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            old = self.db.execute("SELECT score, max_score, status FROM scores WHERE student=? AND "
                                  "assignment=?", (score.student, score.assignment)).fetchone()
            if old is not None and tuple(old) == (score.score, score.max_score, score.status):
                return False
            self.db.execute(
                "INSERT INTO scores (student, assignment, score, max_score, status, state, tries, next_try, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?) ON CONFLICT (student, assignment) DO UPDATE "
                "SET score=excluded.score, max_score=excluded.max_score, status=excluded.status, "
                "state=excluded.state, tries=0, next_try=excluded.next_try, updated_at=excluded.updated_at, "
                "detail=''",
                (score.student, score.assignment, score.score, score.max_score, score.status,
                 PassbackState.PENDING, now, now))
        return True

    def due(self, now: float | None = None) -> list[Row]:
        """Return the rows to post now (pending or failed, their wait over), oldest first."""
        now = time.time() if now is None else now
        found = self.db.execute("SELECT * FROM scores WHERE state NOT IN (?, ?) AND next_try <= ? ORDER BY "
                                "updated_at", (PassbackState.SENT, PassbackState.UNSENDABLE, now))
        return [_row(r) for r in found]

    def rows(self, assignment: str | None = None) -> list[Row]:
        """Return every row (of one assignment), by assignment and student."""
        found = self.db.execute("SELECT * FROM scores WHERE ? IS NULL OR assignment = ? ORDER BY assignment, "
                                "student", (assignment, assignment))
        return [_row(r) for r in found]

    def sent(self, score: Score, now: float | None = None) -> bool:
        """Mark the row sent if it still holds this value; return whether it did (else it stays due)."""
        now = time.time() if now is None else now
        with self.db:
            done = self.db.execute(
                "UPDATE scores SET state=?, sent_at=?, posts=posts+1, detail='' WHERE student=? AND "
                "assignment=? AND score=? AND max_score=? AND status=?",
                (PassbackState.SENT, now, score.student, score.assignment, score.score, score.max_score,
                 score.status))
        return done.rowcount == 1

    def unsendable(self, score: Score, detail: str) -> None:
        """Record that no LMS can take this score as it is: it stays, with why, and is not tried again."""
        with self.db:
            self.db.execute("UPDATE scores SET state=?, tries=tries+1, detail=? WHERE student=? AND "
                            "assignment=? AND score=? AND max_score=? AND status=?",
                            (PassbackState.UNSENDABLE, detail[:500], score.student, score.assignment,
                             score.score, score.max_score, score.status))

    def failed(self, score: Score, detail: str, refused: bool, now: float | None = None) -> None:
        """Record a failed post (refused: the LMS said no; else it could not be reached); wait, then retry."""
        now = time.time() if now is None else now
        key = (score.student, score.assignment, score.score, score.max_score, score.status)
        match = "student=? AND assignment=? AND score=? AND max_score=? AND status=?"
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            found = self.db.execute(f"SELECT tries FROM scores WHERE {match}", key).fetchone()
            if found is None:  # a new score took its place meanwhile: that one is due now
                return
            tries = found["tries"] + 1
            self.db.execute(f"UPDATE scores SET state=?, tries=?, next_try=?, detail=? WHERE {match}",
                            (PassbackState.FAILED if refused else PassbackState.PENDING, tries,
                             now + wait_after(tries), detail[:500], *key))


def _row(r: sqlite3.Row) -> Row:
    return Row(Score(r["student"], r["assignment"], r["score"], r["max_score"], r["status"]),
               PassbackState(r["state"]), r["tries"], r["next_try"], r["updated_at"], r["sent_at"],
               r["posts"], r["detail"])
