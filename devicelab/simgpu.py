"""A small, deterministic simulated GPU on a virtual clock, for lessons and graders without a GPU.

One host thread queues work onto streams; the device runs it later on one compute engine and on copy engines.
Nothing sleeps: the virtual clock moves only through the model, so the same calls always give the same
numbers. Each call models one PyTorch call (the lessons show them side by side):

| simulator | PyTorch |
| --- | --- |
| `gpu.launch(0.010)` | any CUDA op, e.g. `y = a @ b` (queues a kernel) |
| `gpu.copy(n, "h2d")` | `x.to(device)` from pageable memory |
| `gpu.copy(n, "h2d", pinned=True, non_blocking=True)` | `x_pinned.to(device, non_blocking=True)` |
| `gpu.cpu(buf)` | `t.cpu()` |
| `gpu.to_cpu(buf, non_blocking=True)` | `t.to("cpu", non_blocking=True)` |
| `gpu.to_cpu(buf, non_blocking=True, out=host)` | `host.copy_(t, non_blocking=True)` |
| `gpu.item(buf)` | `t.item()` (a scalar copied into pinned memory, then a stream sync) |
| `buf.read()` | reading a CPU tensor (`host[:4].tolist()`): no sync |
| `gpu.synchronize()` | `torch.cuda.synchronize()` |
| `gpu.launch_graph([d1, d2, ...])` | `g.replay()` of a `torch.cuda.CUDAGraph` (`torch.compile`'s
"reduce-overhead") |
| `gpu.new_stream()`, `gpu.stream(s)`, `gpu.event()` | `torch.cuda.Stream()`, `torch.cuda.stream(s)`,
`torch.cuda.Event()` |

The rules (each one is a fact the course teaches, from docs/facts.md, "Sync points and non_blocking,
precisely"):

- Every enqueue (kernel launch or copy) costs the host `launch_s` (5 us; FACTS: a launch costs ~4-6 us).
  The call then returns: the host runs ahead of the device.
- Work on one stream runs in the order it was queued. Streams are independent (PyTorch's side streams do not
  synchronise with the default stream), except through `wait_event` / `wait_stream`.
- One compute engine runs one kernel at a time. Copies run on `copy_engines` copy engines: with two or more,
  host-to-device copies use one and device-to-host copies another, so an upload and a download can run at the
  same time; copies in the same direction share the link's direction and take turns.
- A blocking copy (`non_blocking=False`, PyTorch's default for `x.to(device)`, `.cuda()`, `.cpu()`) is queued,
  then the host waits for **its stream**, all the work queued on it so far (`cudaMemcpyAsync` +
  `cudaStreamSynchronize`): the default host-to-device copy is a sync point.
- `non_blocking=True` skips that stream sync. From pinned memory the call only queues the copy. From pageable
  memory the host is held while the driver stages the data into its pinned buffer (modelled as the copy's own
  duration, from the moment of the call). The model does not make that call wait for earlier work on the
  stream; a real driver may (CUDA's "API synchronization behavior": "the driver may synchronize with the
  stream" before staging; an H100 did not, for 1 MiB behind 7 ms of work, lesson 05). A copy *into* pageable
  host memory always waits for the copy to finish (CUDA "API synchronization behavior").
- Reading a host buffer is an ordinary CPU read, never a sync point: before its copy has landed it gives the
  memory's old contents, wrapped in `StaleData` so that you can see it (PyTorch gives you the old bytes
  silently).
- `cpu()`, `item()` and `synchronize()` are sync points: the host waits.
- The first device operation pays the context-creation cost (1.5 s: an assumption inside the 1-4 s often
  reported; an H100 measured 0.14-0.18 s, lesson 05).
- At most `queue_depth` operations may be in flight; one more makes the host wait (back-pressure; 1024 is an
  assumption, not a published figure).

`describe_profile(profile)` lists every figure with where it comes from (measurement, datasheet or
assumption).

A function that measures time can be graded against this model, because its work is a closure over the
simulator::

    gpu = SimulatedGPU(initialized=True)
    result = measure(lambda: gpu.launch(0.010), sync=gpu.synchronize, clock=gpu.clock, warmup=1, repeats=5)
"""

import bisect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

Direction = Literal["h2d", "d2h", "d2d"]
ENGINES = ("host", "compute", "copy")


