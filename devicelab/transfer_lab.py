"""The transfer lab's core: what may be chosen, the sweeps it runs, the runs it keeps, its plot and table.

The widget (`devicelab.transfer_lab_widget`) is a thin view over this module; tests call these functions
directly. Two backends:

- "this machine": real copies measured by `devicelab.copybench` (host copies everywhere; host<->device copies,
  pinned memory and non-blocking copies only with a CUDA GPU);
- "simulated T4": copies on `devicelab.simgpu`'s model of an NVIDIA T4 on PCIe Gen3 x16, with figures from
  public measurements, timed with its simulated CUDA events on a virtual clock (not this machine).

A sweep runs one size per step (`SweepStepper`), each step scheduled on the kernel's event loop, so the kernel
handles other messages, such as a click on Stop, between steps; no thread is involved.
"""

import asyncio
import base64
import io
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from html import escape
from typing import Any

from devicelab import copybench as cb
from devicelab.copybench import CopyResult
from devicelab.simgpu import T4_PCIE3, GPUProfile, SimulatedGPU
from devicelab.timing import format_seconds
from devicelab.units import GB, KiB, MiB, format_bytes

MACHINE = "machine"
SIMULATED = "sim-t4"
SIM_LABEL = "simulated T4"
METHOD_SIMULATED = "simulated CUDA events (virtual clock)"
SIZE_CHOICES = tuple(2**k for k in range(12, 29))  # 4 KiB ... 256 MiB
REPEAT_CHOICES = (1, 3, 5, 10)
QUICK_LARGEST = 16 * MiB

NO_GPU_REASON = ("No CUDA GPU here, so pinned memory is off: t.pin_memory() raises without one, and h2d, d2h "
                 "and d2d copies need one too. This machine can measure host-to-host copies (h2h); choose "
                 f"the {SIM_LABEL} to compare pinned and pageable GPU copies on a model of Colab's GPU.")
NO_GPU_BANNER = ("No CUDA GPU on this machine. 'This machine' can only copy host memory to host memory "
                 "(h2h); to see GPU copies, pinned against pageable, simulate Colab's T4.")
SIMULATED_BANNER = (f"Showing the {SIM_LABEL}: a model of Colab's GPU on PCIe Gen3 x16 (devicelab.simgpu), "
                    "timed on a virtual clock. Nothing here is measured; on a machine with a GPU, "
                    "'this machine' measures the real copies.")
D2D_REASON = "A device-to-device copy uses no host memory, so pinned or pageable does not apply."
H2H_REASON = "A host-to-host copy is always synchronous, so non-blocking does not apply."


@dataclass(frozen=True)
class LabConfig:
    """One sweep the lab can run."""

    backend: str = MACHINE
    direction: str = "h2h"
    host: str = "pageable"
    non_blocking: bool = False
    smallest: int = 4 * KiB
    largest: int = 256 * MiB
    repeats: int = 3

    def sizes(self) -> list[int]:
        """Return the sizes this sweep measures: powers of two from smallest to largest."""
        return cb.size_range(self.smallest, self.largest)

    def label(self) -> str:
        """Return a short legend label such as 'h2d pinned, non-blocking (simulated T4)'."""
        parts = [self.direction]
        if self.direction != "d2d":
            parts.append(self.host)
        text = " ".join(parts) + (", non-blocking" if self.non_blocking else "")
        return f"{text} ({SIM_LABEL if self.backend == SIMULATED else 'this machine'})"


@dataclass(frozen=True)
class LabChoices:
    """What the controls offer for a backend and direction, and why anything is switched off."""

    directions: tuple[str, ...]
    host_enabled: bool
    non_blocking_enabled: bool
    reason: str = ""


def lab_choices(backend: str, direction: str | None = None, cuda: bool | None = None) -> LabChoices:
    """Return the directions offered and which options are enabled, with the reason for any that are not."""
    cuda = cb.cuda_usable() if cuda is None else cuda
    if backend == SIMULATED:
        directions: tuple[str, ...] = cb.GPU_DIRECTIONS
    elif backend == MACHINE:
        if not cuda:
            return LabChoices(("h2h",), host_enabled=False, non_blocking_enabled=False, reason=NO_GPU_REASON)
        directions = cb.DIRECTIONS
    else:
        raise ValueError(f"unknown backend {backend!r}: choose {MACHINE!r} or {SIMULATED!r}")
    direction = direction if direction in directions else directions[0]
    if direction == "d2d":
        return LabChoices(directions, host_enabled=False, non_blocking_enabled=True, reason=D2D_REASON)
    if direction == "h2h":
        return LabChoices(directions, host_enabled=True, non_blocking_enabled=False, reason=H2H_REASON)
    return LabChoices(directions, host_enabled=True, non_blocking_enabled=True)


