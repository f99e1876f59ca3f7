"""One attempt's scratch course, as the worker builds it: the student's notebook and other files (bounded),
the timestamp, nbgrader's pipeline with RestoreCells and add_missing_cells, and the grading kernel in the
kernelspec.
"""

import json

import nbformat
import zmq

from autograder.grading import worker as worker_module
from autograder.grading.attempt import Job, Skip
from autograder.grading.sandbox import Isolation
from autograder.grading.worker import GUARD_CHANNEL, GUARD_SCRIPT, Worker, WorkerSettings
from tests.factories import tiny_assignment


def make_worker(tmp_path, show_hidden_tests: bool = False) -> Worker:
    template = tmp_path / "template"
    for folder in ("source/tiny", "release/tiny"):
        (template / folder).mkdir(parents=True)
        nbformat.write(tiny_assignment(), template / folder / "tiny.ipynb")
    (template / "gradebook.db").write_bytes(b"")
    settings = WorkerSettings(tmp_path, "tiny", template, tmp_path / "run", Isolation("none"), timeout=30,
                              memory_mib=1000, show_hidden_tests=show_hidden_tests)
    return Worker(settings)


def test_the_scratch_course_has_the_notebook_extras_and_timestamp(tmp_path, monkeypatch):
    monkeypatch.setattr(worker_module, "MAX_EXTRA_FILE_BYTES", 10)
    student = tmp_path / "ada"
    student.mkdir()
    nb = tiny_assignment("return x + x")
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "double-tests"]
    nbformat.write(nb, student / "tiny.ipynb")
    (student / "data.txt").write_text("small")
    (student / "big.bin").write_bytes(b"x" * 100)
    (student / ".secret").write_text("hidden files stay behind")
    worker = make_worker(tmp_path)
    job = Job(4, "ada", {"tiny.ipynb": str(student / "tiny.ipynb")}, str(student), "2026-11-01 10:00:00 UTC",
              attempt=2, skip=(Skip("tiny", 1, "not run"),))
    scratch = worker.scratch_for(job)
    notes, unreadable = worker.prepare(job, scratch)
    submitted = scratch / "submitted" / "ada" / "tiny"
    assert scratch.name == "4-2" and unreadable == []
    assert any("big.bin not copied" in n for n in notes)
    assert sorted(p.name for p in submitted.iterdir()) == ["data.txt", "timestamp.txt", "tiny.ipynb"]
    graded = nbformat.read(submitted / "tiny.ipynb", as_version=4)
    assert [c.source for c in graded.cells] == [c.source for c in nb.cells]  # restored by nbgrader's pipeline
    config = worker.config(job, scratch)
    assert config.GraderExecute.skip == {"tiny": {"1": "not run"}}


def test_restorecells_runs_just_before_nbgraders_overwritecells_with_add_missing_cells_on(tmp_path):
    from nbgrader.preprocessors import OverwriteCells

    from autograder.grading.restore import RestoreCells

    worker = make_worker(tmp_path)
    job = Job(0, "ada", {})
    config = worker.config(job, worker.scratch_for(job))
    steps = list(config.Autograde.sanitize_preprocessors)
    assert steps[steps.index(OverwriteCells) - 1] is RestoreCells and steps.count(RestoreCells) == 1
    assert config.OverwriteCells.add_missing_cells is True
    assert config.RestoreCells.release_folder == str(tmp_path / "template" / "release" / "tiny")


def test_kernels_are_started_and_stopped_by_the_quick_manager_and_client(tmp_path):
    from traitlets.utils.importstring import import_item

    from autograder.grading.execution import GraderExecute, QuickReadyClient, QuickStopKernelManager

    worker = make_worker(tmp_path)
    job = Job(0, "ada", {})
    config = worker.config(job, worker.scratch_for(job))
    executor = GraderExecute(config=config)
    assert executor.kernel_manager_class is QuickStopKernelManager
    assert import_item(executor.kernel_manager_class(config=config).client_class) is QuickReadyClient
    client = QuickReadyClient()
    socket = client.context.socket(zmq.DEALER)
    assert socket.getsockopt(zmq.RECONNECT_IVL) == QuickReadyClient.RECONNECT_MS < 100  # ZeroMQ's: 100
    socket.close(linger=0)


def test_the_kernelspec_starts_the_grading_kernel_with_its_channel(tmp_path):
    worker = make_worker(tmp_path)
    job = Job(0, "ada", {})
    scratch = worker.scratch_for(job)
    worker.prepare(job, scratch)
    worker.write_kernelspec(job, scratch)
    argv = json.loads((scratch / "jupyter" / "kernels" / "python3" / "kernel.json").read_text())["argv"]
    assert str(scratch / "rt" / GUARD_SCRIPT) in argv and str(
        scratch / "kernel" / "channel" / GUARD_CHANNEL) in argv
    assert (scratch / "rt" / GUARD_SCRIPT).is_file() and argv[-2:] == ["-f", "{connection_file}"]


def test_nbgraders_fallback_feedback_is_rendered_inert_and_gets_the_script_forbidding_csp(tmp_path):
    from autograder.grading.attempt import AttemptReport, Outcome
    from autograder.safe_html import STATIC_PAGE_CSP, InertStudentContent

    worker = make_worker(tmp_path, show_hidden_tests=True)  # the fallback of a run that shows them
    job = Job(0, "ada", {})
    scratch = worker.scratch_for(job)
    config = worker.config(job, scratch)
    # nbgrader's generate_feedback builds its exporter from it
    assert config.HTMLExporter.sanitize_html is True
    assert InertStudentContent.__module__ + ".InertStudentContent" in config.HTMLExporter.preprocessors

    class Broken:
        def write(self, *args):
            raise RuntimeError("the fast writer failed")

    class FallbackAPI:
        def generate_feedback(self, assignment, student, force):
            dest = scratch / "feedback" / student / assignment
            dest.mkdir(parents=True)
            (dest / "tiny.html").write_text("<html><head><title>t</title></head><body>page</body></html>")
            return {"success": True}

    worker.feedback = Broken()
    report = AttemptReport(Outcome.COMPLETED)
    worker.write_feedback(FallbackAPI(), job, scratch, report)
    page = (scratch / "feedback" / "ada" / "tiny" / "tiny.html").read_text()
    assert STATIC_PAGE_CSP in page and page.index("Content-Security-Policy") < page.index("<title>")
    assert report.notes == []


def test_where_the_pages_keep_hidden_tests_hidden_a_failed_page_never_falls_back_to_nbgraders(tmp_path):
    """nbgrader's own generate_feedback prints every hidden test: a run that keeps them hidden writes a page
    saying the feedback could not be made instead."""
    from autograder.grading.attempt import AttemptReport, Outcome

    worker = make_worker(tmp_path)
    job = Job(0, "ada", {})
    scratch = worker.scratch_for(job)
    (scratch / "autograded" / "ada" / "tiny").mkdir(parents=True)
    nbformat.write(tiny_assignment(), scratch / "autograded" / "ada" / "tiny" / "tiny.ipynb")

    class Broken:
        def write(self, *args):
            raise RuntimeError("the fast writer failed")

    class FullPagesAPI:
        def generate_feedback(self, assignment, student, force):
            raise AssertionError("nbgrader's full page was asked for")

    worker.feedback = Broken()
    report = AttemptReport(Outcome.COMPLETED)
    worker.write_feedback(FullPagesAPI(), job, scratch, report)
    page = (scratch / "feedback" / "ada" / "tiny" / "tiny.html").read_text()
    assert "could not be made" in page and "double(-3)" not in page
    assert report.notes == ["feedback could not be generated"]
