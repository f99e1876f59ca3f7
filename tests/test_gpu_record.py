"""`make gpu-record` (benchmarks/gpu_smoke.py record): real GPU outputs under GPU cells, or an honest note.

The GPU run is faked here (a runner that returns outputs), so these tests check on CPU what the recorder
writes, that it writes it once, and that without a GPU it changes nothing.
"""

import importlib.util
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder import COURSE_ROOT

SPEC = importlib.util.spec_from_file_location("gpu_smoke", COURSE_ROOT / "benchmarks" / "gpu_smoke.py")
gpu_smoke = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gpu_smoke)

LESSONS = sorted((COURSE_ROOT / "notebooks").glob("*.ipynb"))
MACHINE = gpu_smoke.Machine(device="NVIDIA Fake 80GB", torch="2.14.1+cu128", date="2026-11-25")
RECORDED = re.compile(r"^\*\*Output recorded on a GPU\*\* \((?P<device>[^,]+), torch (?P<torch>\S+), "
                      r"(?P<date>\d{4}-\d{2}-\d{2})\):\n\n(```|~~~~)text\n", re.MULTILINE)
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_gpu_cell_shows_a_recorded_output_or_says_no_gpu_ran_it(path):
    nb = nbformat.read(path, as_version=4)
    for cell in gpu_smoke.gpu_cells(nb):
        note = gpu_smoke.note_of(nb, cell)
        assert note is not None, f"{path.stem}: GPU cell {cell.id} has no note"
        assert note.id == f"{cell.id}-gpu-output"
        assert note.source == gpu_smoke.NOT_YET or RECORDED.match(note.source), (
            f"{path.stem}: the note under {cell.id} neither shows a recorded output nor says no GPU ran it")


@pytest.fixture
def lesson(tmp_path):
    """A copy of lesson 07 to record into."""
    path = tmp_path / "07-streams-events-and-profiling.ipynb"
    shutil.copy(COURSE_ROOT / "notebooks" / path.name, path)
    return path


def fake_runner(outputs: dict[str, str]):
    calls = []

    def runner(path):
        calls.append(path)
        return dict(outputs)

    runner.calls = calls
    return runner


def good_outputs(path) -> dict[str, str]:
    ids = [c.id for c in gpu_smoke.gpu_cells(nbformat.read(path, as_version=4))]
    outputs = {i: f"output of {i}\n" for i in ids}
    outputs.update({"sync-point-gpu": "non_blocking=False: 19.512 ms in .to()\n"
                                      "non_blocking=True: 0.021 ms in .to()\n",
                    "d2h-gpu": "True 1999998.0\n", "streams-gpu": "True\n",
                    "launch-bound-gpu": "eager: 498 us per step\ngraph replay: 212 us per step\n",
                    "async-errors-gpu": "CUDA_LAUNCH_BLOCKING=0:\n  line 6\nCUDA_LAUNCH_BLOCKING=1:\n"
                    "  line 4\n"})
    return outputs


def test_record_writes_each_output_under_its_cell_with_the_machine(lesson):
    outputs = good_outputs(lesson)
    report = gpu_smoke.record([lesson], MACHINE, runner=fake_runner(outputs))
    assert report["written"] == [lesson.name] and not report["broken"] and not report["missing"]
    nb = nbformat.read(lesson, as_version=4)
    for cell in gpu_smoke.gpu_cells(nb):
        note = gpu_smoke.note_of(nb, cell)
        found = RECORDED.match(note.source)
        assert found and found["device"] == MACHINE.device and found["torch"] == MACHINE.torch
        assert found["date"] == MACHINE.date
        assert outputs[cell.id].strip() in note.source
        assert not note.get("outputs") and note.cell_type == "markdown"


def test_recording_twice_changes_nothing_the_second_time(lesson):
    runner = fake_runner(good_outputs(lesson))
    gpu_smoke.record([lesson], MACHINE, runner=runner)
    once = lesson.read_text()
    cells = len(nbformat.read(lesson, as_version=4).cells)
    report = gpu_smoke.record([lesson], MACHINE, runner=runner)
    assert report["unchanged"] == [lesson.name] and lesson.read_text() == once
    assert len(nbformat.read(lesson, as_version=4).cells) == cells, "no second note"


def test_an_output_that_breaks_a_claim_is_reported_and_not_written(lesson):
    outputs = good_outputs(lesson)
    outputs["sync-point-gpu"] = ("non_blocking=False: 0.030 ms in .to()\n"
                                 "non_blocking=True: 0.021 ms in .to()\n")
    outputs["streams-gpu"] = "False\n"
    report = gpu_smoke.record([lesson], MACHINE, runner=fake_runner(outputs))
    assert set(report["broken"]) == {f"{lesson.stem}:sync-point-gpu", f"{lesson.stem}:streams-gpu"}
    nb = nbformat.read(lesson, as_version=4)
    notes = {c.id: gpu_smoke.note_of(nb, c).source for c in gpu_smoke.gpu_cells(nb)}
    assert notes["sync-point-gpu"] == gpu_smoke.NOT_YET and notes["streams-gpu"] == gpu_smoke.NOT_YET
    assert RECORDED.match(notes["d2h-gpu"])


def test_a_cell_the_run_did_not_reach_is_reported_missing(lesson):
    outputs = good_outputs(lesson)
    del outputs["allocator-gpu"]
    report = gpu_smoke.record([lesson], MACHINE, runner=fake_runner(outputs))
    assert report["missing"] == [f"{lesson.stem}:allocator-gpu"]


def test_a_note_is_added_where_a_gpu_cell_has_none(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%%requires_cuda\nprint(1)")
    cell.id, cell.metadata["tags"] = "one-gpu", ["requires-cuda"]
    nb.cells = [cell]
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    gpu_smoke.record([path], MACHINE, runner=fake_runner({"one-gpu": "1\n"}))
    note = nbformat.read(path, as_version=4).cells[1]
    assert note.id == "one-gpu-gpu-output" and note.metadata["tags"] == ["gpu-output"]
    assert "```text\n1\n```" in note.source


def test_without_a_gpu_nothing_runs_and_nothing_changes(lesson):
    before = lesson.read_text()
    runner = fake_runner({})
    report = gpu_smoke.record([lesson], None, runner=runner)
    assert not runner.calls and not report["written"] and lesson.read_text() == before


def test_the_command_without_a_gpu_says_so_and_exits_2(lesson):
    before = lesson.read_text()
    run = subprocess.run([sys.executable, str(COURSE_ROOT / "benchmarks" / "gpu_smoke.py"), "record",
                          str(lesson)],
                         check=False, capture_output=True, text=True,
                         env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
                         timeout=120)
    assert run.returncode == 2 and "no CUDA GPU" in run.stderr and "nothing" in run.stderr
    assert lesson.read_text() == before
