"""Autograde on submit: a JupyterHub service, run as the grader account, that grades each new submission.

Every POLL_S seconds it asks the exchange (either backend, exchange/interfaces.py's `AutogradeExchange`) for
the new submissions of the assignments the instructor turned on, and queues each (autograde_queue.py). It
takes batches off the queue, copies them out of the exchange, grades them with our grader (`grade_class`:
parallel workers, the sandbox, the tamper guard) into the course gradebook, and releases each student's
feedback the way `nbgrader release_feedback` does, so the student's Assignments tab offers Fetch Feedback. It
has no HTTP port: the instructor's switches are `python -m autograder hub autograde on|off|status`, which
write the queue's file as the grader account.

    devicelab-autograde run --config FILE       (as the hub runs it: `hub setup` writes the file)
    devicelab-autograde run --course DIR --exchange DIR --course-id ID --backend files
    devicelab-autograde run --course DIR --exchange STORE --course-id ID --backend http --http-exchange URL \
        [--workers]
"""

import argparse
import datetime
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.grading.results import Status, StudentResult
from autograder.grading.warm_start import Standby
from autograder.grading.zygote import LIBRARIES, WarmStartError
from autograder.hub.database import course_part_url
from autograder.hub.exchange.choice import autograde_exchange, grading_workers
from autograder.hub.exchange.folder.tree import course_ignore, notebook_ids
from autograder.hub.exchange.http.autograde import HttpAutograde
from autograder.hub.exchange.http.work import Handout, WorkResult
from autograder.hub.exchange.interfaces import AutogradeExchange
from autograder.hub.lms.tool import ToolFiles
from autograder.hub.part_settings import AutogradeSettings, AutogradeSwitches, HiddenTests
from autograder.hub.service.autograde_queue import (
    MAX_TRIES,
    AutogradeSetting,
    Entry,
    Queue,
    State,
)
from autograder.hub.text import printable
from autograder.options import add_options, parse

if TYPE_CHECKING:
    from autograder.grading.gradebook import DueDates

POLL_S = 0.25  # a submission waits at most this long once nbgrader has finished copying it
# A batch whose assignment's own solution does not earn full marks in the sandbox (solution_check.py) waits:
# what students see (never the solution's error, which could quote a hidden test), and how long until the next
# try (each try grades the solution again until it passes).
BROKEN_ENVIRONMENT = "waiting: grading is paused until the instructor fixes the grading environment"
BROKEN_ENVIRONMENT_WAIT_S = 60
# a batch starts with at most this many students per core; submissions that arrive while it runs join it as
# workers free up, at most JOINING_PER_CORE per core (then it ends, its reports are written, the next starts)
BATCH_PER_CORE = 4
JOINING_PER_CORE = 12
QUEUE_FILE = "queue.sqlite"


@dataclass(frozen=True)
class Place:
    """Where the service works: the grader's course and the exchange (either backend, `setup/exchanges.py`);
    with grading workers (the HTTP exchange hands them submissions) their results are recorded here instead of
    grading; and its clock (seconds since the epoch), the one time its queue records and its due dates are
    compared with."""

    course: Path
    exchange: AutogradeExchange
    workers: HttpAutograde | None = None
    clock: Callable[[], float] = time.time

    @property
    def home(self) -> Path:
        """Return the service's folder in the course (queue, copies of submissions, results)."""
        return self.course / "autograde"

    def queue(self) -> Queue:
        return course_queue(self.course, self.clock)

    @property
    def lti(self) -> ToolFiles:
        """Return the course's LTI files (grade passback), present when the hub was set up with LTI."""
        return ToolFiles(self.course / "lti")

    def graded(self, assignment: str) -> Path:
        """Return the grader's output folder of an assignment (grades.csv, feedback/, results/)."""
        return self.home / "graded" / assignment

    def work(self, assignment: str) -> Path:
        """Return the folder a batch's submissions are copied to."""
        return self.home / "work" / assignment


logger = logging.getLogger("devicelab.autograde")


def course_queue(course: Path, clock: Callable[[], float] = time.time) -> Queue:
    """Return the course's autograde queue (`hub autograde on|off|status` need nothing else)."""
    return Queue(course_part_url(course, "autograde", course / "autograde" / QUEUE_FILE), clock)