@dataclass(frozen=True)
class GPUProfile:
    """The figures a simulated GPU runs on: costs in seconds, bandwidths in bytes per second (GB/s = 10**9
    B/s).
    """

    name: str
    launch_s: float = 5e-6
    h2d_pinned_Bps: float = 12.4e9
    d2h_pinned_Bps: float = 13.1e9
    h2d_pageable_Bps: float = 12.4e9 / 2.5
    d2h_pageable_Bps: float = 13.1e9 / 2.5
    link_peak_Bps: float = 15.75e9
    copy_latency_s: float = 2.7e-6
    d2d_Bps: float = 160e9
    flops_per_s: float = 8.1e12
    context_init_s: float = 1.5
    queue_depth: int | None = 1024
    copy_engines: int = 2
    # (field, where its figure comes from) for figures whose source differs from PROVENANCE's (the T4's)
    sources: tuple[tuple[str, str], ...] = ()

    def bandwidth(self, direction: Direction, pinned: bool = True) -> float:
        """Return the sustained copy rate in bytes per second for one direction and kind of host memory."""
        if direction == "d2d":
            return self.d2d_Bps
        if direction == "h2d":
            return self.h2d_pinned_Bps if pinned else self.h2d_pageable_Bps
        if direction == "d2h":
            return self.d2h_pinned_Bps if pinned else self.d2h_pageable_Bps
        raise ValueError(f"direction must be 'h2d', 'd2h' or 'd2d', got {direction!r}")

    def copy_seconds(self, nbytes: int, direction: Direction, pinned: bool = True) -> float:
        """Return how long the copy engine is busy moving `nbytes` (a fixed latency plus size over bandwidth).
        """
        return self.copy_latency_s + nbytes / self.bandwidth(direction, pinned)


# NVIDIA T4 on PCIe Gen3 x16, the usual Colab GPU. From FACTS.md: pinned 12.4 GB/s H2D and 13.1 GB/s D2H
# measured in a notebook (15.75 GB/s per-direction limit); a launch ~4-6 us; CUDA start-up often reported as
# 1-4 s (an H100 measured 0.14-0.18 s, lesson 05); half of peak at ~31-36 KiB per copy (FACTS.md's "32-36"
# does not say 1000 or 1024 bytes; this range covers both),
# which a 2.7 us fixed latency reproduces (2.7 us x 12.4 GB/s = 33,480 bytes = 32.7 KiB). Pageable copies are
# 1.2x to 9x slower than pinned across hosts; the default takes 2.5x, the A100 row of FACTS.md
# (25.7 -> 10.0 GB/s H2D, 25.8 -> 10.8 GB/s D2H). Not in FACTS.md, from NVIDIA's T4 datasheet: 8.1 TFLOPS FP32
# peak and 320 GB/s memory, halved for device-to-device copies because a copy reads and writes every byte.
# Assumptions, not measurements: `queue_depth` (1024) is a common rule of thumb for CUDA's launch queue;
# `context_init_s` (1.5 s) is one value inside the 1-4 s often reported; the pageable ratio (2.5x) is one
# host's ratio from a published range (1.2x-9x); `copy_engines` (2) is the smallest count that lets an upload
# and a download overlap (a real GPU reports its own count as `asyncEngineCount` in CUDA's device properties).
T4_PCIE3 = GPUProfile(name="NVIDIA T4, PCIe Gen3 x16")

# NVIDIA A100 on PCIe Gen4 x16. From FACTS.md: pinned 25.7 / 25.8 GB/s, pageable 10.0 / 10.8 GB/s, 31.5 GB/s
# limit. Not in FACTS.md, from NVIDIA's A100 datasheet: 19.5 TFLOPS FP32, 1555 GB/s memory (halved as above).
A100_PCIE4 = GPUProfile(
    name="NVIDIA A100, PCIe Gen4 x16",
    h2d_pinned_Bps=25.7e9,
    d2h_pinned_Bps=25.8e9,
    h2d_pageable_Bps=10.0e9,
    d2h_pageable_Bps=10.8e9,
    link_peak_Bps=31.5e9,
    d2d_Bps=1555e9 / 2,
    flops_per_s=19.5e12,
)


