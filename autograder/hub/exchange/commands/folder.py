"""The instructor's commands on the folder exchange: root repairs the exchange's tree, and the grader
account copies out of it (`devicelab-exchange`, exchange/folder/tree.py) with the autograde service's
checks."""

import json
from dataclasses import dataclass

from autograder.hub.exchange.commands.assignments import (
    collected,
    parse_due,
    record_due,
    require_built,
    students,
)
from autograder.hub.exchange.folder import tree
from autograder.hub.exchange.interfaces import CollectReport, Handin, Handins
from autograder.hub.settings import EXCHANGE, HubError, HubSettings
from autograder.hub.setup.accounts import GraderAccount
from autograder.hub.setup.install import secure_exchange
from autograder.safe_copy import Refusal


@dataclass(frozen=True)
class FolderCommands:
    """`interfaces.StaffExchange` on the hub's exchange folder."""

    s: HubSettings

    @property
    def folders(self) -> tree.Exchange:
        return tree.Exchange(self.s.paths.exchange, self.s.course_id)

    def prepare(self) -> list[str]:
        """Make (or repair) the exchange folder's tree: root's, with nbgrader's modes."""
        return secure_exchange(self.s.grader, self.folders)

    def release(self, assignment: str, force: bool = False, due: str | None = None) -> str:
        """Put the student version into the outbound; record its due date when given."""
        due_utc = parse_due(due) if due else None
        require_built(self.s, assignment)
        repaired = secure_exchange(self.s.grader, self.folders)
        try:
            tree.release(self.folders, self.s.paths.course / "release" / assignment, assignment, force)
        except (FileExistsError, Refusal) as exc:
            raise HubError(str(exc)) from None
        said = "\n".join([*repaired, f"released {assignment} to {self.folders.outbound / assignment}"])
        return said if due_utc is None else f"{said}\n{record_due(self.s, assignment, due_utc)}"

    def status(self, assignment: str) -> Handins:
        """Return every student on the roster with their latest own submission in the inbound."""
        inbox = self.folders.read_inbox({assignment})
        latest = {student: sub.name.timestamp for student, sub in inbox.newest().items()}
        return Handins([Handin(u, latest.get(u), collected(self.s, u, assignment))
                        for u in sorted(set(students(self.s)) | set(latest))], inbox.skipped)

    def collect(self, assignment: str) -> CollectReport:
        """Copy each student's newest own submission into the course's submitted/ (as the grader account)."""
        require_built(self.s, assignment)
        return CollectReport.from_json(self._as_grader("collect", assignment))

    def feedback(self, assignment: str) -> list[str]:
        """Release the grader's feedback pages to the students who were graded; return those students."""
        require_built(self.s, assignment)
        released = json.loads(self._as_grader("feedback", assignment))
        if not released:
            raise HubError(f"no graded submissions of {assignment} to give feedback on: run `hub grade` "
                           "first")
        return released

    def _as_grader(self, action: str, assignment: str) -> str:
        """Run an action of `devicelab-exchange` as the grader account; return the last line it printed."""
        s = self.s
        done = GraderAccount.of(s).command(EXCHANGE, action, assignment, "--course", str(s.paths.course),
                                          "--exchange", str(s.paths.exchange), "--course-id", s.course_id)
        return done.stdout.strip().splitlines()[-1]