def scan(place: Place, queue: Queue) -> int:
    """Queue every new submission of the enabled assignments (oldest first); return how many were new (with
    grading workers: how many results were recorded)."""
    enabled = set(queue.enabled())
    if place.workers is not None:
        return record_worker_results(place, place.workers, queue, enabled)
    return queue_new(place, queue, enabled)


def queue_new(place: Place, queue: Queue, enabled: set[str]) -> int:
    """Queue the exchange's new submissions of the enabled assignments; return how many."""
    if not enabled:
        return 0
    known = {(a, student, timestamp) for a in enabled for student, timestamp in queue.known(a)}
    new = 0
    for sub in place.exchange.new_submissions(enabled, known):
        if (sub.assignment, sub.student, sub.timestamp) in known:
            continue  # two folders of one submission time
        state = queue.add(sub.student, sub.assignment, sub.timestamp, sub.folder, sub.secret)
        known.add((sub.assignment, sub.student, sub.timestamp))
        logger.info(printable(f"{sub.student} submitted {sub.assignment} at {sub.timestamp}: {state}"))
        new += 1
    return new


def record_worker_results(place: Place, workers: HttpAutograde, queue: Queue, enabled: set[str]) -> int:
    """Queue the new submissions, tell the exchange which ones the workers may grade now and how, then record
    their new results (oldest first): the gradebook, the student's feedback pages, the queue, the LMS; return
    how many results.

    The queue's rules hold as when this service grades: the hourly limit, one submission at a time per
    student, a newer submission superseding a queued older one. A result comes into the queue as its
    submission would, so an older submission's result that arrives after a newer one's is superseded and left
    out of the gradebook; one not recorded yet (the service stopped between the two) is recorded at the next
    scan.
    """
    queue_new(place, queue, enabled)
    listed = workers.results(enabled)
    known = {a: queue.known(a) for a in enabled}
    pending = {e.key for e in queue.entries() if e.state in (State.QUEUED, State.GRADING)}
    new = 0
    for r in sorted(listed, key=lambda r: r.timestamp):
        key = (r.student_id, r.assignment_id, r.timestamp)
        if (r.student_id, r.timestamp) in known[r.assignment_id] and key not in pending:
            continue
        state = queue.add(r.student_id, r.assignment_id, r.timestamp, r.timestamp, "")
        if state in (State.QUEUED, State.GRADING):
            entry = next(e for e in queue.entries(r.assignment_id) if e.key == key)
            if record_worker_result(place, queue, entry, r.result, workers):
                new += 1
    # after the results: a student whose result came is free for their next submission at once; told at
    # every scan (the service forgets on restart)
    workers.hand_out(handouts(place, queue))
    return new


