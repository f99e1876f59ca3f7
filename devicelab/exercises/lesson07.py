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
    "sync-point": Prediction(
        question=("The host queues a 20 ms kernel, then copies 1 MiB with a plain x.to(device). How long "
                  "does the host wait in the copy?"),
        choices=("about 0.1 ms (the copy)", "about 20 ms (the kernel, then the copy)"),
        answer="about 20 ms (the kernel, then the copy)",
        reason=("A default copy is cudaMemcpyAsync followed by cudaStreamSynchronize: the host waits for "
                "everything queued on the stream, the kernel included, not only for its own copy.")),
    "early-read": Prediction(
        question=("A result is copied to the host with non_blocking=True and read at once. What does the "
                  "read give?"),
        choices=("the result", "an error", "whatever the memory held before"),
        answer="whatever the memory held before",
        reason=("The call returns before the copy has landed, and reading a CPU tensor is not a sync point: "
                "nothing raises, the bytes are just old. The simulator marks them STALE; PyTorch does not.")),
    "refill": Prediction(
        question=("The host queues a 64 MiB pinned copy behind a 4 ms kernel, then refills the buffer. Is "
                  "the copy done?"),
        choices=("yes", "no"),
        answer="no",
        reason=("A non-blocking copy from pinned memory only queues: the copy has not even started (it waits "
                "for the kernel), and refilling now would send the new data.")),
    "wait-stream": Prediction(
        question=("A batch is copied on a side stream; the next kernel, which uses it, is queued on the "
                  "default stream without wait_stream. When does the kernel start?"),
        choices=("after the copy has landed", "right away, while the copy is still running"),
        answer="right away, while the copy is still running",
        reason=("Two streams are independent: nothing orders the default stream after the side stream unless "
                "you say so (wait_stream or wait_event). The kernel reads the batch before it has arrived.")),
    "long-calls": Prediction(
        question=("In the trace of the slow loop (a pageable batch copied with a blocking .to(), and .item() "
                  "every step), which host call holds the host in every step, however fast the GPU?"),
        choices=("the kernel launches", "the cudaStreamSynchronize calls", "the batch's cudaMemcpyAsync"),
        answer="the batch's cudaMemcpyAsync",
        reason=("A copy from pageable memory holds the host inside cudaMemcpyAsync while the driver stages "
                "the data (CUDA lets it wait for the stream first, too); the stream sync after it has little "
                "left to wait for. A cudaStreamSynchronize lasts as long as the work still queued: .item()'s "
                "is about 1.3 ms in the simulated T4's trace, 11-20 us in the H100's recorded one, whose "
                "small kernels were done by then. Counting sync calls alone misses the copies' waits.")),
    "graph": Prediction(
        question=("On the simulated GPU, which charges 5 us per launch, a step of 100 tiny kernels (2 us "
                  "each) is launched one by one. How long does it take? Type microseconds."),
        answer="500", accept=("about 500", "500 us"),
        reason=("Launched one by one the host is the bottleneck: 100 launches x 5 us = 500 us, the GPU idle "
                "most of the time. A graph replay is one launch: about 5 + 100 x 2 = 205 us. A real launch "
                "through PyTorch costs more: the H100 below took 1474 us eager (about 14.7 us a kernel) "
                "against 149 us replayed.")),
}
ask = asker(PREDICTIONS)