def banner(backend: str, cuda: bool) -> str:
    """Return what the lab says first about what the student is looking at ("" where a GPU is measured)."""
    if backend == SIMULATED:
        return SIMULATED_BANNER
    return "" if cuda else NO_GPU_BANNER


def backend_options(cuda: bool | None = None) -> list[tuple[str, str]]:
    """Return the (label, value) pairs of the backend menu."""
    cuda = cb.cuda_usable() if cuda is None else cuda
    if cuda:
        import torch

        here = f"this machine ({torch.cuda.get_device_name()})"
    else:
        here = "this machine (CPU only: host copies)"
    return [(here, MACHINE), (f"{SIM_LABEL} (PCIe Gen3 x16, virtual clock)", SIMULATED)]


def normalise(config: LabConfig, cuda: bool | None = None) -> LabConfig:
    """Return `config` with anything the choices switch off set to its only allowed value."""
    choices = lab_choices(config.backend, config.direction, cuda)
    direction = config.direction if config.direction in choices.directions else choices.directions[0]
    choices = lab_choices(config.backend, direction, cuda)
    host = config.host if choices.host_enabled else "pageable"
    non_blocking = config.non_blocking and choices.non_blocking_enabled
    return replace(config, direction=direction, host=host, non_blocking=non_blocking)


# ----- sweeps ---------------------------------------------------------------------------------------------

def simulated_sweep(sizes: Sequence[int], direction: str = "h2d", host: str = "pinned",
                    non_blocking: bool = False,
                    *, repeats: int = 3, profile: GPUProfile = T4_PCIE3) -> Iterator[CopyResult]:
    """Yield one CopyResult per size for copies on a simulated GPU, timed with its events (virtual clock)."""
    sizes = [cb.check_size(n) for n in sizes]
    if direction not in cb.GPU_DIRECTIONS:
        raise ValueError(f"the simulated GPU copies h2d, d2h or d2d, not {direction!r}")
    if host not in cb.HOSTS:
        raise ValueError(f"unknown host memory {host!r}: choose 'pageable' or 'pinned'")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    return _simulated(sizes, direction, host, bool(non_blocking), repeats, profile)