def naive_utc(seconds: float) -> datetime.datetime:
    """Return a time (seconds since the epoch) as the gradebook writes due dates: naive UTC."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).replace(tzinfo=None)


def due_dates(course: Path, assignment: str) -> "DueDates":
    """Return the assignment's due dates in the course gradebook, the students' extensions included."""
    from autograder.grading import gradebook as gbook

    return gbook.due_dates(gbook.course_db_url(course), gbook.course_id(course), assignment)


def handouts(place: Place, queue: Queue) -> list[Handout]:
    """Return what the workers may grade now (queue.hand_out_ready), each with how: the hidden tests protected
    until the student's own due date unless the instructor shows them, the assignment's time limit, and that
    due date itself, extension included (the gradebook read once per assignment)."""
    moment = naive_utc(place.clock())
    entries = queue.hand_out_ready()
    settings = {a: queue.setting(a) for a in {e.assignment for e in entries}}
    dues = {a: due_dates(place.course, a) for a in settings}
    handouts = []
    for e in entries:
        due = dues[e.assignment].of(e.student)  # the worker grades lateness by it, as `hub grade` would
        handouts.append(Handout(e.assignment, e.student, e.timestamp,
                                settings[e.assignment].protects_hidden_tests(due, moment),
                                settings[e.assignment].timeout, due.isoformat(" ") if due else None))
    return handouts


def record_worker_result(place: Place, queue: Queue, entry: Entry, posted: WorkResult, workers: HttpAutograde
                         ) -> bool:
    """Write a worker's result into the course gradebook, give its feedback pages to the student, then record
    it as the service's own grades are; return False when the pages were not given back (the entry stays
    pending: the next scan records it again, which changes nothing, and tries again)."""
    from autograder.grading import gradebook as gbook

    if posted.graded:  # the submission's student and assignment are the service's, never the worker's word
        result = replace(StudentResult.from_json(posted.graded), student=entry.student,
                         assignment=entry.assignment)
    else:  # refused or missing: the worker's status, no cells
        result = StudentResult(entry.student, entry.assignment, Status(posted.status), posted.detail,
                               timestamp=entry.timestamp)
    db_url = gbook.course_db_url(place.course)
    with gbook.locked(db_url):
        gbook.record(db_url, gbook.course_id(place.course), entry.assignment, result)
    if not workers.give_back_result(entry):  # the pages the worker posted: only once the gradebook has it
        return False
    detail = "; ".join(n for n in (posted.detail, f"graded by {posted.worker}" if posted.worker else "") if n)
    record_result(place, queue, entry, result, detail, graded=True)
    return True


@dataclass
class Staged:
    """A batch copied out of the exchange: the work folder, the entries whose folder had gone, and notes per
    student.
    """

    work: Path
    missing: list[Entry] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # student -> why their submission was not copied
    notes: dict[str, str] = field(default_factory=dict)  # student -> why their stated time was not used


def stage(place: Place, batch: list[Entry]) -> Staged:
    """Copy the batch's submissions to the work folder (student/assignment/), each with a time it cannot fake.
    """
    staged = Staged(place.work(batch[0].assignment))
    if staged.work.exists():
        shutil.rmtree(staged.work)
    staged.work.mkdir(parents=True)
    stage_into(place, batch, staged)
    return staged


def stage_into(place: Place, batch: list[Entry], staged: Staged) -> None:
    """Copy more submissions into a batch's work folder (missing and refused ones are noted in `staged`)."""
    skip = course_ignore(place.course)
    for e in batch:
        mine = staged.work / e.student
        mine.mkdir()
        taken = place.exchange.take(e, mine / e.assignment, skip)
        if taken.missing or taken.refused:
            shutil.rmtree(mine, ignore_errors=True)
            if taken.missing:
                staged.missing.append(e)
            else:
                staged.refused[e.student] = taken.refused
                logger.info(printable(f"{e.student} {e.assignment} {e.timestamp}: refused: {taken.refused}"))
        elif taken.notes:
            staged.notes[e.student] = taken.notes
            logger.info(printable(f"{e.student} {e.assignment} {e.timestamp}: {taken.notes}"))


def feedback_pages(place: Place, entry: Entry, result: StudentResult, work: Path,
                   setting: AutogradeSetting) -> dict[str, str]:
    """Return the feedback pages for a result (notebook name -> HTML): the grader's, or one saying why not."""
    return result_pages(place, entry.student, entry.assignment, result, work, setting)


def result_pages(place: Place, student: str, assignment: str, result: StudentResult, work: Path,
                 setting: AutogradeSetting) -> dict[str, str]:
    """Return a student's feedback pages for a result (notebook name -> HTML): the grader's, or one saying
    why not (also what a grading worker posts back).

    Until the student's due date (unless the instructor shows them) the pages keep the hidden tests hidden;
    they never fall back to the full pages.
    """
    from autograder.grading.redact import due_date, student_feedback_pages

    pages: dict[str, str] = {}
    if result.ran:
        now = naive_utc(place.clock())
        # a student's own due date: an extension keeps their hidden tests hidden until it has passed
        if setting.protects_hidden_tests(due_date(place.course, assignment, student), now):
            pages = student_feedback_pages(place.course, assignment, student,
                                           place.graded(assignment) / "feedback-on-submit" / student)
        else:
            pages_dir = place.graded(assignment) / "feedback" / student
            pages = {p.stem: p.read_text(encoding="utf-8") for p in sorted(pages_dir.glob("*.html"))}
    if pages:
        return pages
    from autograder.grading.report import not_graded_page  # nbconvert: not for `autograde on`, `status`

    names = sorted(p.stem for p in (work / student / assignment).glob("*.ipynb")) or [assignment]
    return {name: not_graded_page(assignment, name, result.max_score, result.status, result.detail or "")
            for name in names}


