"""Grade passback (LTI Advantage, Assignment and Grade Services): post queued scores to the LMS's line items.

Scores are queued on disk (passback_queue.py) by `hub grade` and by the autograde service, and posted with
PyLTI1p3 (the client-credentials token signed with the tool's key, line items found by tag or created, scores
posted), one flush at a time. Runs as the grader account:

    python -m autograder.hub.lms.passback offer ASSIGNMENT --course DIR   # queue graded/A/grades.csv, post
    python -m autograder.hub.lms.passback flush --course DIR
    python -m autograder.hub.lms.passback status --course DIR [ASSIGNMENT]
"""

import argparse
import csv
import datetime
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests
from filelock import FileLock, Timeout
from pylti1p3.assignments_grades import AssignmentsGradesService
from pylti1p3.exception import LtiException, LtiServiceException
from pylti1p3.grade import Grade
from pylti1p3.lineitem import LineItem

from autograder.csv_cells import restored
from autograder.hub.lms.passback_queue import PassbackQueue, PassbackState, Score
from autograder.hub.lms.tool import Platform, ToolFiles, connector
from autograder.hub.text import printable

AGS_SCOPES = ["https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
              "https://purl.imsglobal.org/spec/lti-ags/scope/score"]
FLUSH_EVERY_S = 5.0  # the autograde service's passback thread
RETRYABLE = {408, 425, 429}  # HTTP codes that mean "later", like 5xx

logger = logging.getLogger("devicelab.passback")


@dataclass(frozen=True)
class Flushed:
    """What one flush did."""

    sent: list[Score]
    failed: list[tuple[Score, str]]
    busy: bool = False  # another flush was running: this one did nothing

    def lines(self) -> list[str]:
        """Return a line per score, for the instructor."""
        if self.busy:
            return ["passback: another process is posting scores now; they will be posted"]
        return ([f"posted to the LMS: {s.student} {s.assignment} {s.score:g}/{s.max_score:g}"
                 for s in self.sent]
                + [f"not posted yet: {s.student} {s.assignment} ({why})" for s, why in self.failed])


def lti_on(files: ToolFiles) -> bool:
    """Return whether this course passes grades back (the hub was set up with LTI)."""
    return files.platform.is_file()


def offer(files: ToolFiles, scores: list[Score], clock: Callable[[], float] = time.time) -> int:
    """Queue the scores (the same value twice is queued once); return how many were new."""
    queue = PassbackQueue.of_course(files.folder.parent, files.queue, clock)
    try:
        return sum(queue.offer(s) for s in scores)
    finally:
        queue.close()


def flush(files: ToolFiles, clock: Callable[[], float] = time.time) -> Flushed:
    """Post every due score to the LMS; a score the LMS did not take waits and is tried again (`clock`: the
    queue's, seconds since the epoch)."""
    try:
        with FileLock(f"{files.queue}.lock", timeout=0):
            return _flush(files, clock)
    except Timeout:
        return Flushed([], [], busy=True)


def _flush(files: ToolFiles, clock: Callable[[], float]) -> Flushed:
    queue = PassbackQueue.of_course(files.folder.parent, files.queue, clock)
    sent, failed = [], []
    try:
        due = queue.due()
        if not due:
            return Flushed([], [])
        platform = files.read_platform()
        ags = AssignmentsGradesService(connector(files, platform),
                                       {"scope": AGS_SCOPES, "lineitems": platform.lineitems_url})
        lineitems: dict[str, LineItem] = {}
        for row in due:
            try:
                post(ags, platform, row.score, lineitems)
            except Unsendable as exc:
                queue.unsendable(row.score, str(exc))
                failed.append((row.score, str(exc)))
                logger.info(printable(f"passback {row.score.student} {row.score.assignment}: {exc}"))
                continue
            except PostFailed as exc:
                queue.failed(row.score, exc.reason, exc.refused)
                failed.append((row.score, exc.reason))
                logger.info(printable(f"passback {row.score.student} {row.score.assignment}: {exc.reason}"))
                continue
            queue.sent(row.score)
            sent.append(row.score)
    finally:
        queue.close()
    return Flushed(sent, failed)


class PostFailed(Exception):
    """The LMS did not take a score: refused (it said no) or not (it could not be reached)."""

    def __init__(self, reason: str, refused: bool) -> None:
        super().__init__(reason)
        self.reason, self.refused = reason, refused


class Unsendable(Exception):
    """No LMS can take the score as it is (trying again would change nothing)."""


