"""One attempt's scratch course, as the worker builds it: restored cells, the student's other files (bounded),
the timestamp, and the grading kernel in the kernelspec."""

import json

import nbformat

from autograder.grading import worker as worker_module
from autograder.grading.attempt import Job, Skip
from autograder.grading.sandbox import Isolation
from autograder.grading.worker import GUARD_CHANNEL, GUARD_SCRIPT, Settings, Worker
from tests.factories import tiny_assignment


def make_worker(tmp_path) -> Worker:
    template = tmp_path / "template"
    for folder in ("source/tiny", "release/tiny"):
        (template / folder).mkdir(parents=True)
        nbformat.write(tiny_assignment(), template / folder / "tiny.ipynb")
    (template / "gradebook.db").write_bytes(b"")
    settings = Settings(tmp_path, "tiny", template, tmp_path / "run", Isolation("none"), timeout=30, memory_mb=1000)
    return Worker(settings)


def test_the_scratch_course_has_the_restored_notebook_extras_and_timestamp(tmp_path, monkeypatch):
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
    assert "restored deleted test cell 'double-tests'" in notes and any("big.bin not copied" in n for n in notes)
    assert sorted(p.name for p in submitted.iterdir()) == ["data.txt", "timestamp.txt", "tiny.ipynb"]
    graded = nbformat.read(submitted / "tiny.ipynb", as_version=4)
    assert [c.metadata.get("nbgrader", {}).get("grade_id") for c in graded.cells][-1] == "double-tests"
    assert worker.config(job, scratch).GraderExecute.skip == {"tiny": {"1": "not run"}}


def test_the_kernelspec_starts_the_grading_kernel_with_its_channel(tmp_path):
    worker = make_worker(tmp_path)
    job = Job(0, "ada", {})
    scratch = worker.scratch_for(job)
    worker.prepare(job, scratch)
    worker.write_kernelspec(job, scratch)
    argv = json.loads((scratch / "jupyter" / "kernels" / "python3" / "kernel.json").read_text())["argv"]
    assert str(scratch / "rt" / GUARD_SCRIPT) in argv and str(scratch / "rt" / GUARD_CHANNEL) in argv
    assert (scratch / "rt" / GUARD_SCRIPT).is_file() and argv[-2:] == ["-f", "{connection_file}"]