def release_feedback(place: Place, entry: Entry, pages: dict[str, str],
                     submitted: Path | None = None) -> None:
    """Give the pages back as `nbgrader release_feedback` does: course feedback/ and the exchange's feedback/.

    `submitted` is the copy of the submission that was graded: its file names are the ones the student's
    fetch_feedback looks for.
    """
    ids = notebook_ids(place.course, entry.assignment, submitted) if submitted else None
    place.exchange.give_back(entry, place.course, pages, ids)


def release_result(place: Place, queue: Queue, entry: Entry, result: StudentResult, staged: Staged,
                   graded: bool) -> None:
    """Release a graded submission's feedback, then mark it done."""
    pages = feedback_pages(place, entry, result, staged.work, queue.setting(entry.assignment))
    release_feedback(place, entry, pages, staged.work / entry.student / entry.assignment)
    notes = [result.detail, *(f"flag: {f}" for f in result.flags), staged.notes.get(entry.student, "")]
    record_result(place, queue, entry, result, "; ".join(n for n in notes if n), graded)


def record_result(place: Place, queue: Queue, entry: Entry, result: StudentResult, detail: str,
                  graded: bool) -> None:
    """Mark a graded submission done and offer its score to the LMS (a hub set up with LTI)."""
    queue.record_outcome(entry, state=State.DONE, graded=graded, status=result.status,
                         score=result.final_score, max_score=result.max_score, detail=detail)
    if place.lti.platform.is_file():  # the hub was set up with LTI: the score goes to the LMS
        from autograder.hub.lms.passback import offer
        from autograder.hub.lms.passback_queue import Score

        offer(place.lti, [Score(entry.student, entry.assignment, result.final_score, result.max_score,
                                result.status)])
    logger.info(f"{entry.student} {entry.assignment} {entry.timestamp}: {result.status} "
                f"{result.final_score:g}/{result.max_score:g}"
                + ("" if graded else " (recorded before a restart; not graded again)"))


class BatchReleaser:
    """Hand each student's feedback back as soon as the grader has recorded them, not when the batch ends.

    The grader calls `on_result` for each student once they are in the gradebook, their feedback pages are
    written and their result is saved, so a quick student does not wait for a slow (or hostile) one graded
    beside them.
    """

    def __init__(self, place: Place, queue: Queue, batch: list[Entry], staged: Staged) -> None:
        self.place, self.queue, self.staged = place, queue, staged
        self.pending = {e.student: e for e in batch}
        self.graded: set[str] = set()  # announced by this run (not results saved before a restart)

    def on_result(self, result: StudentResult) -> None:
        """Release one student's feedback (a failure is logged; the student is settled after the run)."""
        entry = self.pending.get(result.student)
        if entry is None:
            return
        self.graded.add(result.student)
        try:
            release_result(self.place, self.queue, entry, result, self.staged, graded=True)
        except Exception:
            logger.exception(printable(f"releasing {result.student}'s feedback failed"))
            return
        del self.pending[result.student]

    def settle(self, results: dict[str, StudentResult]) -> None:
        """After the run: release what is still pending (results saved before a restart, reused as they were,
        or a release that failed in on_result and is tried again); fail students the grader did not find."""
        for student, entry in list(self.pending.items()):
            if student in results:
                release_result(self.place, self.queue, entry, results[student], self.staged,
                               graded=student in self.graded)
            else:
                self.queue.record_outcome(entry, state=State.FAILED, graded=False, status=Status.INVALID,
                                          score=None, max_score=None,
                                          detail="the grader found no student folder in it")
            del self.pending[student]


