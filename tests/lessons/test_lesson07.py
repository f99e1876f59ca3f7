"""Lesson 07: its practice checks, and the simulated trace it reads (the committed file is what the code
exports).
"""

import json

import pytest

from autograder import COURSE_ROOT
from devicelab.exercises import lesson07
from devicelab.feedback import Outcome, evaluate
from devicelab.sim_trace import example_trace, is_simulated, timed_example_trace
from devicelab.trace_measures import summarize

TRACES = COURSE_ROOT / "notebooks" / "traces"
TRACE = TRACES / "simulated-training-step.json"  # ps06's sample
TIMED = TRACES / "simulated-timed-step.json"  # lesson 07's worked example


@pytest.mark.parametrize(("path", "make"), [(TRACE, example_trace), (TIMED, timed_example_trace)],
                         ids=["ps06-sample", "lesson-07"])
def test_the_committed_traces_are_what_the_simulated_gpu_exports_and_say_so(path, make):
    trace = json.loads(path.read_text())
    assert trace == make(), f"regenerate: write_trace({make.__name__}(), {path.name})"
    assert is_simulated(trace) and "SIMULATED" in trace["traceName"]


def test_the_worked_example_is_not_the_capstone_s_problems():
    """Lesson 07 reads a loop timed with torch.cuda.synchronize(): no copies, no .item(), a wait per step
    outside every operator; the capstone's pageable copies and .item() are for the student to find there."""
    summary = summarize(json.loads(TIMED.read_text()))
    assert summary.copies == {} and summary.waits == {"(no operator)": 3}
    names = {e["name"] for e in json.loads(TIMED.read_text())["traceEvents"]}
    assert "cudaDeviceSynchronize" in names and "aten::item" not in names


def test_practice_solutions_pass_and_stubs_are_not_attempted():
    namespace: dict = {}
    for exercise in lesson07._exercises.exercises.values():
        exec(exercise.solution, namespace)
    for exercise in lesson07._exercises.exercises.values():
        assert evaluate(exercise, namespace).outcome is Outcome.CORRECT

    def stub(*args):
        raise NotImplementedError("your code here")

    stubs = {"copy_on_side_stream": stub, "kernel_seconds": stub}
    assert all(evaluate(e, stubs).outcome is Outcome.NOT_ATTEMPTED
               for e in lesson07._exercises.exercises.values())


def test_practice_checks_catch_a_missing_wait_and_microseconds():
    namespace: dict = {}
    exec('''
def copy_on_side_stream(gpu, side, nbytes):
    with gpu.stream(side):
        return gpu.copy(nbytes, "h2d", pinned=True, non_blocking=True)

def kernel_seconds(trace):
    return sum(e["dur"] for e in trace["traceEvents"] if e.get("cat") == "kernel")
''', namespace)
    side = evaluate(lesson07._exercises.exercises["copy_on_side_stream"], namespace)
    seconds = evaluate(lesson07._exercises.exercises["kernel_seconds"], namespace)
    assert side.outcome is Outcome.INCORRECT and "wait_stream" in side.message
    assert seconds.outcome is Outcome.INCORRECT and "microseconds" in seconds.message


def test_non_blocking_uploads_are_safe_only_while_the_pinned_source_is_left_alone():
    import nbformat

    cells = {c.get("id"): c.source for c in nbformat.read(COURSE_ROOT / "notebooks" /
                                                          "07-streams-events-and-profiling.ipynb",
                                                          as_version=4).cells}
    assert "if the pinned source stays unchanged until the copy has run" in cells["myths"]
    assert "provided its pinned source is not refilled" in cells["recap"]

