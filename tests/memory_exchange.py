"""An exchange held in memory, for testing the autograde service without a folder or a service: it
implements `exchange.interfaces.AutogradeExchange`, and records what the service gave back."""

from dataclasses import dataclass, field
from pathlib import Path

from autograder.hub.exchange.interfaces import Arrived, Held, Skip, Taken


@dataclass
class Stored:
    """One submission: its files (relative path -> bytes), or why the exchange refuses to hand it over."""

    arrived: Arrived
    files: dict[str, bytes] = field(default_factory=dict)
    refused: str = ""
    notes: str = ""


@dataclass
class MemoryExchange:
    where: str = "memory"
    hidden: tuple[Path, ...] = ()
    stored: list[Stored] = field(default_factory=list)
    # (student, assignment, timestamp, pages, ids) of each feedback given back
    given_back: list[tuple] = field(default_factory=list)
    asked: list[set[tuple[str, str, str]]] = field(default_factory=list)  # the `known` of each listing

    def submit(self, student: str, assignment: str, timestamp: str, files: dict[str, bytes] | None = None,
               **how: str) -> Stored:
        stored = Stored(Arrived(student, assignment, timestamp, f"{student}-{timestamp}", "secret"),
                        files or {f"{assignment}.ipynb": b"{}"}, **how)
        self.stored.append(stored)
        return stored

    def remove(self, stored: Stored) -> None:
        self.stored.remove(stored)

    def new_submissions(self, assignments: set[str], known: set[tuple[str, str, str]]) -> list[Arrived]:
        self.asked.append(set(known))
        found = [s.arrived for s in self.stored if s.arrived.assignment in assignments
                 and (s.arrived.assignment, s.arrived.student, s.arrived.timestamp) not in known]
        return sorted(found, key=lambda a: a.timestamp)

    def take(self, submission: Held, into: Path, skip: Skip) -> Taken:
        found = [s for s in self.stored if s.arrived.folder == submission.folder]
        if not found:
            return Taken(missing=True)
        if found[0].refused:
            return Taken(refused=found[0].refused)
        into.mkdir()
        for rel, data in found[0].files.items():
            if not skip(rel):
                (into / rel).parent.mkdir(parents=True, exist_ok=True)
                (into / rel).write_bytes(data)
        (into / "timestamp.txt").write_text(submission.timestamp)
        return Taken(notes=found[0].notes)

    def give_back(self, submission: Held, course: Path, pages: dict[str, str],
                  ids: dict[str, str] | None) -> None:
        self.given_back.append((submission.student, submission.assignment, submission.timestamp, pages, ids))
