"""Time a callable honestly: warm up, synchronise the device, report a median.

GPU work is asynchronous: a CUDA call returns once the work is queued, so a host clock read straight after it
measures the enqueue, not the work (see docs/facts.md). Every function here except `time_naive` waits for
the device before it reads a clock; `time_naive` is kept to show the lie.
"""

import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch

METHOD_CLOCK = "host clock"
METHOD_SYNCED = "synchronised host clock"
METHOD_NAIVE = "naive host clock (no sync)"
METHOD_EVENTS = "CUDA events"
METHOD_BENCHMARK = "torch.utils.benchmark"


@dataclass(frozen=True)
class TimingResult:
    """Timed samples of one callable, in seconds, with the statistics a lesson reports."""

    samples: tuple[float, ...]
    method: str
    device: str
    calls_per_sample: int = 1

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("a TimingResult needs at least one sample")

    @property
    def median(self) -> float:
        """Return the median sample: the figure to report, robust to outliers."""
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        """Return the fastest sample."""
        return min(self.samples)

    @property
    def max(self) -> float:
        """Return the slowest sample."""
        return max(self.samples)

    @property
    def mean(self) -> float:
        """Return the mean sample (pulled up by outliers such as a first-call cost)."""
        return statistics.fmean(self.samples)

    @property
    def stdev(self) -> float:
        """Return the sample standard deviation (0.0 for a single sample)."""
        return statistics.stdev(self.samples) if len(self.samples) > 1 else 0.0

    @property
    def iqr(self) -> float:
        """Return the interquartile range, with the same linear interpolation as torch.utils.benchmark."""
        if len(self.samples) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q3 - q1

    def __str__(self) -> str:
        return (
            f"median {format_seconds(self.median)} over {len(self.samples)} samples (min "
            f"{format_seconds(self.min)}, max {format_seconds(self.max)}, IQR {format_seconds(self.iqr)}); "
            f"{self.method} on {self.device}"
        )


def format_seconds(seconds: float) -> str:
    """Return `seconds` as a short human string in s, ms, us or ns."""
    magnitude = abs(seconds)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if magnitude >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _check_args(fn: object, warmup: object, repeats: object) -> None:
    """Raise a clear error for a non-callable, a negative warm-up or no repeats."""
    if not callable(fn):
        raise TypeError(
            f"fn must be a callable, got {type(fn).__name__}: pass the function itself, "
            "for example time_it(step) or time_it(lambda: model(x)), not its result"
        )
    for name, value, least in (("warmup", warmup, 0), ("repeats", repeats, 1)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")


def _no_sync() -> None:
    """Do nothing: CPU work is finished when the call returns."""


def device_sync(device: str | torch.device) -> Callable[[], None]:
    """Return a function that waits until all queued work on `device` has finished."""
    dev = torch.device(device)
    if dev.type in ("cpu", "meta"):
        return _no_sync
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"cannot synchronise {dev}: no CUDA GPU is usable here. "
                "Time on 'cpu', or pass sync= (for example a SimulatedGPU's synchronize)."
            )
        return lambda: torch.cuda.synchronize(dev)
    if dev.type == "mps":
        return torch.mps.synchronize
    raise ValueError(f"don't know how to synchronise a {dev.type!r} device: pass sync= explicitly")


def _run_timed(
    fn: Callable[[], object], warmup: int, repeats: int, clock: Callable[[], float], sync: Callable[[], None]
) -> tuple[float, ...]:
    """Call `fn` `warmup` times untimed, then time `repeats` calls, syncing before each clock read."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        sync()
        start = clock()
        fn()
        sync()
        samples.append(clock() - start)
    return tuple(samples)


def time_it(
    fn: Callable[[], object],
    *,
    device: str | torch.device = "cpu",
    warmup: int = 1,
    repeats: int = 5,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] | None = None,
) -> TimingResult:
    """Time `fn` with a host clock, synchronising the device before starting and before stopping it."""
    _check_args(fn, warmup, repeats)
    if sync is None:
        sync = device_sync(device)
    method = METHOD_CLOCK if sync is _no_sync else METHOD_SYNCED
    samples = _run_timed(fn, warmup, repeats, clock, sync)
    return TimingResult(samples=samples, method=method, device=str(device))


def time_naive(
    fn: Callable[[], object],
    *,
    warmup: int = 0,
    repeats: int = 5,
    clock: Callable[[], float] = time.perf_counter,
    device: str | torch.device = "cpu",
) -> TimingResult:
    """Time `fn` the wrong way, with no synchronisation, to show what it really measures."""
    _check_args(fn, warmup, repeats)
    samples = _run_timed(fn, warmup, repeats, clock, _no_sync)
    return TimingResult(samples=samples, method=METHOD_NAIVE, device=str(device))


def time_with_events(
    fn: Callable[[], object],
    *,
    warmup: int = 1,
    repeats: int = 5,
    device: int | str | torch.device | None = None,
) -> TimingResult:
    """Time `fn` on the GPU's own clock with CUDA events recorded on the current stream around each call."""
    _check_args(fn, warmup, repeats)
    if not torch.cuda.is_available():
        raise RuntimeError(
            "CUDA events need a CUDA GPU and none is usable here: use time_it(fn, device='cpu'), "
            "or a SimulatedGPU's events to see how they work"
        )
    # torch.cuda.device(None) is documented as a no-op; skip it so that nothing touches the driver needlessly.
    selected = nullcontext() if device is None else torch.cuda.device(device)
    samples = []
    with selected:
        for _ in range(warmup):
            fn()
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()  # wait for the events to be recorded before reading them
            samples.append(start.elapsed_time(end) / 1000.0)  # elapsed_time is in milliseconds
    label = "cuda" if device is None else str(torch.device("cuda", device) if isinstance(device, int)
                                              else device)
    return TimingResult(samples=tuple(samples), method=METHOD_EVENTS, device=label)


def time_with_benchmark(
    fn: Callable[[], object],
    *,
    device: str | torch.device = "cpu",
    min_run_time: float = 0.2,
    adaptive: bool = False,
    num_threads: int = 1,
) -> TimingResult:
    """Time `fn` with torch.utils.benchmark.Timer, which warms up and synchronises the accelerator itself."""
    _check_args(fn, 0, 1)
    if min_run_time <= 0:
        raise ValueError(f"min_run_time must be positive (seconds), got {min_run_time}")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"cannot time on {device}: no CUDA GPU is usable here; use device='cpu'")
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=num_threads, description=str(device))
    if adaptive:
        measurement = timer.adaptive_autorange(min_run_time=min_run_time)
    else:
        measurement = timer.blocked_autorange(min_run_time=min_run_time)
    times: Sequence[float] = measurement.times  # per call: each block's time / calls in the block
    return TimingResult(
        samples=tuple(float(t) for t in times),
        method=METHOD_BENCHMARK,
        device=str(device),
        calls_per_sample=int(measurement.number_per_run),
    )