# NVIDIA H100 80GB HBM3 (SXM5) behind PCIe Gen5 x16: the course's recorded GPU. Figures from the course's own
# recordings on it (torch 2.11.0+cu130, 2026-11-27) where there is one, else from the datasheet or assumed.
H100_PCIE5 = GPUProfile(
    name="NVIDIA H100 80GB HBM3, PCIe Gen5 x16",
    launch_s=14.7e-6,
    h2d_pinned_Bps=53.7e9,
    d2h_pinned_Bps=53.8e9,
    h2d_pageable_Bps=6.5e9,
    d2h_pageable_Bps=6.5e9,
    link_peak_Bps=63.0e9,
    d2d_Bps=3.35e12 / 2,
    flops_per_s=67e12,
    context_init_s=0.16,
    sources=(
        ("launch_s", ("recorded on an H100: 1474 us for 100 x.add_(1) from Python, PyTorch's own cost per op "
                     "(lesson 07)")),
        ("h2d_pinned_Bps", "recorded on an H100: 52.6-54.3 GB/s for 64-256 MiB (lesson 06)"),
        ("d2h_pinned_Bps", ("recorded on an H100: 53.8 GB/s for 256 MiB in the transfer lab (the run the "
                           "lessons hold; 54.4 and 55.0 GB/s in the runs before, docs/measurements.md)")),
        ("h2d_pageable_Bps", "recorded on an H100's host: 6.40-6.58 GB/s for 64-256 MiB (lesson 06)"),
        ("d2h_pageable_Bps", "ASSUMPTION: as host to device (not recorded)"),
        ("link_peak_Bps", "PCIe Gen5 x16, as lesson 06's recording prints it"),
        ("copy_latency_s", "ASSUMPTION: the T4's (not recorded)"),
        ("flops_per_s", "NVIDIA H100 SXM datasheet, FP32"),
        ("context_init_s", "recorded on an H100: 0.14-0.18 s (lesson 05)"),
    ),
)


PROVENANCE = {
    "launch_s": ("kernel launch (host side)", "measured: FACTS ~4-6 us per launch"),
    "h2d_pinned_Bps": ("pinned copy host to device", "measured on a T4 in a notebook (FACTS)"),
    "d2h_pinned_Bps": ("pinned copy device to host", "measured on a T4 in a notebook (FACTS)"),
    "h2d_pageable_Bps": ("pageable copy host to device",
                         "ASSUMPTION: pinned / 2.5 (published range 1.2x-9x)"),
    "d2h_pageable_Bps": ("pageable copy device to host",
                         "ASSUMPTION: pinned / 2.5 (published range 1.2x-9x)"),
    "link_peak_Bps": ("link limit, per direction", "PCIe specification (FACTS)"),
    "copy_latency_s": ("fixed cost per copy", "fitted to the measured half-peak size (~31-36 KiB)"),
    "flops_per_s": ("FP32 peak", "vendor datasheet"),
    "context_init_s": ("CUDA context creation",
                       "ASSUMPTION: inside the 1-4 s often reported (an H100: 0.14-0.18 s)"),
    "queue_depth": ("launch queue depth", "ASSUMPTION: a rule of thumb, not a published figure"),
    "copy_engines": ("copy engines", "ASSUMPTION: one per direction; real GPUs report asyncEngineCount"),
}


def describe_profile(profile: "GPUProfile") -> str:
    """Return one line per figure of `profile`: its value and where it comes from (measurement or assumption).
    """
    lines = [profile.name]
    own = dict(profile.sources)
    for field, (what, source) in PROVENANCE.items():
        source = own.get(field, source)
        value = getattr(profile, field)
        if field.endswith("_Bps"):
            shown = f"{value / 1e9:.2f} GB/s"
        elif field == "flops_per_s":
            shown = f"{value / 1e12:.1f} TFLOP/s"
        elif field.endswith("_s") and value is not None and value < 1e-3:
            shown = f"{value * 1e6:.1f} us"
        elif field.endswith("_s"):
            shown = f"{value:.1f} s"
        else:
            shown = str(value)
        lines.append(f"  {what:30} {shown:>12}   {source}")
    return "\n".join(lines)


class NotReadyError(RuntimeError):
    """Raised when a result the device has not finished producing is asked for where PyTorch raises too.

    CUDA events: `elapsed_time` on an event the GPU has not reached raises in PyTorch as well. Reading a host
    buffer early does not raise (PyTorch does not either): it gives `StaleData`.
    """


