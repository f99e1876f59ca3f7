"""One grading run: from an assignment and a folder (or .zip) of submissions to grades, feedback and gradebook.

The steps: find each student's notebooks; generate the assignment with nbgrader in a template course (and
define it in the course gradebook); reuse the saved result of every student whose submission, assignment
and options have not changed; grade the others in parallel workers; record each finished student in the
gradebook, then save their result (so an interrupted run picks up where it stopped); finally write
grades.csv and summary.html.

A notebook that crashes the kernel, hangs it past the time limit or is killed for memory is graded again
without the cell that did it (that cell fails, everything else counts), at most MAX_ATTEMPTS times
(attempt.py).
"""

import importlib.util
import os
import shutil
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader import utils
from sqlalchemy.exc import SQLAlchemyError

from autograder.cells import grade_id
from autograder.grading import gradebook as gbook
from autograder.grading import scratch
from autograder.grading.attempt import (
    COMPLETED,
    AttemptReport,
    Event,
    Failure,
    FailureKind,
    Job,
    next_attempt,
    wrongly_blamed,
)
from autograder.grading.report import write_reports
from autograder.grading.results import (
    DISK,
    GRADED,
    INVALID,
    MEMORY,
    MISSING,
    PROCESSES,
    TIMEOUT,
    StudentResult,
    fingerprint,
    hash_tree,
    write_atomic,
    zero_cells,
)
from autograder.grading.sandbox import Isolation, detect_isolation
from autograder.grading.submissions import (
    Submission,
    SubmissionsError,
    match_submission,
    open_submissions,
    read_notebook_json,
    regular_files,
    student_folders,
)
from autograder.safe_copy import Refusal, read_small

DEFAULT_TIMEOUT = 300
DEFAULT_MEMORY_MIB = 4096
MAX_FLAGS = 8  # per student, in grades.csv and the summary
MAX_RESULT_BYTES = 16 * 2**20  # a saved result larger than this is not one the grader wrote: grade again
# A student's wall-clock budget: each notebook's --timeout, plus starting and stopping its kernel, plus
# making the scratch course, feedback and report; past it the worker is stopped (pool.py).
KERNEL_START_STOP_S = 20
ATTEMPT_OVERHEAD_S = 40
STUDENT_PACKAGES = ("devicelab",)  # imported by assignment notebooks; visible inside the sandbox


class GradingError(RuntimeError):
    """The run cannot start (unknown assignment, unreadable submissions, gradebook in use)."""


@dataclass
class RunSummary:
    """What a run did."""

    results: list[StudentResult]
    out: Path
    isolation: Isolation
    reused: int
    graded: int
    seconds: float
    ignored: list[str]


