"""Practice for lesson 07: a copy on a side stream, and a first number read from a trace."""

import math

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker
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
    assert copy.stream == side.id, ("Queue the copy on the side stream: with gpu.stream(side): ... (or "
                                    "stream=side).")
    assert copy.kind == "h2d", f"The batch goes host to device ('h2d'), not {copy.kind!r}."
    assert waited < 1e-4, (
        f"The host waited {waited * 1e3:.3f} ms: a copy that returns at once needs pinned=True and "
        "non_blocking=True.")
    assert copy.start < 0.0002, ("The copy should run while the previous step's kernel runs (on the side "
                                 "stream).")
    kernel = gpu.launch(0.001, name="next step")
    assert kernel.ready_at - 0.001 >= copy.end - 1e-12, (
        "The next kernel on the default stream started before the copy ended: make the current stream wait "
        "for the side stream (gpu.current_stream.wait_stream(side)).")


def _kernel_seconds(kernel_seconds) -> None:
    def event(cat, dur, ph="X"):
        return {"ph": ph, "cat": cat, "name": "k", "pid": 0, "tid": 7, "ts": 0.0, "dur": dur, "args": {}}

    trace = {"traceEvents": [event("kernel", 250.0), event("kernel", 750.5), event("gpu_memcpy", 1000.0),
                             event("cpu_op", 40.0),
                             {"ph": "M", "name": "process_name", "pid": 0, "args": {}}]}
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
''', success="This is what torch.cuda.Stream, non_blocking=True on pinned memory and wait_stream do on "  # noqa: E501 (the solution above is shown to students as it is)
             "a GPU."),
    Exercise("kernel_seconds", _kernel_seconds, hints=(
        "Loop over trace['traceEvents'] and keep the events with ph 'X' and cat 'kernel'.",
        "Add up their 'dur' and divide by 1e6: the trace is in microseconds.",
    ), solution='''
def kernel_seconds(trace):
    """Return the seconds the GPU spent running kernels in `trace`."""
    return sum(e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel") / 1e6
'''),  # noqa: E501 (the solution above is shown to students as it is)
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "refill": Prediction(
        question=("A loader keeps one pinned staging buffer, now holding batch 1. The host queues its copy "
                  "to the GPU with non_blocking=True behind 4 ms of kernels, then at once refills the buffer "
                  "with batch 2. What does the GPU receive?"),
        choices=("batch 1: the copy took the data when it was queued",
                 "batch 2 (or part of it), and nothing raises", "an error: the buffer is still being copied"),
        answer="batch 2 (or part of it), and nothing raises",
        giveaways=("must not overwrite", "before refilling", "safe to refill only after",
                   "reads the buffer when", "(part of) the next batch", "source must stay unchanged"),
        reason=("The copy was only queued, and the copy engine reads the buffer when the copy runs, 4 ms "
                "later: by then it holds batch 2. Nothing checks it, in the simulator or in PyTorch. Record "
                "an event right after the copy and wait on it before you refill.")),
    "wait-stream": Prediction(
        question=("A 16 MiB batch is copied host to device on a side stream (pinned, non_blocking=True). "
                  "Right after, the host queues a kernel that reads the batch on the default stream, with no "
                  "other call in between. When does that kernel start?"),
        choices=("after the copy has landed", "right away, while the copy is still running",
                 "never: PyTorch raises an error, as for tensors on two devices"),
        answer="right away, while the copy is still running",
        giveaways=("batch must have arrived", "streams are independent", "synchronising them is your job",
                   "before using the batch", "wait_stream(side) before use",
                   "nothing orders the default stream"),
        reason=("Two streams are independent: nothing orders the default stream after the side stream unless "
                "you say so (wait_stream or wait_event), and nothing checks it, so nothing raises either. "
                "The kernel starts at once and reads the batch before it has arrived.")),
    "pytorch-launch": Prediction(
        question=("On the H100 whose output is recorded under the next cell, a step of 100 tiny kernels "
                  "(`x.add_(1)` on 1024 numbers) is launched one by one from Python. CUDA's own launch "
                  "costs about 5 us; in lesson 05's H100 recording, a naive stopwatch around one `a @ a` "
                  "called from Python read about 23 us. How long does one eager step take?"),
        choices=("about 150 us", "about 500 us", "about 1500 us", "about 15 000 us"),
        answer="about 1500 us",
        giveaways=("1474 us", "14.7 us", "more through pytorch", "python and bookkeeping",
                   "three times the simulated", "its dispatcher and its bookkeeping"),
        reason=("1474 us, about 14.7 us a kernel: a call from Python runs PyTorch's own Python code, "
                "dispatcher and bookkeeping before each CUDA launch, so each costs the host about three "
                "times CUDA's 5 us, of the order of lesson 05's matmul, while each kernel runs for about "
                "1.5 us. Replayed as one CUDA graph, the same step took 149 us.")),
}
ask = asker(PREDICTIONS)