@dataclass(frozen=True)
class StaleData:
    """What an early read of a host buffer sees: the memory's old contents, marked as stale.

    PyTorch gives the old bytes silently (zeros, garbage or the previous batch); the simulator wraps them so
    that the mistake is visible. `old` is None for freshly allocated memory (uninitialised in PyTorch).
    """

    old: Any
    name: str
    ready_at: float
    read_at: float

    def __repr__(self) -> str:
        what = "uninitialised memory" if self.old is None else repr(self.old)
        return (f"STALE({what}: {self.name or 'the copy'} lands at {self.ready_at * 1e3:.3f} ms, "
                f"read at {self.read_at * 1e3:.3f} ms)")


@dataclass(frozen=True)
class TimelineRecord:
    """One span of work: which engine did it, for which stream, and when on the virtual clock."""

    engine: str
    stream: int | None
    name: str
    start: float
    end: float
    kind: str
    unit: int = 0  # which engine of its kind (copy engine 0, 1, ...); 0 for the host and the compute engine

    @property
    def duration(self) -> float:
        """Return the span's length in seconds."""
        return self.end - self.start


class SimBuffer:
    """Memory that a kernel or copy writes: where it lives, its size, and when its contents are valid."""

    def __init__(
        self, gpu: "SimulatedGPU", nbytes: int, location: str, *, pinned: bool = False, ready_at: float = 0.0,
        name: str = "", data: Any = None, old: Any = None, reads: "tuple[SimBuffer, float] | None" = None,
    ) -> None:
        self.gpu = gpu
        self.old = old  # what the memory held before the copy into it lands (None: freshly allocated)
        self.nbytes = nbytes
        self.location = location
        self.pinned = pinned
        self.ready_at = ready_at
        self.name = name
        self.data = data
        self.reads = reads  # (host buffer, when the copy engine reads it) for a copy of host memory

    @property
    def data(self) -> Any:
        """What the buffer holds: for a copy of host memory, what that memory held when the copy read it."""
        if self.reads is not None:
            source, when = self.reads
            return source.data_at(when)
        return self._writes[-1][1]

    @data.setter
    def data(self, value: Any) -> None:
        self.reads = None
        self._writes = [(self.gpu.clock(), value)]

    def data_at(self, when: float) -> Any:
        """Return what the buffer held at `when` on the virtual clock (the host's writes up to then)."""
        if self.reads is not None:
            return self.data
        held = [value for at, value in self._writes if at <= when]
        return held[-1] if held else self._writes[0][1]

    def __repr__(self) -> str:
        pinned = ", pinned" if self.location == "host" and self.pinned else ""
        return (f"SimBuffer({self.name!r}, {self.nbytes} B on {self.location}{pinned}, "
                f"ready_at={self.ready_at:.6g} s)")

    def is_ready(self) -> bool:
        """Return True once the work that writes this buffer has finished on the virtual clock."""
        return self.gpu.clock() >= self.ready_at

    def read(self) -> Any:
        """Read the buffer from the host, like reading a CPU tensor: no sync, so an early read is `StaleData`.

        Raises TypeError for a device buffer, as `t.numpy()` does for a CUDA tensor.
        """
        if self.location != "host":
            raise TypeError(
                f"{self.name or 'this buffer'} lives on the device: the host cannot read it. "
                "Copy it first with gpu.cpu(buffer) (like tensor.cpu())."
            )
        if not self.is_ready():
            return StaleData(self.old, self.name, self.ready_at, self.gpu.clock())
        return self.data


class SimStream:
    """An in-order queue of device work, like torch.cuda.Stream."""

    def __init__(self, gpu: "SimulatedGPU", stream_id: int, name: str) -> None:
        self.gpu = gpu
        self.id = stream_id
        self.name = name
        self._tail = 0.0  # when the last work queued on this stream ends

    def __repr__(self) -> str:
        return f"SimStream({self.id}, {self.name!r})"

    def query(self) -> bool:
        """Return True when all work queued on this stream has finished."""
        return self.gpu.clock() >= self._tail

    def synchronize(self) -> None:
        """Make the host wait until all work queued on this stream has finished."""
        self.gpu._ensure_context()
        self.gpu._wait_until(self._tail, f"wait for stream {self.name}")

    def wait_event(self, event: "SimEvent") -> None:
        """Make later work on this stream wait for `event` (no-op if the event was never recorded)."""
        if event.time is not None:
            self._tail = max(self._tail, event.time)

    def wait_stream(self, other: "SimStream") -> None:
        """Make later work on this stream wait for everything queued on `other` so far."""
        self._tail = max(self._tail, other._tail)

    def record_event(self, event: "SimEvent | None" = None) -> "SimEvent":
        """Record `event` (or a new one) on this stream and return it."""
        event = event if event is not None else self.gpu.event()
        event.record(self)
        return event


