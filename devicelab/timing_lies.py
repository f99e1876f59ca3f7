"""One operation timed four ways, side by side: the pure core of the "timing lies" widget.

The four ways are a naive host clock (no synchronisation), a synchronised host clock, CUDA events and
`torch.utils.benchmark.Timer`. They run on a real CUDA GPU, on a `SimulatedGPU` (a simulated T4 on its virtual
clock, for machines without a GPU) or on the CPU, where all four agree: a CPU finishes the work inside the
call, so there is no queue for a clock to miss. Tests call these functions directly; the widget in
`devicelab.timing_lies_widget` is a thin view over them.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from devicelab.simgpu import T4_PCIE3, SimulatedGPU
from devicelab.timing import (
    TimingResult,
    _check_args,
    device_sync,
    format_seconds,
    time_it,
    time_naive,
    time_with_benchmark,
    time_with_events,
)

NAIVE = "naive clock"
SYNCED = "synchronised clock"
EVENTS = "CUDA events"
BENCHMARK = "benchmark.Timer"
METHODS = (NAIVE, SYNCED, EVENTS, BENCHMARK)
HOST_MARKERS = "host-clock markers"  # what stands in for CUDA events on a CPU

Target = str | torch.device | SimulatedGPU


class MethodTiming(NamedTuple):
    """One row of a comparison: the method's name, what it measured, and a note on what that means."""

    method: str
    result: TimingResult
    note: str


def target_label(device: Target) -> str:
    """Return how a chart names where the work ran ("simulated NVIDIA T4, ...", "CPU", a GPU's name)."""
    if isinstance(device, SimulatedGPU):
        return f"simulated {device.profile.name}"
    dev = torch.device(device)
    if dev.type == "cpu":
        return "CPU"
    if dev.type == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(dev)} ({dev})"
    return str(dev)


def gpu_target() -> torch.device | SimulatedGPU:
    """Return the real CUDA GPU when one is usable, else a simulated T4 (PCIe Gen3) whose context exists."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    return SimulatedGPU(T4_PCIE3, initialized=True)


def matmul_op(n: int, device: Target) -> Callable[[], object]:
    """Return an operation that multiplies two n x n float32 matrices on `device` (2 n^3 FLOPs per call)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the matrix size must be a positive int, got {n!r}")
    if isinstance(device, SimulatedGPU):
        gpu, flops = device, 2 * n**3
        return lambda: gpu.launch(flops=flops, name=f"matmul {n}x{n}")
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    return lambda: a @ b


def compare_timings(
    op: Callable[[], object],
    *,
    device: Target = "cpu",
    repeats: int = 5,
    warmup: int = 1,
    min_run_time: float = 0.05,
    progress: Callable[[str], None] | None = None,
) -> list[MethodTiming]:
    """Time `op` four ways on `device` ("cpu", a CUDA device or a SimulatedGPU) and return the four rows.

    On a SimulatedGPU, `op` must queue its work on that simulator (for example `lambda: gpu.launch(0.01)`).
    `progress`, if given, is called with each method's name just before that method runs.
    """
    _check_args(op, warmup, repeats)
    if min_run_time <= 0:
        raise ValueError(f"min_run_time must be positive (seconds), got {min_run_time}")
    step = progress if progress is not None else _ignore
    if isinstance(device, SimulatedGPU):
        rows = _on_simulator(op, device, warmup, repeats, min_run_time, step)
    else:
        dev = torch.device(device)
        if dev.type == "cpu":
            rows = _on_cpu(op, warmup, repeats, min_run_time, step)
        elif dev.type == "cuda":
            rows = _on_cuda(op, dev, warmup, repeats, min_run_time, step)
        else:
            raise ValueError("compare_timings runs on 'cpu', a CUDA device or a SimulatedGPU, not "
                             f"{dev.type!r}")
    label = target_label(device)
    return [MethodTiming(m, dataclasses.replace(r, device=label), note) for m, r, note in rows]


def _ignore(_method: str) -> None:
    """Report no progress."""


def _naive_note(naive: TimingResult, honest: TimingResult) -> str:
    note = (f"no sync: the clock stops when the call returns, after {format_seconds(naive.median)}, "
            f"while the work takes {format_seconds(honest.median)}: it measured the enqueue")
    if naive.max > 100 * naive.median:
        note += f"; its first call also paid a one-off start-up cost ({format_seconds(naive.max)})"
    return note