def default_jobs() -> int:
    """Return the number of CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover  (not Linux)
        return os.cpu_count() or 1


def _where(failure: Failure | Event, multi: bool) -> str:
    if failure.cell is None:
        return "before the first cell ran" if failure.kind != FailureKind.INVALID else ""
    text = f"cell {failure.cell + 1}"
    if failure.grade_id:
        text += f" ({failure.grade_id})"
    if multi and failure.notebook:
        text += f" of {failure.notebook}"
    return text


def describe_failure(failure: Failure, multi: bool) -> str:
    """Return one readable clause for a failed attempt."""
    where = _where(failure, multi)
    message = failure.message or failure.kind.value
    if failure.kind == FailureKind.UNRESPONSIVE:
        message = "ran past the time limit and ignored the interrupt; stopped"
    return f"{where}: {message}" if where else message


# Events of a completed attempt that change the status (when it is still `graded`), and how they read
EVENT_STATUS = {"timeout": TIMEOUT, "memory": MEMORY, "processes": PROCESSES, "disk": DISK}


def _event_detail(event: Event, where: str) -> str:
    if event.kind == "timeout":
        return f"{where}: {event.message}; the cell was interrupted"
    if event.kind == "memory":
        return f"{where}: ran out of memory ({event.message})"
    return f"{where}: {event.message}"


def combine(student: str, assignment: str, attempts: list[AttemptReport], notes: list[str],
            max_points: dict[tuple[str, str], float], multi: bool) -> StudentResult:
    """Turn a student's attempts (worker reports, last one final) into their result."""
    result = StudentResult(student, assignment, GRADED)
    failures = [a.failure for a in attempts if a.failure is not None]
    final = attempts[-1]
    details = [describe_failure(f, multi) for f in failures]
    if failures and final.outcome == COMPLETED:
        details[-1] += "; graded again without running that cell"
    if failures:
        result.status = failures[0].kind.status
    seen = set()
    for event in final.events if final.outcome == COMPLETED else []:
        key = (event.kind, event.notebook, event.cell)
        if key in seen or event.kind not in (*EVENT_STATUS, "sys-exit", "truncated"):
            continue
        seen.add(key)
        if event.kind in EVENT_STATUS and result.status == GRADED:
            result.status = EVENT_STATUS[event.kind]
        details.append(_event_detail(event, _where(event, multi)))
    flags = list(dict.fromkeys((f"{e.notebook}: " if multi and e.notebook else "") + e.message
                               for attempt in attempts for e in attempt.events if e.kind == "tamper"))
    result.flags = flags[:MAX_FLAGS] + ([f"and {len(flags) - MAX_FLAGS} more findings"]
                                        if len(flags) > MAX_FLAGS else [])
    if final.outcome == COMPLETED:
        result.cells = list(final.cells)
        result.comments = final.comments
        result.late_penalties = final.late_penalties
        result.timestamp = final.timestamp
        result.ran = True
        tests = [c for c in result.cells if c.kind == "test"]
        failed = [c for c in tests if not c.passed and c.max_score > 0]
        if failed and result.status == GRADED:
            shown = ", ".join(c.grade_id for c in failed[:4]) + (", ..." if len(failed) > 4 else "")
            details.append(f"failed {len(failed)} of {len(tests)} tests: {shown}")
        waiting = [c for c in result.cells if c.needs_manual_grade]
        if waiting:
            details.append(f"{len(waiting)} {'cell awaits' if len(waiting) == 1 else 'cells await'} manual grading: "
                           + ", ".join(c.grade_id for c in waiting[:4]) + (", ..." if len(waiting) > 4 else ""))
    else:
        result.cells = zero_cells(max_points)
    details += final.notes + notes
    result.detail = "; ".join(d for d in details if d)
    return result


def grade_class(root: Path, assignment: str, submissions: Path, *, jobs: int | None = None,
                timeout: float = DEFAULT_TIMEOUT, memory_mib: int = DEFAULT_MEMORY_MIB, out: Path | None = None,
                sandbox: str = "auto", force: bool = False, progress: bool = True, echo=print,
                hidden: tuple[Path, ...] = ()) -> RunSummary:
    """Grade every student folder in `submissions`; write grades, feedback, summary; fill the gradebook.

    `hidden`: more folders the sandbox hides from student code (beside the course, the submissions and the
    output), e.g. the exchange of a hub whose grader account may read every submission.
    """
    root = root.resolve()
    if str(root) not in sys.path:  # as nbgrader does: plugins (late penalties, exporters) live beside the config
        sys.path.insert(0, str(root))
    source = root / "source" / assignment
    if not source.is_dir() or not any(source.glob("*.ipynb")):
        have = sorted(p.name for p in (root / "source").iterdir() if p.is_dir()) if (root / "source").is_dir() else []
        raise GradingError(f"no assignment {assignment!r} in {root / 'source'} (have: {', '.join(have) or 'none'})")
    problems = unsupported(root, assignment)
    if problems:
        raise GradingError("this course cannot be graded here: " + "; ".join(problems)
                           + ". Use plain `nbgrader autograde` for it (README, 'Grading a class').")
    for left in scratch.remove_stale():
        echo(f"removed {left}, the scratch of a grading run that was killed")
    run_root = scratch.make_run_root()
    run = ClassRun(root, assignment, Path(submissions).resolve(), (out or root / "graded" / assignment).resolve(),
                   run_root, jobs or default_jobs(), timeout, memory_mib, echo, [Path(p) for p in hidden])
    try:
        try:
            folder = open_submissions(run.submissions, run_root, assignment)
        except SubmissionsError as exc:
            raise GradingError(str(exc)) from exc
        try:
            with gbook.locked(run.db_url):
                return run.grade(folder, sandbox, force, progress)
        except gbook.GradebookError as exc:
            raise GradingError(str(exc)) from exc
    finally:
        if os.environ.get("DEVICELAB_KEEP_SCRATCH"):
            scratch.keep(run_root)
            echo(f"scratch kept in {run_root}")
        else:
            shutil.rmtree(run_root, ignore_errors=True)


# nbgrader's own folder layout, which the grader's scratch courses and the course's results follow
DEFAULT_LAYOUT = {"source_directory": "source", "submitted_directory": "submitted",
                  "autograded_directory": "autograded", "feedback_directory": "feedback",
                  "directory_structure": os.path.join("{nbgrader_step}", "{student_id}", "{assignment_id}")}