class SimEvent:
    """A marker in a stream, like torch.cuda.Event: query it, wait for it, time between two of them."""

    def __init__(self, gpu: "SimulatedGPU", enable_timing: bool = True) -> None:
        self.gpu = gpu
        self.enable_timing = enable_timing
        self.time: float | None = None  # when the device reaches the marker; None until recorded

    def __repr__(self) -> str:
        return f"SimEvent(time={self.time})"

    def record(self, stream: SimStream | None = None) -> None:
        """Mark the point after all work queued so far on `stream` (default: the current stream)."""
        self.gpu._ensure_context()
        stream = stream if stream is not None else self.gpu.current_stream
        self.time = max(self.gpu.clock(), stream._tail)

    def query(self) -> bool:
        """Return True when the device has passed the marker (always True if never recorded)."""
        return self.time is None or self.gpu.clock() >= self.time

    def synchronize(self) -> None:
        """Make the host wait until the device has passed the marker."""
        if self.time is not None:
            self.gpu._wait_until(self.time, "wait for event")

    def wait(self, stream: SimStream | None = None) -> None:
        """Make later work on `stream` (default: the current stream) wait for this event."""
        (stream if stream is not None else self.gpu.current_stream).wait_event(self)

    def elapsed_time(self, end_event: "SimEvent") -> float:
        """Return the milliseconds between this event and `end_event`, both recorded and completed."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("both events must be created with enable_timing=True")
        if self.time is None or end_event.time is None:
            raise NotReadyError("both events must be recorded before elapsed_time()")
        if not (self.query() and end_event.query()):
            raise NotReadyError("device not ready: synchronize on the end event before elapsed_time()")
        return (end_event.time - self.time) * 1e3


class SimulatedGPU:
    """A deterministic GPU model on a virtual clock: queue kernels and copies, sync, read the timeline."""

    def __init__(self, profile: GPUProfile = T4_PCIE3, *, initialized: bool = False) -> None:
        self.profile = profile
        self._now = 0.0
        self._initialized = initialized
        self._busy: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
        self._in_flight: list[float] = []  # end times of queued device work, for back-pressure
        self._device_done = 0.0  # when all device work queued so far ends
        self._records: list[TimelineRecord] = []
        self._streams: list[SimStream] = []
        self.default_stream = self.new_stream("default")
        self._current = self.default_stream

    def __repr__(self) -> str:
        return f"SimulatedGPU({self.profile.name!r}, clock={self._now:.6g} s)"

    # ----- clock, streams, events, timeline -------------------------------------------------------

    def clock(self) -> float:
        """Return the host's virtual time in seconds."""
        return self._now

    @property
    def timeline(self) -> list[TimelineRecord]:
        """Return every span so far (host launches and waits, kernels, copies), in the order they were made.
        """
        return list(self._records)

    def clear_timeline(self) -> None:
        """Forget the recorded spans (the clock and queued work are kept)."""
        self._records.clear()

    @property
    def current_stream(self) -> SimStream:
        """Return the stream that work goes to when no stream is given."""
        return self._current

    def new_stream(self, name: str | None = None) -> SimStream:
        """Create a stream, like torch.cuda.Stream()."""
        stream = SimStream(self, len(self._streams), name or f"stream{len(self._streams)}")
        self._streams.append(stream)
        return stream

    @contextmanager
    def stream(self, stream: SimStream) -> Iterator[SimStream]:
        """Send work to `stream` inside a `with` block, like torch.cuda.stream(s)."""
        previous, self._current = self._current, stream
        try:
            yield stream
        finally:
            self._current = previous

    def event(self, enable_timing: bool = True) -> SimEvent:
        """Create an event, like torch.cuda.Event(enable_timing=True)."""
        return SimEvent(self, enable_timing)

    # ----- host side ------------------------------------------------------------------------------

    def host_work(self, seconds: float, name: str = "host work") -> None:
        """Spend `seconds` of host time on CPU work (data loading, Python overhead, ...)."""
        _check_non_negative("seconds", seconds)
        self._host_span(seconds, name, "host")

    def synchronize(self) -> None:
        """Make the host wait until all work on all streams has finished, like torch.cuda.synchronize()."""
        self._ensure_context()
        self._wait_until(self._device_done, "synchronize")

    # ----- device work ----------------------------------------------------------------------------

    def launch(
        self, duration_s: float | None = None, *, flops: float | None = None, stream: SimStream | None = None,
        name: str = "kernel", nbytes: int = 0, data: Any = None,
    ) -> SimBuffer:
        """Queue a kernel lasting `duration_s` (or `flops` / the profile's FLOP rate) and return its output.
        """
        if (duration_s is None) == (flops is None):
            raise ValueError("give exactly one of duration_s (seconds) or flops")
        duration = duration_s if duration_s is not None else flops / self.profile.flops_per_s
        _check_non_negative("duration_s" if duration_s is not None else "flops", duration)
        end = self._enqueue("compute", duration, stream, name, "kernel")
        return SimBuffer(self, nbytes, "device", ready_at=end, name=name, data=data)

    def launch_graph(self, durations: Sequence[float], *, stream: SimStream | None = None,
                     name: str = "graph") -> SimBuffer:
        """Replay a captured CUDA graph of kernels (`g.replay()`): one launch for all of them, run back to
        back.

        What a graph saves is the host's per-kernel launch cost; the kernels still run one after another.
        """
        if not durations:
            raise ValueError("a graph needs at least one kernel")
        self._ensure_context()
        stream = stream if stream is not None else self._current
        self._apply_back_pressure()
        self._host_span(self.profile.launch_s, f"graph launch {name}", "launch")
        end = self._now
        for index, duration in enumerate(durations):
            _check_non_negative("duration", duration)
            end = self._place("compute", duration, stream, f"{name} kernel {index}", "kernel")
        return SimBuffer(self, 0, "device", ready_at=end, name=name)

    def copy(
        self, source: int | SimBuffer, direction: Direction | None = None, *, pinned: bool | None = None,
        non_blocking: bool = False, stream: SimStream | None = None, name: str | None = None,
        data: Any = None, out: SimBuffer | None = None,
    ) -> SimBuffer:
        """Queue a copy of `source` (a byte count or a buffer) and return the destination buffer.

        `pinned` is about the host side (the source of an h2d copy, the destination of a d2h copy); for a
        host buffer it defaults to the buffer's own flag. A blocking copy makes the host wait for its stream;
        a non-blocking one from pageable memory holds the host while it is staged (not for earlier work: the
        model's choice, where a real driver may also wait for the stream); a copy into pageable memory waits
        for the copy. `out` (a host buffer, d2h only) is written in place, like `out.copy_(t,
        non_blocking=...)`.
        """
        reads = None
        if isinstance(source, SimBuffer):
            nbytes = source.nbytes
            if data is None and source.location == "host" and out is None:
                reads = source  # the copy engine reads host memory when the copy runs, not when it is queued
            elif data is None:
                data = source.data
            direction = direction or ("h2d" if source.location == "host" else "d2h")
            if (direction == "h2d") != (source.location == "host"):
                raise ValueError(f"a {direction} copy cannot start from {source!r}")
            if pinned is None and source.location == "host":
                pinned = source.pinned
        else:
            nbytes = source
            direction = direction or "h2d"
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"nbytes must be a non-negative int, got {nbytes!r}")
        if direction not in ("h2d", "d2h", "d2d"):
            raise ValueError(f"direction must be 'h2d', 'd2h' or 'd2d', got {direction!r}")
        if out is not None:
            if direction != "d2h" or out.location != "host":
                raise ValueError(f"out= must be a host buffer for a d2h copy, got {out!r}")
            pinned = out.pinned
        pinned = bool(pinned)
        duration = self.profile.copy_seconds(nbytes, direction, pinned)
        label = name or f"{direction} {nbytes} B{' pinned' if pinned else ''}"
        unit = 1 if direction == "d2h" and self.profile.copy_engines > 1 else 0
        end = self._enqueue("copy", duration, stream, label, direction, unit=unit)
        if direction == "d2d":
            pass  # device to device: the host never waits
        elif not non_blocking:
            self._wait_until(end, "wait: stream sync after a blocking copy" if pinned
                             else "wait: pageable copy (staging buffer), then stream sync")
        elif not pinned and direction == "h2d":
            # staging only: the model waits for no earlier work, though CUDA lets a driver sync the stream
            self._wait_until(self._now + duration, "wait: pageable copy (staging buffer)")
        elif not pinned:
            self._wait_until(end, "wait: pageable copy (the host waits for a copy into pageable memory)")
        if out is not None:
            out.old, out.data, out.ready_at, out.name = out.data, data, max(end, out.ready_at), label
            return out
        location = "host" if direction == "d2h" else "device"
        return SimBuffer(self, nbytes, location, pinned=pinned and location == "host", ready_at=end,
                         name=label, data=data, reads=None if reads is None else (reads, end - duration))

    def host_write(self, buffer: SimBuffer, data: Any) -> None:
        """Write `data` into a host buffer now, like `staging.copy_(next_batch)` on the CPU.

        The host waits for nothing, and a queued copy that has not read the buffer yet sends the new data (the
        model takes what the buffer holds when the copy starts; a real write during the copy would tear it).
        """
        if buffer.location != "host":
            raise ValueError(f"{buffer!r} is not host memory: the host cannot write it directly")
        buffer._writes.append((self._now, data))
        buffer.ready_at = max(buffer.ready_at, self._now)

    def host_buffer(self, nbytes: int, *, pinned: bool = False, data: Any = None,
                    name: str = "host") -> SimBuffer:
        """Return a host buffer that is ready now, like `torch.empty(..., pin_memory=pinned)` filled with
        `data`.
        """
        return SimBuffer(self, nbytes, "host", pinned=pinned, ready_at=self._now, name=name, data=data)

    def cpu(self, buffer: SimBuffer, *, stream: SimStream | None = None) -> SimBuffer:
        """Copy a device buffer into pageable host memory and wait for it, like tensor.cpu()."""
        return self.to_cpu(buffer, non_blocking=False, stream=stream)

    def to_cpu(self, buffer: SimBuffer, *, non_blocking: bool = False, stream: SimStream | None = None,
               out: SimBuffer | None = None) -> SimBuffer:
        """Copy a device buffer to the host like tensor.to("cpu", non_blocking=...) (or out.copy_(tensor,
        ...)).

        With non_blocking=True PyTorch writes into pinned memory and returns at once: until a sync point has
        let the copy finish, read() gives `StaleData` (the memory's old contents), as a real read would.
        """
        if buffer.location != "device":
            raise ValueError(f"{buffer!r} is already on the host")
        return self.copy(buffer, "d2h", pinned=non_blocking, non_blocking=non_blocking, stream=stream,
                         name=f"{buffer.name or 'buffer'} to cpu", out=out)

    def item(self, buffer: SimBuffer | None = None, *, stream: SimStream | None = None) -> Any:
        """Copy one scalar to the host and wait, like tensor.item(): a sync point; return the buffer's data.

        PyTorch copies the scalar into pinned host memory (`_local_scalar_dense_cuda`), then syncs the stream.
        """
        scalar = SimBuffer(self, 8, "device", name="scalar") if buffer is None else _with_nbytes(buffer, 8)
        return self.copy(scalar, "d2h", pinned=True, stream=stream, name="item").read()

    # ----- the model's machinery ------------------------------------------------------------------

    def _ensure_context(self) -> None:
        """Pay the one-time context-creation cost on the first device operation."""
        if not self._initialized:
            self._initialized = True
            self._host_span(self.profile.context_init_s, "CUDA context creation", "init")

    def _host_span(self, seconds: float, name: str, kind: str) -> None:
        """Advance the host clock by `seconds`, recording what the host was doing."""
        if seconds > 0:
            self._records.append(TimelineRecord("host", None, name, self._now, self._now + seconds, kind))
            self._now += seconds

    def _wait_until(self, when: float, name: str) -> None:
        """Block the host until virtual time `when` (no-op if it has passed)."""
        self._host_span(when - self._now, name, "wait")

    def _apply_back_pressure(self) -> None:
        """Block the host while the launch queue is full."""
        depth = self.profile.queue_depth
        self._in_flight = [end for end in self._in_flight if end > self._now]
        if depth is not None and len(self._in_flight) >= depth:
            self._in_flight.sort()
            self._wait_until(self._in_flight[len(self._in_flight) - depth], "wait: launch queue full")
            self._in_flight = [end for end in self._in_flight if end > self._now]

    def _enqueue(self, engine: str, duration: float, stream: SimStream | None, name: str, kind: str,
                 unit: int = 0) -> float:
        """Charge the host a launch, place the work on `engine` after its stream's earlier work, return its
        end.
        """
        self._ensure_context()
        stream = stream if stream is not None else self._current
        if stream.gpu is not self:
            raise ValueError(f"{stream!r} belongs to another SimulatedGPU")
        self._apply_back_pressure()
        self._host_span(self.profile.launch_s, f"launch {name}", "launch")
        return self._place(engine, duration, stream, name, kind, unit)

    def _place(self, engine: str, duration: float, stream: SimStream, name: str, kind: str,
               unit: int = 0) -> float:
        """Place work on `engine` after its stream's earlier work (no host cost); return its end."""
        start = self._fit((engine, unit), max(self._now, stream._tail), duration)
        end = start + duration
        if duration > 0:  # an empty span occupies nothing (and would break the sorted-ends invariant)
            starts, ends = self._busy.setdefault((engine, unit), ([], []))
            index = bisect.bisect_right(starts, start)
            starts.insert(index, start)
            ends.insert(index, end)
        stream._tail = end
        self._device_done = max(self._device_done, end)
        self._in_flight.append(end)
        self._records.append(TimelineRecord(engine, stream.id, name, start, end, kind, unit))
        return end

    def _fit(self, engine: tuple[str, int], ready: float, duration: float) -> float:
        """Return the earliest time at or after `ready` when `engine` is free for `duration` seconds."""
        starts, ends = self._busy.get(engine, ([], []))
        t = ready
        for i in range(bisect.bisect_right(ends, t), len(starts)):
            if starts[i] >= t + duration:
                break
            t = max(t, ends[i])
        return t


