"""Measure copy bandwidth honestly: host to device, device to host, device to device and host to host.

The rules every measurement here follows (see docs/facts.md):

- Buffers are allocated, and their pages touched, *before* the clock starts: allocating inside a timed region
  measures page faults, not copies (`src.clone()` reaches ~2.5 GB/s where `dst.copy_(src)` reaches ~10.9 GB/s
  on the course's machines).
- One untimed warm-up, then several timed samples; report the median (and the min).
- On a GPU, CUDA events on the copy's stream time the device's own work; on the CPU, a host clock.
- Tiny copies are repeated inside a sample until it lasts about a millisecond, so that the clock's resolution
  does not decide the result; each figure is per copy.
- Units (devicelab.units): sizes are binary (4 KiB, 256 MiB: powers of 1024); bandwidth is GB/s, 10**9 bytes
  per second, as PCIe and GPU datasheets quote it.
- Host-to-host copies run with PyTorch's own number of threads by default, as your code's copies do (on an
  H100 host, one thread reached only 0.6x of NumPy's memcpy-based copy, all 16 reached 2.5x); pass `threads=1`
  for a figure that does not depend on what the other cores are doing.

When NVML (`pip install nvidia-ml-py`) can read the GPU's PCIe link, each host<->device result also carries
the per-direction link limit and the share of it reached. Sweeps yield results one by one, so a plot can grow
as they arrive; closing a sweep early frees its buffers.
"""

import contextlib
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from devicelab.units import GB, GiB, KiB, MiB, format_bytes

DIRECTIONS = ("h2d", "d2h", "d2d", "h2h")
HOSTS = ("pageable", "pinned")
GPU_DIRECTIONS = ("h2d", "d2h", "d2d")
DIRECTION_NAMES = {"h2d": "host to device", "d2h": "device to host", "d2d": "device to device",
                   "h2h": "host to host"}
DEFAULT_SIZES = tuple(2**k for k in range(12, 29))  # 4 KiB, 8 KiB, ..., 256 MiB
CSV_COLUMNS = ("direction", "host", "non_blocking", "bytes", "median_s", "min_s", "gbps", "link_gbps",
               "share_of_link")
METHOD_EVENTS = "CUDA events"
METHOD_CLOCK = "host clock"

# Share of the available host memory a benchmark may take: pageable buffers, and pinned ones (which the
# operating system can never swap out, so taking too much of them starves everything else on the machine).
HOST_MEMORY_SHARE = 0.8
PINNED_MEMORY_SHARE = 0.5

# Per-lane, per-direction PCIe rates in GB/s: transfer rate times line-code efficiency, over 8 bits.
# Gen1-2: 8b/10b; Gen3-5: 128b/130b; Gen6: PAM4 with FLIT mode (242 of 256 bytes carry data).
PCIE_LANE_GBPS = {1: 2.5 * 8 / 10 / 8, 2: 5.0 * 8 / 10 / 8, 3: 8.0 * 128 / 130 / 8, 4: 16.0 * 128 / 130 / 8,
                  5: 32.0 * 128 / 130 / 8, 6: 64.0 * 242 / 256 / 8}


class NoGPUError(RuntimeError):
    """Raised when a measurement needs a CUDA GPU (a GPU direction, or pinned memory) and none is usable."""


class CopyMemoryError(MemoryError):
    """Raised when the buffers for a copy do not fit in host or device memory; nothing stays allocated."""


@dataclass(frozen=True)
class LinkLimit:
    """The PCIe link between host and GPU: generation, lanes and the per-direction limit in GB/s."""

    generation: int
    width: int
    gbps: float
    source: str = "NVML"

    def __str__(self) -> str:
        return f"PCIe Gen{self.generation} x{self.width}: {self.gbps:.2f} GB/s per direction ({self.source})"


