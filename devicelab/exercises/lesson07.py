"""Practice for lesson 07: a copy on a side stream, and a first number read from a trace."""

import math

from devicelab.feedback import Exercise, checker
from devicelab.simgpu import SimulatedGPU
from devicelab.units import MiB


def _copy_on_side_stream(copy_on_side_stream) -> None:
    gpu = SimulatedGPU(initialized=True)
    side = gpu.new_stream("copies")
    gpu.launch(0.0002, name="previous step")  # shorter than the copy
    before = gpu.clock()
    copy_on_side_stream(gpu, side, 8 * MiB)
    waited = gpu.clock() - before
    copies = [r for r in gpu.timeline if r.engine == "copy"]
    assert len(copies) == 1, f"Queue exactly one copy; the timeline shows {len(copies)}."
    [copy] = copies
    assert copy.stream == side.id, "Queue the copy on the side stream: with gpu.stream(side): ... (or stream=side)."
    assert copy.kind == "h2d", f"The batch goes host to device ('h2d'), not {copy.kind!r}."
    assert waited < 1e-4, (
        f"The host waited {waited * 1e3:.3f} ms: a copy that returns at once needs pinned=True and non_blocking=True.")
    assert copy.start < 0.0002, "The copy should run while the previous step's kernel runs (on the side stream)."
    kernel = gpu.launch(0.001, name="next step")
    assert kernel.ready_at - 0.001 >= copy.end - 1e-12, (
        "The next kernel on the default stream started before the copy ended: make the current stream wait for "
        "the side stream (gpu.current_stream.wait_stream(side)).")


def _kernel_seconds(kernel_seconds) -> None:
    def event(cat, dur, ph="X"):
        return {"ph": ph, "cat": cat, "name": "k", "pid": 0, "tid": 7, "ts": 0.0, "dur": dur, "args": {}}

    trace = {"traceEvents": [event("kernel", 250.0), event("kernel", 750.5), event("gpu_memcpy", 1000.0),
                             event("cpu_op", 40.0), {"ph": "M", "name": "process_name", "pid": 0, "args": {}}]}
    got = kernel_seconds(trace)
    assert isinstance(got, int | float) and math.isclose(got, 1000.5e-6, rel_tol=1e-9), (
        f"Two kernels of 250 us and 750.5 us run 0.0010005 s in all; got {got!r}. dur is in microseconds.")
    assert kernel_seconds({"traceEvents": []}) == 0, "No kernels: 0 seconds."


_exercises = checker(
    Exercise("copy_on_side_stream", _copy_on_side_stream, hints=(
        "Inside `with gpu.stream(side):` the work goes to the side stream.",
        "gpu.copy(nbytes, 'h2d', pinned=True, non_blocking=True) returns at once.",
        "After the block: gpu.current_stream.wait_stream(side), so later kernels wait for the batch.",
    ), solution='''
def copy_on_side_stream(gpu, side, nbytes):
    """Copy `nbytes` host to device on `side` without making the host wait; later default-stream work waits."""
    with gpu.stream(side):
        batch = gpu.copy(nbytes, "h2d", pinned=True, non_blocking=True)
    gpu.current_stream.wait_stream(side)
    return batch
''', success="This is what torch.cuda.Stream, non_blocking=True on pinned memory and wait_stream do on a GPU."),
    Exercise("kernel_seconds", _kernel_seconds, hints=(
        "Loop over trace['traceEvents'] and keep the events with ph 'X' and cat 'kernel'.",
        "Add up their 'dur' and divide by 1e6: the trace is in microseconds.",
    ), solution='''
def kernel_seconds(trace):
    """Return the seconds the GPU spent running kernels in `trace`."""
    return sum(e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel") / 1e6
'''),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
