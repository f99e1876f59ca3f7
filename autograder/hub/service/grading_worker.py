"""A grading worker: leases submissions from the HTTP exchange, grades each in the sandbox, posts the results.

    devicelab-grading-worker --url URL [--token-file FILE] --course DIR [--assignment A]...
        [--sandbox auto|bwrap|unshare|none] [--once]
    devicelab-grading-worker --config FILE        (as the hub runs it: `hub setup` writes the file)

It talks to the exchange service only over its API, with a hub token that has the staff scope, so it runs on
any node that holds a copy of the course (nbgrader_config.py and source/; the worker keeps its own gradebook
and graded/ in it). It leases one submission at a time (the oldest with no result), grades it with the
course's grader (`grade_class`: the sandbox, the tamper guard) and posts the score and the feedback pages; the
service records the first result posted for a submission and hands a lease that expired (a worker killed
halfway) to the next worker. It prints one JSON line per submission it graded. It refuses to grade without a
sandbox unless `--sandbox none` is given: `auto` means bubblewrap or unshare, never nothing.
"""

import argparse
import datetime
import json
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autograder.grading.results import Status
from autograder.hub.exchange.folder import tree as exchange
from autograder.hub.exchange.http.api import ServiceClient, ServiceError
from autograder.hub.exchange.http.archive import ArchiveRefused
from autograder.hub.exchange.http.autograde import HttpAutograde
from autograder.hub.exchange.http.staff import take_submission
from autograder.hub.exchange.http.work import Offer, WorkResult, keep_leased, post_result, take_work
from autograder.hub.part_settings import HiddenTests, WorkerSettings
from autograder.hub.service.autograde import Place, Waiting, result_pages
from autograder.hub.service.autograde_queue import AutogradeSetting
from autograder.hub.text import printable
from autograder.options import parse

IDLE_S = 0.25  # how long a worker waits before asking again when nothing is waiting
logger = logging.getLogger("devicelab.grading-worker")


class SandboxRefused(Exception):
    """No sandbox works here and none was asked for explicitly with `--sandbox none`."""


def choose_sandbox(asked: str, detect: Callable[[str], str] | None = None) -> str:
    """Return the sandbox to grade in: the one asked for, `auto`'s choice, and never none unless asked."""
    if asked == "none":
        return "none"
    if detect is None:
        from autograder.grading.sandbox import IsolationUnavailable, detect_isolation

        def detect(mode: str) -> str:
            try:
                return detect_isolation(mode).mode
            except IsolationUnavailable as exc:
                raise SandboxRefused(str(exc)) from None
    found = detect(asked)
    if found == "none":
        raise SandboxRefused("no sandbox works here (bubblewrap or unshare): a worker grades untrusted code "
                             "only in one, unless it is started with --sandbox none")
    return found


def grading_setting(worker: "Worker", offer: Offer) -> AutogradeSetting:
    """Return how to grade a leased submission: as the autograde service said in the offer (the instructor's
    setting of its assignment, the student's due date), else as the worker was started."""
    hidden = (worker.hidden_tests if offer.protect_hidden_tests is None
              else HiddenTests.PROTECTED if offer.protect_hidden_tests else HiddenTests.SHOWN)
    timeout = offer.timeout or worker.timeout
    return AutogradeSetting(offer.assignment_id, True, hidden_tests=hidden,
                            **({"timeout": timeout} if timeout else {}))