def _benchmark_note(bench: TimingResult) -> str:
    if bench.calls_per_sample == 1:
        return "warms up and synchronises by itself; one call per block"
    return (f"warms up and synchronises by itself; {bench.calls_per_sample} back-to-back calls per block, "
            "so the host queues the next call while the GPU runs this one")


def _on_simulator(op, gpu: SimulatedGPU, warmup: int, repeats: int, min_run_time: float, step) -> list:
    step(NAIVE)
    naive = time_naive(op, repeats=repeats, clock=gpu.clock)
    gpu.synchronize()  # let the naive run's queued work finish, so it does not leak into the next method
    step(SYNCED)
    synced = time_it(op, sync=gpu.synchronize, clock=gpu.clock, warmup=warmup, repeats=repeats)
    step(EVENTS)
    events = _simulated_events(op, gpu, warmup, repeats)
    step(BENCHMARK)
    bench = _simulated_benchmark(op, gpu, min_run_time)
    return [
        (NAIVE, naive, _naive_note(naive, synced)),
        (SYNCED, synced, "sync before starting and before stopping the clock: the work plus one launch"),
        (EVENTS, events, "two markers queued around the work, stamped on the GPU's own clock: no host clock"),
        (BENCHMARK, bench, _benchmark_note(bench) + " (here on the simulator's clock)"),
    ]


def _simulated_events(op, gpu: SimulatedGPU, warmup: int, repeats: int) -> TimingResult:
    """Time `op` with the simulator's events, as time_with_events does with torch.cuda.Event."""
    for _ in range(warmup):
        op()
    samples = []
    for _ in range(repeats):
        start, end = gpu.event(enable_timing=True), gpu.event(enable_timing=True)
        start.record()
        op()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1000.0)
    return TimingResult(samples=tuple(samples), method="simulated CUDA events", device="simulated")


def _simulated_benchmark(op, gpu: SimulatedGPU, min_run_time: float) -> TimingResult:
    """Run the real torch.utils.benchmark.Timer with its clock swapped for the simulator's synchronised one.
    """
    from torch.utils.benchmark import Timer

    def synced_clock() -> float:  # what Timer's default clock does on a GPU: synchronise, then read
        gpu.synchronize()
        return gpu.clock()

    measurement = Timer(stmt="op()", globals={"op": op}, timer=synced_clock).blocked_autorange(
        min_run_time=min_run_time)
    return TimingResult(samples=tuple(float(t) for t in measurement.times), method="torch.utils.benchmark",
                        device="simulated", calls_per_sample=int(measurement.number_per_run))


def _host_markers(op, warmup: int, repeats: int, clock: Callable[[], float]) -> TimingResult:
    """Stamp the host clock around each call: on a CPU that is exactly where an event would sit."""
    for _ in range(warmup):
        op()
    samples = []
    for _ in range(repeats):
        start = clock()
        op()
        samples.append(clock() - start)
    return TimingResult(samples=tuple(samples), method=HOST_MARKERS, device="cpu")


def _on_cpu(op, warmup: int, repeats: int, min_run_time: float, step) -> list:
    import time

    threads = torch.get_num_threads()
    step(NAIVE)
    naive = time_naive(op, repeats=repeats)
    step(SYNCED)
    synced = time_it(op, device="cpu", warmup=warmup, repeats=repeats)
    step(EVENTS)
    markers = _host_markers(op, warmup, repeats, time.perf_counter)
    step(BENCHMARK)
    bench = time_with_benchmark(op, device="cpu", min_run_time=min_run_time, num_threads=threads)
    return [
        (NAIVE, naive, "no sync needed: a CPU finishes the work before the call returns"),
        (SYNCED, synced, "synchronising a CPU does nothing: nothing is ever queued"),
        (EVENTS, markers, ("a CPU has no events to record (torch.Event('cpu').record() raises); host-clock "
                           "stamps around the call stand in for them, since the work happens inside the "
                           "call")),
        (BENCHMARK, bench, (f"num_threads={threads}, PyTorch's own setting (Timer's default, 1 thread, is "
                            f"not what your program uses); {bench.calls_per_sample} call(s) per block")),
    ]


