"""One grading run: from an assignment and a folder (or .zip) of submissions to grades, feedback and
gradebook.

The steps: find each student's notebooks; generate the assignment with nbgrader in a template course (and
define it in the course gradebook); reuse the saved result of every student whose submission, assignment
and options have not changed; grade the others in parallel workers; record each finished student in the
gradebook, then save their result (so an interrupted run picks up where it stopped); finally write
grades.csv and summary.html.

A notebook that crashes the kernel, hangs it past the time limit or is killed for memory is graded again
without the cell that did it (that cell fails, everything else counts), at most MAX_ATTEMPTS times
(attempt.py).
"""

import os
import shutil
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import nbformat
from nbgrader import utils
from sqlalchemy.exc import SQLAlchemyError
from tqdm import tqdm

from autograder.cells import grade_id
from autograder.grading import gradebook as gbook
from autograder.grading import scratch
from autograder.grading.attempt import (
    AttemptReport,
    Event,
    EventKind,
    Failure,
    FailureKind,
    Job,
    Outcome,
    next_attempt,
    wrongly_blamed,
)
from autograder.grading.defaults import DEFAULT_MEMORY_MIB, DEFAULT_SANDBOX, DEFAULT_TIMEOUT
from autograder.grading.errors import (
    GradingError,
    RecordFailed,
    SandboxError,
    UnknownAssignment,
    UnsupportedCourse,
)
from autograder.grading.remote_calls import preload
from autograder.grading.report import write_reports
from autograder.grading.results import (
    CellKind,
    Status,
    StudentResult,
    fingerprint,
    hash_tree,
    write_atomic,
    zero_cells,
)
from autograder.grading.sandbox import (
    Isolation,
    IsolationUnavailable,
    detect_isolation,
    student_package_folders,
)
from autograder.grading.solution_check import SolutionCheck, refusal, refuse, solution_job
from autograder.grading.submissions import (
    Submission,
    is_student_folder,
    match_submission,
    open_submissions,
    read_notebook_json,
    regular_files,
    student_folders,
)
from autograder.grading.template import CACHE_FOLDER, cached_template, register, template_key
from autograder.grading.warm_start import Standby, libraries_imported
from autograder.grading.zygote import LIBRARIES, WarmStartError
from autograder.safe_copy import Refusal, read_small

MAX_FLAGS = 8  # per student, in grades.csv and the summary
MAX_RESULT_BYTES = 16 * 2**20  # a saved result larger than this is not one the grader wrote: grade again
# A student's wall-clock budget: each notebook's --timeout, plus starting and stopping its kernel, plus
# making the scratch course, feedback and report; past it the worker is stopped (pool.py).
KERNEL_START_STOP_S = 20
ATTEMPT_OVERHEAD_S = 40
BACKUP_NAME = "gradebook-before-grading.db"  # in the output folder: the gradebook as it was before the run


@dataclass(frozen=True)
class GradeOptions:
    """How a run grades: the same for every student of it."""

    jobs: int | None = None  # parallel workers; None: one per CPU core
    timeout: float = DEFAULT_TIMEOUT  # seconds per notebook
    memory_mib: int = DEFAULT_MEMORY_MIB  # per student
    sandbox: str = DEFAULT_SANDBOX  # auto or one of sandbox.MODES
    force: bool = False  # grade again even students whose saved result is still valid
    progress: bool = True  # show a progress bar
    hidden: tuple[Path, ...] = ()  # more folders the sandbox hides (e.g. a hub's exchange)
    warm: bool = True  # fork kernels from each worker's zygote (zygote.py); False: start each kernel anew
    standby: Standby | None = None  # zygotes kept running between runs (the hub's service); else per worker
    # feedback pages as nbgrader makes them, hidden tests printed in full: only for after the due date.
    # By default each hidden test shows its score and the instructor's message, never its code.
    show_hidden_tests: bool = False
    # grade the assignment's own solution first and refuse unless it earns full marks (solution_check.py); off
    # only for a course whose source/ holds no working solution
    check_solution: bool = True

    @property
    def workers(self) -> int:
        """Return the number of parallel workers asked for (one per core when not given)."""
        return self.jobs or default_jobs()


