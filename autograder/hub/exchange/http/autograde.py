"""The autograde service's side of the HTTP exchange (`interfaces.AutogradeExchange`), with the service's
own hub token (staff); and, with grading workers, what the service tells them and reads back."""

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from autograder.hub.exchange.http.api import ServiceClient, ServiceError
from autograder.hub.exchange.http.archive import ArchiveRefused
from autograder.hub.exchange.http.staff import give_back, take_submission
from autograder.hub.exchange.http.work import Handout, Recorded, give_back_result, hand_out, recorded_results
from autograder.hub.exchange.interfaces import Arrived, Held, Skip, Taken
from autograder.hub.part_settings import AutogradeSettings
from autograder.hub.text import printable

logger = logging.getLogger("devicelab.autograde")


@dataclass(frozen=True)
class HttpAutograde:
    """The exchange service at `where` (its URL); `hidden` the folders the sandbox hides all the same."""

    where: str
    hidden: tuple[Path, ...] = ()
    token: str = ""  # "": the service's own, JUPYTERHUB_API_TOKEN

    @classmethod
    def from_settings(cls, s: AutogradeSettings) -> "HttpAutograde":
        """Return the exchange service the autograde service's settings name (its store hidden all the
        same)."""
        return cls(s.http_exchange, (Path(s.exchange),))

    def service(self) -> ServiceClient:
        token = self.token or os.environ.get("JUPYTERHUB_API_TOKEN", "")
        return ServiceClient(self.where, token, timeout_s=60)

    def new_submissions(self, assignments: set[str], known: set[tuple[str, str, str]]) -> list[Arrived]:
        """Return the stored submissions not yet known, oldest first (none when the service cannot say)."""
        try:
            listed = [sub for a in sorted(assignments) for sub in self.service().submissions(a)]
        except ServiceError as exc:
            logger.info(printable(f"the exchange service listed nothing: {exc}"))
            return []
        # no secret: the service knows whose feedback is whose
        return [Arrived(s.student_id, s.assignment_id, s.timestamp, s.timestamp)
                for s in sorted(listed, key=lambda s: s.timestamp)
                if (s.assignment_id, s.student_id, s.timestamp) not in known]

    def take(self, submission: Held, into: Path, skip: Skip) -> Taken:
        try:
            take_submission(self.service(), submission.student, submission.assignment, submission.timestamp,
                            into, skip)
        except ServiceError as exc:
            return Taken(missing=True) if exc.status == 404 else Taken(refused=str(exc))
        except ArchiveRefused as exc:
            return Taken(refused=str(exc))
        return Taken()

    def give_back(self, submission: Held, course: Path, pages: dict[str, str],
                  ids: dict[str, str] | None) -> None:
        try:
            give_back(self.service(), course, submission.student, submission.assignment, submission.timestamp,
                      pages, ids)
        except ServiceError as exc:  # the grade is kept; `hub feedback` gives the pages back later
            logger.info(printable(f"{submission.student} {submission.assignment}: feedback not given back: "
                                  f"{exc}"))

    # grading workers (hub setup --grading-workers): only the HTTP exchange hands submissions to them

    def results(self, assignments: set[str]) -> list[Recorded]:
        """Return the results the workers posted for these assignments (none when the service cannot say)."""
        try:
            return [r for a in sorted(assignments) for r in recorded_results(self.service(), a)]
        except ServiceError as exc:
            logger.info(printable(f"the exchange service listed no results: {exc}"))
            return []

    def give_back_result(self, submission: Held) -> bool:
        """Give a worker's feedback pages to the student, once their result is in the gradebook; return False
        (and log why) when the service did not, so that the caller tries again at its next scan."""
        try:
            give_back_result(self.service(), submission.student, submission.assignment, submission.timestamp)
        except ServiceError as exc:
            logger.info(printable(f"{submission.student} {submission.assignment}: feedback not given back "
                                  f"yet: {exc}"))
            return False
        return True

    def hand_out(self, handouts: list[Handout]) -> None:
        """Tell the service exactly which submissions the workers may grade now, and how."""
        try:
            hand_out(self.service(), handouts)
        except ServiceError as exc:
            logger.info(printable(f"the exchange service took no handouts: {exc}"))
