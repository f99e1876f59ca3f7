"""What the exchange's users need of it, whichever backend holds the submissions.

Two users, two interfaces, each method returning one type:

- `StaffExchange`, the instructor's commands (`hub release`, `status`, `collect`, `feedback`), run by root;
- `AutogradeExchange`, the autograde service (run as the grader): the new submissions, one taken into a
  batch's work folder, feedback given back.

The folder backend (`exchange/folder/`: nbgrader's exchange folder, made safe) and the HTTP backend
(`exchange/http/`: a hub service) each implement both; `setup/exchanges.py` alone picks one
(`exchange/choice.py` builds it). A third backend (object storage, a cluster's own store) is then one class of
each, named there with its template fragments.
"""

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from autograder.hub.text import printable


@dataclass(frozen=True)
class BadName:
    """A submission that is not one anybody is graded for (a folder of the inbound, say), and why."""

    name: str
    reason: str

    def line(self) -> str:
        """Return the line the instructor reads (escaped)."""
        return printable(f"{self.name}: {self.reason}")


@dataclass(frozen=True)
class Handin:
    """One student's state for an assignment: when they last submitted (None: never), whether it was
    collected.
    """

    student: str
    submitted: str | None
    collected: bool


@dataclass
class Handins:
    """Who has submitted an assignment, and what in the exchange is nobody's submission."""

    handins: list[Handin]
    skipped: list[BadName] = field(default_factory=list)


@dataclass(frozen=True)
class Collected:
    """A submission collected into the course: whose, graded as made when, and what was left out of it."""

    student: str
    timestamp: str
    notes: str


@dataclass
class CollectReport:
    """What `hub collect` did: collected, already collected (unchanged), and folders not collected and why."""

    collected: list[Collected] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[BadName] = field(default_factory=list)
    log: list[str] = field(default_factory=list)  # what a backend's own tool said (nbgrader collect, HTTP)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "CollectReport":
        data = json.loads(text)
        return cls([Collected(**c) for c in data["collected"]], data["unchanged"],
                   [BadName(**b) for b in data["skipped"]], data.get("log", []))

    def lines(self) -> list[str]:
        """Return what the instructor reads, one line each, student-made text escaped."""
        out = [printable(f"collected {c.student} ({c.timestamp})" + (f": {c.notes}" if c.notes else ""))
               for c in self.collected]
        out += [printable(f"no newer submission: {s}") for s in self.unchanged]
        out += [f"not collected: {b.line()}" for b in self.skipped]
        out += [printable(line) for line in self.log]
        return out or ["no submissions to collect"]


class StaffExchange(Protocol):
    """The instructor's side of the exchange, as root's `hub` commands use it."""

    def prepare(self) -> list[str]:
        """Make (or repair) the exchange's own place at `hub setup`, once the grader account exists; return
        a line per repair."""

    def release(self, assignment: str, force: bool = False, due: str | None = None) -> str:
        """Release the built student version for every student to fetch; return what the instructor reads."""

    def status(self, assignment: str) -> Handins:
        """Return every student on the roster with their latest submission."""

    def collect(self, assignment: str) -> CollectReport:
        """Copy each student's newest submission into the course's submitted/."""

    def feedback(self, assignment: str) -> list[str]:
        """Give the graded feedback pages back; return the students they went to."""


@dataclass(frozen=True)
class Arrived:
    """A submission the exchange holds: whose, of what, made when (the exchange's time, never the student's
    word), where the backend finds it, and nbgrader's secret that feedback is returned by ("" if none)."""

    student: str
    assignment: str
    timestamp: str
    folder: str
    secret: str = ""


class Held(Protocol):
    """A submission as the autograde service's queue names it (its `Entry`, or an `Arrived`)."""

    @property
    def student(self) -> str: ...
    @property
    def assignment(self) -> str: ...
    @property
    def timestamp(self) -> str: ...
    @property
    def folder(self) -> str: ...
    @property
    def secret(self) -> str: ...


@dataclass(frozen=True)
class Taken:
    """What came of taking a submission into a batch: it had gone (`missing`), it was refused (`refused`
    says why), or it was taken (`notes` on what its time or files were not used for)."""

    missing: bool = False
    refused: str = ""
    notes: str = ""


Skip = Callable[[str], bool]  # a path in a submission (relative, POSIX) the course ignores


class AutogradeExchange(Protocol):
    """The autograde service's side of the exchange."""

    where: str  # what the service's log says it watches
    hidden: tuple[Path, ...]  # folders the grading sandbox hides from student code

    def new_submissions(self, assignments: set[str], known: set[tuple[str, str, str]]) -> list[Arrived]:
        """Return the submissions of these assignments not in `known` (assignment, student, timestamp) and
        ready to grade, oldest first."""

    def take(self, submission: Held, into: Path, skip: Skip) -> Taken:
        """Copy a submission into the new folder `into` (its parent exists), within the caps, stamped with
        the exchange's time; nothing is left at `into` unless it was taken."""

    def give_back(self, submission: Held, course: Path, pages: dict[str, str],
                  ids: dict[str, str] | None) -> None:
        """Give a graded submission's feedback pages back, as `nbgrader release_feedback` does (the course's
        feedback/ and the student's side); `ids` maps a page's notebook to the student's own name for it."""
