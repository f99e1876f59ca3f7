"""Lesson 07: its practice checks, and the simulated trace it reads (the committed file is what the code
exports).
"""

import json

from autograder import COURSE_ROOT
from devicelab.exercises import lesson07
from devicelab.feedback import Outcome, evaluate
from devicelab.sim_trace import example_trace, is_simulated

TRACE = COURSE_ROOT / "notebooks" / "traces" / "simulated-training-step.json"


def test_the_committed_trace_is_what_the_simulated_gpu_exports_and_says_so():
    trace = json.loads(TRACE.read_text())
    assert trace == example_trace(), "regenerate: write_trace(example_trace(), TRACE)"
    assert is_simulated(trace) and "SIMULATED" in trace["traceName"]


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
