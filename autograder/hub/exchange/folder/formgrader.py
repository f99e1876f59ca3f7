"""nbgrader exchange plugins for the grader service, so formgrader's buttons take the hub's safe paths.

formgrader's *Collect* button runs nbgrader's own collect, which follows links and grades a folder in another
student's name; here it runs `tree.collect` (owner checked, links refused, caps) instead. Its *Release*
button cannot work on a root-owned exchange: it says to use `hub release`.
"""

from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment

from autograder.hub.exchange.folder.tree import Exchange, collect


class SafeCollect(ExchangeCollect):
    """formgrader's Collect: each student's newest own submission, copied as `hub collect` copies it."""

    def start(self) -> None:
        """Collect the assignment into the course's submitted/ and log what was collected or refused."""
        course_id, assignment = self.coursedir.course_id, self.coursedir.assignment_id
        if not course_id:
            self.fail("No course id specified.")
        report = collect(Path(self.coursedir.root), Exchange(Path(self.root), course_id), assignment,
                         course_id)
        for line in report.lines():
            self.log.info(line)


class RootRelease(ExchangeReleaseAssignment):
    """formgrader's Release: refused with the command that does it (the exchange belongs to root)."""

    def start(self) -> None:
        """Refuse, naming `hub release`."""
        self.fail("the class hub's exchange belongs to root: release with `sudo python -m autograder hub "
                  f"release {self.coursedir.assignment_id}`")
