"""Record what a SimulatedGPU does and export it as a chrome trace, the format torch.profiler writes.

`torch.profiler.profile(...).export_chrome_trace(path)` writes a JSON object whose `"traceEvents"` list holds
complete events (`"ph": "X"`, `"ts"` and `"dur"` in microseconds) with a category: `cpu_op` for PyTorch
operators, `cuda_runtime` for the host's CUDA API calls, `kernel` and `gpu_memcpy` for work on the GPU.
`SimProfiler` turns the simulated GPU's virtual timeline into the same events, so that a student without a GPU
can open a trace in Perfetto (https://ui.perfetto.dev) or chrome://tracing and read it in Python. Everything
it writes is labelled SIMULATED (the process names, the device name, `traceName`, and a top-level
`"devicelab"` entry): the numbers come from the model in `devicelab.simgpu`, never from a GPU.

How the simulated timeline maps onto a real trace:

- a kernel -> `kernel`; a copy -> `gpu_memcpy` named like CUDA's (`Memcpy HtoD (Pinned -> Device)`, ...), with
  `args["bytes"]`; both with `args["device"]` (0) and `args["stream"]`, in the GPU's process, one thread per
  stream;
- the host's launch of a kernel -> `cudaLaunchKernel`, of a graph replay -> `cudaGraphLaunch`, of a copy ->
  `cudaMemcpyAsync` (`cuda_runtime`); a host wait -> the call that waits: `cudaStreamSynchronize` after a
  blocking copy (PyTorch's `cudaMemcpyAsync` + `cudaStreamSynchronize`), for `item()` and for
  `stream.synchronize()`; `cudaDeviceSynchronize` for `gpu.synchronize()`; `cudaEventSynchronize` for
  `event.synchronize()`. A copy from or into pageable memory, blocking or not, holds the host inside
  `cudaMemcpyAsync` (the driver stages it through its own pinned buffer, and may first synchronize with the
  stream: CUDA's "API synchronization behavior"; a copy into pageable memory returns when it is done), so that
  wait lengthens the `cudaMemcpyAsync` event, and the `cudaStreamSynchronize` after a blocking one returns at
  once: counting sync calls alone undercounts host waits;
- `item()` copies into pinned memory (`Memcpy DtoH (Device -> Pinned)`, as `_local_scalar_dense_cuda` does);
- streams: the default stream is thread 7 (CUPTI's number for it in real traces), other streams 13, 14, ...,
  each thread named with the stream's name;
- operators: the simulator has none, so name them yourself with `with prof.op("aten::item"): ...`, or nested
  with `prof.ops(*TO_OPS)` for a `.to()` copy (`aten::to` > `aten::_to_copy` > `aten::copy_`, as a real trace
  nests them) and `prof.ops(*ITEM_OPS)` for `.item()`;
- host work (`gpu.host_work`) and the one-time context creation -> `user_annotation` events.
"""

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from devicelab.simgpu import SimulatedGPU, TimelineRecord

SIMULATED = "SIMULATED"
HOST_PID = 1  # the simulated host process
HOST_TID = 1  # its main thread
GPU_PID = 0  # the simulated GPU: device 0, one thread per stream
DEFAULT_STREAM_TID = 7  # CUPTI numbers the legacy default stream 7: real traces show kernels on "stream 7"
# simulated stream n > 0 becomes 12 + n; a real trace numbers created streams its own way
SIDE_STREAM_TID = 12
SYNC_CALLS = {"synchronize": "cudaDeviceSynchronize", "wait for event": "cudaEventSynchronize"}
TO_OPS = ("aten::to", "aten::_to_copy", "aten::copy_")  # how a real trace nests a .to() copy
ITEM_OPS = ("aten::item", "aten::_local_scalar_dense")  # and .item()
MEMCPY_NAMES = {
    ("h2d", True): "Memcpy HtoD (Pinned -> Device)",
    ("h2d", False): "Memcpy HtoD (Pageable -> Device)",
    ("d2h", True): "Memcpy DtoH (Device -> Pinned)",
    ("d2h", False): "Memcpy DtoH (Device -> Pageable)",
    ("d2d", True): "Memcpy DtoD (Device -> Device)",
    ("d2d", False): "Memcpy DtoD (Device -> Device)",
}