@dataclass(frozen=True)
class CopyResult:
    """One measured copy size: what was copied, how long it took per copy, and the bandwidth."""

    direction: str
    host: str  # "pageable" or "pinned"; "" for d2d, where no host memory takes part
    non_blocking: bool
    bytes: int
    median_s: float
    min_s: float
    repeats: int
    method: str = METHOD_CLOCK
    device: str = "cpu"
    link_gbps: float | None = None
    calls_per_sample: int = 1

    @property
    def gbps(self) -> float:
        """Return the bandwidth at the median time, in GB/s (10**9 bytes per second)."""
        return self.bytes / self.median_s / GB

    @property
    def peak_gbps(self) -> float:
        """Return the bandwidth at the fastest sample, in GB/s."""
        return self.bytes / self.min_s / GB

    @property
    def share_of_link(self) -> float | None:
        """Return the median bandwidth as a share of the link limit (0.8 = 80%), or None when unknown."""
        return None if not self.link_gbps else self.gbps / self.link_gbps

    def as_row(self) -> dict[str, object]:
        """Return the result as a CSV row (CSV_COLUMNS), with "" where a value is unknown."""
        share = self.share_of_link
        return {"direction": self.direction, "host": self.host, "non_blocking": self.non_blocking,
                "bytes": self.bytes, "median_s": self.median_s, "min_s": self.min_s, "gbps": self.gbps,
                "link_gbps": "" if self.link_gbps is None else self.link_gbps,
                "share_of_link": "" if share is None else share}


# ----- sizes ----------------------------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB}
_DECIMAL_LABELS = {"kb": "KiB", "mb": "MiB", "gb": "GiB"}
_SIZE = re.compile(r"^\s*(-?[0-9]*\.?[0-9]+)\s*([a-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Return the number of bytes in `text` such as "4KiB", "1.5 MiB", "256M" or "4096" (K = KiB = 1024
    bytes).
    """
    if isinstance(text, bool):
        raise TypeError(f"a size must be a number of bytes or a string such as '4KiB', not {text!r}")
    if isinstance(text, int):
        return check_size(text)
    match = _SIZE.match(str(text).lower().replace("_", ""))
    if match is None:
        raise ValueError(f"cannot read the size {text!r}: write a number of bytes or a number with a unit, "
                         "for example 4096, 4KiB, 1MiB, 256MiB or 1GiB")
    number, unit = match.groups()
    if unit in _DECIMAL_LABELS:
        raise ValueError(f"{text!r}: sizes in this course are binary, so write "
                         f"{number}{_DECIMAL_LABELS[unit]} ({_DECIMAL_LABELS[unit]} = "
                         f"{_UNITS[_DECIMAL_LABELS[unit].lower()]} bytes) or a number of bytes (the course "
                         "keeps decimal units for bandwidth: GB/s = 10**9 bytes per second)")
    if unit not in _UNITS:
        raise ValueError(f"unknown unit {unit!r} in {text!r}: use B, KiB, MiB or GiB (powers of 1024)")
    nbytes = float(number) * _UNITS[unit]
    if nbytes <= 0:
        raise ValueError(f"a copy size must be at least 1 byte, got {text!r}")
    if nbytes != int(nbytes):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return check_size(int(nbytes))


def parse_sizes(text: str) -> list[int]:
    """Return the sizes in a comma-separated list such as "4KiB,1MiB,256MiB"."""
    parts = [part for part in str(text).split(",") if part.strip()]
    if not parts:
        raise ValueError("no sizes given: write them comma-separated, for example 4KiB,1MiB,256MiB")
    return [parse_size(part) for part in parts]


def check_size(nbytes: object) -> int:
    """Return `nbytes` if it is a positive int, else raise a clear error."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"a size must be an int number of bytes, got {type(nbytes).__name__} {nbytes!r}")
    if nbytes <= 0:
        raise ValueError(f"a copy size must be at least 1 byte, got {nbytes}")
    return nbytes