@dataclass(frozen=True)
class Assignment:
    """The assignment as generated for this run: its template course, its notebooks' cells and their points.
    """

    template: Path  # a course with the assignment generated: gradebook.db, source/, release/
    expected: dict[str, set[str]]  # notebook name -> grade_ids of its cells
    max_points: dict[tuple[str, str], float]  # (notebook, grade_id) -> points, graded cells only

    @property
    def multi(self) -> bool:
        """Return True when the assignment has several notebooks (details then name the notebook)."""
        return len(self.expected) > 1


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


# Events of a completed attempt the student's detail tells of (those with a status also change a `graded` one)
REPORTED_EVENTS = (EventKind.TIMEOUT, EventKind.MEMORY, EventKind.PROCESSES, EventKind.DISK,
                   EventKind.SYS_EXIT, EventKind.TRUNCATED)


def _event_detail(event: Event, where: str) -> str:
    if event.kind == EventKind.TIMEOUT:
        return f"{where}: {event.message}; the cell was interrupted"
    if event.kind == EventKind.MEMORY:
        return f"{where}: ran out of memory ({event.message})"
    return f"{where}: {event.message}"


def combine(student: str, assignment: str, attempts: list[AttemptReport], notes: list[str],
            max_points: dict[tuple[str, str], float], multi: bool) -> StudentResult:
    """Turn a student's attempts (worker reports, last one final) into their result."""
    result = StudentResult(student, assignment, Status.GRADED)
    failures = [a.failure for a in attempts if a.failure is not None]
    final = attempts[-1]
    details = [describe_failure(f, multi) for f in failures]
    if failures and final.outcome == Outcome.COMPLETED:
        details[-1] += "; graded again without running that cell"
    if failures:
        result.status = failures[0].kind.status
    seen = set()
    for event in final.events if final.outcome == Outcome.COMPLETED else []:
        key = (event.kind, event.notebook, event.cell)
        if key in seen or event.kind not in REPORTED_EVENTS:
            continue
        seen.add(key)
        if event.kind.status is not None and result.status == Status.GRADED:
            result.status = event.kind.status
        details.append(_event_detail(event, _where(event, multi)))
    flags = list(dict.fromkeys((f"{e.notebook}: " if multi and e.notebook else "") + e.message
                               for attempt in attempts for e in attempt.events if e.kind == EventKind.TAMPER))
    result.flags = flags[:MAX_FLAGS] + ([f"and {len(flags) - MAX_FLAGS} more findings"]
                                        if len(flags) > MAX_FLAGS else [])
    if final.outcome == Outcome.COMPLETED:
        result.cells = list(final.cells)
        result.comments = final.comments
        result.late_penalties = final.late_penalties
        result.timestamp = final.timestamp
        result.ran = True
        tests = [c for c in result.cells if c.kind == CellKind.TEST]
        failed = [c for c in tests if not c.passed and c.max_score > 0]
        if failed and result.status == Status.GRADED:
            shown = ", ".join(c.grade_id for c in failed[:4]) + (", ..." if len(failed) > 4 else "")
            details.append(f"failed {len(failed)} of {len(tests)} tests: {shown}")
        waiting = [c for c in result.cells if c.needs_manual_grade]
        if waiting:
            details.append(f"{len(waiting)} {'cell awaits' if len(waiting) == 1 else 'cells await'} "
                           "manual grading: " + ", ".join(c.grade_id for c in waiting[:4])
                           + (", ..." if len(waiting) > 4 else ""))
    else:
        result.cells = zero_cells(max_points)
    details += final.notes + notes
    result.detail = "; ".join(d for d in details if d)
    return result


