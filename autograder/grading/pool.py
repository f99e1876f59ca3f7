"""Run grading workers in parallel, watch them, and survive whatever a student's code does to them.

Each worker is forked from the grader once nbgrader is imported (so starting one costs nothing), moves into
its own session and process group, and grades one student at a time in a scratch course. The grader's
single thread hands out jobs, reads reports, and a few times a second checks every busy worker: past its
wall-clock deadline or over its memory cap, the worker's whole process tree is killed (SIGTERM, then
SIGKILL after a short grace) and a fresh worker takes its place. A worker that dies on its own (a student's
code killed it) is noticed the same way. The grader itself is never a target: student kernels run in other
sessions (and, with a sandbox, in other PID namespaces).
"""

import gc
import json
import os
import select
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from autograder.grading.attempt import AttemptReport, Failure, FailureKind, Job, Outcome, progress_events
from autograder.grading.execution import read_progress
from autograder.grading.sandbox import (
    MAX_DISK_MIB,
    MAX_FILES,
    MAX_TASKS,
    ProcessWatch,
    TaskCap,
    become_subreaper,
    die_with_parent,
    disk_usage,
    process_children,
    wait_for,
)
from autograder.grading.worker import Worker, WorkerSettings

TICK = 0.25
ZYGOTE_KEY = "zygote"  # a worker's first line when it has one: {"zygote": pid}
WATCH_EVERY = 0.5


def _child_main(settings: WorkerSettings, job_fd: int, report_fd: int, log_path: Path,
                cap: TaskCap | None, slot: int) -> None:
    """Body of a worker process: read jobs, grade, write reports, until the job pipe closes."""
    # What the grader's heap held at the fork stays as it is: a file object of the grader's, collected here,
    # would close a descriptor number that by then is one of the worker's own (a kernel's socket, a pipe).
    gc.freeze()
    os.setsid()
    die_with_parent()
    become_subreaper()
    if cap is not None:
        cap.join()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    keep = sorted({0, 1, 2, job_fd, report_fd})
    for low, high in zip(keep, [*keep[1:], 65536], strict=True):
        os.closerange(low + 1, high)  # other workers' pipes and the grader's files stay the grader's
    # Python's own streams may have written to a file just closed (a test runner's capture): point them
    # at the log.
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)  # noqa: SIM115
    fresh_event_loop()
    worker = Worker(settings, cap.events_file if cap is not None else "")
    jobs = os.fdopen(job_fd, "r", encoding="utf-8")
    reports = os.fdopen(report_fd, "w", encoding="utf-8")

    def announce(pid: int) -> None:  # the grader leaves the zygote's own memory out of each student's
        reports.write(json.dumps({ZYGOTE_KEY: pid}) + "\n")
        reports.flush()

    zygote = worker.start_zygote(slot, announce)
    for line in jobs:
        job = Job.from_json(line)
        try:
            report = worker.attempt(job)
        except Exception as exc:  # noqa: BLE001  (a bug here must not lose the student: report it)
            traceback.print_exc()
            text = str(exc).splitlines()[0] if str(exc) else ""
            report = AttemptReport(Outcome.FAILED, Failure(
                FailureKind.GRADER_ERROR, f"the grader failed on it ({type(exc).__name__}: {text})"[:300]))
        _kill_leftovers(zygote.pid if zygote is not None else None)
        reports.write(report.to_json() + "\n")
        reports.flush()


def fresh_event_loop() -> None:
    """Give this worker an event loop of its own: the one the grader's process made (jupyter_core keeps one
    per context, which a fork inherits) has its selector and wake-up pipe among the descriptors closed."""
    import asyncio

    from jupyter_core import utils as jupyter_utils

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    jupyter_utils._loop.set(loop)  # jupyter_core has no public way to replace the loop it keeps


def _kill_leftovers(zygote: int | None) -> None:
    """Kill what a student's code left running (this worker adopted it as a subreaper), and reap it; the
    zygote stays."""
    import psutil

    leftovers = [p for p in psutil.Process().children(recursive=True) if p.pid != zygote]
    for proc in leftovers:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(leftovers, timeout=2)