class SimProfiler:
    """Record a SimulatedGPU's work inside a `with` block, like torch.profiler.profile, and export it.

        gpu = SimulatedGPU(initialized=True)
        with SimProfiler(gpu) as prof:
            with prof.op("aten::to"):
                x = gpu.copy(4 * MiB, "h2d", pinned=True, non_blocking=True)
        prof.export_chrome_trace("simulated.json")
    """

    def __init__(self, gpu: SimulatedGPU, op_overhead_s: float = 1e-6) -> None:
        self.gpu = gpu
        # host time an operator spends before and after its work (dispatch)
        self.op_overhead_s = op_overhead_s
        self._overheads: set[int] = set()  # ids of those host spans: part of the operator, not shown apart
        self._start = 0
        self._records: list[TimelineRecord] = []
        # id of a copy's TimelineRecord -> what the call asked for
        self._copies: dict[int, dict[str, Any]] = {}
        self._ops: list[tuple[str, float, float, int]] = []  # (name, start s, end s, thread)
        self._keep: list[TimelineRecord] = []  # the copy records, kept alive so that their ids stay unique
        self._active = False

    def __enter__(self) -> "SimProfiler":  # noqa: PYI034  (typing.Self needs Python 3.11)
        self._start = len(self.gpu.timeline)
        self._records, self._copies, self._ops, self._keep, self._overheads = [], {}, [], [], set()
        self._active = True
        # an instance attribute: cpu(), to_cpu() and item() go through it too
        self.gpu.copy = self._traced_copy
        return self

    def __exit__(self, *exc: object) -> None:
        del self.gpu.copy
        self._active = False
        self._records = self.gpu.timeline[self._start:]

    def _traced_copy(self, source, direction=None, *, pinned=None, non_blocking=False, **kwargs):
        before = len(self.gpu.timeline)
        result = SimulatedGPU.copy(self.gpu, source, direction, pinned=pinned, non_blocking=non_blocking,
                                   **kwargs)
        record = next(r for r in self.gpu.timeline[before:] if r.engine == "copy")
        self._copies[id(record)] = {"bytes": result.nbytes, "pinned": bool(result.pinned or (
            pinned if pinned is not None else getattr(source, "pinned", False))),
                                    "non_blocking": non_blocking}
        self._keep.append(record)
        return result

    @contextmanager
    def op(self, name: str, thread: int = HOST_TID) -> Iterator[None]:
        """Mark the host time spent inside the block as the operator `name` (a `cpu_op`, like `aten::item`).
        """
        start = self.gpu.clock()
        self._overhead(name)
        try:
            yield
        finally:
            self._overhead(name)
            self._ops.append((name, start, self.gpu.clock(), thread))

    @contextmanager
    def ops(self, *names: str) -> Iterator[None]:
        """Mark the block as operators nested outermost first, e.g. `prof.ops(*TO_OPS)` for a `.to()` copy."""
        with ExitStack() as stack:
            for name in names:
                stack.enter_context(self.op(name))
            yield

    def _overhead(self, name: str) -> None:
        if self.op_overhead_s > 0:
            self.gpu.host_work(self.op_overhead_s, f"{name} dispatch")
            self._overheads.add(id(self.gpu.timeline[-1]))
            self._keep.append(self.gpu.timeline[-1])

    def _memcpy_call(self, start: float, launch: TimelineRecord, copy: TimelineRecord,
                     after: list[TimelineRecord], inside: set[int], correlation: int) -> list[dict]:
        """Return the host's cudaMemcpyAsync for `copy` (and the stream sync a blocking copy adds after it).

        A copy from or into pageable memory holds the host inside cudaMemcpyAsync (staging through the
        driver's pinned buffer; a copy into pageable memory returns only when it is done), so that wait
        lengthens the call and the cudaStreamSynchronize that PyTorch calls after a blocking copy then returns
        at once. The call and its copy share `correlation`, as in a real trace.
        """
        meta = self._copies.get(id(copy), {})
        wait = after[0] if after and after[0].kind == "wait" else None
        end = launch.end
        if wait is not None and not meta.get("pinned") and wait.name.startswith("wait: pageable"):
            inside.add(id(wait))
            end = wait.end
        calls = [_complete("cuda_runtime", "cudaMemcpyAsync", start, end, HOST_PID, HOST_TID,
                           {"correlation": correlation})]
        if copy.kind != "d2d" and not meta.get("non_blocking",
                                               False) and (wait is None or id(wait) in inside):
            calls.append(_complete("cuda_runtime", "cudaStreamSynchronize", end, end, HOST_PID, HOST_TID, {}))
        return calls

    def trace(self) -> dict:
        """Return the recorded work as a chrome trace (the dict json.load gives for a real profiler export).
        """
        records = self.gpu.timeline[self._start:] if self._active else self._records
        events = _metadata(self.gpu)
        events += [_complete("cpu_op", name, start, end, HOST_PID, thread, {})
                   for name, start, end, thread in sorted(self._ops, key=lambda o: (o[1], -o[2]))]
        # a full launch queue holds the host inside the next launch
        pending_wait: TimelineRecord | None = None
        inside_memcpy: set[int] = set()  # ids of waits drawn inside a cudaMemcpyAsync call
        for index, record in enumerate(records):
            if record.engine == "host":
                following = records[index + 1] if index + 1 < len(records) else None
                if record.kind == "launch":
                    start = pending_wait.start if pending_wait is not None else record.start
                    pending_wait = None
                    if following is not None and following.engine == "copy":
                        events += self._memcpy_call(start, record, following, records[index + 2:index + 3],
                                                    inside_memcpy, correlation=index + 1)
                    else:
                        call = "cudaGraphLaunch" if record.name.startswith(
                            "graph launch") else "cudaLaunchKernel"
                        events.append(_complete("cuda_runtime", call, start, record.end, HOST_PID, HOST_TID,
                                                {}))
                elif record.kind == "wait":
                    if record.name == "wait: launch queue full":
                        pending_wait = record
                    elif id(record) not in inside_memcpy:
                        call = SYNC_CALLS.get(record.name, "cudaStreamSynchronize")
                        events.append(_complete("cuda_runtime", call, record.start, record.end, HOST_PID,
                                                HOST_TID, {}))
                elif id(record) not in self._overheads:  # host work, context creation
                    events.append(_complete("user_annotation", record.name, record.start, record.end,
                                            HOST_PID, HOST_TID, {}))
            elif record.engine == "compute":
                tid = stream_tid(record.stream)
                events.append(_complete("kernel", record.name, record.start, record.end, GPU_PID, tid,
                                        {"device": 0, "stream": tid}))
            elif record.engine == "copy":
                meta = self._copies.get(id(record), {})
                tid = stream_tid(record.stream)
                args = {"device": 0, "stream": tid, "correlation": index}
                if "bytes" in meta:
                    args["bytes"] = meta["bytes"]
                name = MEMCPY_NAMES[(record.kind, meta.get("pinned", False))]
                events.append(_complete("gpu_memcpy", name, record.start, record.end, GPU_PID, tid, args))
        return {
            "schemaVersion": 1,
            "traceName": f"{SIMULATED}: devicelab.simgpu, {self.gpu.profile.name}",
            "displayTimeUnit": "ms",
            "deviceProperties": [{"id": 0, "name": f"{SIMULATED} {self.gpu.profile.name}"}],
            "devicelab": {"simulated": True, "gpu": self.gpu.profile.name,
                          "note": "made by devicelab.sim_trace from the simulated GPU's virtual clock, not "
                          "measured"},
            "traceEvents": events,
        }

    def export_chrome_trace(self, path: str | Path) -> Path:
        """Write the trace as JSON to `path` (like torch.profiler's export_chrome_trace) and return the path.
        """
        return write_trace(self.trace(), path)