def grade_class(root: Path, assignment: str, submissions: Path, options: GradeOptions = GradeOptions(), *,
                out: Path | None = None, echo: Callable[[str], object] = print,
                on_result: Callable[[StudentResult], object] | None = None,
                joining: Callable[[], list[str]] | None = None) -> RunSummary:
    """Grade every student folder in `submissions`; write grades, feedback, summary; fill the gradebook.

    `on_result` is called with each student's result as soon as they are recorded (gradebook, feedback pages,
    saved result), in the calling thread; students whose saved result is reused are not announced.
    `joining()`, asked whenever a worker is free and nothing is left to hand it, returns the names of student
    folders it has just put into `submissions` (a folder): they join the run (the hub's late submissions).
    Raises a GradingError subclass (errors.py) when the run cannot start or go on.
    """
    root = root.resolve()
    gbook.share_engines()
    # as nbgrader does: plugins (late penalties, exporters) live beside the config
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    source = root / "source" / assignment
    if not source.is_dir() or not any(source.glob("*.ipynb")):
        have = (sorted(p.name for p in (root / "source").iterdir() if p.is_dir())
                if (root / "source").is_dir() else [])
        raise UnknownAssignment(
            f"no assignment {assignment!r} in {root / 'source'} (have: {', '.join(have) or 'none'})")
    problems = unsupported(root, assignment)
    if problems:
        raise UnsupportedCourse("this course cannot be graded here: " + "; ".join(problems)
                                + ". Use plain `nbgrader autograde` for it (docs/instructors.md, 'Grading a "
                                "class').")
    for left in scratch.remove_stale():
        echo(f"removed {left}, the scratch of a grading run that was killed")
    run_root = scratch.make_run_root()
    submissions = Path(submissions).resolve()
    out = (out or root / "graded" / assignment).resolve()
    own_standby = None
    try:
        folder = open_submissions(submissions, run_root, assignment)
        if options.warm and options.standby is None:  # the zygotes import while the run is set up
            own_standby = early_zygotes(options, run_root, len(student_folders(folder)[0]),
                                        assignment_libraries(root, assignment))
            options = replace(options, standby=own_standby)
        with gbook.locked(gbook.course_db_url(root)):
            prepared = prepare(root, assignment, out, run_root)
            inbox = submissions if submissions.is_dir() else submissions.parent
            isolation = isolate(options.sandbox, [root, inbox, folder, out, run_root, *options.hidden], echo)
            run = ClassRun(root, assignment, submissions, out, run_root, prepared, isolation, options, echo,
                           on_result)
            return run.grade(folder, joining)
    finally:
        if own_standby is not None:
            own_standby.stop()
        if os.environ.get("DEVICELAB_KEEP_SCRATCH"):
            scratch.keep(run_root)
            echo(f"scratch kept in {run_root}")
        else:
            shutil.rmtree(run_root, ignore_errors=True)


# nbgrader's own folder layout, which the grader's scratch courses and the course's results follow
DEFAULT_LAYOUT = {"source_directory": "source", "submitted_directory": "submitted",
                  "autograded_directory": "autograded", "feedback_directory": "feedback",
                  "directory_structure": os.path.join("{nbgrader_step}", "{student_id}", "{assignment_id}")}


def assignment_libraries(root: Path, assignment: str) -> tuple[str, ...]:
    """Return the heavy libraries (torch, NumPy) the assignment's source notebooks import: a run's zygotes
    preload those (all of them when a notebook cannot be read)."""
    try:
        return libraries_imported(sorted(str(p) for p in (root / "source" / assignment).glob("*.ipynb")))
    except (OSError, ValueError):
        return LIBRARIES


def early_zygotes(options: GradeOptions, run_root: Path, students: int,
                  libraries: tuple[str, ...] = LIBRARIES) -> Standby | None:
    """Start a run's zygotes at once (one per worker it may use), where bubblewrap may be its sandbox, so that
    they import `libraries` while the run is set up; None where there is nothing to start."""
    from autograder.grading.worker import KEEP_ENV, zygote_environment

    count = min(options.workers, students)
    if count == 0 or options.sandbox not in ("auto", "bwrap") or not shutil.which("bwrap"):
        return None
    folder = run_root / "zygotes"
    standby = Standby(str(folder), zygote_environment(folder, KEEP_ENV), libraries)
    try:
        standby.launch(count)
    except OSError:
        standby.stop()
        return None
    return standby


