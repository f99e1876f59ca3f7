"""Grade one student in a scratch course of its own: restore, autograde with nbgrader, feedback, scores.

Runs inside a worker process (see pool.py). Only the kernel runs student code, and it runs in the sandbox;
this module is the trusted side that drives nbgrader and reads the results back out of the scratch gradebook.

A scratch course (one attempt) is laid out so that the sandbox can write only `kernel/`:

    source/ submitted/ autograded/ feedback/ gradebook.db   nbgrader's course: the grader's alone
    rt/          the grader's runtime: connection file, the grading kernel (grading_kernel.py and its package
                 guard_kernel/, read-only to the kernel)
    grader/      HOME and Jupyter folders of the grader's own process while it drives nbgrader
    jupyter/     the kernelspec
    kernel/      the sandbox's: <assignment>/ (its working folder), home/ (with tmp/), rt/ (its sockets),
                 channel/ (the guard's FIFO, made afresh for each kernel); each bound on its own, so that
                 student code can change what is in them but cannot swap the folders themselves for links

With `--sandbox bwrap` nothing the grader writes or reads lies in `kernel/`, so links student code plants
there lead nowhere. With `unshare` or `none` student code can write whatever the grader can anyway.
"""

import json
import os
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.cells import grade_id
from autograder.course import course_config, course_directory, error_line
from autograder.grading.attempt import AttemptReport, Failure, FailureKind, Job, Outcome, progress_events
from autograder.grading.execution import NOT_RUN, GraderExecute, QuickReadyClient, read_progress
from autograder.grading.feedback_pages import FeedbackWriter
from autograder.grading.gradebook import set_extension
from autograder.grading.guard_kernel import program as guard_program
from autograder.grading.guard_kernel.kernel import COURSE_MODULES_ENV
from autograder.grading.redact import UNRENDERED_PAGE, RedactHiddenTests
from autograder.grading.restore import RestoreCells, read_notes
from autograder.grading.results import CellKind, CellScore
from autograder.grading.sandbox import MAX_FILE_MIB, Isolation, address_space_mib, kernel_command
from autograder.grading.submissions import read_notebook_json
from autograder.grading.verdict import SaveVerdicts
from autograder.grading.warm_start import Zygote, course_modules_imported
from autograder.grading.zygote import LIBRARIES, WarmStartError
from autograder.safe_copy import Limits, Refusal, copy_tree
from autograder.safe_html import exporter_config, with_csp

