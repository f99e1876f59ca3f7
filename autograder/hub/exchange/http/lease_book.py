"""The exchange service's leases in the hub's database (stores/models.py: held_leases, issued_leases), so
that a lease outlives a restart of the service: a worker grading a submission when the service restarts
keeps its lease, posts its result under it, and no second worker is handed the submission meanwhile."""

from sqlalchemy import delete, select

from autograder.hub.exchange.http.work import Handout, Key, Lease
from autograder.hub.stores.models import HeldLease, IssuedLease
from autograder.hub.stores.tables import Tables


class DatabaseLeaseBook:
    """A `work.LeaseBook` in a sqlite file or the hub's PostgreSQL schema `exchange` (migrated when
    opened)."""

    def __init__(self, url: str) -> None:
        self.tables = Tables(url, "exchange")

    def close(self) -> None:
        self.tables.close()

    def held(self) -> dict[Key, Lease]:
        with self.tables.read() as conn:
            rows = conn.execute(select(HeldLease.__table__)).all()
        return {(r.assignment_id, r.student_id, r.timestamp): _lease(r) for r in rows}

    def current(self, key: Key) -> Lease | None:
        with self.tables.read() as conn:
            row = conn.execute(select(HeldLease.__table__).where(*_at(HeldLease, key))).first()
        return None if row is None else _lease(row)

    def hold(self, lease: Lease) -> None:
        h = lease.handout
        where = _at(HeldLease, lease.key)
        with self.tables.write() as conn:
            conn.execute(delete(HeldLease.__table__).where(*where))
            conn.execute(HeldLease.__table__.insert().values(
                assignment_id=h.assignment_id, student_id=h.student_id, timestamp=h.timestamp,
                lease_id=lease.lease_id, expires=lease.expires,
                protect_hidden_tests=None if h.protect_hidden_tests is None else int(h.protect_hidden_tests),
                timeout=h.timeout, due=h.due))
            known = select(IssuedLease.lease_id).where(IssuedLease.lease_id == lease.lease_id)
            if conn.execute(known).first() is None:
                conn.execute(IssuedLease.__table__.insert().values(
                    lease_id=lease.lease_id, assignment_id=h.assignment_id, student_id=h.student_id,
                    timestamp=h.timestamp))

    def issued(self, key: Key) -> set[str]:
        with self.tables.read() as conn:
            return set(conn.execute(select(IssuedLease.lease_id).where(*_at(IssuedLease, key))).scalars())

    def forget(self, key: Key) -> None:
        with self.tables.write() as conn:
            conn.execute(delete(HeldLease.__table__).where(*_at(HeldLease, key)))
            conn.execute(delete(IssuedLease.__table__).where(*_at(IssuedLease, key)))


def _lease(r) -> Lease:
    """Return the lease a row of held_leases holds."""
    protect = None if r.protect_hidden_tests is None else bool(r.protect_hidden_tests)
    return Lease(r.lease_id, Handout(r.assignment_id, r.student_id, r.timestamp, protect, r.timeout, r.due),
                 r.expires)


def _at(model, key: Key) -> tuple:
    """Return the conditions that pick one submission's rows."""
    assignment, student, timestamp = key
    return (model.assignment_id == assignment, model.student_id == student, model.timestamp == timestamp)
