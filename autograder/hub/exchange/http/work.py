"""Grading work handed out by the exchange service: leases on submissions, and the results workers post.

With grading workers the autograde service names the submissions that may be graded now, each with how
(`Handout`: its hidden tests protected or not, its time limit: the instructor's settings and the hourly limit
hold with workers as without); a service started with --hand-out-when-told hands out nothing else. A worker
leases one submission without a result (oldest first), with how to grade it; the lease lasts LEASE_S. A worker
that dies holding one loses it when it expires, and the submission is handed out again, up to MAX_LEASES
leases: one that every worker it was handed to died on (a crash, a kill) is recorded `invalid` by the service
itself, once, rather than handed out at every expiry for ever. The first result
posted for a submission is the one recorded, whoever posts it (a worker whose lease ran out grades the same
stored submission as the one it was handed to next); any later one is refused as already recorded, so nothing
is lost or counted twice.
"""

import contextlib
import datetime
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

from autograder.grading.defaults import timeout_problem
from autograder.grading.results import Status, StudentResult
from autograder.hub.exchange.http.api import ServiceClient, ServiceError, SubmissionInfo
from autograder.hub.settings import LEASE_S
from autograder.safe_copy import Limits

MAX_RESULT_BYTES = 16 << 20  # a result and its feedback pages, as JSON
MAX_LEASES = 3  # leases of one submission that may end with no result before the service gives it up
RESULT_FILE = "result.json"
RESULTS = "results"  # the store's trees of results: ("results", assignment, student, timestamp)
# a worker's feedback pages, held until the autograde service has recorded their result in the gradebook
HELD_FEEDBACK = "held-feedback"  # ("held-feedback", assignment, student, timestamp)
RESULT_LIMITS = Limits(file_bytes=MAX_RESULT_BYTES, total_bytes=MAX_RESULT_BYTES, entries=1, depth=1)


@dataclass(frozen=True)
class Handout:
    """A submission the autograde service lets workers grade now, and how (None: the worker's own setting)."""

    assignment_id: str
    student_id: str
    timestamp: str
    protect_hidden_tests: bool | None = None  # feedback keeps the hidden tests hidden (before the due date)
    timeout: float | None = None  # seconds per notebook
    due: str | None = None  # the student's due date, extension included (naive UTC, ISO): late or not

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.assignment_id, self.student_id, self.timestamp)

    @classmethod
    def from_json(cls, raw: object) -> "Handout":
        """Read one from its JSON form (TypeError or ValueError when it is not one)."""
        if not isinstance(raw, dict):
            raise TypeError("a submission is an object")
        names = [raw.get(k) for k in ("assignment_id", "student_id", "timestamp")]
        protect, timeout, due = raw.get("protect_hidden_tests"), raw.get("timeout"), raw.get("due")
        if not all(isinstance(n, str) and n for n in names):
            raise ValueError("a submission names its assignment_id, student_id and timestamp")
        if protect is not None and not isinstance(protect, bool):
            raise ValueError("protect_hidden_tests is true, false or null")
        if timeout_problem(timeout):
            raise ValueError(f"timeout is a number of seconds or null: {timeout_problem(timeout)}")
        if due is not None:
            try:
                moment = datetime.datetime.fromisoformat(str(due))
                if moment.tzinfo is not None:
                    moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
                due = moment.isoformat(" ")
            except ValueError:
                raise ValueError("due is a date and time (ISO, UTC) or null") from None
        return cls(*names, protect, None if timeout is None else float(timeout), due)


@dataclass(frozen=True)
class Lease:
    """One submission handed to one worker until `expires` (the service's monotonic clock), with how to grade
    it."""

    lease_id: str
    handout: Handout
    expires: float

    @property
    def key(self) -> tuple[str, str, str]:
        return self.handout.key

    def offer(self, now: float) -> dict:
        """Return the lease as a worker receives it (how long it has, not the service's clock)."""
        return {"lease_id": self.lease_id, **asdict(self.handout), "lease_s": round(self.expires - now, 3)}


STATUSES = tuple(s.value for s in Status)


@dataclass(frozen=True)
class WorkResult:
    """What a worker posts for a graded submission: the grader's status and score, and the feedback pages."""

    status: str
    score: float | None
    max_score: float | None
    detail: str = ""
    pages: dict[str, str] = field(default_factory=dict)  # notebook (the student's name for it) -> HTML
    worker: str = ""
    graded: str = ""  # the grader's StudentResult as JSON (cells, comments): what the gradebook records

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, body: bytes) -> "WorkResult":
        """Read a posted result (ValueError when it is not one)."""
        try:
            raw = json.loads(body)
            result = cls(str(raw["status"]), _number(raw.get("score")), _number(raw.get("max_score")),
                         str(raw.get("detail", "")), dict(raw.get("pages", {})), str(raw.get("worker", "")),
                         str(raw.get("graded") or ""))
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a result: {exc}") from None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in result.pages.items()):
            raise ValueError("not a result: pages are notebook names and HTML text")
        if result.status not in STATUSES:  # a worker's word is input: only what the grader writes
            raise ValueError(f"not a result: no status {result.status[:40]!r} (one of {', '.join(STATUSES)})")
        if result.graded:
            try:
                StudentResult.from_json(result.graded)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise ValueError(f"not a result: its graded record cannot be read ({exc})"[:300]) from None
        return result