def size_range(smallest: int = 4 * KiB, largest: int = 256 * MiB) -> list[int]:
    """Return the powers of two from `smallest` up to `largest` (both rounded into that grid), ascending."""
    smallest, largest = check_size(smallest), check_size(largest)
    if smallest > largest:
        raise ValueError(f"the smallest size ({format_bytes(smallest)}) is above the largest "
                         f"({format_bytes(largest)})")
    low, high = math.ceil(math.log2(smallest)), math.floor(math.log2(largest))
    sizes = [2**k for k in range(low, high + 1)]
    return sizes or [smallest]


# ----- what this machine has ------------------------------------------------------------------------------

def cuda_usable() -> bool:
    """Return True when PyTorch can use a CUDA GPU here."""
    return torch.cuda.is_available()


def default_direction() -> str:
    """Return the direction to measure when none is asked for: h2d with a GPU, h2h without one."""
    return "h2d" if cuda_usable() else "h2h"


def available_host_bytes() -> int | None:
    """Return how many bytes of RAM can be taken without swapping (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * KiB  # /proc/meminfo writes "kB" but means KiB
    except OSError:
        pass
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        return int(psutil.virtual_memory().available)
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def available_device_bytes(device: torch.device) -> int:
    """Return the free memory of a CUDA device, counting what PyTorch's cache holds but does not use."""
    free, _total = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def pcie_gbps(generation: int, width: int) -> float:
    """Return the per-direction limit in GB/s of a PCIe link (Gen3 x16: 15.75 GB/s)."""
    if generation not in PCIE_LANE_GBPS:
        raise ValueError(f"unknown PCIe generation {generation}")
    return PCIE_LANE_GBPS[generation] * width


def link_limit(device: int | str | torch.device | None = None) -> LinkLimit | None:
    """Return the PCIe link limit of a CUDA device as NVML reports it, or None when it cannot be read.

    Uses the maximum generation and width possible *with this device and this system* (a Gen4 card in a Gen3
    slot reports Gen3), not the current ones, which drop while the GPU idles to save power.
    """
    try:
        import pynvml  # from the optional package nvidia-ml-py
    except ImportError:
        return None
    if not cuda_usable():
        return None
    index = _cuda_index(device)
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001  (no driver, no library: the link is simply unknown)
        return None
    try:
        handle = _nvml_handle(pynvml, index)
        generation = int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
        width = int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
        return LinkLimit(generation, width, pcie_gbps(generation, width))
    except Exception:  # noqa: BLE001  (NVMLError_NotSupported on some boards and VMs; unknown generation)
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _cuda_index(device: int | str | torch.device | None) -> int:
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    dev = torch.device(device)
    return dev.index if dev.index is not None else torch.cuda.current_device()


def _nvml_handle(pynvml, index: int):
    """Find the NVML handle of CUDA device `index` by its PCI bus id (CUDA and NVML may number GPUs apart)."""
    props = torch.cuda.get_device_properties(index)
    bus_id = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    for key in (bus_id, bus_id.encode()):
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(key)
        except Exception:  # noqa: BLE001, S112  (older bindings want bytes; try the next form)
            continue
    return pynvml.nvmlDeviceGetHandleByIndex(index)


# ----- checking a request ---------------------------------------------------------------------------------

