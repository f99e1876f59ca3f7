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
        assert note.source == gpu_smoke.NOT_YET or gpu_smoke.recorded_in(note.source), (
            f"{path.stem}: the note under {cell.id} neither shows a recorded output nor says no GPU ran it")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_a_recorded_output_that_answers_a_prediction_is_folded_and_no_other_is(path, tmp_path):
    """It is on screen before the cell runs: open, it would answer the question asked just above it."""
    nb = nbformat.read(path, as_version=4)
    for cell in gpu_smoke.gpu_cells(nb):
        note = gpu_smoke.note_of(nb, cell).source
        if gpu_smoke.recorded_in(note):
            folded = note.startswith("<details><summary>") and note.endswith(gpu_smoke.FOLD_END)
            answers = gpu_smoke.answers_a_prediction(nb, cell)
            assert folded == answers, (
                f"{path.stem}: the note under {cell.id} is {'' if folded else 'not '}folded "
                "(`make gpu-notes` lays the notes out as `make gpu-record` writes them)")
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    assert gpu_smoke.refold([copy]) == [], f"{path.name}: `make gpu-notes` would change it"


@pytest.fixture
def lesson(tmp_path):
    """A copy of lesson 07 to record into."""
    path = tmp_path / "07-streams-events-and-profiling.ipynb"
    shutil.copy(COURSE_ROOT / "notebooks" / path.name, path)
    return path


def notes_of(path) -> dict[str, str]:
    """Return the note under each GPU cell of a lesson, by cell id."""
    nb = nbformat.read(path, as_version=4)
    return {c.id: gpu_smoke.note_of(nb, c).source for c in gpu_smoke.gpu_cells(nb)}


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
                    "allocator-gpu": " after torch.empty: allocated 393.0 MiB, reserved 1.0 GiB\n"
                                     "       after del x: allocated 137.0 MiB, reserved 1.0 GiB\n"
                                     " after empty_cache: allocated 137.0 MiB, reserved 166 MiB\n",
                    "launch-bound-gpu": "eager: 1474 us per step\ngraph replay: 149 us per step\n",
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
        found = gpu_smoke.recorded_in(note.source)
        assert found is not None and found[0] == MACHINE and found[1] == outputs[cell.id].rstrip()
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
    before = notes_of(lesson)
    report = gpu_smoke.record([lesson], MACHINE, runner=fake_runner(outputs))
    assert set(report["broken"]) == {f"{lesson.stem}:sync-point-gpu", f"{lesson.stem}:streams-gpu"}
    notes = notes_of(lesson)
    for kept in ("sync-point-gpu", "streams-gpu"):
        assert notes[kept] == before[kept], f"{kept}: a broken output replaced the note"
    assert MACHINE.device in notes["d2h-gpu"], "the outputs that keep their claims are written"


def test_a_cell_the_run_did_not_reach_is_reported_missing(lesson):
    outputs = good_outputs(lesson)
    del outputs["allocator-gpu"]
    report = gpu_smoke.record([lesson], MACHINE, runner=fake_runner(outputs))
    assert report["missing"] == [f"{lesson.stem}:allocator-gpu"]


ASKED_OUTPUTS = {"answer-gpu": "1474 us\n", "other-gpu": "149 us\n"}


def _asked_then_answered(tmp_path):
    """A notebook whose GPU cell answers a prediction, another GPU cell after it that does not."""
    nb = nbformat.v4.new_notebook()
    ask = nbformat.v4.new_code_cell('ask("launch")')
    answer = nbformat.v4.new_code_cell("%%requires_cuda\nprint('1474 us')")
    answer.id, answer.metadata["tags"] = "answer-gpu", ["requires-cuda"]
    other = nbformat.v4.new_code_cell("%%requires_cuda\nprint('149 us')")
    other.id, other.metadata["tags"] = "other-gpu", ["requires-cuda"]
    nb.cells = [ask, answer, other]
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    return path