@dataclass
class WorkerProcess:
    """The grader's handle on one worker process."""

    pid: int
    jobs: object  # text file: the write end of the job pipe
    reports: int  # raw fd: the read end of the report pipe
    watch: ProcessWatch
    buffer: bytes = b""
    job: Job | None = None
    deadline: float = 0.0
    baseline_mib: float | None = None
    peak_mib: float = 0.0
    cap: TaskCap | None = None
    slot: int = 0  # which of the pool's places it fills (a Standby's zygote serves one slot)
    zygote: int | None = None  # the worker's zygote: its own memory is not a student's
    extra: dict = field(default_factory=dict)

    @classmethod
    def start(cls, settings: WorkerSettings, log_path: Path, cap: TaskCap | None = None, slot: int = 0
              ) -> "WorkerProcess":
        """Fork a worker process (inside `cap`, when there is one) for a slot of the pool."""
        job_r, job_w = os.pipe()
        report_r, report_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover  (runs in the child; covered by the end-to-end tests)
            try:
                os.close(job_w)
                os.close(report_r)
                _child_main(settings, job_r, report_w, log_path, cap, slot)
            finally:
                os._exit(0)
        os.close(job_r)
        os.close(report_w)
        os.set_blocking(report_r, False)
        return cls(pid, os.fdopen(job_w, "w", encoding="utf-8"), report_r, ProcessWatch(pid), cap=cap,
                   slot=slot)

    def send(self, job: Job, seconds: float) -> None:
        """Hand the worker a job with a wall-clock deadline."""
        self.job = job
        self.deadline = time.monotonic() + seconds
        self.peak_mib = 0.0
        self.jobs.write(job.to_json() + "\n")
        self.jobs.flush()

    def read(self) -> AttemptReport | None:
        """Return the worker's report once a whole line has arrived, else None."""
        try:
            chunk = os.read(self.reports, 1 << 20)
        except BlockingIOError:
            return None
        except OSError:
            chunk = b""
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if line.startswith(b'{"%s"' % ZYGOTE_KEY.encode()):
                self.zygote = int(json.loads(line)[ZYGOTE_KEY])
                if self.zygote not in self.watch.members(process_children()):  # a Standby's: watch under it
                    self.watch.roots = (self.zygote,)
                continue
            return AttemptReport.from_json(line.decode())
        return None

    def close(self) -> None:
        """Close the grader's ends of the pipes, once: a second call closes nothing (by then the report pipe's
        fd number may be another thread's file)."""
        reports, self.reports = self.reports, -1
        for closer in (self.jobs.close, lambda: os.close(reports) if reports >= 0 else None):
            try:
                closer()
            except OSError:
                pass

    def end(self, children_of: dict[int, list[int]] | None = None) -> None:
        """Kill the worker and everything it started, reap it, close the pipes, remove its cap."""
        self.watch.kill(children_of)
        wait_for(self.pid, 5)
        self.close()
        if self.cap is not None:
            self.cap.remove()