def unsupported(root: Path, assignment: str) -> list[str]:
    """Return what in this course the grader cannot do as nbgrader would (empty: it can grade it)."""
    from autograder.course import course_directory

    course = course_directory(root)
    problems = [f"CourseDirectory.{name} is {getattr(course, name)!r}, not nbgrader's default {value!r}"
                for name, value in DEFAULT_LAYOUT.items() if getattr(course, name) != value]
    for path in sorted((root / "source" / assignment).glob("*.ipynb")):
        raw, _ = read_notebook_json(path)
        meta = (raw or {}).get("metadata", {})
        language = ((meta.get("kernelspec") or {}).get("language")
                    or (meta.get("language_info") or {}).get("name"))
        if language and str(language).lower() != "python":
            problems.append(f"{path.name} is a {language} notebook (the grading kernel runs Python only)")
    return problems


def prepare(root: Path, assignment: str, out: Path, run_root: Path) -> Assignment:
    """Back up the gradebook, make the template course and define the assignment in the course gradebook (each
    generated only when what it is made of changed, template.py); return what grading needs."""
    db_url = gbook.course_db_url(root)
    out.mkdir(parents=True, exist_ok=True)
    gbook.backup(db_url, out / BACKUP_NAME)
    course = gbook.course_id(root)
    template, _ = cached_template(root, assignment, out / CACHE_FOLDER, run_root / "template")
    register(root, assignment, template, db_url, course, run_root / "register")
    gbook.copy_due_date(db_url, f"sqlite:///{template / 'gradebook.db'}", course, assignment)
    expected: dict[str, set[str]] = {}
    max_points: dict[tuple[str, str], float] = {}
    for nb in sorted((template / "release" / assignment).glob("*.ipynb")):
        raw, _ = read_notebook_json(nb)
        expected[nb.name] = set()
        for cell in nbformat.from_dict(raw["cells"]):
            gid = grade_id(cell)
            if gid:
                expected[nb.name].add(gid)
                if utils.is_grade(cell):
                    max_points[(nb.name, gid)] = float(cell.metadata.nbgrader.get("points", 0))
    return Assignment(template, expected, max_points)


def prepare_ahead(root: Path, assignment: str, out: Path) -> None:
    """Make the assignment's template and define it in the gradebook now, as its next run would (cached for
    that run): the hub's service does this when autograding is turned on, before the first submission."""
    root, run_root = root.resolve(), scratch.make_run_root()
    try:
        with gbook.locked(gbook.course_db_url(root)):
            prepare(root, assignment, out.resolve(), run_root)
    finally:
        shutil.rmtree(run_root, ignore_errors=True)


def isolate(sandbox: str, hide: list[Path], echo: Callable[[str], object]) -> Isolation:
    """Pick the sandbox: hide the given folders (course, submissions, output...); show Python and its
    packages.
    """
    try:
        isolation = detect_isolation(sandbox, hidden=hide, visible=student_package_folders())
    except IsolationUnavailable as exc:
        raise SandboxError(str(exc)) from exc
    for note in isolation.notes:
        echo(f"note: {note}")
    return isolation


