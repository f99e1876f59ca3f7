"""Copy/compute overlap in a training-step-shaped loop: copy a batch to the GPU, compute on it, repeat.

Three ways to feed the loop, drawn as timelines of the copy and compute engines:

- "pageable-blocking": `x = batch.to(device)` from ordinary memory, PyTorch's default. The host waits for
  every copy, and the copy sits on the same stream as the compute, so nothing overlaps.
- "pinned-same-stream": `x = batch.to(device, non_blocking=True)` from pinned memory on the default stream.
  The host no longer waits, but one stream runs in order: copy, compute, copy, compute.
- "pinned-side-stream": pinned memory, non_blocking=True, and the copy of the *next* batch issued on a second
  stream while the current batch computes; the compute waits for its own batch with an event. Copy and compute
  overlap. On the GPU the overlap needs a pinned source, a stream other than the compute's, and a free copy
  engine; `non_blocking=True` is what lets the host queue the next kernels while the copy runs (a blocking
  copy on a side stream overlaps only work queued before it).

`simulate_steps` runs them on the simulated T4 (virtual clock, no GPU needed); `measure_steps` runs them on a
real CUDA GPU and reads every span from CUDA events. `compare` picks whichever this machine can do.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from devicelab.simgpu import T4_PCIE3, GPUProfile, SimulatedGPU, TimelineRecord, plot_timeline
from devicelab.units import MiB

MODES = ("pageable-blocking", "pinned-same-stream", "pinned-side-stream")
MODE_LABELS = {
    "pageable-blocking": "pageable memory, blocking copy (the default)",
    "pinned-same-stream": "pinned memory, non_blocking=True, same stream",
    "pinned-side-stream": "pinned memory, non_blocking=True, copy on a side stream",
}
SIMULATED = "simulated T4"
MEASURED = "measured with CUDA events"


@dataclass(frozen=True)
class OverlapRun:
    """One way of feeding the loop: its timeline and how long all the steps took."""

    mode: str
    steps: int
    timeline: tuple[TimelineRecord, ...]
    source: str

    @property
    def label(self) -> str:
        """Return a human description of the mode."""
        return MODE_LABELS[self.mode]

    @property
    def total_s(self) -> float:
        """Return the time from the first device span's start to the last one's end."""
        spans = [r for r in self.timeline if r.engine in ("copy", "compute")]
        return max(r.end for r in spans) - min(r.start for r in spans)

    def busy_s(self, engine: str) -> float:
        """Return the seconds `engine` ("copy" or "compute") spent working."""
        return sum(r.duration for r in self.timeline if r.engine == engine)

    def overlap_s(self) -> float:
        """Return the seconds during which a copy and a kernel ran at the same time."""
        copies = [r for r in self.timeline if r.engine == "copy"]
        kernels = [r for r in self.timeline if r.engine == "compute"]
        return sum(max(0.0, min(c.end, k.end) - max(c.start, k.start)) for c in copies for k in kernels)


def _check(mode: str, steps: int) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")


def simulate_steps(mode: str, steps: int = 4, *, batch_bytes: int = 32 * MiB, compute_s: float = 3e-3,
                   host_s: float = 0.2e-3, profile: GPUProfile = T4_PCIE3) -> OverlapRun:
    """Run `steps` training steps (copy a batch, then compute on it) on the simulated GPU; return the
    timeline.

    `host_s` is the host's own work per step (Python, the optimizer's launches). The default batch (32 MiB)
    takes about 2.7 ms to copy pinned and 6.8 ms pageable on the T4 profile, against 3 ms of compute.
    """
    _check(mode, steps)
    gpu = SimulatedGPU(profile, initialized=True)
    if mode == "pinned-side-stream":
        copy_stream = gpu.new_stream("copy")
        with gpu.stream(copy_stream):
            gpu.copy(batch_bytes, "h2d", pinned=True, non_blocking=True, name="batch 0")
        ready = copy_stream.record_event()
        for step in range(steps):
            gpu.host_work(host_s, f"step {step} (host)")
            gpu.current_stream.wait_event(ready)  # compute on batch `step` waits for its copy only
            if step + 1 < steps:
                with gpu.stream(copy_stream):  # prefetch the next batch while this one computes
                    gpu.copy(batch_bytes, "h2d", pinned=True, non_blocking=True, name=f"batch {step + 1}")
                next_ready = copy_stream.record_event()
            gpu.launch(compute_s, name=f"step {step}")
            if step + 1 < steps:
                ready = next_ready
    else:
        pinned = mode == "pinned-same-stream"
        for step in range(steps):
            gpu.host_work(host_s, f"step {step} (host)")
            gpu.copy(batch_bytes, "h2d", pinned=pinned, non_blocking=pinned, name=f"batch {step}")
            gpu.launch(compute_s, name=f"step {step}")
    gpu.synchronize()
    return OverlapRun(mode, steps, tuple(gpu.timeline), SIMULATED)


def measure_steps(mode: str, steps: int = 4, *, batch_bytes: int = 32 * MiB, matmul_size: int = 2048,
                  matmuls: int = 4, device: Any = None) -> OverlapRun:
    """Run `steps` training steps on a CUDA GPU; time every copy and kernel with CUDA events."""
    import torch

    _check(mode, steps)
    if not torch.cuda.is_available():
        raise RuntimeError("measure_steps needs a CUDA GPU and none is usable here: use simulate_steps")
    device = torch.device("cuda") if device is None else torch.device(device)
    pinned = mode != "pageable-blocking"
    numel = batch_bytes // 4
    batches = [torch.ones(numel, pin_memory=pinned) for _ in range(steps)]
    weight = torch.randn(matmul_size, matmul_size, device=device)
    work = torch.randn(matmul_size, matmul_size, device=device)
    compute_stream = torch.cuda.current_stream(device)
    copy_stream = torch.cuda.Stream(device) if mode == "pinned-side-stream" else compute_stream
    spans: list[tuple[str, int, str, Any, Any]] = []

    def timed(engine: str, stream, name: str, fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record(stream)
            out = fn()
            end.record(stream)
        spans.append((engine, 0 if stream is compute_stream else 1, name, start, end))
        return out

    def compute(x, step):
        def run():
            acc = work
            for _ in range(matmuls):
                acc = acc @ weight
            return acc.sum() + x[0]
        return timed("compute", compute_stream, f"step {step}", run)

    # warm-up: the first matmul and copy pay one-time costs that would hide the pattern
    compute(batches[0].to(device, non_blocking=pinned), -1)
    torch.cuda.synchronize(device)
    spans.clear()
    origin = torch.cuda.Event(enable_timing=True)
    origin.record(compute_stream)
    if mode == "pinned-side-stream":
        x = timed("copy", copy_stream, "batch 0", lambda: batches[0].to(device, non_blocking=True))
        for step in range(steps):
            compute_stream.wait_stream(copy_stream)
            x.record_stream(compute_stream)  # x was made on copy_stream and is used on compute_stream
            current = x
            if step + 1 < steps:
                x = timed("copy", copy_stream, f"batch {step + 1}",
                          lambda s=step: batches[s + 1].to(device, non_blocking=True))
            compute(current, step)
    else:
        for step in range(steps):
            x = timed("copy", compute_stream, f"batch {step}",
                      lambda s=step: batches[s].to(device, non_blocking=pinned))
            compute(x, step)
    torch.cuda.synchronize(device)
    records = tuple(
        TimelineRecord(engine, stream_id, name, origin.elapsed_time(start) / 1e3,
                       origin.elapsed_time(end) / 1e3, "h2d" if engine == "copy" else "kernel")
        for engine, stream_id, name, start, end in spans)
    return OverlapRun(mode, steps, records, MEASURED)


def compare(steps: int = 4, modes: Sequence[str] = MODES, *, on_gpu: bool | None = None,
            **kwargs) -> list[OverlapRun]:
    """Run every mode: measured on a CUDA GPU when there is one, simulated otherwise."""
    if on_gpu is None:
        import torch

        on_gpu = torch.cuda.is_available()
    run = measure_steps if on_gpu else simulate_steps
    return [run(mode, steps, **kwargs) for mode in modes]


def plot_overlap(runs: Sequence[OverlapRun], *, unit: str = "ms") -> Any:
    """Draw each run's timeline, one panel per mode on a shared time axis; return the matplotlib Figure."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(runs), 1, figsize=(10, 1.9 * len(runs) + 0.4), sharex=True, squeeze=False)
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    for ax, run in zip(axes[:, 0], runs, strict=True):
        plot_timeline(run.timeline, ax, unit=unit)
        ax.set_title(f"{run.label}: {run.total_s * scale:.3g} {unit} for {run.steps} steps (overlap "
                     f"{run.overlap_s() * scale:.3g} {unit}; {run.source})", fontsize="medium", loc="left")
        ax.set_xlabel("")
    axes[-1,
         0].set_xlabel(f"time ({unit})" if runs and runs[0].source == MEASURED else f"virtual time ({unit})")
    figure.tight_layout()
    return figure