class KernelSequence:
    """GPU work to time: call `n` queues the `n`-th of `durations` as a kernel; calling it more often fails.
    """

    def __init__(self, gpu: SimulatedGPU, durations: Sequence[float], caller: str = "the timer",
                 name: str = "kernel") -> None:
        self.gpu = gpu
        self.durations = list(durations)
        self.caller = caller
        self.name = name
        self.calls = 0

    def __call__(self) -> None:
        if self.calls >= len(self.durations):
            raise AssertionError(f"{self.caller} called fn more than warmup + repeats = "
                                 f"{len(self.durations)} times.")
        self.gpu.launch(self.durations[self.calls], name=self.name)
        self.calls += 1


def _with_nbytes(buffer: SimBuffer, nbytes: int) -> SimBuffer:
    """Return a copy of `buffer` that claims `nbytes` bytes (same place, readiness and data)."""
    return SimBuffer(buffer.gpu, nbytes, buffer.location, pinned=buffer.pinned, ready_at=buffer.ready_at,
                     name=buffer.name, data=buffer.data)


def _check_non_negative(name: str, value: float) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


_COLOURS = {"launch": "tab:gray", "wait": "lightgray", "init": "tab:purple", "host": "tab:olive",
            "kernel": "tab:blue", "h2d": "tab:orange", "d2h": "tab:green", "d2d": "tab:red"}


def plot_timeline(timeline: Sequence[TimelineRecord], ax: Any = None, *, unit: str = "ms") -> Any:
    """Draw the timeline as one row of bars per engine (host, compute, copy) and return the matplotlib Axes.
    """
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(10, 2.5))
    def row_of(record: TimelineRecord) -> str:
        return record.engine if record.unit == 0 else f"{record.engine} {record.unit}"

    present = {row_of(r) for r in timeline}
    engines = [e for e in ENGINES if e in present]
    engines += sorted(present - set(engines))
    rows = {engine: row for row, engine in enumerate(reversed(engines))}
    seen: set[str] = set()
    for record in timeline:
        label = None if record.kind in seen else record.kind
        seen.add(record.kind)
        ax.broken_barh([(record.start * scale, max(record.duration * scale, 0.0))],
                       (rows[row_of(record)] - 0.4, 0.8),
                       facecolors=_COLOURS.get(record.kind, "tab:brown"), edgecolor="black", linewidth=0.3,
                       label=label)
    ax.set_yticks(list(rows.values()), list(rows.keys()))
    ax.set_xlabel(f"virtual time ({unit})")
    if seen:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return ax