def post(ags: AssignmentsGradesService, platform: Platform, score: Score,
         lineitems: dict[str, LineItem]) -> None:
    """Post one score to its assignment's line item (found by tag, or created); raise PostFailed or
    Unsendable."""
    if not score.max_score > 0:
        raise Unsendable(f"the assignment has no points (maximum {score.max_score:g}): an LMS line item "
                         "needs a maximum above 0; not posted, nor tried again until graded with points")
    user = platform.people.get(score.student)
    if not user:
        raise PostFailed("no LMS id yet: the student has not opened the hub from the LMS", refused=True)
    if not platform.lineitems_url:
        raise PostFailed("the LMS has not told the hub where its line items are yet: open the hub from the "
                         "course once", refused=True)
    try:
        if score.assignment not in lineitems:
            wanted = (LineItem().set_tag(score.assignment).set_label(score.assignment)
                      .set_resource_id(score.assignment).set_score_maximum(score.max_score))
            lineitems[score.assignment] = ags.find_or_create_lineitem(wanted, find_by="tag")
        graded = score.status == "graded"
        grade = (Grade().set_score_given(score.score).set_score_maximum(score.max_score).set_user_id(user)
                 .set_activity_progress("Completed")
                 .set_grading_progress("FullyGraded" if graded else "PendingManual")
                 .set_timestamp(datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
                 .set_comment(f"autograder: {score.status}"))
        ags.put_grade(grade, lineitems[score.assignment])
    except LtiServiceException as exc:
        code = exc.response.status_code
        refused = code < 500 and code not in RETRYABLE
        raise PostFailed(f"the LMS answered HTTP {code}", refused) from None
    except requests.RequestException as exc:
        raise PostFailed(f"the LMS could not be reached ({type(exc).__name__})", refused=False) from None
    except LtiException as exc:
        raise PostFailed(f"the LMS's answer was not usable ({exc})", refused=True) from None


def read_scores(grades_csv: Path, assignment: str) -> list[Score]:
    """Return the scores of the grader's grades.csv."""
    with grades_csv.open(newline="", encoding="utf-8") as handle:
        return [Score(r["student"], assignment, float(r["score"] or 0), float(r["max_score"] or 0),
                      r["status"]) for r in map(restored, csv.DictReader(handle))]


class Pacer:
    """The autograde service's passback: a flush at most every few seconds, when no batch is waiting.

    It runs in the service's own loop, not in a thread: the service forks its grading workers, and a fork
    must not copy a thread that may hold a lock.
    """

    def __init__(self, files: ToolFiles, every_s: float = FLUSH_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.files, self.every_s, self.clock, self.next_at = files, every_s, clock, float("-inf")

    def __call__(self) -> None:
        """Flush if it is time; an error is logged and the next flush tries again."""
        now = self.clock()
        if now < self.next_at:
            return
        self.next_at = now + self.every_s
        try:
            flush(self.files)
        except Exception:
            logger.exception("grade passback failed; trying again")


def status_lines(files: ToolFiles, assignment: str | None) -> list[str]:
    """Return a line per queued score: student, assignment, score, state, posts, why not yet."""
    queue = PassbackQueue.of_course(files.folder.parent, files.queue)
    try:
        rows = queue.rows(assignment)
    finally:
        queue.close()
    counts = {state: sum(r.state == state for r in rows) for state in PassbackState}
    lines = [f"{r.score.student:24} {r.score.assignment:28} {r.score.score:g}/{r.score.max_score:g} "
             f"{r.state:8} {r.detail}".rstrip() for r in rows]
    return [*map(printable, lines), ", ".join(f"{n} {state}" for state, n in counts.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="passback", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["offer", "flush", "status"])
    parser.add_argument("assignment", nargs="?")
    parser.add_argument("--course", required=True)
    args = parser.parse_args(argv)
    files = ToolFiles(Path(args.course) / "lti")
    if not lti_on(files):
        print("grade passback is off: the hub was not set up with --authenticator lti13")
        return 0
    if args.action == "status":
        print("\n".join(status_lines(files, args.assignment)))
        return 0
    if args.action == "offer":
        if not args.assignment:
            parser.error("offer needs the assignment")
        grades = Path(args.course) / "graded" / args.assignment / "grades.csv"
        print(f"queued for the LMS: {offer(files, read_scores(grades, args.assignment))} new scores")
    print("\n".join(flush(files).lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