def _on_cuda(op, dev: torch.device, warmup: int, repeats: int, min_run_time: float, step) -> list:
    sync = device_sync(dev)  # raises a clear error when no GPU is usable
    step(NAIVE)
    naive = time_naive(op, repeats=repeats)
    sync()  # let the naive run's queued work finish before the next method starts
    step(SYNCED)
    synced = time_it(op, device=dev, warmup=warmup, repeats=repeats)
    step(EVENTS)
    events = time_with_events(op, warmup=warmup, repeats=repeats, device=dev.index)
    step(BENCHMARK)
    bench = time_with_benchmark(op, device=dev, min_run_time=min_run_time)
    return [
        (NAIVE, naive, _naive_note(naive, synced)),
        (SYNCED, synced, "torch.cuda.synchronize() before starting and before stopping the clock"),
        (EVENTS, events, "torch.cuda.Event markers queued around the work, stamped on the GPU's own clock"),
        (BENCHMARK, bench, _benchmark_note(bench)),
    ]


def compare_matmul(
    n: int,
    *,
    targets: Sequence[Target] | None = None,
    repeats: int = 5,
    warmup: int = 1,
    min_run_time: float = 0.05,
    op_factory: Callable[[int, Target], Callable[[], object]] = matmul_op,
    progress: Callable[[str], None] | None = None,
) -> list[list[MethodTiming]]:
    """Compare the four methods on an n x n matmul, on the GPU (real or simulated) and on the CPU."""
    if targets is None:
        targets = [gpu_target(), "cpu"]
    comparisons = []
    for target in targets:
        label = target_label(target)

        def step(method: str, label: str = label) -> None:
            if progress is not None:
                progress(f"{label}: {method}")

        comparisons.append(compare_timings(op_factory(n, target), device=target, repeats=repeats,
                                           warmup=warmup, min_run_time=min_run_time, progress=step))
    return comparisons


_COLOURS = {NAIVE: "tab:red", SYNCED: "tab:blue", EVENTS: "tab:green", BENCHMARK: "tab:purple"}


def _tick_label(row: MethodTiming) -> str:
    if row.result.method == HOST_MARKERS:
        return f"{row.method}\n(CPU: host stamps)"
    return row.method.replace(" ", "\n", 1)


def plot_comparison(results: Sequence[MethodTiming], ax: Any = None) -> Any:
    """Draw one comparison as bars of median milliseconds per call, each sample as a dot; return the Axes."""
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6, 3.5))
    positions = range(len(results))
    medians = [row.result.median * 1e3 for row in results]
    ax.bar(positions, medians, color=[_COLOURS.get(row.method, "tab:gray") for row in results], alpha=0.75)
    for x, row in zip(positions, results, strict=True):
        samples = [s * 1e3 for s in row.result.samples]
        ax.plot([x] * len(samples), samples, "o", color="black", markersize=3, alpha=0.6)
        ax.annotate(format_seconds(row.result.median), (x, row.result.median * 1e3), ha="center",
                    va="bottom", fontsize="small", xytext=(0, 2), textcoords="offset points")
    values = [v for row in results for v in row.result.samples if v > 0]
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.margins(y=0.15)
    ax.set_xticks(list(positions), [_tick_label(row) for row in results], fontsize="small")
    ax.set_ylabel("ms per call (bar: median)")
    ax.set_title(results[0].result.device if results else "", fontsize="medium")
    return ax


def plot_comparisons(comparisons: Sequence[Sequence[MethodTiming]]) -> Any:
    """Draw several comparisons side by side in one new matplotlib Figure and return it."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(len(comparisons), 1), figsize=(5.5 * max(len(comparisons), 1), 3.8),
                             squeeze=False)
    for results, ax in zip(comparisons, axes[0], strict=False):
        plot_comparison(results, ax)
    fig.tight_layout()
    return fig


def describe_comparison(results: Sequence[MethodTiming]) -> str:
    """Return the comparison as plain text lines: method, median and note."""
    lines = [results[0].result.device if results else ""]
    for row in results:
        lines.append(f"  {row.method:<19} {format_seconds(row.result.median):>9}   {row.note}")
    return "\n".join(lines)