def test_the_output_of_a_cell_that_answers_a_prediction_is_recorded_folded(tmp_path):
    path = _asked_then_answered(tmp_path)
    gpu_smoke.record([path], MACHINE, runner=fake_runner(ASKED_OUTPUTS))
    nb = nbformat.read(path, as_version=4)
    answer, other = (gpu_smoke.note_of(nb, c).source for c in gpu_smoke.gpu_cells(nb))
    assert answer.startswith("<details><summary><strong>Output recorded on a GPU</strong> (NVIDIA Fake 80GB, "
                             "torch 2.14.1+cu128, 2026-11-25)") and answer.endswith("\n\n</details>")
    assert "```text\n1474 us\n```" in answer and RECORDED.match(other)
    assert gpu_smoke.recorded_in(answer) == (MACHINE, "1474 us", [])
    assert gpu_smoke.recorded_in(other) == (MACHINE, "149 us", [])


def test_gpu_notes_folds_an_open_note_that_answers_a_prediction_keeping_what_was_recorded(tmp_path):
    path = _asked_then_answered(tmp_path)
    gpu_smoke.record([path], MACHINE, runner=fake_runner(ASKED_OUTPUTS))
    nb = nbformat.read(path, as_version=4)
    answering = gpu_smoke.gpu_cells(nb)[0]
    folded = gpu_smoke.note_of(nb, answering).source
    opened = gpu_smoke.note_text("1474 us", MACHINE, ["my-script"])  # as written before folds existed
    gpu_smoke.set_note(nb, answering, opened)
    nbformat.write(nb, path)
    assert gpu_smoke.refold([path]) == [path.name]
    note = gpu_smoke.note_of(nbformat.read(path, as_version=4), answering).source
    assert note.startswith("<details>") and gpu_smoke.recorded_in(note) == (MACHINE, "1474 us", ["my-script"])
    assert note != folded and "my-script" in note
    assert gpu_smoke.refold([path]) == [], "a second pass changes nothing"
    assert gpu_smoke.recorded_in(gpu_smoke.NOT_YET) is None


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


def test_an_output_that_ends_in_an_uncaught_exception_is_reported_and_not_written(lesson):
    outputs = good_outputs(lesson)
    outputs["staging-gpu"] = ("Traceback (most recent call last):\n  File \"x\", line 1\n"
                                "RuntimeError: CUDA error: out of memory\n")
    before = notes_of(lesson)["staging-gpu"]
    report = gpu_smoke.record([lesson], MACHINE, runner=fake_runner(outputs))
    assert report["broken"] == {f"{lesson.stem}:staging-gpu": [
        "the cell ran to its end without an uncaught exception"]}
    assert "out of memory" in report["broken_outputs"][f"{lesson.stem}:staging-gpu"]
    assert notes_of(lesson)["staging-gpu"] == before


def test_a_caught_error_the_cell_prints_is_an_output_like_any_other(lesson):
    outputs = good_outputs(lesson)
    outputs["staging-gpu"] = "RuntimeError: Expected all tensors to be on the same device\n"
    report = gpu_smoke.record([lesson], MACHINE, runner=fake_runner(outputs))
    assert not report["broken"] and report["written"] == [lesson.name]


CLEAN_TRACE = "host waits 2, 0.04 ms, inside {'(no operator)': 2}\n{'Memcpy HtoD (Pinned -> Device)': 16}"
HOST_BOUND = "whole trace               43.47 ms, the GPU busy for 2.22 ms"
TIMED = ("your copy vs the script   before min   380.00 ms  median   390.00 ms  max   400.00 ms  (7 runs)\n"
         "your copy vs the script   after  min    60.00 ms  median    62.00 ms  max    64.00 ms  (7 runs)\n"
         "your copy vs the script   6.29x faster (medians), beyond the spread\n")

def test_the_capstone_records_with_the_reference_fix_and_its_notes_say_so(tmp_path, monkeypatch):
    path = tmp_path / f"{gpu_smoke.CAPSTONE}.ipynb"
    shutil.copy(COURSE_ROOT / "notebooks" / path.name, path)
    ran = {}

    def runner(lesson):
        nb = nbformat.read(lesson, as_version=4)
        ran.update({c.id: c.source for c in nb.cells})
        return {"582034e8": "RuntimeError: Expected all tensors to be on the same device\n",
                "be5b748b": "host waits           1,    0.02 ms, inside {'(no operator)': 1}\n"
                            "copies 100: {'Memcpy HtoD (Pinned -> Device)': 100}\n" + HOST_BOUND + "\n",
                "12d95338": TIMED}

    report = gpu_smoke.record([path], MACHINE, runner=runner)
    assert report["written"] == [path.name] and not report["broken"]
    nb = nbformat.read(path, as_version=4)
    notes = {c.id: gpu_smoke.note_of(nb, c).source for c in gpu_smoke.gpu_cells(nb)}
    remark = gpu_smoke.STAND_IN_NOTE.format(cell="my-script")
    assert remark not in notes["582034e8"], "the crash is recorded before the script is replaced"
    assert remark in notes["be5b748b"] and remark in notes["12d95338"]
    assert RECORDED.match(notes["12d95338"])


