"""The attempt protocol between the grader and its workers, and the rule that decides the next attempt.

The grader hands a worker a `Job` (one student, one attempt); the worker, or the pool when it had to stop the
worker, answers with an `AttemptReport`. Both cross a pipe as one line of JSON. When an attempt failed because
of one cell (a dead or hung kernel, a cap), `next_attempt` returns the same job again with that cell skipped.
"""

import json
from dataclasses import asdict, dataclass, field
from enum import Enum

from autograder.grading.results import CRASHED, DISK, INVALID, MEMORY, PROCESSES, TIMEOUT, CellScore

MAX_ATTEMPTS = 3


class FailureKind(str, Enum):
    """Why an attempt could not finish; each kind knows the status it gives and whether it is retried."""

    KERNEL_DIED = "kernel-died"
    CRASHED = "crashed"  # the grading process died
    GRADER_ERROR = "grader-error"  # the grader failed on this student: `invalid` with the reason, never retried
    UNRESPONSIVE = "unresponsive"  # ignored the interrupt at the time limit
    TIMEOUT = "timeout"
    MEMORY = "memory"
    PROCESSES = "processes"
    DISK = "disk"
    INVALID = "invalid"  # nbgrader could not read the notebook

    @property
    def status(self) -> str:
        """Return the student's status when this is the first failure."""
        return {"unresponsive": TIMEOUT, "timeout": TIMEOUT, "memory": MEMORY, "processes": PROCESSES,
                "disk": DISK, "invalid": INVALID, "grader-error": INVALID}.get(self.value, CRASHED)

    @property
    def retried(self) -> bool:
        """Return True when grading again without the guilty cell can help."""
        return self not in (FailureKind.INVALID, FailureKind.GRADER_ERROR)

    @property
    def reason(self) -> str:
        """Return what the guilty cell did, to tell the student why it was not run again."""
        return {"kernel-died": "crashed the kernel", "crashed": "crashed the grading process",
                "unresponsive": "ran past the time limit", "timeout": "ran past the time limit",
                "memory": "used more than the memory cap", "processes": "started too many processes",
                "disk": "wrote too much to disk"}.get(self.value, "failed")


@dataclass(frozen=True)
class Skip:
    """A cell not to run in this attempt, and why (shown in its output)."""

    notebook: str | None
    cell: int
    why: str


@dataclass(frozen=True)
class Job:
    """One attempt at grading one student."""

    index: int  # the student's position in the class (names the scratch folder)
    student: str
    notebooks: dict[str, str]  # the assignment's notebook name -> the student's file
    folder: str = ""  # the student's folder (other files are copied along)
    timestamp: str | None = None
    attempt: int = 1
    skip: tuple[Skip, ...] = ()

    @property
    def scratch_name(self) -> str:
        """Return the name of this attempt's scratch course folder."""
        return f"{self.index}-{self.attempt}"

    def to_json(self) -> str:
        """Return the job as one line of JSON."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Job":
        """Read a job written by to_json."""
        raw = json.loads(text)
        raw["skip"] = tuple(Skip(**s) for s in raw.get("skip", ()))
        return cls(**raw)


@dataclass(frozen=True)
class Failure:
    """Why an attempt stopped, and where (notebook, cell index, grade_id) when one cell is to blame."""

    kind: FailureKind
    message: str = ""
    notebook: str | None = None
    cell: int | None = None
    grade_id: str | None = None

    @classmethod
    def from_json(cls, raw: dict) -> "Failure":
        """Read a failure from its JSON form."""
        return cls(FailureKind(raw["kind"]), raw.get("message") or "", raw.get("notebook"), raw.get("cell"),
                   raw.get("grade_id"))


@dataclass(frozen=True)
class Event:
    """Something that happened while a notebook ran (a cell interrupted, output cut, a flag), from execution.py."""

    kind: str
    message: str = ""
    notebook: str | None = None
    cell: int | None = None
    grade_id: str | None = None


def progress_events(progress: dict) -> list[Event]:
    """Return the events of a progress file (execution.py writes them as JSON objects)."""
    fields = ("kind", "message", "notebook", "cell", "grade_id")
    return [Event(**{k: raw.get(k) or ("" if k == "message" else None) for k in fields})
            for raw in progress.get("events", []) if isinstance(raw, dict) and raw.get("kind")]


COMPLETED, FAILED, UNREADABLE = "completed", "failed", "invalid"


@dataclass
class AttemptReport:
    """What one attempt produced: scores when it completed, else why it failed."""

    outcome: str  # COMPLETED, FAILED or UNREADABLE (no notebook could be read)
    failure: Failure | None = None
    events: list[Event] = field(default_factory=list)
    cells: list[CellScore] = field(default_factory=list)
    comments: dict[str, dict[str, str | None]] = field(default_factory=dict)
    late_penalties: dict[str, float] = field(default_factory=dict)
    timestamp: str | None = None
    notes: list[str] = field(default_factory=list)
    scratch: str | None = None
    seconds: float = 0.0
    peak_mib: float = 0.0

    @property
    def blamed(self) -> tuple[str | None, int] | None:
        """Return the (notebook, cell) this attempt's failure is blamed on, if any."""
        return (self.failure.notebook, self.failure.cell) if self.failure and self.failure.cell is not None else None

    def to_json(self) -> str:
        """Return the report as one line of JSON."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | dict) -> "AttemptReport":
        """Read a report written by to_json (or its parsed dict)."""
        raw = dict(json.loads(text) if isinstance(text, str) else text)
        raw["failure"] = Failure.from_json(raw["failure"]) if raw.get("failure") else None
        raw["events"] = progress_events(raw)
        raw["cells"] = [c if isinstance(c, CellScore) else CellScore(**c) for c in raw.get("cells", [])]
        return cls(**raw)


def next_attempt(job: Job, report: AttemptReport, max_attempts: int = MAX_ATTEMPTS) -> Job | None:
    """Return the job to run after this report (the same student, the guilty cell skipped), or None: done."""
    failure = report.failure
    if (report.outcome != FAILED or failure is None or report.blamed is None or not failure.kind.retried
            or job.attempt >= max_attempts or report.blamed in {(s.notebook, s.cell) for s in job.skip}):
        return None
    # A dead kernel is noticed up to a second late, so a failure can be blamed on a cell after the culprit:
    # when a later attempt fails earlier in the same notebook, the cells skipped after that point run again.
    keep = tuple(s for s in job.skip if not (s.notebook == failure.notebook and s.cell > failure.cell))
    why = f"not run: in an earlier attempt this cell {failure.kind.reason}"
    return Job(job.index, job.student, job.notebooks, job.folder, job.timestamp, job.attempt + 1,
               (*keep, Skip(failure.notebook, failure.cell, why)))


def wrongly_blamed(before: Job, after: Job) -> set[tuple[str | None, int]]:
    """Return the cells that `before` skipped and `after` runs again (their earlier failures were misblamed)."""
    return {(s.notebook, s.cell) for s in before.skip} - {(s.notebook, s.cell) for s in after.skip}