def check_request(direction: str, host: str, device: torch.device | None) -> torch.device | None:
    """Validate direction and host; return the CUDA device to use (None for h2h without a GPU)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}: choose one of {', '.join(DIRECTIONS)} (h2d = "
                         "host to device, d2h = device to host, d2d = device to device, h2h = host to host)")
    if host not in HOSTS:
        raise ValueError(f"unknown host memory {host!r}: choose 'pageable' or 'pinned'")
    needs_gpu = direction in GPU_DIRECTIONS or host == "pinned"
    if device is not None:
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"device must be a CUDA device such as 'cuda' or 'cuda:1', got {device}")
    if not needs_gpu:
        return device
    if not cuda_usable():
        what = (f"{direction} ({DIRECTION_NAMES[direction]})" if direction in GPU_DIRECTIONS
                else "pinned host memory (t.pin_memory() raises without a GPU)")
        raise NoGPUError(f"{what} needs a CUDA GPU and none is usable here: measure h2h with pageable "
                         "memory, or use the simulated GPU (devicelab.simgpu)")
    device = device if device is not None else torch.device("cuda", torch.cuda.current_device())
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.index >= torch.cuda.device_count():
        raise ValueError(f"there is no {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def memory_needed(nbytes: int, direction: str) -> tuple[int, int]:
    """Return (host bytes, device bytes) that one measurement of `nbytes` allocates."""
    host_buffers = {"h2d": 1, "d2h": 1, "d2d": 0, "h2h": 2}[direction]
    device_buffers = {"h2d": 1, "d2h": 1, "d2d": 2, "h2h": 0}[direction]
    return host_buffers * nbytes, device_buffers * nbytes


def check_fits(nbytes: int, direction: str, host: str, device: torch.device | None,
               host_bytes: int | None = None, device_bytes: int | None = None) -> None:
    """Raise CopyMemoryError, before anything is allocated, when the buffers for `nbytes` cannot fit."""
    need_host, need_device = memory_needed(nbytes, direction)
    if need_host:
        available = available_host_bytes() if host_bytes is None else host_bytes
        share = PINNED_MEMORY_SHARE if host == "pinned" else HOST_MEMORY_SHARE
        if available is not None and need_host > share * available:
            kind = "pinned (page-locked, never swapped)" if host == "pinned" else "host"
            raise CopyMemoryError(
                f"a {format_bytes(nbytes)} {direction} copy needs {format_bytes(need_host)} of {kind} "
                f"memory, and this machine has {format_bytes(available)} available (at most {share:.0%} of "
                "it may be used): choose smaller sizes")
    if need_device and device is not None:
        available = available_device_bytes(device) if device_bytes is None else device_bytes
        if need_device > available:
            raise CopyMemoryError(
                f"a {format_bytes(nbytes)} {direction} copy needs {format_bytes(need_device)} on {device}, "
                f"and only {format_bytes(available)} is free there: choose smaller sizes")


# ----- buffers --------------------------------------------------------------------------------------------

def _allocate(nbytes: int, where: str, device: torch.device | None, pinned: bool) -> torch.Tensor:
    """Allocate `nbytes` on the host or the device and touch every page, so no page fault lands in a timing.
    """
    if where == "device":
        tensor = torch.empty(nbytes, dtype=torch.uint8, device=device)
    else:
        tensor = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    tensor.fill_(1)
    return tensor


def _release(device: torch.device | None, pinned: bool) -> None:
    """Give cached memory back after a failed allocation, so that an error leaves nothing behind."""
    if device is not None:
        torch.cuda.empty_cache()
    if pinned and hasattr(torch._C, "_host_emptyCache"):
        torch._C._host_emptyCache()


@contextmanager
def copy_buffers(nbytes: int, direction: str, host: str = "pageable", device: torch.device | None = None,
                 allocate: Callable[..., torch.Tensor] = _allocate
                 ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (source, destination) buffers for one copy; free them on exit, and on any error."""
    pinned = host == "pinned"
    where = {"h2d": ("host", "device"), "d2h": ("device", "host"), "d2d": ("device", "device"),
             "h2h": ("host", "host")}[direction]
    buffers: list[torch.Tensor] = []
    try:
        try:
            for side in where:
                buffers.append(allocate(nbytes, side, device, pinned))
        except (torch.OutOfMemoryError, RuntimeError, MemoryError) as error:
            if isinstance(error, RuntimeError) and not _is_out_of_memory(error):
                raise
            buffers.clear()
            _release(device, pinned)
            raise CopyMemoryError(f"out of memory allocating {format_bytes(nbytes)} buffers for a "
                                  f"{direction} copy ({type(error).__name__}): choose smaller sizes. Nothing "
                                  "stays allocated.") from None
        yield buffers[0], buffers[1]
    finally:
        buffers.clear()