def write_trace(trace: dict, path: str | Path) -> Path:
    """Write a trace dict as JSON, one event per line (stable, diff-friendly), and return the path."""
    path = Path(path)
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    lines = ",\n".join(json.dumps(e, sort_keys=True) for e in trace["traceEvents"])
    text = json.dumps(head, indent=1, sort_keys=True)[:-2] + ',\n "traceEvents": [\n' + lines + "\n]}\n"
    path.write_text(text, encoding="utf-8")
    return path


def is_simulated(trace: dict) -> bool:
    """Return True for a trace that devicelab.sim_trace made (not recorded on a GPU)."""
    return bool(trace.get("devicelab", {}).get("simulated"))


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _complete(cat: str, name: str, start: float, end: float, pid: int, tid: int | None, args: dict) -> dict:
    ts = _us(start)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid if tid is not None else 0,
            "ts": ts, "dur": round(_us(end) - ts, 3), "args": args}


def _metadata(gpu: SimulatedGPU) -> list[dict]:
    def meta(name: str, pid: int, tid: int, value: str) -> dict:
        return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {"name": value}}

    names = {s.id: s.name for s in gpu._streams}
    streams = sorted({r.stream for r in gpu.timeline if r.stream is not None} | {0})
    return [meta("process_name", HOST_PID, 0, f"python ({SIMULATED} host)"),
            meta("thread_name", HOST_PID, HOST_TID, "MainThread"),
            meta("process_name", GPU_PID, 0, f"GPU 0 ({SIMULATED} {gpu.profile.name})"),
            *(meta("thread_name", GPU_PID, stream_tid(s), f"stream {stream_tid(s)} ({names.get(s, s)})")
              for s in streams)]


