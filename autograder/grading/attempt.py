"""The attempt protocol between the grader and its workers, and the rule that decides the next attempt.

The grader hands a worker a `Job` (one student, one attempt); the worker, or the pool when it had to stop the
worker, answers with an `AttemptReport`. Both cross a pipe as one line of JSON. When an attempt failed because
of one cell (a dead or hung kernel, a cap), `next_attempt` returns the same job again with that cell skipped.
"""

import json
from dataclasses import asdict, dataclass, field

from autograder.grading.results import CellScore, Status
from autograder.str_enum import StrEnum

MAX_ATTEMPTS = 3


class EventKind(StrEnum):
    """What happened while a notebook ran (execution.py writes these into the progress file)."""

    KERNEL_DIED = "kernel-died"
    UNRESPONSIVE = "unresponsive"  # ignored the interrupt at the time limit
    TIMEOUT = "timeout"  # a cell was interrupted at the time limit
    MEMORY = "memory"  # a cell ran out of memory (MemoryError, CUDA out of memory)
    PROCESSES = "processes"  # a cell tried to start too many processes
    DISK = "disk"  # a cell wrote a file past the size cap
    TAMPER = "tamper"  # the guard found and undid a change to grading
    SKIPPED = "skipped"  # a cell not run in this attempt
    TRUNCATED = "truncated"  # output past the cap was dropped
    SYS_EXIT = "sys-exit"  # a cell called sys.exit()

    @property
    def status(self) -> Status | None:
        """Return the status this event gives a student graded so far, if it changes it."""
        return {EventKind.TIMEOUT: Status.TIMEOUT, EventKind.MEMORY: Status.MEMORY,
                EventKind.PROCESSES: Status.PROCESSES, EventKind.DISK: Status.DISK}.get(self)


class FailureKind(StrEnum):
    """Why an attempt could not finish; each kind knows the status it gives and whether it is retried."""

    KERNEL_DIED = EventKind.KERNEL_DIED.value
    CRASHED = "crashed"  # the grading process died
    # the grader failed on this student: `invalid` with the reason, never retried
    GRADER_ERROR = "grader-error"
    UNRESPONSIVE = EventKind.UNRESPONSIVE.value
    TIMEOUT = EventKind.TIMEOUT.value
    MEMORY = EventKind.MEMORY.value
    PROCESSES = EventKind.PROCESSES.value
    DISK = EventKind.DISK.value
    INVALID = "invalid"  # nbgrader could not read the notebook

    @property
    def status(self) -> Status:
        """Return the student's status when this is the first failure."""
        return {FailureKind.UNRESPONSIVE: Status.TIMEOUT, FailureKind.TIMEOUT: Status.TIMEOUT,
                FailureKind.MEMORY: Status.MEMORY, FailureKind.PROCESSES: Status.PROCESSES,
                FailureKind.DISK: Status.DISK, FailureKind.INVALID: Status.INVALID,
                FailureKind.GRADER_ERROR: Status.INVALID}.get(self, Status.CRASHED)

    @property
    def retried(self) -> bool:
        """Return True when grading again without the guilty cell can help."""
        return self not in (FailureKind.INVALID, FailureKind.GRADER_ERROR)

    @property
    def reason(self) -> str:
        """Return what the guilty cell did, to tell the student why it was not run again."""
        return {FailureKind.KERNEL_DIED: "crashed the kernel",
                FailureKind.CRASHED: "crashed the grading process",
                FailureKind.UNRESPONSIVE: "ran past the time limit",
                FailureKind.TIMEOUT: "ran past the time limit",
                FailureKind.MEMORY: "used more than the memory cap",
                FailureKind.PROCESSES: "started too many processes",
                FailureKind.DISK: "wrote too much to disk"}.get(self, "failed")


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
    extension_s: float | None = None  # the student's extension of the due date (hub extend), in seconds

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
    """Something that happened while a notebook ran (a cell interrupted, output cut, a flag), from
    execution.py.
    """

    kind: EventKind
    message: str = ""
    notebook: str | None = None
    cell: int | None = None
    grade_id: str | None = None


def progress_events(progress: dict) -> list[Event]:
    """Return the events of a progress file (execution.py writes them as JSON objects)."""
    known = {kind.value for kind in EventKind}
    fields = ("message", "notebook", "cell", "grade_id")
    return [Event(EventKind(raw["kind"]),
                  **{k: raw.get(k) or ("" if k == "message" else None) for k in fields})
            for raw in progress.get("events", []) if isinstance(raw, dict) and raw.get("kind") in known]


class Outcome(StrEnum):
    """How an attempt ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    UNREADABLE = Status.INVALID.value  # no notebook could be read


@dataclass
class AttemptReport:
    """What one attempt produced: scores when it completed, else why it failed."""

    outcome: Outcome
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
        return ((self.failure.notebook, self.failure.cell) if self.failure and self.failure.cell is not None
                else None)

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
        raw["outcome"] = Outcome(raw["outcome"])
        return cls(**raw)


def next_attempt(job: Job, report: AttemptReport, max_attempts: int = MAX_ATTEMPTS) -> Job | None:
    """Return the job to run after this report (the same student, the guilty cell skipped), or None: done."""
    failure = report.failure
    if (report.outcome != Outcome.FAILED or failure is None or report.blamed is None
        or not failure.kind.retried
            or job.attempt >= max_attempts or report.blamed in {(s.notebook, s.cell) for s in job.skip}):
        return None
    # A dead kernel is noticed up to a second late, so a failure can be blamed on a cell after the culprit:
    # when a later attempt fails earlier in the same notebook, the cells skipped after that point run again.
    keep = tuple(s for s in job.skip if not (s.notebook == failure.notebook and s.cell > failure.cell))
    why = f"not run: in an earlier attempt this cell {failure.kind.reason}"
    return Job(job.index, job.student, job.notebooks, job.folder, job.timestamp, job.attempt + 1,
               (*keep, Skip(failure.notebook, failure.cell, why)), job.extension_s)


def wrongly_blamed(before: Job, after: Job) -> set[tuple[str | None, int]]:
    """Return the cells that `before` skipped and `after` runs again (their earlier failures were misblamed).
    """
    return {(s.notebook, s.cell) for s in before.skip} - {(s.notebook, s.cell) for s in after.skip}