def _is_out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate" in text


# ----- timing ---------------------------------------------------------------------------------------------

TARGET_SAMPLE_S = 1e-3  # repeat tiny copies until one sample lasts about this long
MAX_CALLS = 1000


def _calls_for(one_call_s: float) -> int:
    if one_call_s <= 0:
        return MAX_CALLS
    return max(1, min(MAX_CALLS, round(TARGET_SAMPLE_S / one_call_s)))


def _time_on_host(copy: Callable[[], object], warmup: int, repeats: int,
                  clock: Callable[[], float]) -> tuple[list[float], int]:
    for _ in range(warmup):
        copy()
    start = clock()
    copy()
    calls = _calls_for(clock() - start)
    samples = []
    for _ in range(repeats):
        start = clock()
        for _ in range(calls):
            copy()
        samples.append((clock() - start) / calls)
    return samples, calls


def _time_with_events(copy: Callable[[], object], warmup: int, repeats: int,
                      device: torch.device) -> tuple[list[float], int]:
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream()

        def sample(calls: int) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(calls):
                copy()
            end.record(stream)
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / calls  # elapsed_time is in milliseconds

        for _ in range(warmup):
            copy()
        torch.cuda.synchronize(device)
        calls = _calls_for(sample(1))
        return [sample(calls) for _ in range(repeats)], calls


