"""The tables of each store, one declarative base (one MetaData) per part: a part's migrations make exactly
its own tables, in its own sqlite file or PostgreSQL schema.

The stores' columns are the ones the hand-written DDL of the hubs before alembic made, so that such a hub
upgrades in place (its first migration adopts the tables it finds).
"""

from sqlalchemy import Index, Integer, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from autograder.hub.stores.columns import REAL, SORTED_TEXT


class AutogradeBase(DeclarativeBase):
    """The autograde service's queue (service/autograde_queue.py)."""


class AssignmentRow(AutogradeBase):
    """Autograding of one assignment: on or off, its hourly limit, time limit and hidden tests' setting."""

    __tablename__ = "assignments"
    assignment: Mapped[str] = mapped_column(SORTED_TEXT, primary_key=True)
    enabled: Mapped[int] = mapped_column(Integer)
    per_hour: Mapped[int] = mapped_column(Integer, server_default="0")
    timeout: Mapped[float] = mapped_column(REAL, server_default="120")
    hidden_tests: Mapped[str] = mapped_column(Text, server_default="protected")


class SubmissionRow(AutogradeBase):
    """One submission in the queue, keyed as nbgrader keys it (student, assignment, timestamp)."""

    __tablename__ = "submissions"
    __table_args__ = (Index("by_state", "state", "place"),)
    student: Mapped[str] = mapped_column(SORTED_TEXT, primary_key=True)
    assignment: Mapped[str] = mapped_column(SORTED_TEXT, primary_key=True)
    timestamp: Mapped[str] = mapped_column(SORTED_TEXT, primary_key=True)
    folder: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Text)
    place: Mapped[float] = mapped_column(REAL)
    seen_at: Mapped[float] = mapped_column(REAL)
    started_at: Mapped[float | None] = mapped_column(REAL)
    finished_at: Mapped[float | None] = mapped_column(REAL)
    tries: Mapped[int] = mapped_column(Integer, server_default="0")
    graded: Mapped[int] = mapped_column(Integer, server_default="0")
    status: Mapped[str] = mapped_column(Text, server_default="")
    score: Mapped[float | None] = mapped_column(REAL)
    max_score: Mapped[float | None] = mapped_column(REAL)
    detail: Mapped[str] = mapped_column(Text, server_default="")


class PassbackBase(DeclarativeBase):
    """The grade passback queue (lms/passback_queue.py)."""


class ScoreRow(PassbackBase):
    """A student's score of an assignment on its way to the LMS."""

    __tablename__ = "scores"
    student: Mapped[str] = mapped_column(SORTED_TEXT, primary_key=True)
    assignment: Mapped[str] = mapped_column(SORTED_TEXT, primary_key=True)
    score: Mapped[float] = mapped_column(REAL)
    max_score: Mapped[float] = mapped_column(REAL)
    status: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Text)
    tries: Mapped[int] = mapped_column(Integer, server_default="0")
    next_try: Mapped[float] = mapped_column(REAL)
    updated_at: Mapped[float] = mapped_column(REAL)
    sent_at: Mapped[float | None] = mapped_column(REAL)
    posts: Mapped[int] = mapped_column(Integer, server_default="0")
    detail: Mapped[str] = mapped_column(Text, server_default="")


class NoncesBase(DeclarativeBase):
    """The LTI launches' nonces already used (lms/launch.py)."""


class NonceRow(NoncesBase):
    """A nonce, kept until its token expires."""

    __tablename__ = "nonces"
    nonce: Mapped[str] = mapped_column(Text, primary_key=True)
    expires: Mapped[float] = mapped_column(REAL)


class PeopleBase(DeclarativeBase):
    """Who is who: each LMS person and their hub account (lms/people.py)."""


class PersonRow(PeopleBase):
    """An LMS person, (issuer, deployment, sub), and the one account made for them."""

    __tablename__ = "people"
    __table_args__ = (UniqueConstraint("account"),)
    issuer: Mapped[str] = mapped_column(Text, primary_key=True)
    deployment_id: Mapped[str] = mapped_column(Text, primary_key=True)
    sub: Mapped[str] = mapped_column(Text, primary_key=True)
    account: Mapped[str] = mapped_column(Text)


class ExchangeBase(DeclarativeBase):
    """The exchange service's grading leases (stores/leases.py)."""


class HeldLease(ExchangeBase):
    """A submission's current lease: who may post its result until `expires` (seconds since the epoch), and
    how the submission is graded (work.Handout)."""

    __tablename__ = "held_leases"
    assignment_id: Mapped[str] = mapped_column(SORTED_TEXT, primary_key=True)
    student_id: Mapped[str] = mapped_column(SORTED_TEXT, primary_key=True)
    timestamp: Mapped[str] = mapped_column(SORTED_TEXT, primary_key=True)
    lease_id: Mapped[str] = mapped_column(Text)
    expires: Mapped[float] = mapped_column(REAL)
    protect_hidden_tests: Mapped[int | None] = mapped_column(Integer)  # 0/1; None: the worker's setting
    timeout: Mapped[float | None] = mapped_column(REAL)
    due: Mapped[str | None] = mapped_column(Text)


class IssuedLease(ExchangeBase):
    """Every lease handed out for a submission still without a result (held, expired or handed on): a
    result posted under any of them is kept; MAX_LEASES of them run out and the submission is given up."""

    __tablename__ = "issued_leases"
    __table_args__ = (Index("issued_by_submission", "assignment_id", "student_id", "timestamp"),)
    lease_id: Mapped[str] = mapped_column(Text, primary_key=True)
    assignment_id: Mapped[str] = mapped_column(SORTED_TEXT)
    student_id: Mapped[str] = mapped_column(SORTED_TEXT)
    timestamp: Mapped[str] = mapped_column(SORTED_TEXT)


BASES: dict[str, type[DeclarativeBase]] = {
    "autograde": AutogradeBase, "passback": PassbackBase, "nonces": NoncesBase, "people": PeopleBase,
    "exchange": ExchangeBase,
}
