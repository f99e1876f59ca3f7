"""What grading one student produced: a plain record that is saved, merged into the gradebook and reported."""

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder.str_enum import StrEnum

# Bump when a change to the grader can change grades: cached results from older versions are then regraded.
GRADER_VERSION = "4"



class Status(StrEnum):
    """A student's status for one assignment, in the order the summary counts them."""

    GRADED = "graded"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    PROCESSES = "processes"
    DISK = "disk"
    CRASHED = "crashed"
    INVALID = "invalid"
    MISSING = "missing"
    REFUSED = "refused"  # the autograde service would not copy the submission out of the exchange

    @property
    def ran_notebooks(self) -> bool:
        """Return True when the student's notebooks were run (whether or not every cell finished)."""
        return self in (Status.GRADED, Status.TIMEOUT, Status.MEMORY, Status.PROCESSES, Status.DISK,
                        Status.CRASHED)


class CellKind(StrEnum):
    """What a graded cell is."""

    TEST = "test"  # autograded
    ANSWER = "answer"  # an answer graded by hand
    TASK = "task"  # a task graded by hand


@dataclass
class CellScore:
    """The autograder's score for one graded test cell."""

    notebook: str
    grade_id: str
    score: float
    max_score: float
    needs_manual_grade: bool = False
    error: str = ""  # first line of the error when the test failed
    kind: CellKind = CellKind.TEST

    def __post_init__(self) -> None:
        self.kind = CellKind(self.kind)  # a spelling read back from JSON becomes the member

    @property
    def passed(self) -> bool:
        """Return True when the cell earned all its points."""
        return self.max_score > 0 and self.score >= self.max_score


@dataclass
class StudentResult:
    """One student's row in grades.csv, plus everything the gradebook needs to record it."""

    student: str
    assignment: str
    status: Status
    detail: str = ""
    cells: list[CellScore] = field(default_factory=list)
    # notebook -> solution/task cell grade_id -> nbgrader's auto_comment ("No response." or None)
    comments: dict[str, dict[str, str | None]] = field(default_factory=dict)
    late_penalties: dict[str, float] = field(default_factory=dict)
    timestamp: str | None = None
    fingerprint: str = ""
    ran: bool = False  # True when an autograded notebook exists for this student
    # Tampering the grading kernel found and undid, one short reason each, for the instructor to review
    flags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # a spelling read back from JSON or CSV becomes the member

    @property
    def score(self) -> float:
        """Return the points earned."""
        return sum(c.score for c in self.cells)

    @property
    def max_score(self) -> float:
        """Return the points possible."""
        return sum(c.max_score for c in self.cells)

    @property
    def late_penalty(self) -> float:
        """Return the points taken off for lateness (nbgrader's late submission penalty, all notebooks)."""
        return sum(self.late_penalties.values())

    @property
    def final_score(self) -> float:
        """Return the score after the late penalty, as `nbgrader export` reports it."""
        return max(0.0, self.score - self.late_penalty)

    def to_json(self) -> str:
        """Return the record as JSON text."""
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "StudentResult":
        """Read a record written by to_json."""
        raw = json.loads(text)
        raw["cells"] = [CellScore(**c) for c in raw.get("cells", [])]
        return cls(**raw)


def zero_cells(max_points: dict[tuple[str, str], float]) -> list[CellScore]:
    """Return a zero score for every graded cell of the assignment ((notebook, grade_id) -> points)."""
    return [CellScore(nb, gid, 0.0, points) for (nb, gid), points in sorted(max_points.items())]


def hash_tree(paths: list[Path], base: Path | None = None) -> str:
    """Return a digest of the names and contents of the given files (order-independent)."""
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: str(p.relative_to(base) if base else p.name)):
        name = str(path.relative_to(base)) if base else path.name
        digest.update(name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def fingerprint(*parts: object) -> str:
    """Return a short digest of everything that determines a student's grade."""
    return hashlib.sha256(json.dumps([GRADER_VERSION, *parts], sort_keys=True,
                                     default=str).encode()).hexdigest()[:32]


def write_atomic(path: Path, text: str) -> None:
    """Write a text file so that a reader (or an interrupted run) never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