@dataclass
class Worker:
    """One worker: its course copy, its API client, how it grades (`waiting`: a zygote kept warm)."""

    course: Path
    service: ServiceClient
    sandbox: str
    assignments: tuple[str, ...] = ()
    hidden_tests: HiddenTests = HiddenTests.PROTECTED
    timeout: float | None = None
    hidden: tuple[Path, ...] = ()  # folders the sandbox hides besides the course's (the token's)
    # its hub service's name, else host:pid (in a box of its own every worker's pid is the same)
    name: str = field(default_factory=lambda: os.environ.get("JUPYTERHUB_SERVICE_NAME")
                      or f"{socket.gethostname()}:{os.getpid()}")
    waiting: Waiting = field(default_factory=lambda: Waiting(1))

    @property
    def place(self) -> Place:
        return Place(self.course, HttpAutograde(self.service.url, self.hidden))

    def grade(self, offer: Offer) -> WorkResult:
        """Take the leased submission, grade it, return the result and the feedback pages to post."""
        from autograder.grading import gradebook as gbook
        from autograder.grading.session import GradeOptions, grade_class

        place, student, assignment = self.place, offer.student_id, offer.assignment_id
        work = place.home / "worker" / assignment
        shutil.rmtree(work, ignore_errors=True)
        (work / student).mkdir(parents=True)
        submitted = work / student / assignment
        try:
            take_submission(self.service, student, assignment, offer.timestamp, submitted,
                            exchange.course_ignore(self.course))
        except ArchiveRefused as exc:
            return WorkResult(str(Status.REFUSED), None, None, str(exc), {}, self.name)
        setting = grading_setting(self, offer)
        # the student's due date, as the service's gradebook has it: lateness and its penalty are nbgrader's
        due = datetime.datetime.fromisoformat(offer.due) if offer.due else None
        gbook.set_due_date(gbook.course_db_url(self.course), gbook.course_id(self.course), assignment, due)
        standby = self.warm((assignment,))
        options = GradeOptions(jobs=1, timeout=setting.timeout, progress=False, show_hidden_tests=True,
                               sandbox=self.sandbox, hidden=self.hidden, standby=standby, force=True)
        summary = grade_class(self.course, assignment, work, options, out=place.graded(assignment),
                              echo=lambda line: logger.info("  %s", line))
        graded = [r for r in summary.results if r.student == student]
        if not graded:
            return WorkResult(str(Status.MISSING), None, None, "the grader found no notebook in it", {},
                              self.name)
        result = graded[0]
        pages = result_pages(place, student, assignment, result, work, setting)
        ids = exchange.notebook_ids(self.course, assignment, submitted)
        notes = [result.detail, *(f"flag: {f}" for f in result.flags)]
        named = {ids.get(n, n): text for n, text in pages.items()}  # the student's name for each notebook
        return WorkResult(str(result.status), result.final_score, result.max_score,
                          "; ".join(n for n in notes if n), named, self.name, result.to_json())

    def warm(self, assignments: tuple[str, ...]):
        """Start (or keep) a zygote that imports what these assignments import, where bubblewrap is the
        sandbox; return it (None elsewhere: each grading starts its own kernel)."""
        if self.sandbox != "bwrap" or not assignments:
            return None
        self.waiting.launch(self.waiting.libraries_of(self.course, list(assignments)))
        return self.waiting.ready()

    def once(self) -> bool:
        """Lease, grade and post one submission; return False when nothing was waiting."""
        offer = take_work(self.service, self.assignments)
        if offer is None:
            return False
        started = time.monotonic()
        from autograder.grading.errors import GradingError

        try:
            with keep_leased(self.service, offer):  # no other worker is handed it while this one grades
                result = self.grade(offer)
        except GradingError as exc:  # not graded: its lease runs out and it is handed out again
            logger.info(printable(f"{offer.student_id} {offer.assignment_id} {offer.timestamp}: not graded: "
                                  f"{exc}"))
            time.sleep(IDLE_S)
            return True
        recorded = post_result(self.service, offer, result)
        print(json.dumps({"student": offer.student_id, "assignment": offer.assignment_id,
                          "timestamp": offer.timestamp, "status": result.status, "score": result.score,
                          "recorded": recorded, "worker": self.name,
                          "seconds": round(time.monotonic() - started, 3)}), flush=True)
        return True

    def run(self, until_idle: bool = False) -> None:
        """Grade until stopped (or until nothing is waiting, with until_idle); a refused call is retried."""
        try:
            self.warm(self.assignments)  # before the first submission, which then waits only for its grading
            while True:
                try:
                    busy = self.once()
                except ServiceError as exc:
                    logger.info(printable(f"the exchange service refused: {exc}"))
                    busy = False
                if not busy:
                    if until_idle:
                        return
                    time.sleep(IDLE_S)
        finally:
            self.waiting.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grading_worker", description=__doc__.splitlines()[0])
    settings = parse(WorkerSettings, parser, argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="[worker %(asctime)s] %(message)s",
                        datefmt="%H:%M:%S")
    os.umask(0o077)
    try:
        sandbox = choose_sandbox(settings.sandbox)
    except SandboxRefused as exc:
        print(f"grading_worker: {exc}", file=sys.stderr)
        return 2
    token_file = Path(settings.token_file) if settings.token_file else None
    token = (token_file.read_text(encoding="utf-8").strip() if token_file
             else os.environ.get("JUPYTERHUB_API_TOKEN", ""))
    if not token:
        print("grading_worker: no token: give --token-file, or run it as a hub service", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    service = ServiceClient(settings.url, token, timeout_s=60)
    worker = Worker(Path(settings.course).resolve(), service, sandbox, settings.assignments,
                    HiddenTests(settings.hidden_tests), settings.timeout,
                    (token_file.resolve().parent,) if token_file else ())
    worker.run(until_idle=settings.once)
    return 0


if __name__ == "__main__":
    sys.exit(main())