def grade_batch(place: Place, queue: Queue, batch: list[Entry], jobs: int | None = None,
                standby: Standby | None = None) -> None:
    """Grade one batch and release its feedback, each student's as soon as they are recorded (kernels forked
    from the `standby` zygotes, when given)."""
    from autograder.grading.errors import BrokenGradingEnvironment, GradebookBusy
    from autograder.grading.session import GradeOptions, default_jobs, grade_class

    assignment = batch[0].assignment
    setting = queue.setting(assignment)
    staged = stage(place, batch)
    batch = settle_unstaged(queue, batch, staged)
    if not batch:
        return
    started = time.monotonic()
    releaser = BatchReleaser(place, queue, batch, staged)
    joiner = Joiner(place, queue, assignment, releaser, staged, JOINING_PER_CORE * (jobs or default_jobs()))
    # feedback/ keeps nbgrader's full pages: result_pages gives a student those only after their due date
    options = GradeOptions(jobs=jobs, timeout=setting.timeout, progress=False, hidden=place.exchange.hidden,
                           show_hidden_tests=True,
                           standby=standby)
    try:
        summary = grade_class(place.course, assignment, staged.work, options, out=place.graded(assignment),
                              echo=lambda line: logger.info("  %s", line), on_result=releaser.on_result,
                              joining=joiner)
    except GradebookBusy as exc:  # the instructor's `hub grade`: wait for it
        logger.info(f"waiting: {exc}")
        queue.requeue(list(releaser.pending.values()), "waiting for another grading run")
        time.sleep(5)
        return
    except BrokenGradingEnvironment as exc:  # none graded wrong: wait for the fix
        logger.error(f"not grading: {exc}")  # the staff's log has the cell and the error; students see why
        queue.requeue(list(releaser.pending.values()), BROKEN_ENVIRONMENT)
        time.sleep(BROKEN_ENVIRONMENT_WAIT_S)
        return
    releaser.settle({r.student: r for r in summary.results})
    write_assignment_reports(place.graded(assignment), assignment, summary.isolation.description)
    took = time.monotonic() - started
    logger.info(f"batch of {len(batch) + joiner.joined} for {assignment} in {took:.1f} s"
                + (f" ({joiner.joined} joined it)" if joiner.joined else ""))


def prepare_ahead(place: Place, assignment: str) -> None:
    """Make an assignment's template before its first submission (its first batch would), so that submission
    waits only for its own grading; a failure is logged and left to that batch."""
    from autograder.grading.errors import GradebookBusy
    from autograder.grading.session import prepare_ahead as make_template

    started = time.monotonic()
    try:
        make_template(place.course, assignment, place.graded(assignment))
    except GradebookBusy as exc:
        logger.info(f"{assignment}: the template is left to its first batch ({exc})")
        return
    except Exception:  # the first batch makes it, and reports what went wrong to the students it grades
        logger.exception(f"{assignment}: making the template ahead failed")
        return
    logger.info(f"{assignment}: template ready in {time.monotonic() - started:.1f} s")


def settle_unstaged(queue: Queue, batch: list[Entry], staged: Staged) -> list[Entry]:
    """Fail the batch's submissions that could not be staged (gone, or refused); return the others."""
    for e in batch:
        if e in staged.missing:
            queue.record_outcome(e, state=State.FAILED, graded=False, status=Status.MISSING, score=None,
                                 max_score=None, detail="its folder left the exchange before it was graded")
        elif e.student in staged.refused:
            queue.record_outcome(e, state=State.FAILED, graded=False, status=Status.REFUSED, score=None,
                                 max_score=None, detail=staged.refused[e.student])
    return [e for e in batch if e not in staged.missing and e.student not in staged.refused]


class Joiner:
    """Submissions that arrive while a batch is graded join it as soon as a worker is free, instead of waiting
    for the whole batch to end (while its assignment's turn lasts, one submission per student, up to a limit).
    """

    def __init__(self, place: Place, queue: Queue, assignment: str, releaser: "BatchReleaser", staged: Staged,
                 limit: int, poll_clock: Callable[[], float] = time.monotonic) -> None:
        self.place, self.queue, self.assignment = place, queue, assignment
        self.releaser, self.staged, self.limit = releaser, staged, limit
        self.poll_clock = poll_clock  # how often it looks (seconds, any start): never the queue's times
        self.students = set(releaser.pending)  # everyone this run grades: one submission each
        self.joined = 0
        self.last = 0.0

    def __call__(self) -> list[str]:
        """Queue what arrived, stage the next of this assignment's turn; return their student folders."""
        now = self.poll_clock()
        if self.joined >= self.limit or now - self.last < POLL_S:
            return []
        self.last = now
        try:
            scan(self.place, self.queue)
            more = self.queue.next_batch(self.limit - self.joined, joining=self.assignment,
                                         grading=frozenset(self.students))
        except Exception:  # the queue's file could not be read: the batch goes on without them
            logger.exception("looking for submissions to join the batch failed")
            return []
        try:
            stage_into(self.place, more, self.staged)
        except Exception:  # staging failed: back in the queue, for a later poll or the next batch
            logger.exception("staging submissions that joined the batch failed")
            for e in more:  # (none of them is in the run: their folders are theirs alone)
                shutil.rmtree(self.staged.work / e.student, ignore_errors=True)
            self.queue.requeue(more, "staging failed; queued again")
            return []
        self.students.update(e.student for e in more)
        more = settle_unstaged(self.queue, more, self.staged)
        for e in more:
            self.releaser.pending[e.student] = e
            logger.info(printable(f"{e.student} {e.assignment} {e.timestamp}: joins the batch being graded"))
        self.joined += len(more)
        return [e.student for e in more]