@contextmanager
def _threads(threads: int | None) -> Iterator[None]:
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_counts(repeats: object, warmup: object, threads: object) -> None:
    for name, value, least in (("repeats", repeats, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")


def measure_copy(nbytes: int, direction: str | None = None, host: str = "pageable",
                 non_blocking: bool = False,
                 *, repeats: int = 5, warmup: int = 1, device: str | torch.device | None = None,
                 link: LinkLimit | bool | None = True, threads: int | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> CopyResult:
    """Measure one copy size: buffers made outside the timing, a warm-up, `repeats` samples, the median.

    `link=True` reads the PCIe link with NVML when possible; pass a LinkLimit, or None to leave it out.
    """
    return next(sweep([nbytes], direction, host, non_blocking, repeats=repeats, warmup=warmup, device=device,
                      link=link, threads=threads, clock=clock))


def sweep(sizes: Iterable[int] = DEFAULT_SIZES, direction: str | None = None, host: str = "pageable",
          non_blocking: bool = False, *, repeats: int = 5, warmup: int = 1,
          device: str | torch.device | None = None, link: LinkLimit | bool | None = True,
          threads: int | None = None, clock: Callable[[], float] = time.perf_counter,
          allocate: Callable[..., torch.Tensor] = _allocate) -> Iterator[CopyResult]:
    """Yield one CopyResult per size, in order, as each is measured. Every argument is checked up front.

    The default direction is h2d with a GPU and h2h without one. Closing the generator early (a Stop button,
    `break`) frees the buffers in use.
    """
    direction = default_direction() if direction is None else direction
    sizes = [check_size(n) for n in sizes]
    if not sizes:
        raise ValueError("no sizes to measure")
    _check_counts(repeats, warmup, threads)
    cuda_device = check_request(direction, host, device)
    check_fits(max(sizes), direction, host, cuda_device)
    return _sweep(sizes, direction, host, bool(non_blocking), repeats, warmup, cuda_device, link, threads,
                  clock, allocate)


def _sweep(sizes: list[int], direction: str, host: str, non_blocking: bool, repeats: int, warmup: int,
           device: torch.device | None, link: LinkLimit | bool | None, threads: int | None,
           clock: Callable[[], float], allocate: Callable[..., torch.Tensor]) -> Iterator[CopyResult]:
    if link is True:
        link = link_limit(device) if direction in ("h2d", "d2h") else None
    link_gbps = link.gbps if isinstance(link, LinkLimit) and direction in ("h2d", "d2h") else None
    for nbytes in sizes:
        with copy_buffers(nbytes, direction, host, device, allocate) as (src, dst):

            def copy(src=src, dst=dst) -> None:
                dst.copy_(src, non_blocking=non_blocking)

            if direction in GPU_DIRECTIONS:
                samples, calls = _time_with_events(copy, warmup, repeats, device)
                method, where = METHOD_EVENTS, str(device)
            else:
                with _threads(threads):
                    samples, calls = _time_on_host(copy, warmup, repeats, clock)
                method, where = METHOD_CLOCK, "cpu"
            del copy, src, dst  # the names outlive the with block: drop them so the buffers are freed now
        yield CopyResult(direction=direction, host="" if direction == "d2d" else host,
                         non_blocking=non_blocking,
                         bytes=nbytes, median_s=statistics.median(samples), min_s=min(samples),
                         repeats=repeats, method=method, device=where, link_gbps=link_gbps,
                         calls_per_sample=calls)


UNSTEADY_SPREAD = 3.0  # a median this many times the fastest sample means the samples waited for something


def waited_for_cores(results: Sequence[CopyResult]) -> list[CopyResult]:
    """Return the host-timed results that waited for busy CPU cores rather than copying.

    PyTorch splits a host copy of more than a few KiB over its CPU threads, and each copy waits for its
    slowest thread. When another program holds one of those cores, that thread waits for the scheduler
    (milliseconds), so a 1 MiB copy can take longer than a 64 MiB one. The symptoms: a copy slower than a
    larger copy of the same run, or a median far above the fastest sample.
    """
    timed = [r for r in results if r.method == METHOD_CLOCK]
    slow = []
    for index, result in enumerate(timed):
        larger_and_faster = any(o.bytes > result.bytes and o.median_s < result.median_s
                                for o in timed[index + 1:])
        if larger_and_faster or result.median_s > UNSTEADY_SPREAD * result.min_s:
            slow.append(result)
    return slow


def contention_advice(slow: Sequence[CopyResult], threads: int) -> str:
    """Return what to tell a user whose host copies waited for busy cores (see `waited_for_cores`)."""
    sizes = ", ".join(format_bytes(r.bytes) for r in slow)
    return (f"note: the copies of {sizes} waited for busy CPU cores rather than copying: PyTorch splits a "
            f"host copy over its {threads} threads and each copy waits for the slowest one, which another "
            "program's work on its core delays by milliseconds. Measure again on an idle machine, or with "
            "--threads 1 (one thread needs one free core).")


def table(results: Iterable[CopyResult]) -> str:
    """Return the results as a plain-text table."""
    lines = [table_header()]
    lines += [table_row(r) for r in results]
    return "\n".join(lines)


def table_header() -> str:
    """Return the header line of the plain-text results table."""
    return (f"{'direction':<9} {'host':<8} {'non_blocking':<12} {'size':>8} {'median':>10} {'min':>10} "
            f"{'GB/s':>7} {'link GB/s':>9} {'of link':>7}")


def table_row(result: CopyResult) -> str:
    """Return one result as a line of the plain-text table."""
    from devicelab.timing import format_seconds

    link = "" if result.link_gbps is None else f"{result.link_gbps:.2f}"
    share = "" if result.share_of_link is None else f"{result.share_of_link:.0%}"
    return (f"{result.direction:<9} {result.host or '-':<8} {'yes' if result.non_blocking else 'no':<12} "
            f"{format_bytes(result.bytes):>8} {format_seconds(result.median_s):>10} "
            f"{format_seconds(result.min_s):>10} {result.gbps:>7.2f} {link:>9} {share:>7}")