def unsupported(root: Path, assignment: str) -> list[str]:
    """Return what in this course the grader cannot do as nbgrader would (empty: it can grade it)."""
    from autograder.course import course_directory

    course = course_directory(root)
    problems = [f"CourseDirectory.{name} is {getattr(course, name)!r}, not nbgrader's default {value!r}"
                for name, value in DEFAULT_LAYOUT.items() if getattr(course, name) != value]
    for path in sorted((root / "source" / assignment).glob("*.ipynb")):
        raw, _ = read_notebook_json(path)
        meta = (raw or {}).get("metadata", {})
        language = (meta.get("kernelspec") or {}).get("language") or (meta.get("language_info") or {}).get("name")
        if language and str(language).lower() != "python":
            problems.append(f"{path.name} is a {language} notebook (the grading kernel runs Python only)")
    return problems


class ClassRun:
    """The state of one `grade` run; `grade` does it all, the other methods are its steps."""

    def __init__(self, root: Path, assignment: str, submissions: Path, out: Path, run_root: Path, jobs: int,
                 timeout: float, memory_mib: int, echo, extra_hidden: list[Path] | None = None) -> None:
        self.root, self.assignment, self.submissions, self.out = root, assignment, submissions, out
        self.run_root, self.jobs, self.timeout, self.memory_mib, self.echo = run_root, jobs, timeout, memory_mib, echo
        self.db_url, self.course = gbook.course_db_url(root), gbook.course_id(root)
        self.backup = out / "gradebook-before-grading.db"
        self.started = time.monotonic()
        self.results: dict[str, StudentResult] = {}
        self.subs: dict[str, Submission] = {}
        self.prints: dict[str, str] = {}
        self.attempts: dict[str, list[AttemptReport]] = {}
        self.in_course = submissions == (root / "submitted").resolve()
        self.bar = None
        # Set by prepare(): the assignment's notebooks (name -> grade_ids), points per graded cell, several notebooks?
        self.expected: dict[str, set[str]] = {}
        self.max_points: dict[tuple[str, str], float] = {}
        self.multi = False
        self.isolation: Isolation | None = None  # set by isolate()
        self.reused: set[str] = set()  # students whose saved result was reused (plan())
        self.extra_hidden = list(extra_hidden or [])  # more folders the sandbox hides (grade_class's hidden)

    def grade(self, folder: Path, sandbox: str, force: bool, progress: bool) -> RunSummary:
        """Prepare, reuse what is unchanged, grade the rest in parallel, write the reports."""
        from tqdm import tqdm

        from autograder.grading.pool import Pool
        from autograder.grading.worker import Settings

        students, ignored = student_folders(folder)
        template = self.prepare()
        self.isolation = self.isolate(sandbox, folder)
        others = frozenset(p.name for p in (self.root / "source").iterdir() if p.is_dir()) - {self.assignment}
        subs = [_matched(f, self.expected, self.assignment, others) for f in students]
        todo = self.plan(subs, force, self.isolation)
        self.echo(f"{self.assignment}: {len(subs)} students in {self.submissions}"
                  + (f" ({len(self.reused)} unchanged since the last run)" if self.reused else ""))
        if ignored:
            self.echo(f"ignored (not student folders): {', '.join(ignored[:8])}{' ...' if len(ignored) > 8 else ''}")
        self.echo(f"isolation: {self.isolation.description}")
        if todo:
            self.echo(f"{len(todo)} to grade with {min(self.jobs, len(todo))} workers, {self.timeout:g} s per "
                      f"notebook, {self.memory_mib} MiB each")
        workers = min(self.jobs, max(1, len(todo)))
        settings = Settings(self.root, self.assignment, template, self.run_root, self.isolation, self.timeout,
                            self.memory_mib, max(1, default_jobs() // workers))
        tqdm.monitor_interval = 0  # no monitor thread: workers are forked from this process
        self.bar = tqdm(total=len(subs), initial=len(subs) - len(todo), unit="student", dynamic_ncols=True,
                        desc=f"grading {self.assignment}", disable=not progress)
        pool = Pool(settings, workers, self.memory_mib, self.run_root)
        try:
            pool.run(todo, self.seconds_for, self.on_report)
        finally:
            pool.shutdown()
            self.bar.close()
        ordered = [self.results[s.student] for s in subs]
        write_reports(self.out, self.assignment, ordered, self.isolation.description)
        return RunSummary(ordered, self.out, self.isolation, len(self.reused), len(todo),
                          time.monotonic() - self.started, ignored)

    def prepare(self) -> Path:
        """Back up the gradebook, generate the template course, define the assignment; return the template."""
        self.out.mkdir(parents=True, exist_ok=True)
        gbook.backup(self.db_url, self.backup)
        template = gbook.generate_apart(self.root, self.assignment, self.run_root / "template")
        gbook.generate_apart(self.root, self.assignment, self.run_root / "register", db_url=self.db_url)
        gbook.copy_due_date(self.db_url, f"sqlite:///{template / 'gradebook.db'}", self.course, self.assignment)
        self.expected, self.max_points = {}, {}
        for nb in sorted((template / "release" / self.assignment).glob("*.ipynb")):
            raw, _ = read_notebook_json(nb)
            self.expected[nb.name] = set()
            for cell in nbformat.from_dict(raw["cells"]):
                gid = grade_id(cell)
                if gid:
                    self.expected[nb.name].add(gid)
                    if utils.is_grade(cell):
                        self.max_points[(nb.name, gid)] = float(cell.metadata.nbgrader.get("points", 0))
        self.multi = len(self.expected) > 1
        return template

    def isolate(self, sandbox: str, folder: Path) -> Isolation:
        """Pick the sandbox: hide the course, the submissions and the output; show Python and its packages."""
        packages = [Path(spec.origin).parent for name in STUDENT_PACKAGES
                    if (spec := importlib.util.find_spec(name)) is not None and spec.origin]
        inbox = self.submissions if self.submissions.is_dir() else self.submissions.parent
        try:
            hide = [self.root, inbox, folder, self.out, self.run_root, *self.extra_hidden]
            isolation = detect_isolation(sandbox, hidden=hide, visible=packages)
        except RuntimeError as exc:
            raise GradingError(str(exc)) from exc
        for note in isolation.notes:
            self.echo(f"note: {note}")
        return isolation

    def seconds_for(self, job: Job) -> float:
        """Return the wall-clock budget of one attempt (past it, its worker is stopped)."""
        return len(job.notebooks) * (self.timeout + KERNEL_START_STOP_S) + ATTEMPT_OVERHEAD_S

    def plan(self, subs: list[Submission], force: bool, isolation: Isolation) -> list[Job]:
        """Reuse unchanged results, settle missing and invalid students, and return the jobs for the rest."""
        digest = hash_tree(regular_files(self.root / "source" / self.assignment),
                           self.root / "source" / self.assignment)
        self.reused = set()
        todo = []
        for index, sub in enumerate(subs):
            self.subs[sub.student] = sub
            try:
                files = hash_tree(regular_files(sub.folder), sub.folder)
            except OSError as exc:  # a file that cannot be read: this student's problem only
                files = ""
                sub.status, sub.detail = INVALID, f"a file cannot be read ({_why(exc)})"
            self.prints[sub.student] = fingerprint(digest, files, float(self.timeout), int(self.memory_mib),
                                                   isolation.mode)
            cached = None if force else _cached(self.out, self.root, self.assignment, sub.student,
                                                 self.prints[sub.student])
            if cached is not None:
                if cached.status == MISSING or not gbook.has_submission(self.db_url, self.course, self.assignment,
                                                                         sub.student):
                    gbook.record(self.db_url, self.course, self.assignment, cached)  # e.g. graded elsewhere
                self.results[sub.student] = cached
                self.reused.add(sub.student)
            elif sub.status is not None:
                self.finish(sub, StudentResult(sub.student, self.assignment, sub.status,
                                               "; ".join([sub.detail, *sub.notes]), zero_cells(self.max_points)))
            else:
                todo.append(Job(index, sub.student, {k: str(v) for k, v in sub.notebooks.items()},
                                str(sub.folder), sub.timestamp))
        return todo

    def on_report(self, job: Job, report: AttemptReport) -> list[Job]:
        """Take one attempt's report: grade again without the guilty cell, or finish the student."""
        try:
            return self.take_report(job, report)
        except GradingError:
            raise
        except Exception as exc:  # noqa: BLE001  (one student's failure is theirs: the class goes on)
            traceback.print_exc()
            sub = self.subs[job.student]
            self.finish(sub, StudentResult(sub.student, self.assignment, INVALID,
                                           f"the grader could not finish this student ({_why(exc)})",
                                           zero_cells(self.max_points)))
            self.bar.update(1)
            return []

    def take_report(self, job: Job, report: AttemptReport) -> list[Job]:
        """Grade again without the guilty cell, or combine the student's attempts and finish them."""
        history = self.attempts.setdefault(job.student, [])
        history.append(report)
        retry = next_attempt(job, report)
        if retry is not None:
            _drop(report)
            cleared = wrongly_blamed(job, retry)
            history[:] = [r for r in history if r.blamed not in cleared]
            return [retry]
        sub = self.subs[job.student]
        result = combine(sub.student, self.assignment, history, sub.notes, self.max_points, self.multi)
        self.finish(sub, result, Path(report.scratch) if report.scratch else None)
        for old in history:
            _drop(old)
        self.bar.update(1)
        self.bar.set_postfix(Counter(r.status for r in self.results.values()), refresh=False)
        return []

    def finish(self, sub: Submission, result: StudentResult, scratch: Path | None = None) -> None:
        """Record a student, install their files and feedback, save the result; a failure makes them invalid."""
        try:
            self.record(sub, result, scratch)
        except GradingError:
            raise
        except Exception as exc:  # noqa: BLE001  (one student's failure is theirs: the class goes on)
            traceback.print_exc()
            failed = StudentResult(sub.student, self.assignment, INVALID,
                                   f"the grader could not record this student ({_why(exc)})",
                                   zero_cells(self.max_points))
            shutil.rmtree(self.out / "feedback" / sub.student, ignore_errors=True)
            try:
                self.record(sub, failed)
            except GradingError:
                raise
            except Exception:  # noqa: BLE001  (not even the zero could be recorded: the results say why)
                traceback.print_exc()
            failed.fingerprint = ""  # graded again by the next run
            write_atomic(self.out / "results" / f"{sub.student}.json", failed.to_json())
            self.results[sub.student] = failed

    def record(self, sub: Submission, result: StudentResult, scratch: Path | None = None) -> None:
        """Record a student in the gradebook, install their files and feedback, then save the result."""
        result.fingerprint = self.prints.get(sub.student, "")
        try:
            gbook.record(self.db_url, self.course, self.assignment, result)
        except SQLAlchemyError as exc:
            raise GradingError(
                f"cannot record {sub.student} in the gradebook ({type(exc).__name__}: {str(exc).splitlines()[0]}). "
                + ("Student code may have changed it: without bubblewrap it can write your files. "
                   if self.isolation.mode != "bwrap" else "")
                + (f"The gradebook as it was before this run is in {self.backup}" if self.backup.exists()
                   else "There was no gradebook before this run.")) from exc
        feedback = self.out / "feedback" / sub.student
        if feedback.exists():
            shutil.rmtree(feedback)
        if scratch is not None and result.ran:
            gbook.install(self.root, self.assignment, sub.student, scratch, keep_submitted=self.in_course)
            for page in sorted((scratch / "feedback" / sub.student / self.assignment).glob("*.html")):
                feedback.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(page, feedback / page.name)
        write_atomic(self.out / "results" / f"{sub.student}.json", result.to_json())
        self.results[sub.student] = result


def _why(exc: BaseException) -> str:
    """Return an exception as one short line for a student's detail."""
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _matched(folder: Path, expected: dict[str, set[str]], assignment: str, others: frozenset[str]) -> Submission:
    """Match one student's files; whatever goes wrong makes that student invalid, not the run fail."""
    try:
        return match_submission(folder.name, folder, expected, assignment, others)
    except Exception as exc:  # noqa: BLE001  (one student's failure is theirs: the class goes on)
        traceback.print_exc()
        return Submission(folder.name, folder, status=INVALID, detail=f"cannot be read ({_why(exc)})")


def _drop(report: AttemptReport) -> None:
    """Remove an attempt's scratch course once it is no longer needed."""
    if report.scratch:
        shutil.rmtree(report.scratch, ignore_errors=True)


def _cached(out: Path, root: Path, assignment: str, student: str, print_: str) -> StudentResult | None:
    """Return the saved result of an unchanged student, if everything it refers to is still there."""
    try:  # a regular file of a sane size (no link followed, no FIFO waited on), or no saved result
        text = read_small(out / "results", f"{student}.json", MAX_RESULT_BYTES).decode("utf-8")
        result = StudentResult.from_json(text)
    except (Refusal, OSError, ValueError, TypeError, KeyError):
        return None
    if result.fingerprint != print_:
        return None
    if result.ran and not ((root / "autograded" / student / assignment).is_dir()
                           and (out / "feedback" / student).is_dir()):
        return None
    return result