@pytest.mark.parametrize(("output", "claim"), [
    (TIMED, True),
    (TIMED.replace("(7 runs)", "(5 runs)"), False),
    (TIMED.replace("your copy vs the script   after ", "your copy vs the script   "), False),
    ("1.40x faster on NVIDIA Fake\n", False),
])
def test_the_capstone_claims_both_versions_were_timed_in_turns_7_runs_each(output, claim):
    assert (gpu_smoke.broken_claims(gpu_smoke.CAPSTONE, "12d95338", output) == []) is claim


@pytest.mark.parametrize(("summary", "clean"), [
    ("host waits 2, 0.04 ms, inside {'(no operator)': 2}\n{'Memcpy HtoD (Pinned -> Device)': 16}", True),
    ("host waits 3, 0.1 ms, inside {'aten::copy_': 1, '(no operator)': 2}\n(Pinned -> Device)", False),
    ("host waits 0, 0.0 ms, inside {}\n{'Memcpy HtoD (Pageable -> Device)': 16}", False),
])
def test_the_capstone_claims_the_fixed_trace_is_clean(summary, clean):
    output = f"{summary}\n{HOST_BOUND}\n"
    assert (gpu_smoke.broken_claims(gpu_smoke.CAPSTONE, "be5b748b", output) == []) is clean


@pytest.mark.parametrize(("eager", "claim"),
                         [(1474, True), (1100, True), (2150, True), (520, False), (3000, False)])
def test_lesson_07_claims_the_eager_step_its_prediction_answers(eager, claim):
    output = f"eager: {eager} us per step\ngraph replay: 149 us per step\n"
    lesson = "07-streams-events-and-profiling"
    assert (gpu_smoke.broken_claims(lesson, "launch-bound-gpu", output) == []) is claim


def test_the_stand_in_runs_as_the_cell_it_replaces(tmp_path):
    """The reference fix is exec'd in the lesson's namespace: it must define what `my-script` defines."""
    source = gpu_smoke.STAND_INS[gpu_smoke.CAPSTONE]["my-script"].read_text()
    namespace: dict = {}
    exec(source, namespace)
    assert {"Net", "build_loader", "run_epoch"} <= set(namespace)


def test_a_trace_the_gpu_cells_wrote_is_kept_and_an_old_one_is_not(tmp_path):
    lesson = tmp_path / "07-streams-events-and-profiling.ipynb"
    (tmp_path / "traces").mkdir()
    written = tmp_path / "traces" / "my-gpu-timed-step.json"
    written.write_text("{}")
    assert gpu_smoke.keep_files(lesson, since=0.0) == ["traces/recorded-gpu-timed-step.json"]
    assert (tmp_path / "traces" / "recorded-gpu-timed-step.json").read_text() == "{}"
    assert gpu_smoke.keep_files(lesson, since=written.stat().st_mtime + 60) == []


def test_the_kept_real_trace_shows_what_ps06_says_about_it():
    """ps06's prompt (recorded for an earlier lesson 07): the pageable copy holds the host inside aten::copy_,
    .item() waits inside aten::_local_scalar_dense; read from the trace a GPU recorded."""
    import json

    from devicelab.trace_measures import summarize

    trace = json.loads((COURSE_ROOT / "notebooks" / "traces" / "recorded-gpu-step.json").read_text())
    assert "simulated" not in json.dumps(trace.get("traceName", "")) and trace["deviceProperties"]
    summary = summarize(trace)
    assert summary.waits.get("aten::copy_") == 3 and summary.waits.get("aten::_local_scalar_dense") == 3
    assert summary.copies.get("Memcpy HtoD (Pageable -> Device)") == 3