def _simulated(sizes: list[int], direction: str, host: str, non_blocking: bool, repeats: int,
               profile: GPUProfile) -> Iterator[CopyResult]:
    gpu = SimulatedGPU(profile)
    pinned = host == "pinned" and direction != "d2d"
    for nbytes in sizes:
        # warm-up (and context creation)
        gpu.copy(nbytes, direction, pinned=pinned, non_blocking=non_blocking)
        gpu.synchronize()
        samples = []
        for _ in range(repeats):
            # Queue the events and the copy behind a busy kernel, so that they time the copy engine's work
            # and not the host's launch gap (the figures in FACTS.md describe the copy itself).
            gpu.launch(1e-3, name="earlier work")
            start, end = gpu.event(), gpu.event()
            start.record()
            gpu.copy(nbytes, direction, pinned=pinned, non_blocking=non_blocking)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        gpu.clear_timeline()
        samples.sort()
        yield CopyResult(direction=direction, host="" if direction == "d2d" else host,
                         non_blocking=non_blocking,
                         bytes=nbytes, median_s=samples[len(samples) // 2], min_s=samples[0], repeats=repeats,
                         method=METHOD_SIMULATED, device=SIM_LABEL,
                         link_gbps=None if direction == "d2d" else profile.link_peak_Bps / GB)


def start_sweep(config: LabConfig) -> Iterator[CopyResult]:
    """Check `config` and return its sweep (nothing is measured until the first next())."""
    sizes = config.sizes()
    if config.backend == SIMULATED:
        return simulated_sweep(sizes, config.direction, config.host, config.non_blocking,
                               repeats=config.repeats)
    if config.backend != MACHINE:
        raise ValueError(f"unknown backend {config.backend!r}")
    return cb.sweep(sizes, config.direction, config.host, config.non_blocking, repeats=config.repeats)


# ----- runs -----------------------------------------------------------------------------------------------

@dataclass
class Run:
    """One sweep's results so far, and how it ended."""

    config: LabConfig
    results: list[CopyResult] = field(default_factory=list)
    status: str = "running"
    number: int = 1  # its place among the runs on the plot: two runs of the same copy are told apart

    @property
    def label(self) -> str:
        """Return the run's legend label: its number and what it copies ('#2 h2d pinned (simulated T4)')."""
        return f"#{self.number} {self.config.label()}"

    @property
    def link_gbps(self) -> float | None:
        """Return the link limit its results carry, if any."""
        return next((r.link_gbps for r in self.results if r.link_gbps), None)


@dataclass
class LabState:
    """Every run so far, so that a new run is drawn next to the earlier ones."""

    runs: list[Run] = field(default_factory=list)

    def new_run(self, config: LabConfig) -> Run:
        """Start recording a new run and return it (numbered after the runs on the plot)."""
        run = Run(config, number=len(self.runs) + 1)
        self.runs.append(run)
        return run

    def clear(self) -> None:
        """Forget every run."""
        self.runs.clear()


def link_label(run: Run) -> str:
    """Return the legend text of a run's link-limit line."""
    if run.config.backend == SIMULATED:
        return f"PCIe Gen3 x16 limit, {run.link_gbps:.2f} GB/s ({SIM_LABEL})"
    return f"PCIe link limit, {run.link_gbps:.2f} GB/s (NVML)"


def plot_bandwidth(runs: Sequence[Run], ax: Any = None, *, title: str | None = None) -> Any:
    """Draw GB/s against copy size for each run, with each known link limit as a dashed line; return the Axes.
    """
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(8, 4))
    drawn_links: set[float] = set()
    for run in runs:
        if run.results:
            xs = [r.bytes for r in run.results]
            ys = [r.gbps for r in run.results]
            (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=run.label)
            if any(r.repeats > 1 for r in run.results):  # the spread: from the median copy to the fastest
                ax.fill_between(xs, ys, [r.peak_gbps for r in run.results], color=line.get_color(),
                                alpha=0.18, linewidth=0)
            if run.link_gbps and run.link_gbps not in drawn_links:
                drawn_links.add(run.link_gbps)
                ax.axhline(run.link_gbps, linestyle=("--", ":", "-.")[len(drawn_links) % 3 - 1],
                           linewidth=1.2, color="black", label=link_label(run))
    ax.set_xscale("log", base=2)
    ticks = [s for s in SIZE_CHOICES if s in (4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB)]
    ax.set_xticks(ticks, [format_bytes(s) for s in ticks])
    ax.set_xlim(3 * KiB, 350 * MiB)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("copy size (1 KiB = 1024 bytes)")
    ax.set_ylabel("GB/s (10^9 bytes/s)")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(title or "Copy bandwidth by size (line: the median copy; band: up to the fastest)")
    if any(run.results for run in runs):
        ax.legend(fontsize="small", loc="best")
    return ax


def render_png(runs: Sequence[Run], *, figsize: tuple[float, float] = (8, 4), dpi: int = 90) -> bytes:
    """Return the bandwidth plot as PNG bytes (no pyplot, so nothing is shown as a side effect)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=figsize, dpi=dpi)
    plot_bandwidth(runs, figure.subplots())
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.13, top=0.91)  # tight_layout costs a second draw
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def png_html(png: bytes, alt: str = "bandwidth plot") -> str:
    """Return an <img> tag that embeds PNG bytes."""
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"/>'


def results_table_html(run: Run | None) -> str:
    """Return a run's results as an HTML table (empty string when there is no run)."""
    if run is None:
        return ""
    cell = "padding:2px 12px;text-align:right;border-bottom:1px solid #ddd"  # columns that never run together
    header = "".join(f"<th style='{cell}'>{name}</th>" for name in
                     ("size", "median copy", "fastest copy", "GB/s (median)", "link GB/s", "share of link"))
    rows = []
    for r in run.results:
        link = "" if r.link_gbps is None else f"{r.link_gbps:.2f}"
        share = "" if r.share_of_link is None else f"{r.share_of_link:.0%}"
        values = (format_bytes(r.bytes), format_seconds(r.median_s), format_seconds(r.min_s), f"{r.gbps:.2f}",
                  link, share)
        rows.append("<tr>" + "".join(f"<td style='{cell}'>{v}</td>" for v in values) + "</tr>")
    method = escape(run.results[0].method) if run.results else ""
    caption = f"<b>{escape(run.label)}</b>: {escape(run.status)}" + (f"; timed with {method}" if method
                                                                     else "")
    return (f"<div>{caption}</div><table style='border-collapse:collapse;font-family:monospace'>"
            f"<tr>{header}</tr>{''.join(rows)}</table>")


# ----- running a sweep step by step -----------------------------------------------------------------------

Scheduler = Callable[[Callable[[], None]], None]


# the least idle time between two steps, in which the kernel handles waiting messages (Stop)
STEP_GAP_S = 0.01
STEP_GAP_SHARE = 0.5  # ... and at least this share of the last step's duration: a busy kernel needs more
STEP_GAP_MAX_S = 0.2


