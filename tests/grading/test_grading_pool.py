"""The worker pool on its own: a fake worker (no nbgrader, no kernel) that dies, hangs or answers."""

import os
import time
from pathlib import Path

import pytest

from autograder.grading import pool as pool_module
from autograder.grading.attempt import AttemptReport, FailureKind, Job, Outcome
from autograder.grading.pool import Pool
from autograder.grading.sandbox import Isolation
from autograder.grading.worker import WorkerSettings


class FakeWorker:
    """Grades by the student's name: 'die' exits the worker, 'hang' never answers, others complete."""

    def __init__(self, settings, task_events=""):
        self.settings = settings

    def start_zygote(self, slot=0, announce=None):
        return None  # no kernels, so no warm start

    def attempt(self, job: Job) -> AttemptReport:
        if job.student == "die":
            os._exit(3)
        if job.student == "hang":
            time.sleep(600)
        if job.student == "bug":
            raise ValueError("a grader bug")
        return AttemptReport(Outcome.COMPLETED, notes=[f"graded {job.student} attempt {job.attempt}"])


def seconds_for(job: Job) -> float:
    """Each job's time limit: 'hang' runs past its short one; the others finish at once and have far more
    than a loaded machine could take to fork a worker and hear from it (no limit they could reach)."""
    return 1.0 if job.student == "hang" else 120.0


@pytest.fixture
def fake_pool(tmp_path, monkeypatch):
    monkeypatch.setattr(pool_module, "Worker", FakeWorker)  # the forked workers inherit it
    settings = WorkerSettings(tmp_path, "tiny", tmp_path, tmp_path, Isolation("none"), timeout=5,
                              memory_mib=4000)
    pool = Pool(settings, 2, 4000, tmp_path)
    yield pool
    pool.shutdown()


def test_every_job_gets_one_report_whatever_its_worker_did(fake_pool):
    jobs = [Job(i, name, {}) for i, name in enumerate(["ada", "die", "hang", "bug", "ben"])]
    reports: dict[str, AttemptReport] = {}
    fake_pool.run(jobs, seconds_for, lambda job, report: reports.setdefault(job.student, report) and [])
    assert sorted(reports) == ["ada", "ben", "bug", "die", "hang"]
    assert reports["ada"].outcome == Outcome.COMPLETED and reports["ada"].notes == ["graded ada attempt 1"]
    assert reports["die"].failure.kind is FailureKind.CRASHED and "exited (code 3)" in reports[
        "die"].failure.message
    assert reports["hang"].failure.kind is FailureKind.TIMEOUT
    assert reports["bug"].failure.kind is FailureKind.GRADER_ERROR and "a grader bug" in reports[
        "bug"].failure.message


def test_follow_up_jobs_run_next_and_no_worker_is_left(fake_pool):
    seen = []

    def on_report(job, report):
        seen.append((job.student, job.attempt))
        return [Job(job.index, job.student, {}, attempt=2)] if job.attempt == 1 else []

    fake_pool.run([Job(0, "ada", {}), Job(1, "ben", {})], seconds_for, on_report)
    assert sorted(seen) == [("ada", 1), ("ada", 2), ("ben", 1), ("ben", 2)]
    pids = [w.pid for w in fake_pool.workers]
    fake_pool.shutdown()
    assert not fake_pool.workers and all(not Path(f"/proc/{pid}").exists() for pid in pids)


def test_jobs_that_join_are_run_while_the_run_lasts_and_then_it_ends(fake_pool):
    asked, reports = [], []
    late = [[Job(2, "cat", {}), Job(3, "die", {})], [Job(4, "dan", {})]]

    def more():
        asked.append(sorted(r for r in reports))
        return late.pop(0) if late else []

    fake_pool.run([Job(0, "ada", {}), Job(1, "ben", {})], seconds_for,
                  lambda job, report: reports.append(job.student) or [], more)
    assert sorted(reports) == ["ada", "ben", "cat", "dan", "die"]  # a joiner that crashed is reported too
    assert not late and asked[0] != sorted(reports)  # asked while the run was going, not only at its end
    assert asked[-1] == sorted(reports)  # and once more when everyone was done: nothing came, so it ended


def test_without_joiners_a_run_is_asked_nothing(fake_pool):
    reports = []
    fake_pool.run([Job(0, "ada", {})], seconds_for, lambda job, report: reports.append(job.student) or [])
    assert reports == ["ada"] and len(fake_pool.workers) == 1


def test_a_worker_closed_twice_never_closes_an_fd_that_has_been_reused_since():
    """Pool.shutdown closes every worker, then ends (and so closes again) those that did not stop in time. In
    a threaded grader (the hub's services) another thread may have been given the report pipe's fd number in
    between, and a second os.close closed its file under it."""
    import os

    from autograder.grading.pool import WorkerProcess
    from autograder.grading.sandbox import ProcessWatch

    read_end, write_end = os.pipe()
    worker = WorkerProcess(os.getpid(), os.fdopen(write_end, "w"), read_end, ProcessWatch(os.getpid()))
    worker.close()
    reused, other = os.pipe()  # the lowest free numbers: the ones just closed
    try:
        assert read_end in (reused, other)
        worker.close()
        assert os.fstat(reused) and os.fstat(other)  # both still open
    finally:
        for fd in (reused, other):
            try:
                os.close(fd)
            except OSError:
                pass