class Pool:
    """A fixed number of worker processes grading jobs; `run` calls back with one report per attempt."""

    def __init__(self, settings: WorkerSettings, size: int, memory_mib: int, log_dir: Path) -> None:
        self.settings = settings
        self.size = max(1, size)
        self.memory_mib = memory_mib
        self.log_dir = log_dir
        self.workers: list[WorkerProcess] = []
        self.started = 0

    def _spawn(self) -> WorkerProcess:
        self.started += 1
        cap = TaskCap.create(f"devicelab-grade-{os.getpid()}-{self.started}", MAX_TASKS)
        slot = min(set(range(self.size)) - {w.slot for w in self.workers})
        worker = WorkerProcess.start(self.settings, self.log_dir / f"worker-{self.started}.log", cap, slot)
        self.workers.append(worker)
        return worker

    def run(self, jobs: Iterable[Job], seconds_for: Callable[[Job], float],
            on_report: Callable[[Job, AttemptReport], list[Job]],
            more: Callable[[], list[Job]] | None = None) -> None:
        """Grade every job; `on_report(job, report)` may return follow-up jobs (retries), run next. `more()`,
        asked whenever nothing is queued and a worker could start, returns jobs that joined the run (none:
        the run ends once its workers are done)."""
        queue = deque(jobs)
        last_watch = 0.0
        while True:
            if more is not None and not queue and (any(w.job is None for w in self.workers)
                                                   or len(self.workers) < self.size):
                queue.extend(more())
            if not queue and not any(w.job for w in self.workers):
                break
            while queue and (any(w.job is None for w in self.workers) or len(self.workers) < self.size):
                idle = next((w for w in self.workers if w.job is None), None) or self._spawn()
                job = queue.popleft()
                try:
                    idle.send(job, seconds_for(job))
                except OSError:  # the idle worker is gone: replace it and hand the job on
                    idle.job = None
                    idle.end()
                    self.workers.remove(idle)
                    queue.appendleft(job)
            busy = [w for w in self.workers if w.job is not None]
            ready, _, _ = select.select([w.reports for w in busy], [], [], TICK)
            finished: list[tuple[WorkerProcess, AttemptReport]] = []
            for worker in busy:
                if worker.reports in ready:
                    report = worker.read()
                    if report is not None:
                        finished.append((worker, report))
            now = time.monotonic()
            if now - last_watch >= WATCH_EVERY:
                last_watch = now
                finished += self._watch([w for w in busy if all(w is not f for f, _ in finished)])
            for worker, report in finished:
                job, worker.job = worker.job, None
                report.peak_mib = report.peak_mib or round(worker.peak_mib)
                queue.extendleft(reversed(on_report(job, report) or []))

    def _watch(self, busy: list[WorkerProcess]) -> list[tuple[WorkerProcess, AttemptReport]]:
        """Check the busy workers' deadlines, memory and lives; return reports for those that had to go."""
        if not busy:
            return []
        children_of = process_children()
        done = []
        for worker in busy:
            status = _exited(worker.pid)
            if status is not None:
                report = self._lost(worker, FailureKind.CRASHED, _death(status))
            elif time.monotonic() > worker.deadline:
                report = self._lost(worker, FailureKind.TIMEOUT,
                                    "still running when the time limit ran out; stopped", children_of)
            else:
                why = self._over_a_cap(worker, children_of)
                if why is None:
                    continue
                report = self._lost(worker, *why, children_of)
            done.append((worker, report))
        return done

    def _over_a_cap(self, worker: WorkerProcess, children_of: dict[int, list[int]]
                    ) -> tuple[FailureKind, str] | None:
        """Return (kind, message) when a busy worker's job is over its memory, process or disk cap."""
        used = self._used_mib(worker, children_of)
        worker.peak_mib = max(worker.peak_mib, used)
        if used > self.memory_mib:
            return FailureKind.MEMORY, (f"used more than the {self.memory_mib} MiB memory cap ({used:.0f} "
                                        "MiB); stopped")
        if worker.cap is None and (count := len(worker.watch.members(children_of))) > MAX_TASKS:
            return FailureKind.PROCESSES, f"started more than {MAX_TASKS} processes ({count}); stopped"
        if worker.job is None:
            return None
        mib, files = disk_usage(self.settings.run_root / worker.job.scratch_name)
        if files > MAX_FILES:
            return FailureKind.DISK, f"wrote more than {MAX_FILES:,} files; stopped"
        if mib > MAX_DISK_MIB:
            return FailureKind.DISK, f"wrote more than {MAX_DISK_MIB} MiB to disk ({mib:.0f} MiB); stopped"
        return None

    def _used_mib(self, worker: WorkerProcess, children_of: dict[int, list[int]]) -> float:
        """Return the memory this job uses: its processes, plus what the worker itself grew by."""
        import psutil

        try:
            own = psutil.Process(worker.pid).memory_info().rss / 2**20
        except psutil.Error:
            own = 0.0
        if worker.baseline_mib is None:
            worker.baseline_mib = own
        # the zygote and the two processes under it that only wait for a kernel share the zygote's pages; the
        # kernels (and everything they start) count
        zygote = worker.zygote
        waiting = [c for z in ([zygote] if zygote else []) for c in children_of.get(z, ())]
        waiting += [g for c in waiting for g in children_of.get(c, ())]
        uncounted = frozenset([zygote, *waiting]) if zygote else frozenset()
        total = worker.watch.resident_mib(children_of, uncounted)
        return total - own + max(0.0, own - worker.baseline_mib)

    def _lost(self, worker: WorkerProcess, kind: FailureKind, message: str,
              children_of: dict[int, list[int]] | None = None) -> AttemptReport:
        """Kill a worker and its processes; return the report of the attempt it was running."""
        worker.end(children_of)
        self.workers.remove(worker)
        progress = read_progress(self.settings.run_root / worker.job.scratch_name / "progress.json") \
            if worker.job is not None else {}
        where = progress.get("cell") if progress.get("state") == "running" else None
        failure = Failure(kind, message, progress.get("notebook"), where,
                          progress.get("grade_id") if where is not None else None)
        return AttemptReport(Outcome.FAILED, failure, progress_events(progress))

    def shutdown(self) -> None:
        """Stop every worker: politely when idle, by force when busy."""
        for worker in self.workers:
            worker.close()
        deadline = time.monotonic() + 5
        for worker in list(self.workers):
            if worker.job is not None or wait_for(worker.pid, max(0.0, deadline - time.monotonic())) is None:
                worker.end()
            elif worker.cap is not None:
                worker.cap.remove()
        self.workers.clear()


def _exited(pid: int) -> int | None:
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return 0
    return status if done else None


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return (f"the grading process was killed ({name}) while this notebook ran (by the notebook's code, "
                "or by the system for lack of memory)")
    return f"the grading process exited (code {os.waitstatus_to_exitcode(status)}) while this notebook ran"