def write_assignment_reports(out: Path, assignment: str, isolation: str) -> None:
    """Rewrite grades.csv and summary.html over every student graded so far (grade_class writes one batch's).
    """
    from autograder.grading.report import write_reports
    from autograder.grading.results import StudentResult

    results = []
    for path in sorted((out / "results").glob("*.json")):
        try:
            results.append(StudentResult.from_json(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError, KeyError):
            logger.info(f"skipped an unreadable result in the class report: {path.name}")
    write_reports(out, assignment, sorted(results, key=lambda r: r.student), isolation)


def run(place: Place, jobs: int | None = None, once: bool = False) -> None:
    """The service's loop: recover, then scan, grade, release, forever (or until nothing is left, with once).
    """
    from autograder.grading.session import default_jobs

    os.umask(0o077)
    size = BATCH_PER_CORE * (jobs or default_jobs())
    waiting = Waiting(jobs or default_jobs())
    try:
        _loop(place, jobs, once, size, waiting)
    finally:
        waiting.stop()


@dataclass
class Waiting:
    """The zygotes that wait for the next submissions (where bubblewrap is: they serve no other sandbox), so
    that a submission's kernel is forked at once, with torch already imported. They start importing once an
    assignment is graded on submit, and import what those assignments import (torch, NumPy: the grader's own
    rule, `assignment_libraries`): until then a hub holds no torch in memory and spends no CPU on it. An
    assignment turned on later that imports more starts them again with more."""

    count: int
    standby: Standby | None = None
    launched: bool = False
    checked: bool = False
    libraries: tuple[str, ...] = ()
    imports: dict[str, tuple[str, ...]] = field(default_factory=dict)  # assignment -> its libraries

    def libraries_of(self, course: Path, assignments: list[str]) -> tuple[str, ...]:
        """Return what these assignments' source notebooks import, of LIBRARIES (each read once)."""
        from autograder.grading.session import assignment_libraries

        for name in assignments:
            if name not in self.imports:
                self.imports[name] = assignment_libraries(course, name)
        return tuple(name for name in LIBRARIES if any(name in self.imports[a] for a in assignments))

    def launch(self, libraries: tuple[str, ...] = LIBRARIES) -> None:
        """Start the zygotes importing `libraries` (once; again, with these added, when they lack one);
        return without waiting for them."""
        wanted = tuple(name for name in LIBRARIES if name in {*self.libraries, *libraries})
        if self.launched and wanted == self.libraries:
            return
        self.stop()
        self.launched, self.checked, self.libraries = True, False, wanted
        from autograder.grading import scratch
        from autograder.grading.worker import KEEP_ENV, zygote_environment

        if not shutil.which("bwrap"):
            return
        folder = scratch.make_run_root()
        self.standby = Standby(str(folder), zygote_environment(folder, KEEP_ENV), wanted)
        try:
            self.standby.launch(self.count)
        except (WarmStartError, OSError) as exc:
            self._give_up(exc)

    def ready(self) -> Standby | None:
        """Return the running zygotes (launched now if they were not), or None where they could not start."""
        if not self.launched:
            self.launch()
        if self.standby is not None and not self.checked:
            self.checked = True
            try:
                self.standby.ready(self.count)
                logger.info(f"{self.count} zygotes wait for submissions "
                            f"({', '.join(self.libraries) or 'nothing but the kernel'} imported)")
            except (WarmStartError, OSError) as exc:
                self._give_up(exc)
        return self.standby

    def _give_up(self, exc: Exception) -> None:
        logger.info(f"no zygotes waiting (each batch starts its own): {exc}")
        self.stop()

    def stop(self) -> None:
        """Stop the zygotes, if any were started."""
        if self.standby is not None:
            self.standby.stop()
            shutil.rmtree(self.standby.folder, ignore_errors=True)
            self.standby = None


def _loop(place: Place, jobs: int | None, once: bool, size: int, waiting: Waiting) -> None:
    """Scan, grade, release, pass back, until stopped (or until nothing is left, with once)."""
    queue = place.queue()
    for e in queue.recover():
        logger.info(f"{e.student} {e.assignment} {e.timestamp}: was being graded when the service stopped; "
            + (str(State.FAILED) if e.tries >= MAX_TRIES else f"{State.QUEUED} again"))
    logger.info(f"watching {place.exchange.where} for {', '.join(queue.enabled()) or 'no assignment yet'}")
    pass_back = None
    if place.lti.platform.is_file():
        from autograder.hub.lms.passback import Pacer

        pass_back = Pacer(place.lti)
        logger.info("grade passback to the LMS is on")
    ready: set[str] = set()  # assignments whose template this service has made ahead
    while True:
        scan(place, queue)
        enabled = queue.enabled()
        if enabled:
            waiting.launch(waiting.libraries_of(place.course, enabled))
            for assignment in enabled:
                if assignment not in ready:
                    ready.add(assignment)
                    prepare_ahead(place, assignment)
        batch = [] if place.workers else queue.next_batch(size)  # with workers: their results, recorded
        if batch:
            try:
                grade_batch(place, queue, batch, jobs, waiting.ready())
            except Exception:
                logger.exception("grading a batch failed")
                queue.recover()
                time.sleep(POLL_S)
            continue
        if pass_back is not None:
            pass_back()
        if once:
            return
        time.sleep(POLL_S)


def run_service(settings: AutogradeSettings) -> int:
    """Run the service until stopped (SIGTERM), or until its queue is empty (`once`)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="[autograde %(asctime)s] %(message)s",
                        datefmt="%H:%M:%S")  # the hub's log, one line each, as before
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    exchange = autograde_exchange(settings)
    workers = grading_workers(exchange) if settings.workers else None
    run(Place(Path(settings.course), exchange, workers), settings.jobs, settings.once)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        return run_service(parse(AutogradeSettings, argparse.ArgumentParser(
            prog="autograde run", description="grade each new submission of the assignments turned on"),
            argv[1:]))
    parser = argparse.ArgumentParser(prog="autograde", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("run", help="grade each new submission of the assignments turned on (run --help)")
    for name in ("on", "off", "status"):
        p = sub.add_parser(name)
        p.add_argument("--course", required=True)
        p.add_argument("assignment")
        if name == "on":
            add_options(p, AutogradeSwitches)
    args = parser.parse_args(argv)
    course = Path(args.course)
    queue = course_queue(course)
    if args.action in ("on", "off"):
        try:
            s = queue.configure(args.assignment, args.action == "on", getattr(args, "per_hour", None),
                                getattr(args, "timeout", None), getattr(args, "hidden_tests", None))
        except ValueError as exc:
            print(f"autograde {args.action}: {exc}", file=sys.stderr)
            return 2
        print(f"autograde {args.assignment}: {'on' if s.enabled else 'off'}"
              + (f", at most {s.per_hour} graded submissions per student per hour" if s.per_hour else "")
              + f", {s.timeout:g} s per notebook, hidden tests {s.hidden_tests}"
              + (" until the due date" if s.hidden_tests == HiddenTests.PROTECTED else ""))
        return 0
    s = queue.setting(args.assignment)
    print(f"autograde {args.assignment}: {'on' if s.enabled else 'off'}"
          + (f", at most {s.per_hour} per student per hour" if s.per_hour else "")
          + f", hidden tests {s.hidden_tests}")
    for e in queue.entries(args.assignment):
        score = f"{e.score:g}/{e.max_score:g}" if e.score is not None and e.max_score is not None else ""
        print(printable(f"{e.student:24} {e.timestamp:28} {e.state:10} {e.status:9} {score:11} {e.detail}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