def stream_tid(stream: int | None) -> int:
    """Return the thread id a trace gives simulated stream `stream` (the default stream is 7, as in CUPTI's).
    """
    return DEFAULT_STREAM_TID if not stream else SIDE_STREAM_TID + stream


def example_step(gpu: SimulatedGPU, prof: SimProfiler, *, pinned: bool, sync_each_step: bool,
                 steps: int = 3) -> None:
    """Simulate a few training steps (one batch copied in, forward, backward, optimizer) under `prof`."""
    from devicelab.units import MiB

    side = gpu.new_stream("copies")
    for _ in range(steps):
        with prof.ops(*TO_OPS):
            if pinned:
                with gpu.stream(side):
                    gpu.copy(8 * MiB, "h2d", pinned=True, non_blocking=True, name="batch")
                gpu.current_stream.wait_stream(side)
            else:
                gpu.copy(8 * MiB, "h2d", pinned=False, name="batch")
        _forward_backward_update(gpu, prof)
        if sync_each_step:
            with prof.ops(*ITEM_OPS):
                gpu.item()
    with prof.ops(*ITEM_OPS):
        gpu.item()


def _forward_backward_update(gpu: SimulatedGPU, prof: SimProfiler) -> None:
    """Queue one training step's kernels of the course's small example model: forward, backward, update."""
    with prof.op("aten::addmm"):
        gpu.launch(0.0004, name="sgemm forward")
    with prof.op("autograd::engine::evaluate_function: AddmmBackward0"):
        gpu.launch(0.0008, name="sgemm backward")
    with prof.op("aten::_foreach_add_"):
        gpu.launch(0.0001, name="sgd update")


def example_trace() -> dict:
    """Return the course's example trace: three simulated training steps with a pageable batch and .item() per
    step.
    """
    gpu = SimulatedGPU(initialized=True)
    with SimProfiler(gpu) as prof:
        example_step(gpu, prof, pinned=False, sync_each_step=True)
    return prof.trace()


def timed_example_step(gpu: SimulatedGPU, prof: SimProfiler, *, sync_each_step: bool, steps: int = 3) -> None:
    """Simulate a few training steps on a batch already on the GPU, each timed with `torch.cuda.synchronize()`
    when `sync_each_step` (lesson 07's worked example); else one wait at the end."""
    for _ in range(steps):
        _forward_backward_update(gpu, prof)
        if sync_each_step:
            gpu.synchronize()  # the step timer: torch.cuda.synchronize(), then perf_counter()
        gpu.host_work(0.0003, "Python between steps (print the step time, next batch)")
    gpu.synchronize()


def timed_example_trace() -> dict:
    """Return lesson 07's worked trace: three simulated steps, each timed with torch.cuda.synchronize()."""
    gpu = SimulatedGPU(initialized=True)
    with SimProfiler(gpu) as prof:
        timed_example_step(gpu, prof, sync_each_step=True)
    return prof.trace()