KERNEL_FOLDER = "kernel"
GUARD_SCRIPT = "grading_kernel.py"
GUARD_CHANNEL = "guard.fifo"
RESTORE_NOTES = "restored.jsonl"
MAX_EXTRA_FILE_BYTES = 50 * 2**20
MAX_EXTRA_TOTAL_BYTES = 200 * 2**20
MAX_EXTRA_ENTRIES = 10_000
MAX_EXTRA_DEPTH = 32
KEEP_ENV = ("LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "TZ")  # the caller's variables a kernel keeps


def copy_guard(runtime: Path) -> Path:
    """Copy the grading kernel into a runtime folder: its package whole (no bytecode), and its program beside
    it as GUARD_SCRIPT, which imports the package from there; return the script."""
    shutil.copytree(Path(guard_program.__file__).parent, runtime / guard_program.PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    shutil.copyfile(guard_program.__file__, runtime / GUARD_SCRIPT)
    return runtime / GUARD_SCRIPT


@dataclass(frozen=True)
class WorkerSettings:
    """What every student of one run shares."""

    root: Path  # the course root (its nbgrader_config.py)
    assignment: str
    template: Path  # a course with the assignment generated: gradebook.db, source/, release/
    run_root: Path  # where scratch courses go (short: kernel sockets live there)
    isolation: Isolation
    timeout: float  # seconds per notebook
    memory_mib: int
    threads: int = 1  # CPU threads per kernel (OMP_NUM_THREADS and friends)
    warm: bool = True  # fork kernels from a zygote that has imported torch (zygote.py); False: each anew
    zygotes: tuple[Zygote, ...] = ()  # running zygotes (a Standby's), one per worker slot; else each its own
    libraries: tuple[str, ...] = LIBRARIES  # what a worker's own zygote preloads besides the kernel
    keep_env: tuple[str, ...] = KEEP_ENV
    show_hidden_tests: bool = False  # feedback pages as nbgrader makes them, hidden tests and all


@dataclass(frozen=True)
class KernelFolders:
    """The only folders of a scratch course that student code may write (under `root`)."""

    root: Path
    work: Path  # the kernel's working folder
    home: Path  # HOME; its tmp/ is the sandbox's /tmp
    runtime: Path  # the kernel's sockets
    channel: Path  # the guard's FIFO (the kernel unlinks it once open)

    @classmethod
    def of(cls, scratch: Path, assignment: str) -> "KernelFolders":
        """Return the kernel's folders of one scratch course."""
        root = scratch / KERNEL_FOLDER
        return cls(root, root / assignment, root / "home", root / "rt", root / "channel")

    @property
    def writable(self) -> list[Path]:
        """Return the folders the sandbox binds writable, each a mount point of its own."""
        return [self.work, self.home, self.runtime, self.channel]


def repair_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop outputs and fix the small structural slips editors make, so that nbformat accepts the notebook."""
    for cell in nb.cells:
        cell["metadata"] = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        source = cell.get("source", "")
        cell["source"] = "".join(source) if isinstance(source, list) else str(source)
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    return nb


def _skipped_extra(rel: str) -> bool:
    """Return True for what a submission's folder holds besides its extra files (notebooks, timestamp,
    clutter).
    """
    name = rel.rsplit("/", 1)[-1]
    return (name.endswith(".ipynb") or name == "timestamp.txt" or name.startswith(".")
            or name in ("__MACOSX", "__pycache__"))


def _copy_extras(src: Path, dest: Path, notes: list[str]) -> None:
    """Copy a student's other files (data, modules) into the new folder `dest`: regular files only, bounded.
    """
    limits = Limits(file_bytes=MAX_EXTRA_FILE_BYTES, total_bytes=MAX_EXTRA_TOTAL_BYTES,
                    entries=MAX_EXTRA_ENTRIES, depth=MAX_EXTRA_DEPTH)
    try:
        report = copy_tree(src, dest, limits, skip=_skipped_extra)
    except (Refusal, OSError) as exc:
        notes.append(f"extra files not copied ({exc})")
        dest.mkdir(exist_ok=True)
        return
    notes += [f"{r.path} not copied ({r.reason.removesuffix(', not copied')})" for r in report.refused]
    if report.stopped:
        notes.append(f"other extra files not copied ({report.stopped}; extra files are limited)")


def base_environment(keep_env: tuple[str, ...], threads: int) -> dict[str, str]:
    """Return what every environment of a run has: PATH, locale, the kept variables, the CPU threads."""
    from autograder.course import with_venv_on_path

    env = {key: os.environ[key] for key in keep_env if key in os.environ}
    env.update({"PATH": with_venv_on_path()["PATH"], "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                "OPENBLAS_NUM_THREADS": str(threads)})
    env.setdefault("LANG", "C.UTF-8")
    return env


def zygote_environment(folder: Path, keep_env: tuple[str, ...]) -> dict[str, str]:
    """Return a zygote's environment: a kernel's, its folders in `folder` (each kernel gets its own).

    One thread: OpenBLAS (NumPy's) starts its threads at import, and a zygote must fork with one thread only,
    so its kernels' NumPy runs on one BLAS thread (torch reads OMP_NUM_THREADS in the kernel, when it first
    needs threads).
    """
    return base_environment(keep_env, 1) | {"HOME": str(folder), "TMPDIR": str(folder)}


def cell_kinds(nb: nbformat.NotebookNode | None) -> dict[str, CellKind]:
    """Return grade_id -> what each graded cell of a notebook is."""
    from nbgrader import utils

    kinds = {}
    for cell in nb.cells if nb is not None else []:
        if utils.is_task(cell):
            kinds[cell.metadata.nbgrader.grade_id] = CellKind.TASK
        elif utils.is_grade(cell):
            kinds[cell.metadata.nbgrader.grade_id] = (CellKind.ANSWER if utils.is_solution(cell)
                                                      else CellKind.TEST)
    return kinds


class Worker:
    """Grades students one after another; keeps what every student shares (the instructor's notebooks)."""

    def __init__(self, settings: WorkerSettings, task_events: str = "") -> None:
        self.settings = settings
        self.task_events = task_events  # the worker's cap on processes counts refused forks here
        release = settings.template / "release" / settings.assignment
        self.instructor = {p.name: nbformat.read(p, as_version=4) for p in sorted(release.glob("*.ipynb"))}
        self.feedback: FeedbackWriter | None = None
        self.zygote: Zygote | None = None

    def start_zygote(self, slot: int = 0, announce: Callable[[int], object] = lambda pid: None
                     ) -> Zygote | None:
        """Take this worker slot's running zygote, or start one, where warm start is asked for and works (in
        bubblewrap's sandbox). `announce(pid)` is called as soon as the zygote exists, before it has imported
        anything (the grader then leaves its memory out of the students')."""
        s = self.settings
        if not s.warm or s.isolation.mode != "bwrap":
            return None
        if slot < len(s.zygotes) and s.zygotes[slot].alive():
            self.zygote = s.zygotes[slot]
            announce(self.zygote.pid)
            return self.zygote
        folder = s.run_root / f"zygote-{os.getpid()}"
        try:
            zygote = Zygote.spawn(str(folder), zygote_environment(folder, s.keep_env), s.libraries)
            announce(zygote.pid)
            zygote.wait_ready()
            self.zygote = zygote
        except (WarmStartError, OSError) as exc:
            print(f"warm start is off for this worker: {exc}", flush=True)
        return self.zygote

    def scratch_for(self, job: Job) -> Path:
        """Return the scratch course folder of one grading attempt."""
        return self.settings.run_root / job.scratch_name

    def prepare(self, job: Job, scratch: Path) -> tuple[list[str], list[str]]:
        """Build the scratch course; return (notes about the submission, notebooks that could not be read)."""
        s = self.settings
        if scratch.exists():
            shutil.rmtree(scratch)
        (scratch / "source").mkdir(parents=True)
        shutil.copytree(s.template / "source" / s.assignment, scratch / "source" / s.assignment)
        shutil.copyfile(s.template / "gradebook.db", scratch / "gradebook.db")
        if job.extension_s:  # before nbgrader reads the due date, so that its late penalty counts it
            course = course_directory(s.root, scratch)
            set_extension(course.db_url, course.course_id, s.assignment, job.student, job.extension_s)
        submitted = scratch / "submitted" / job.student / s.assignment
        submitted.parent.mkdir(parents=True)
        notes: list[str] = []
        unreadable: list[str] = []
        if job.folder:
            _copy_extras(Path(job.folder), submitted, notes)
        else:
            submitted.mkdir()
        if job.timestamp:
            (submitted / "timestamp.txt").write_text(job.timestamp, encoding="utf-8")
        for name, path in sorted(job.notebooks.items()):
            raw, problem = read_notebook_json(Path(path))  # the caps on size, cells and nesting, again
            if raw is None:
                unreadable.append(f"{Path(path).name}: {problem}")
                continue
            try:
                nb = nbformat.reader.reads(json.dumps(raw))
                nb = repair_notebook(nbformat.convert(nb, 4))
                nbformat.validate(nb)
            except Exception as exc:  # noqa: BLE001  (any unreadable notebook is a finding, not a crash)
                unreadable.append(f"{Path(path).name}: not a valid notebook ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0][:150] if str(exc) else ''})")
                continue
            (submitted / name).write_text(nbformat.v4.writes(nb), encoding="utf-8")  # validated just above
        kernel = KernelFolders.of(scratch, s.assignment)
        for folder in (scratch / "rt", scratch / "grader" / "tmp",
                       scratch / "jupyter" / "kernels" / "python3",
                       kernel.home / "tmp", kernel.runtime, kernel.channel):
            folder.mkdir(parents=True)
        return notes, unreadable

    def environment(self, scratch: Path, home: Path, runtime: Path) -> dict[str, str]:
        """Return an environment with nothing of the grader's own but PATH and locale (HOME and Jupyter's
        folders in `home` and `runtime`): the kernel's, or the grader's own while it drives nbgrader."""
        return base_environment(self.settings.keep_env, self.settings.threads) | {
            "HOME": str(home), "TMPDIR": str(home / "tmp"),
            "IPYTHONDIR": str(home / ".ipython"), "MPLCONFIGDIR": str(home / ".matplotlib"),
            "JUPYTER_PATH": str(scratch / "jupyter"), "JUPYTER_RUNTIME_DIR": str(runtime),
            "JUPYTER_CONFIG_DIR": str(home / ".jupyter"), "JUPYTER_DATA_DIR": str(home / ".jupyter-data")}

    def grader_environment(self, scratch: Path) -> dict[str, str]:
        """Return the grader's own environment while it drives nbgrader and renders feedback: set once per
        attempt, its HOME and Jupyter folders in grader/ and rt/ (out of the sandbox's reach), nothing from
        the kernel or the caller but PATH and locale."""
        return self.environment(scratch, scratch / "grader", scratch / "rt")

    def config(self, job: Job, scratch: Path):
        """Return the nbgrader configuration of one attempt: the course's, pointed at the scratch course."""
        from nbgrader.converters import Autograde
        from nbgrader.preprocessors import Execute, OverwriteCells, SaveAutoGrades

        s = self.settings
        config = course_config(s.root, scratch)
        config.merge(exporter_config())  # nbgrader's own generate_feedback (the fallback) renders inert too
        defaults = Autograde.class_traits()
        config.Autograde.sanitize_preprocessors = [
            q for p in defaults["sanitize_preprocessors"].default() for q in
            ((RestoreCells, p) if p is OverwriteCells else (p,))]
        config.OverwriteCells.add_missing_cells = True
        config.RestoreCells.release_folder = str(s.template / "release" / s.assignment)
        config.RestoreCells.notes_file = str(scratch / RESTORE_NOTES)
        # our run, and our verdict on test cells
        ours = {Execute: GraderExecute, SaveAutoGrades: SaveVerdicts}
        config.Autograde.autograde_preprocessors = [
            ours.get(p, p) for p in defaults["autograde_preprocessors"].default()]
        config.GraderExecute.budget = float(s.timeout)
        config.GraderExecute.progress_file = str(scratch / "progress.json")
        skip: dict[str, dict[str, str]] = {}
        for cell in job.skip:
            skip.setdefault(cell.notebook, {})[str(cell.cell)] = cell.why
        config.GraderExecute.skip = skip
        config.GraderExecute.shutdown_kernel = "immediate"
        config.GraderExecute.guard_channel = str(KernelFolders.of(scratch, s.assignment).channel
                                                 / GUARD_CHANNEL)
        config.GraderExecute.task_events = self.task_events
        config.GraderExecute.work_folder = str(KernelFolders.of(scratch, s.assignment).work)
        config.GraderExecute.kernel_home = str(KernelFolders.of(scratch, s.assignment).home)
        config.GraderExecute.source_folder = str(scratch / "source" / s.assignment)  # the instructor's
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(KernelFolders.of(scratch, s.assignment).runtime / "k")
        config.KernelManager.connection_file = str(scratch / "rt" / "kernel.json")
        config.AsyncKernelManager.client_class = f"{QuickReadyClient.__module__}.{QuickReadyClient.__name__}"
        return config

    def write_kernelspec(self, job: Job, scratch: Path) -> None:
        """Make `python3` mean: the grading kernel, with the limits, inside the sandbox, in its own folders.
        """
        s = self.settings
        kernel = KernelFolders.of(scratch, s.assignment)
        program = copy_guard(scratch / "rt")
        guarded = [str(program), "--channel", str(kernel.channel / GUARD_CHANNEL)]
        argv = kernel_command(s.isolation, kernel.writable, kernel.work, s.memory_mib, guarded,
                              tmp=kernel.home / "tmp", readable=(scratch / "rt",))
        if self.zygote is not None and self.zygote.alive():  # warm, with the cold command to fall back on
            spec = scratch / "jupyter" / "kernels" / "python3" / "warm.json"
            holder = s.isolation.prefix(kernel.writable, kernel.work, kernel.home / "tmp", (scratch / "rt",))
            procs = str(Path(self.task_events).with_name("cgroup.procs")) if self.task_events else ""
            self.zygote.write_spec(str(spec), guarded, holder, address_space_mib(s.memory_mib), MAX_FILE_MIB,
                                   argv[:-2], procs)
            argv = self.zygote.launcher_argv(str(spec))
        instructors = sorted(str(p) for p in (s.template / "source" / s.assignment).glob("*.ipynb"))
        spec = {"argv": argv, "display_name": "Python 3 (graded)", "language": "python",
                "interrupt_mode": "message", "metadata": {"debugger": False},
                "env": self.environment(scratch, kernel.home, kernel.runtime) | {
                    COURSE_MODULES_ENV: ",".join(course_modules_imported(instructors))}}
        (scratch / "jupyter" / "kernels" / "python3" / "kernel.json").write_text(json.dumps(spec),
                                                                                 encoding="utf-8")

    def attempt(self, job: Job) -> AttemptReport:
        """Grade one attempt at one student; return its report (session.py combines a student's reports)."""
        from nbgrader.apps import NbGraderAPI

        started = time.monotonic()
        s = self.settings
        scratch = self.scratch_for(job)
        notes, unreadable = self.prepare(job, scratch)
        report = AttemptReport(Outcome.COMPLETED, notes=notes + unreadable, scratch=str(scratch))
        if not any((scratch / "submitted" / job.student / s.assignment).glob("*.ipynb")):
            report.outcome, report.notes = Outcome.UNREADABLE, notes
            report.failure = Failure(FailureKind.INVALID, "; ".join(unreadable))
            return report
        self.write_kernelspec(job, scratch)
        saved_env, env = dict(os.environ), self.grader_environment(scratch)
        os.environ.clear()
        os.environ.update(env)
        try:
            api = NbGraderAPI(config=self.config(job, scratch))
            result = api.autograde(s.assignment, job.student, force=True, create=True)
            report.notes = notes + read_notes(scratch / RESTORE_NOTES) + unreadable
            progress = read_progress(scratch / "progress.json")
            report.events = progress_events(progress)
            if result.get("success"):
                self.write_feedback(api, job, scratch, report)
                self.collect(job, scratch, report)
            else:
                report.outcome = Outcome.FAILED
                report.failure = self.failure(progress, result)
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
        report.seconds = round(time.monotonic() - started, 2)
        return report

    def write_feedback(self, api, job: Job, scratch: Path, report: AttemptReport) -> None:
        """Write the student's feedback pages into scratch/feedback/<student>/<assignment>/: the hidden tests
        kept hidden (each one's score and the instructor's message only), unless the run shows them."""
        s = self.settings
        dest = scratch / "feedback" / job.student / s.assignment
        try:
            if self.feedback is None:
                self.feedback = FeedbackWriter(course_config(s.root))
                if not s.show_hidden_tests:  # after nbgrader's GetGrades: the scores stay
                    self.feedback.exporter.register_preprocessor(RedactHiddenTests, enabled=True)
            course = course_directory(s.root, scratch)
            self.feedback.write(scratch / "autograded" / job.student / s.assignment, dest, job.student,
                                s.assignment, course.db_url, course.course_id)
        except Exception:  # noqa: BLE001  (fall back to nbgrader's own, slower, generate_feedback)
            traceback.print_exc()
            if not s.show_hidden_tests:  # nbgrader's own pages print the hidden tests: a page saying so
                dest.mkdir(parents=True, exist_ok=True)
                for notebook in sorted(p.stem for p in (scratch / "autograded" / job.student /
                                                        s.assignment).glob("*.ipynb")):
                    (dest / f"{notebook}.html").write_text(UNRENDERED_PAGE.render(notebook=notebook),
                                                          encoding="utf-8")
                report.notes.append("feedback could not be generated")
                return
            try:
                made = api.generate_feedback(s.assignment, job.student, force=True).get("success")
            except Exception:  # noqa: BLE001  (no feedback is this student's problem, not the class's)
                traceback.print_exc()
                made = False
            if not made:
                report.notes.append("feedback could not be generated")
            for page in dest.glob("*.html") if made else []:
                page.write_text(with_csp(page.read_text(encoding="utf-8")), encoding="utf-8")

    def failure(self, progress: dict, result: dict) -> Failure:
        """Say why nbgrader could not finish: a dead or hung kernel (with the cell), or a broken notebook."""
        for event in reversed(progress_events(progress)):
            if event.kind in (FailureKind.KERNEL_DIED, FailureKind.UNRESPONSIVE):
                return Failure(FailureKind(event.kind), event.message, event.notebook, event.cell,
                               event.grade_id)
        text = (result.get("error") or "") + "\n" + (result.get("log") or "")
        message = error_line(text, "nbgrader could not grade the notebook")
        if progress.get("state") == "running" and progress.get("cell") is not None:
            return Failure(FailureKind.KERNEL_DIED, message[:300], progress.get("notebook"), progress["cell"],
                           progress.get("grade_id"))
        return Failure(FailureKind.INVALID, f"nbgrader could not grade it: {message[:300]}")

    def collect(self, job: Job, scratch: Path, report: AttemptReport) -> None:
        """Read the scores, comments and first error lines of a finished attempt into the report."""
        from nbgrader.api import Gradebook

        s = self.settings
        errors = self._errors(scratch / "autograded" / job.student / s.assignment)
        course = course_directory(s.root, scratch)
        with Gradebook(course.db_url, course.course_id) as gb:
            submission = gb.find_submission(s.assignment, job.student)
            report.timestamp = submission.timestamp.isoformat() if submission.timestamp else None
            for notebook in submission.notebooks:
                nb_name = notebook.name + ".ipynb"
                report.late_penalties[nb_name] = float(notebook.late_submission_penalty or 0)
                report.comments[nb_name] = {c.name: c.auto_comment for c in notebook.comments}
                kinds = cell_kinds(self.instructor.get(nb_name))
                report.cells += [CellScore(nb_name, grade.name, float(grade.auto_score or 0),
                                           float(grade.max_score or 0), bool(grade.needs_manual_grade),
                                           errors.get((nb_name, grade.name), ""),
                                           kinds.get(grade.name, CellKind.TEST))
                                 for grade in notebook.grades]

    @staticmethod
    def _errors(folder: Path) -> dict[tuple[str, str], str]:
        """Return the first line of each failing graded cell's error, by (notebook, grade_id)."""
        found = {}
        for path in sorted(folder.glob("*.ipynb")):
            nb, _ = read_notebook_json(path)
            for cell in (nb or {}).get("cells", []):
                gid = grade_id(cell)
                errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
                if gid and errors:
                    first = errors[0]
                    text = (first.get("evalue") or "").strip().splitlines()
                    if first.get("ename") == NOT_RUN:
                        found[(path.name, gid)] = text[0] if text else "not run"
                    else:
                        found[(path.name, gid)] = (f"{first.get('ename')}: {text[0]}" if text
                                                   else str(first.get("ename")))[:160]
        return found