def step_gap(last_step_s: float, gap_s: float = STEP_GAP_S) -> float:
    """Return how long to leave the event loop to itself after a step that took `last_step_s`."""
    return min(STEP_GAP_MAX_S, max(gap_s, STEP_GAP_SHARE * last_step_s))


def event_loop_scheduler(gap_s: float = STEP_GAP_S) -> Scheduler | None:
    """Return a function that runs a callback on the kernel's event loop after a gap, or None without a loop.

    Call it from the main thread (a widget's click handler). A message such as a click on Stop reaches the
    kernel's handler through several event-loop callbacks; leaving a gap before each step, instead of queueing
    the step at once, lets all of them run first, so Stop takes effect before the next size. The gap grows
    with the step's own duration (a loaded machine slows both), within STEP_GAP_MAX_S.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None:
        try:
            from tornado.ioloop import IOLoop
        except ImportError:
            return None
        loop = IOLoop.current(instance=False)
        if loop is None:
            return None
    running: dict[str, float | None] = {"since": None}

    def schedule(callback: Callable[[], None]) -> None:
        since = running["since"]
        gap = step_gap(time.perf_counter() - since if since is not None else 0.0, gap_s)

        def run() -> None:
            running["since"] = time.perf_counter()
            try:
                callback()
            finally:
                running["since"] = None

        loop.call_later(gap, run)

    return schedule


class SweepStepper:
    """Measure one size per scheduled step, reporting each result, until the sweep ends, fails or is stopped.
    """

    def __init__(self, results: Iterator[CopyResult], schedule: Scheduler | None,
                 on_result: Callable[[CopyResult], None],
                 on_finish: Callable[[str, BaseException | None], None]):
        self._results = results
        self._schedule = schedule
        self._on_result = on_result
        self._on_finish = on_finish
        self._stop_requested = False
        self.state = "ready"  # ready -> running -> done | stopped | error
        self.error: BaseException | None = None
        self.steps = 0

    @property
    def running(self) -> bool:
        """Return True between start() and the end of the sweep."""
        return self.state == "running"

    def start(self) -> None:
        """Begin the sweep: schedule the first step (or, with no scheduler, run every step now)."""
        if self.state != "ready":
            raise RuntimeError(f"this sweep is already {self.state}")
        self.state = "running"
        if self._schedule is None:
            while self.running:
                self.step()
        else:
            self._schedule(self.step)

    def stop(self) -> None:
        """Ask the sweep to stop before its next step (the step in progress, if any, finishes first)."""
        self._stop_requested = True

    def step(self) -> None:
        """Measure the next size and report it, then schedule the following step."""
        if not self.running:
            return
        if self._stop_requested:
            self._finish("stopped")
            return
        try:
            result = next(self._results)
        except StopIteration:
            self._finish("done")
            return
        except Exception as error:  # noqa: BLE001  (shown in the widget instead of escaping into the event loop)
            self._finish("error", error)
            return
        self.steps += 1
        try:
            self._on_result(result)
        except Exception as error:  # noqa: BLE001
            self._finish("error", error)
            return
        if self._schedule is not None and self.running:
            self._schedule(self.step)

    def _finish(self, state: str, error: BaseException | None = None) -> None:
        self.state, self.error = state, error
        close = getattr(self._results, "close", None)
        if close is not None:
            close()  # a generator frees its buffers here
        self._on_finish(state, error)


def quick_config(cuda: bool | None = None) -> LabConfig:
    """Return the small sweep the lab runs on its own when it cannot be interactive."""
    cuda = cb.cuda_usable() if cuda is None else cuda
    direction = "h2d" if cuda else "h2h"
    return LabConfig(backend=MACHINE, direction=direction, host="pinned" if cuda else "pageable",
                     non_blocking=cuda, largest=QUICK_LARGEST, repeats=3)


def run_quick(configs: Sequence[LabConfig] | None = None) -> LabState:
    """Run each config's sweep to the end, at once, and return the state holding the runs."""
    if configs is None:
        configs = [quick_config(), LabConfig(SIMULATED, "h2d", "pageable", largest=QUICK_LARGEST),
                   LabConfig(SIMULATED, "h2d", "pinned", True, largest=QUICK_LARGEST)]
    state = LabState()
    for config in configs:
        run = state.new_run(config)
        stepper = SweepStepper(start_sweep(config), None, run.results.append,
                               lambda status, error, run=run: setattr(run, "status", _status(status, error)))
        stepper.start()
    return state


def _status(state: str, error: BaseException | None) -> str:
    return f"error: {error}" if error is not None else state
