"""The autograde service's side of the folder exchange (`interfaces.AutogradeExchange`): the inbound's new
submissions, each copied out with `tree`'s checks, and feedback given back by its nbgrader secret."""

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.hub.exchange.folder import tree
from autograder.hub.exchange.interfaces import Arrived, BadName, Held, Skip, Taken
from autograder.hub.part_settings import AutogradeSettings
from autograder.hub.text import printable
from autograder.safe_copy import Refusal, read_small

# nbgrader's submit copies a submission into the inbound in place and writes its secret last: a folder without
# one is still being copied. Past this age it is taken anyway (graded, with no secret to return feedback by).
COPYING_GRACE_S = 10.0

logger = logging.getLogger("devicelab.autograde")


@dataclass(frozen=True)
class FolderAutograde:
    """The course's folders of the exchange, as the grader account reads and writes them."""

    folders: tree.Exchange
    where: str = field(init=False)
    hidden: tuple[Path, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "where", str(self.folders.inbound))
        object.__setattr__(self, "hidden", (self.folders.root,))

    @classmethod
    def at(cls, root: Path, course_id: str) -> "FolderAutograde":
        return cls(tree.Exchange(root, course_id))

    @classmethod
    def from_settings(cls, s: AutogradeSettings) -> "FolderAutograde":
        """Return the exchange folder the autograde service's settings name."""
        return cls.at(Path(s.exchange), s.course_id)

    def new_submissions(self, assignments: set[str], known: set[tuple[str, str, str]]) -> list[Arrived]:
        """Return the inbound's new submissions whose owner is the student they name, oldest first; one
        still being copied (no secret yet, changed in the last COPYING_GRACE_S) waits for the next scan."""
        if not assignments:
            return []
        found = []
        inbox = self.folders.read_inbox(assignments, now=None)
        for sub in sorted(inbox.submissions, key=lambda s: s.name.when):
            name = sub.name
            if (name.assignment, name.student, name.timestamp) in known:
                continue
            secret = _secret(sub)
            if not secret and _age_s(sub.folder) < COPYING_GRACE_S:
                continue
            found.append(Arrived(name.student, name.assignment, name.timestamp, sub.folder.name, secret))
        return found

    def take(self, submission: Held, into: Path, skip: Skip) -> Taken:
        found = self.folders.submission(submission.folder)
        if isinstance(found, BadName):
            gone = not os.path.lexists(self.folders.inbound / submission.folder)
            return Taken(missing=True) if gone else Taken(refused=found.reason)
        try:
            taken = tree.take(found, into, skip)
        except Refusal as exc:
            return Taken(refused=str(exc))
        return Taken(notes="; ".join(n for n in (taken.arrival.note(), taken.report.summary()) if n))

    def give_back(self, submission: Held, course: Path, pages: dict[str, str],
                  ids: dict[str, str] | None) -> None:
        if not submission.secret:
            logger.info(printable(f"{submission.student} {submission.assignment}: no nbgrader secret, so no "
                                  "feedback to hand back through the exchange"))
            return
        tree.release_feedback(self.folders, course, submission.student, submission.assignment,
                              submission.timestamp, submission.secret, pages, ids)


def _secret(sub: tree.Submission) -> str:
    """Return the submission's secret, or "" when there is none yet (or it is not a small file of theirs)."""
    try:  # a small regular file of the student's own: never a link followed, a FIFO waited on
        secret = read_small(sub.folder, tree.SECRET_FILE, owner=sub.uid)
        return secret.decode("utf-8", errors="replace").strip()
    except Refusal:
        return ""


def _age_s(folder: Path) -> float:
    """Return how long ago the folder last changed (0 when it cannot be read)."""
    try:
        return max(0.0, time.time() - folder.lstat().st_mtime)
    except OSError:
        return 0.0