def _number(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


Key = tuple[str, str, str]  # (assignment_id, student_id, timestamp)


class LeaseBook(Protocol):
    """Where the leases are kept: in memory (`MemoryLeaseBook`), or in the hub's database, where they outlive
    a restart of the service (`lease_book.DatabaseLeaseBook`)."""

    def held(self) -> dict[Key, Lease]:
        """Return every submission's current lease (live or expired)."""

    def current(self, key: Key) -> Lease | None:
        """Return one submission's current lease (live or expired; None: it has none)."""

    def hold(self, lease: Lease) -> None:
        """Make this the submission's current lease, and count it as issued for the submission."""

    def issued(self, key: Key) -> set[str]:
        """Return the id of every lease issued for a submission since its last result."""

    def forget(self, key: Key) -> None:
        """Drop a submission's leases (its result is recorded)."""


class MemoryLeaseBook:
    """Leases in the service's memory: after a restart every submission without a result is free."""

    def __init__(self) -> None:
        self._held: dict[Key, Lease] = {}
        self._issued: dict[Key, set[str]] = {}

    def held(self) -> dict[Key, Lease]:
        return dict(self._held)

    def current(self, key: Key) -> Lease | None:
        return self._held.get(key)

    def hold(self, lease: Lease) -> None:
        self._held[lease.key] = lease
        self._issued.setdefault(lease.key, set()).add(lease.lease_id)

    def issued(self, key: Key) -> set[str]:
        return set(self._issued.get(key, ()))

    def forget(self, key: Key) -> None:
        self._held.pop(key, None)
        self._issued.pop(key, None)


class Leases:
    """The service's leases on submissions, kept in a `LeaseBook`; expiry is read on the wall clock (seconds
    since the epoch), so that a lease kept in the database means the same after a restart."""

    def __init__(self, lease_s: float = LEASE_S, clock: Callable[[], float] = time.time,
                 handed_out: set[str] | None = None, book: LeaseBook | None = None) -> None:
        self.lease_s, self.clock = lease_s, clock
        self.book = book if book is not None else MemoryLeaseBook()
        self.handed_out = handed_out  # the assignments whose submissions are leased (None: every one)
        self.named: dict[Key, Handout] | None = None  # exactly these (None: all handed out)
        # results being written now: a post in flight, which a restart ends anyway
        self.recording: set[Key] = set()

    def hand_out(self, handouts: Iterable[Handout]) -> None:
        """Hand out exactly these submissions from now on, each with how to grade it."""
        self.named = {h.key: h for h in handouts}
        self.handed_out = {h.assignment_id for h in self.named.values()}

    def lease(self, waiting: Iterable[SubmissionInfo]) -> Lease | None:
        """Lease the oldest of the waiting submissions that is handed out and that no live lease holds (None
        when there is none)."""
        now, held = self.clock(), self.book.held()
        for sub in sorted(waiting, key=lambda s: s.timestamp):
            key = (sub.assignment_id, sub.student_id, sub.timestamp)
            current = held.get(key)
            if key in self.recording or (current is not None and current.expires > now):
                continue
            if self.named is not None and key not in self.named:
                continue
            handout = self.named[key] if self.named is not None else Handout(*key)
            lease = Lease(secrets.token_hex(16), handout, now + self.lease_s)
            self.book.hold(lease)
            return lease
        return None

    def given_up(self, waiting: Iterable[SubmissionInfo]) -> list[Handout]:
        """Return the waiting submissions whose MAX_LEASES-th lease has run out with no result posted: no
        worker finishes them (each that took one died on it), so the service records them `invalid`."""
        now, held = self.clock(), self.book.held()
        keys = [(sub.assignment_id, sub.student_id, sub.timestamp) for sub in waiting]
        return [held[key].handout for key in keys
                if key in held and held[key].expires <= now and key not in self.recording
                and len(self.book.issued(key)) >= MAX_LEASES]

    def was_issued(self, key: Key, lease_id: str) -> bool:
        """Return whether the service handed this lease out for this submission (held now, expired, or handed
        on since: the first result of a real lease is kept, never one for a lease nobody was given)."""
        return lease_id in self.book.issued(key)

    def live(self, key: Key, lease_id: str) -> bool:
        """Return whether this lease is the submission's current one and has not expired."""
        held = self.book.current(key)
        return held is not None and held.lease_id == lease_id and held.expires > self.clock()

    def renew(self, key: Key, lease_id: str) -> float | None:
        """Extend the submission's lease, if it is this one and live, by a full lease from now; return its
        length (None: it is not held by this lease any more, and may be another worker's)."""
        held = self.book.current(key)
        if held is None or held.lease_id != lease_id or held.expires <= self.clock():
            return None
        self.book.hold(replace(held, expires=self.clock() + self.lease_s))
        return self.lease_s

    def begin_recording(self, key: Key) -> bool:
        """Claim the right to write a submission's result (False: another post is writing it now)."""
        if key in self.recording:
            return False
        self.recording.add(key)
        return True

    def end_recording(self, key: Key, recorded: bool) -> None:
        """Let go of a submission: its lease ends when its result was recorded."""
        self.recording.discard(key)
        if recorded:
            self.book.forget(key)


@dataclass(frozen=True)
class Offer:
    """A lease as a worker holds it: the submission and how long it may take to post its result."""

    lease_id: str
    student_id: str
    assignment_id: str
    timestamp: str
    lease_s: float
    protect_hidden_tests: bool | None = None  # None: the worker's own setting
    timeout: float | None = None
    due: str | None = None  # the student's due date (naive UTC); None: none


def take_work(service: ServiceClient, assignments: Iterable[str] = ()) -> Offer | None:
    """Lease the oldest ungraded submission (of these assignments; all when none); None when there is none."""
    asked = ",".join(assignments)
    body = service.call("POST", "work", **({"assignment": asked} if asked else {}))
    return Offer(**json.loads(body)) if body else None


@dataclass(frozen=True)
class Recorded:
    """A result the service has recorded: which submission, and what its worker posted (no pages)."""

    student_id: str
    assignment_id: str
    timestamp: str
    result: WorkResult


def recorded_results(service: ServiceClient, assignment: str) -> list[Recorded]:
    """Return the results recorded for an assignment's submissions (`GET api/results`, staff)."""
    listed = json.loads(service.call("GET", RESULTS, assignment=assignment) or b"{}").get("results", [])
    found = []
    for raw in listed:
        key = (str(raw.pop("student_id")), str(raw.pop("assignment_id")), str(raw.pop("timestamp")))
        found.append(Recorded(*key, WorkResult.from_json(json.dumps(raw).encode())))
    return found


def give_back_result(service: ServiceClient, student: str, assignment: str, timestamp: str) -> bool:
    """Give a recorded result's feedback pages to its student (`POST api/results/A/S/T/feedback`, staff);
    return False when they were not given now: feedback was there already, or the service held none (a result
    recorded before pages were held). Raise ServiceError when the service did not do it."""
    body = service.call("POST", f"{RESULTS}/{assignment}/{student}/{timestamp}/feedback")
    return bool(json.loads(body or b"{}").get("given_back"))


def hand_out(service: ServiceClient, handouts: Iterable[Handout]) -> None:
    """Tell the service exactly which submissions to hand to workers, and how each is graded (`PUT api/work`,
    staff)."""
    service.call("PUT", "work", json.dumps({"submissions": [asdict(h) for h in handouts]}).encode())


@dataclass(frozen=True)
class Renewal:
    """A lease being renewed while its submission is graded (`keep_leased`)."""

    lost: threading.Event  # set when the service said the lease is no longer this worker's
    thread: threading.Thread


@contextlib.contextmanager
def keep_leased(service: ServiceClient, offer: Offer) -> Iterator[Renewal]:
    """Renew the offer's lease every third of its length while the block runs, so that no other worker is
    handed the submission while this one grades it (a grading of several attempts outlasts one lease); stop
    at the block's end, or for good when the service says the lease has ended (`lost`). A renewal that does
    not reach the service is tried again at the next third."""
    done, lost = threading.Event(), threading.Event()
    path = f"work/{offer.assignment_id}/{offer.student_id}/{offer.timestamp}"

    def renew() -> None:
        while not done.wait(offer.lease_s / 3):
            try:
                service.call("POST", path, lease=offer.lease_id)
            except ServiceError as exc:
                if exc.status in (403, 404, 409):
                    lost.set()
                    return

    thread = threading.Thread(target=renew, name=f"lease {offer.lease_id[:8]}", daemon=True)
    thread.start()
    try:
        yield Renewal(lost, thread)
    finally:
        done.set()
        thread.join()


def post_result(service: ServiceClient, offer: Offer, result: WorkResult) -> bool:
    """Post a graded submission's result; return False when one was recorded already (this one is not)."""
    path = f"results/{offer.assignment_id}/{offer.student_id}/{offer.timestamp}"
    try:
        service.call("PUT", path, result.to_json(), lease=offer.lease_id)
    except ServiceError as exc:
        if exc.status == 409:
            return False
        raise
    return True