class ClassRun:
    """One `grade` run over a prepared assignment: `grade` does it all, the other methods are its steps."""

    def __init__(self, root: Path, assignment: str, submissions: Path, out: Path, run_root: Path,
                 prepared: Assignment, isolation: Isolation, options: GradeOptions,
                 echo: Callable[[str], object], on_result: Callable[[StudentResult], object] | None) -> None:
        self.root, self.assignment, self.submissions, self.out = root, assignment, submissions, out
        self.run_root, self.prepared, self.isolation, self.options = run_root, prepared, isolation, options
        self.echo, self.on_result = echo, on_result
        self.db_url, self.course = gbook.course_db_url(root), gbook.course_id(root)
        self.backup = out / BACKUP_NAME
        self.started = time.monotonic()
        self.results: dict[str, StudentResult] = {}
        self.subs: dict[str, Submission] = {}
        self.prints: dict[str, str] = {}
        self.attempts: dict[str, list[AttemptReport]] = {}
        self.in_course = submissions == (root / "submitted").resolve()
        self.reused: set[str] = set()  # students whose saved result was reused (plan())
        self.bar = tqdm(disable=True)  # replaced by the real bar in grade()

    @property
    def max_points(self) -> dict[tuple[str, str], float]:
        """Return the points of each graded cell ((notebook, grade_id) -> points)."""
        return self.prepared.max_points

    def grade(self, folder: Path, joining: Callable[[], list[str]] | None = None) -> RunSummary:
        """Reuse what is unchanged, grade the rest (and whoever joins) in parallel, write the reports."""
        from autograder.grading.pool import Pool
        from autograder.grading.worker import WorkerSettings

        options = self.options
        students, ignored = student_folders(folder)
        others = frozenset(p.name for p in (self.root / "source").iterdir() if p.is_dir()) - {self.assignment}
        subs = [_matched(f, self.prepared.expected, self.assignment, others) for f in students]
        todo = self.plan(subs)
        joined: list[Job] = []
        if todo or joining is not None:  # before the workers fork, and while the zygotes import
            preload(self.prepared.template / "source" / self.assignment)

        def more() -> list[Job]:
            """Plan the students who joined (a folder of theirs is new, and so is their name)."""
            names = [n for n in dict.fromkeys(joining()) if n not in self.subs and Path(n).name == n
                     and is_student_folder(folder / n)]
            new = [_matched(folder / n, self.prepared.expected, self.assignment, others) for n in names]
            subs.extend(new)
            jobs = self.plan(new, first=len(subs) - len(new))
            joined.extend(jobs)
            self.bar.total += len(new)
            return jobs

        self.echo(f"{self.assignment}: {len(subs)} students in {self.submissions}"
                  + (f" ({len(self.reused)} unchanged since the last run)" if self.reused else ""))
        if ignored:
            self.echo("ignored (not student folders): "
                      f"{', '.join(ignored[:8])}{' ...' if len(ignored) > 8 else ''}")
        self.echo(f"isolation: {self.isolation.description}")
        if todo:
            self.echo(f"{len(todo)} to grade with {min(options.workers, len(todo))} workers, "
                      f"{options.timeout:g} s per notebook, {options.memory_mib} MiB each")
        workers = options.workers if joining is not None else min(options.workers, max(1, len(todo)))
        settings = WorkerSettings(self.root, self.assignment, self.prepared.template, self.run_root,
                                  self.isolation, options.timeout, options.memory_mib,
                                  max(1, default_jobs() // workers), warm=options.warm,
                                  zygotes=self.standing_zygotes(workers) if todo or joining else (),
                                  libraries=options.standby.libraries if options.standby else LIBRARIES,
                                  show_hidden_tests=options.show_hidden_tests)
        tqdm.monitor_interval = 0  # no monitor thread: workers are forked from this process
        self.bar = tqdm(total=len(subs), initial=len(subs) - len(todo), unit="student", dynamic_ncols=True,
                        desc=f"grading {self.assignment}", disable=not options.progress)
        pool = Pool(settings, workers, options.memory_mib, self.run_root)
        try:
            if options.check_solution and (todo or joining is not None):
                self.check_solution(pool)
            pool.run(todo, self.seconds_for, self.on_report, more if joining is not None else None)
        finally:
            pool.shutdown()
            self.bar.close()
        ordered = [self.results[s.student] for s in subs]
        write_reports(self.out, self.assignment, ordered, self.isolation.description)
        return RunSummary(ordered, self.out, self.isolation, len(self.reused), len(todo) + len(joined),
                          time.monotonic() - self.started, ignored)

    def check_solution(self, pool) -> None:
        """Grade the assignment's own solution first, in the same sandbox and kernel (solution_check.py);
        raise BrokenGradingEnvironment unless it earns full marks. A pass is remembered for what it proved."""
        check = SolutionCheck(template_key(self.root, self.assignment), self.isolation, self.options.timeout,
                              self.options.memory_mib, tuple(student_package_folders()))
        if check.passed_before():
            return
        reports: list[AttemptReport] = []
        pool.run([solution_job(self.prepared.template, self.assignment, self.run_root)], self.seconds_for,
                 lambda _job, report: reports.append(report) or [])
        why = refusal(reports[0], self.max_points) if reports else "it was never graded"
        for report in reports:
            _drop(report)
        if why is not None:
            raise refuse(self.assignment, why)
        check.remember()
        self.echo(f"{self.assignment}: its own solution earns full marks in this sandbox")

    def standing_zygotes(self, workers: int) -> tuple:
        """Return the caller's running zygotes for the workers (none: each worker starts its own)."""
        standby = self.options.standby
        if standby is None or not self.options.warm or self.isolation.mode != "bwrap":
            return ()
        try:
            return standby.ready(workers)
        except (WarmStartError, OSError) as exc:
            self.echo(f"note: the standing zygotes could not start ({exc}); each worker starts its own")
            return ()

    def seconds_for(self, job: Job) -> float:
        """Return the wall-clock budget of one attempt (past it, its worker is stopped)."""
        return len(job.notebooks) * (self.options.timeout + KERNEL_START_STOP_S) + ATTEMPT_OVERHEAD_S

    def plan(self, subs: list[Submission], first: int = 0) -> list[Job]:
        """Reuse unchanged results, settle missing and invalid students, and return the jobs for the rest
        (`first`: the index of the first of them in the run)."""
        digest = hash_tree(regular_files(self.root / "source" / self.assignment),
                           self.root / "source" / self.assignment)
        todo = []
        extended = gbook.extensions(self.db_url, self.course, self.assignment)
        for index, sub in enumerate(subs, start=first):
            self.subs[sub.student] = sub
            try:
                files = hash_tree(regular_files(sub.folder), sub.folder)
            except OSError as exc:  # a file that cannot be read: this student's problem only
                files = ""
                sub.status, sub.detail = Status.INVALID, f"a file cannot be read ({_why(exc)})"
            self.prints[sub.student] = fingerprint(digest, files, float(self.options.timeout),
                                                   int(self.options.memory_mib), self.isolation.mode,
                                                   self.options.show_hidden_tests,  # its pages differ
                                                   *([extended[sub.student]] if sub.student in extended
                                                     else []))
            cached = None if self.options.force else _cached(self.out, self.root, self.assignment,
                                                             sub.student, self.prints[sub.student])
            if cached is not None:
                if cached.status == Status.MISSING or not gbook.has_submission(self.db_url, self.course,
                                                                               self.assignment, sub.student):
                    gbook.record(self.db_url, self.course, self.assignment, cached)  # e.g. graded elsewhere
                self.results[sub.student] = cached
                self.reused.add(sub.student)
            elif sub.status is not None:
                self.finish(sub, StudentResult(sub.student, self.assignment, sub.status,
                                               "; ".join([sub.detail, *sub.notes]),
                                               zero_cells(self.max_points)))
            else:
                todo.append(Job(index, sub.student, {k: str(v) for k, v in sub.notebooks.items()},
                                str(sub.folder), sub.timestamp, extension_s=extended.get(sub.student)))
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
            self.finish(sub, StudentResult(sub.student, self.assignment, Status.INVALID,
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
        result = combine(sub.student, self.assignment, history, sub.notes, self.max_points,
                         self.prepared.multi)
        self.finish(sub, result, Path(report.scratch) if report.scratch else None)
        for old in history:
            _drop(old)
        self.bar.update(1)
        self.bar.set_postfix(Counter(r.status for r in self.results.values()), refresh=False)
        return []

    def finish(self, sub: Submission, result: StudentResult, scratch: Path | None = None) -> None:
        """Record a student (a failure makes them invalid), then announce their result."""
        self.settle(sub, result, scratch)
        if self.on_result is not None:
            self.on_result(self.results[sub.student])

    def settle(self, sub: Submission, result: StudentResult, scratch: Path | None = None) -> None:
        """Record a student, install their files and feedback, save the result; a failure makes them invalid.
        """
        try:
            self.record(sub, result, scratch)
        except GradingError:
            raise
        except Exception as exc:  # noqa: BLE001  (one student's failure is theirs: the class goes on)
            traceback.print_exc()
            failed = StudentResult(sub.student, self.assignment, Status.INVALID,
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
            raise RecordFailed(
                f"cannot record {sub.student} in the gradebook ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0]}). "
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


def _matched(folder: Path, expected: dict[str, set[str]], assignment: str,
             others: frozenset[str]) -> Submission:
    """Match one student's files; whatever goes wrong makes that student invalid, not the run fail."""
    try:
        return match_submission(folder.name, folder, expected, assignment, others)
    except Exception as exc:  # noqa: BLE001  (one student's failure is theirs: the class goes on)
        traceback.print_exc()
        return Submission(folder.name, folder, status=Status.INVALID, detail=f"cannot be read ({_why(exc)})")


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
