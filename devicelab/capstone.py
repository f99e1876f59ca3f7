"""Lesson 08's capstone: a slow training script, and a profiler that runs any version of it on a simulated
GPU.

The script (`Net`, `Photos`, `encode`, `decode`, `build_loader`, `run_epoch`, `stopwatch`, `main`) is real
PyTorch code that runs on any device; `show_script()` prints it. Its dataset does real work on the host for
every image (decoding bytes, a random crop and flip, in torch on the CPU), and its model real work on the GPU
(four convolutions over batches of 256 images of 3x224x224 bytes, 36.8 MiB, 50 steps an epoch). It is slow on
a GPU, and the lesson does not say why: the student finds out from a trace of their own code.

`profile_script(Net, build_loader, run_epoch, machine="H100")` runs the student's versions of those three on
the simulated GPU (`devicelab.simgpu`, on a virtual clock) and records a chrome trace with `SimProfiler`. The
code runs for real, with `meta` tensors standing in for CUDA ones: every `device="cuda"` is redirected to
`meta`, every PyTorch call is seen by a `TorchFunctionMode`, and each one drives the simulated GPU as its CUDA
counterpart would:

| the script does | the simulated GPU does |
| --- | --- |
| `x.to("cuda")`, `.cuda()`, `gpu.copy_(x)` | a host-to-device copy of `x`'s bytes (pageable or pinned) |
| an op on a CUDA tensor (`model(x)`, `loss.backward()`, `optimizer.step()`) | kernels, timed from FLOPs or
bytes |
| `.item()`, `float(t)`, `f"{t:.4f}"`, `.tolist()`, `.cpu()` | a device-to-host copy and a host wait |
| `torch.cuda.Stream()`, `torch.cuda.stream(s)`, `wait_stream`, events | the simulated streams and events |
| iterating the `DataLoader` | host time to decode, collate and pin each batch (main thread or workers) |

A `Machine` is the simulated GPU's profile and its host's: `MACHINES["H100"]` is calibrated to the course's
recordings on an H100 (copy rates, pinning, PyTorch's cost per op, starting workers), `MACHINES["T4"]` to
published figures; each figure names its source, and the ones marked ASSUMPTION are not measurements. The
first batch is made for real (so a dataset's errors surface); later batches are empty tensors of the same
shapes, their making charged from the host's profile. Meta tensors hold no values: losses read on the
simulated GPU are placeholders (0.0). What the trace shows (which calls wait, which copies are pageable, what
overlaps) is the point, and every figure it gives is simulated.
"""

import contextlib
import inspect
import math
import statistics
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, Dataset, Subset

from devicelab.sim_trace import ITEM_OPS, TO_OPS, SimProfiler
from devicelab.simgpu import H100_PCIE5, T4_PCIE3, GPUProfile, SimStream, SimulatedGPU, describe_profile
from devicelab.trace_measures import TraceSummary, show_summary, summarize

__all__ = ["TraceSummary", "show_summary", "summarize"]  # read a trace here too, as lesson 08 does

# ----- the script
# -----------------------------------------------------------------------------------------------


class Net(nn.Module):
    """A small convolutional image classifier that adds a little input noise while training."""

    def __init__(self, classes=10, noise=0.01):
        super().__init__()
        self.noise = noise
        self.body = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, classes))

    def forward(self, x):
        x = x.float() / 255                      # the images arrive as bytes
        if self.training:
            x = x + self.noise * torch.randn(x.shape)
        return self.body(x)


def encode(image):
    """Return an image's bytes as its file holds them: each row stored as differences between pixels."""
    return image.diff(dim=-1, prepend=torch.zeros_like(image[..., :1])).numpy().tobytes()


def decode(data, size):
    """Return the (3, size, size) image of bytes that `encode` stored in `data`."""
    deltas = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(3, size, size)
    return deltas.cumsum(-1, dtype=torch.uint8)


class Photos(Dataset):
    """Colour photos stored as encoded files; each is decoded, cropped and flipped at random when loaded."""

    def __init__(self, n=50 * 256, size=256, crop=224, files=16, seed=0):
        generator = torch.Generator().manual_seed(seed)
        images = torch.randint(0, 256, (files, 3, size, size), generator=generator, dtype=torch.uint8)
        self.files = [encode(image) for image in images]
        self.n, self.size, self.crop = n, size, crop

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        image = decode(self.files[i % len(self.files)], self.size)
        top, left = torch.randint(0, self.size - self.crop + 1, (2,)).tolist()
        image = image[:, top:top + self.crop, left:left + self.crop]
        if torch.rand(()) < 0.5:
            image = image.flip(-1)                 # a horizontal flip
        return image.contiguous(), i % len(self.files) % 10


def build_loader(dataset, device):
    """Return the script's DataLoader for training on `device`."""
    return DataLoader(dataset, batch_size=256, shuffle=True)


def run_epoch(model, loader, optimizer, device):
    """Train one epoch; return the loss of every step."""
    losses = []
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % 10 == 0:
            print(f"step {step}: loss {losses[-1]:.4f}")
    return losses


def stopwatch(fn):
    """Return how long fn() took, in seconds."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(device, images=50 * 256):
    """The whole script: train one epoch of `images` photos on `device` and report its time."""
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = build_loader(Photos(n=images), device)
    seconds = stopwatch(lambda: run_epoch(model, loader, optimizer, device))
    print(f"one epoch: {seconds * 1e3:.1f} ms")


SCRIPT = (Net, encode, decode, Photos, build_loader, run_epoch, stopwatch, main)


def show_script() -> None:
    """Print the script's source, as it is in this module."""
    print("\n\n".join(inspect.getsource(part).rstrip() for part in SCRIPT))


# ----- the machines the script is simulated on
# ------------------------------------------------------------------


@dataclass(frozen=True)
class HostProfile:
    """What the host's side of loading costs on a simulated machine: seconds, and bytes per second."""

    name: str
    decode_s_per_image: float  # Photos.__getitem__: decode, crop and flip one image, in one thread
    collate_Bps: float  # the DataLoader stacking a batch's images (a host copy)
    pin_Bps: float  # pinning a batch (a host copy into page-locked memory)
    worker_handoff_s: float  # receiving a batch from a worker process
    worker_start_s: float  # starting workers: a loader's first epoch, then every epoch unless persistent
    cores: int  # CPU cores: the loop's process keeps one, the workers share the rest
    sources: tuple[tuple[str, str], ...]  # (field, where its figure comes from)


@dataclass(frozen=True)
class Machine:
    """A simulated machine for the capstone: a GPU's profile and its host's, each figure with its source."""

    name: str
    gpu: GPUProfile
    host: HostProfile

    def describe(self) -> str:
        """Return everything the simulated machine runs on, each with its source: the GPU's figures
        (simgpu.describe_profile), the host's, and the choices of the model that turn the script's work into
        time (MODELLING)."""
        lines = [f"{self.name} (SIMULATED): {self.gpu.name}; host: {self.host.name}", "  the GPU:"]
        lines += [f"  {line}" for line in describe_profile(self.gpu).splitlines()[1:]]
        lines.append("  the host:")
        lines += [f"    {field:30} {_shown(field, getattr(self.host, field)):>12}   {source}"
                  for field, source in self.host.sources]
        lines.append("  how the simulation turns the script's work into time (choices of the model, not "
                     "measurements):")
        lines += [f"    {what:30} {how}" for what, how in MODELLING]
        return "\n".join(lines)


def _shown(field: str, value: float) -> str:
    """A host figure in the units a person reads: GB/s for a rate, us or ms for a time, a count as it is."""
    if isinstance(value, int):
        return str(value)
    if field.endswith("_Bps"):
        return f"{value / 1e9:.1f} GB/s"
    return f"{value * 1e6:.0f} us" if value < 1e-3 else f"{value * 1e3:.0f} ms"


_DECODE_SOURCE = ("ASSUMPTION: 90 us, what Photos.__getitem__ took per image (256 images, one thread, with "
                  "collating) on the course's 2-core CPU machine, 2026-11-28; benchmarks/capstone_gpu.py "
                  "prints the GPU host's own figure")
MACHINES = {
    "H100": Machine("H100", H100_PCIE5, HostProfile(
        name="the course's H100 host", decode_s_per_image=90e-6, collate_Bps=10.9e9, pin_Bps=43e9,
        worker_handoff_s=50e-6, worker_start_s=0.10, cores=16,
        sources=(("decode_s_per_image", _DECODE_SOURCE),
                 ("collate_Bps", "ASSUMPTION: the 10.9 GB/s host copy measured on the course's CPU machine"),
                 ("cores", ("ASSUMPTION: 16, what the GPU machines lent to the course have; the H100's host "
                            "was not counted")),
                 ("pin_Bps", ("derived from two medians recorded on an H100's host (lesson 06): a 64 MiB "
                             "upload took 2.83 ms with x.pin_memory() before it and 1.28 ms from memory "
                             "already pinned, so pinning took about 1.55 ms")),
                 ("worker_handoff_s", "ASSUMPTION: a round figure for passing a batch between processes"),
                 ("worker_start_s", ("recorded on an H100's host: 97-170 ms for a new 2-worker loader's "
                                    "first batch (benchmarks/capstone_gpu.py, 2026-11-27)"))))),
    "T4": Machine("T4", T4_PCIE3, HostProfile(
        name="a Colab-like T4 host", decode_s_per_image=90e-6, collate_Bps=10.9e9, pin_Bps=10.9e9,
        worker_handoff_s=50e-6, worker_start_s=0.10, cores=2,
        sources=(("decode_s_per_image", _DECODE_SOURCE),
                 ("collate_Bps", "ASSUMPTION: the 10.9 GB/s host copy measured on the course's CPU machine"),
                 ("cores", ("ASSUMPTION: 2, the vCPUs a free Colab T4 session reports (os.cpu_count()); "
                            "not counted by the course")),
                 ("pin_Bps", "ASSUMPTION: a host copy at the same 10.9 GB/s"),
                 ("worker_handoff_s", "ASSUMPTION: a round figure for passing a batch between processes"),
                 ("worker_start_s", "ASSUMPTION: the H100 host's recorded 97-170 ms, rounded")))),
}
KERNEL_MIN_S = 3e-6  # the shortest kernel (ASSUMPTION: a few microseconds, as small elementwise kernels take)
# How SimCuda and SimLoader turn the script's work into time: every choice the model makes that is not a
# figure of a machine. Machine.describe() lists them; tests/test_lesson08.py checks each against the code.
MODELLING = (
    ("convolutions, matrix products",
     ("ASSUMPTION: 2 x output elements x inner size FLOPs, at the GPU's whole FP32 peak (no tensor cores, "
      "no lost efficiency)")),
    ("the backward pass", "ASSUMPTION: one kernel of 2 x the FLOPs of the forward since the last backward"),
    ("every kernel", f"ASSUMPTION: at least {KERNEL_MIN_S * 1e6:.0f} us, however little it does"),
    ("every other op (elementwise)",
     ("ASSUMPTION: memory-bound: three times its output's bytes (two reads, a write) at the memory "
      "bandwidth, twice the device-to-device copy rate")),
    ("DataLoader workers",
     ("ASSUMPTION: n workers make batches n times as fast while each has a core of its own (the loop's "
      "process keeps one core, the workers share the rest evenly, with no cost for switching between them); "
      "one thread pins their batches, on no core of its own")),
    ("prefetching", ("ASSUMPTION: as PyTorch's loader: batch b is handed to a worker once batch "
                     "b - num_workers x prefetch_factor has reached the loop; workers take batches in turn")),
    ("starting workers", ("ASSUMPTION: worker_start_s for any number of workers, at a loader's first epoch, "
                          "persistent or not, and again every epoch unless persistent_workers=True. "
                          "profile_script's epoch is a later one of a loader made once")),
)


def machine_of(machine: "str | Machine") -> Machine:
    """Return the Machine named `machine` (a key of MACHINES), or `machine` itself."""
    if isinstance(machine, Machine):
        return machine
    if machine not in MACHINES:
        raise ValueError(f"machine must be one of {sorted(MACHINES)} or a Machine, got {machine!r}")
    return MACHINES[machine]


# ----- the host's side of loading, modelled
# ---------------------------------------------------------------------


@dataclass(frozen=True)
class LoaderPlan:
    """What the script's DataLoader asks for, read from the loader itself."""

    batch_size: int
    num_workers: int
    pin_memory: bool
    persistent_workers: bool = False
    prefetch_factor: int = 2  # batches each worker may have ready ahead (PyTorch's default with workers)


class SimLoader:
    """Iterate a DataLoader's dataset in its batches, charging the simulated host what loading them costs.

    The batches follow the loader's own batch sampler (shuffled or not, `drop_last` or not), and the samples
    it hands out, in order, are kept in `order`. Workers (as `_MultiProcessingDataLoaderIter` hands out
    work): each makes every num_workers-th batch, at most num_workers x prefetch_factor batches are asked for
    ahead of the loop, the workers share the host's cores but the one the loop's process keeps, one pinning
    thread pins their batches in turn, and the loop waits for a batch that is not ready. The workers start at
    the loader's first epoch, and again every epoch unless `persistent_workers=True` (MODELLING).
    """

    def __init__(self, loader: DataLoader, runtime: "SimCuda", steps: int | None = None,
                 started: bool = False) -> None:
        self.plan = LoaderPlan(loader.batch_size or 1, loader.num_workers, bool(loader.pin_memory),
                               bool(getattr(loader, "persistent_workers", False)),
                               getattr(loader, "prefetch_factor", None) or 2)
        self.started = started  # whether this loader has run an epoch before (its workers were started)
        self.loader = loader
        self.dataset = loader.dataset
        self.collate = loader.collate_fn
        self.runtime = runtime
        self.steps = steps
        self.handed = 0  # batches handed out so far
        self.order: list[int] = []  # the samples handed out, as indices into the dataset under any Subset

    def __len__(self) -> int:  # DataLoader's own __len__ is this one while the simulation runs
        sampler = self.loader.batch_sampler if self.loader.batch_sampler is not None else self.loader.sampler
        n = len(sampler)
        return n if self.steps is None else min(n, self.steps)

    def _indices(self) -> Iterator[list[int]]:
        """Yield each batch's indices into the loader's dataset, as the loader's batch sampler draws them."""
        if self.loader.batch_sampler is None:  # batch_size=None: one sample per step
            yield from ([i] for i in self.loader.sampler)
        else:
            yield from self.loader.batch_sampler

    def _batches(self) -> Iterator[tuple[Any, int]]:
        """Yield each batch and its number of samples: the first made for real, the rest stand-ins."""
        first, drawn = None, self._indices()
        for _ in range(len(self)):
            with self.runtime.paused():  # the loader's own CPU work (a shuffle draws on torch), untouched
                indices = [int(i) for i in next(drawn)]
                size = len(indices)
                self.order.extend(_underlying(self.dataset, indices))
                if first is None or size != first[1]:
                    first = batch = (self.collate([self.dataset[i] for i in indices]), size)
                else:
                    batch = (_empty_like(first[0]), size)
            yield batch

    def __iter__(self) -> Iterator[Any]:
        gpu, plan, host = self.runtime.gpu, self.plan, self.runtime.host
        workers = plan.num_workers
        if workers and (not self.started or not plan.persistent_workers):
            gpu.host_work(host.worker_start_s, "DataLoader: start the workers")
        self.started = True
        start = pinned_until = gpu.clock()
        # n workers share the cores the loop's process leaves (at least one): each at that share of a core
        slowdown = workers / min(workers, max(1, host.cores - 1)) if workers else 1.0
        ahead = workers * plan.prefetch_factor  # batches asked for before the loop has taken any
        free_at = [start] * workers  # when each worker has finished its last batch
        handed_at: list[float] = []  # when each batch reached the loop
        for b, (batch, size) in enumerate(self._batches()):
            nbytes = sum(t.nbytes for t in _tensors(batch))
            make = size * host.decode_s_per_image + nbytes / host.collate_Bps
            pin = nbytes / host.pin_Bps if plan.pin_memory else 0.0
            if workers == 0:
                gpu.host_work(make, "DataLoader: make the batch (main thread)")
                if pin:
                    gpu.host_work(pin, "DataLoader: pin the batch (main thread)")
            else:
                asked = start if b < ahead else handed_at[b - ahead]  # sent to a worker when one came back
                ready = free_at[b % workers] = max(free_at[b % workers], asked) + make * slowdown
                pinned_until = max(ready, pinned_until) + pin  # one pinning thread, batch after batch
                if pinned_until > gpu.clock():  # the loop's thread waits for the worker (not a CUDA call)
                    gpu.host_work(pinned_until - gpu.clock(), "DataLoader: wait for a worker's batch")
                gpu.host_work(host.worker_handoff_s, "DataLoader: receive the batch from a worker")
            if plan.pin_memory:
                for t in _tensors(batch):
                    self.runtime.pinned.add(t)
            self.handed += 1
            handed_at.append(gpu.clock())
            yield batch


def _underlying(dataset: Dataset, indices: list[int]) -> list[int]:
    """Return `indices` into `dataset` as indices into the dataset under its `Subset`s (a shuffled Subset is a
    shuffle too)."""
    while isinstance(dataset, Subset):
        indices = [int(dataset.indices[i]) for i in indices]
        dataset = dataset.dataset
    return indices


def _empty_like(batch: Any) -> Any:
    """Return a batch of the same structure with new, empty tensors of the same shapes."""
    if isinstance(batch, torch.Tensor):
        return torch.empty_like(batch)
    if isinstance(batch, dict):
        return {k: _empty_like(v) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_empty_like(v) for v in batch)
    return batch


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        return [t for v in batch.values() for t in _tensors(v)]
    if isinstance(batch, list | tuple):
        return [t for v in batch for t in _tensors(v)]
    return []


# ----- CUDA, played by the meta device and the simulated GPU
# ----------------------------------------------------

_SYNCS = {"item", "__float__", "__int__", "__bool__", "__format__", "tolist", "cpu", "numpy", "__repr__"}
_FREE = {"__get__", "__set__", "size", "dim", "numel", "stride", "is_pinned", "view", "reshape", "t",
         "detach",
         "squeeze", "unsqueeze", "expand", "as_strided", "_set_grad_enabled", "_record_function_enter_new",
         "_record_function_exit._RecordFunction", "__len__", "__iter__", "__getitem__", "requires_grad_",
         "zero_", "record_stream", "is_contiguous", "flatten", "__hash__", "__eq__", "data_ptr"}


def _is_cuda(device: Any) -> bool:
    return (isinstance(device, torch.device) and device.type == "cuda") or \
        (isinstance(device, str) and device.startswith("cuda"))


def _redirect(value: Any) -> Any:
    return torch.device("meta") if _is_cuda(value) else value


class SimStreamHandle:
    """torch.cuda.Stream on the simulated GPU."""

    def __init__(self, runtime: "SimCuda", stream: SimStream) -> None:
        self.runtime, self.sim = runtime, stream

    def wait_stream(self, other: "SimStreamHandle") -> None:
        self.sim.wait_stream(other.sim)
        self.runtime.wait(self.sim.id, other.sim.id, self.runtime.queued.get(other.sim.id, 0))

    def wait_event(self, event: "SimEventHandle") -> None:
        event.wait(self)

    def record_event(self, event: "SimEventHandle | None" = None) -> "SimEventHandle":
        event = event if event is not None else SimEventHandle(self.runtime)
        event.record(self)
        return event

    def synchronize(self) -> None:
        self.sim.synchronize()
        self.runtime.host_synced()

    def query(self) -> bool:
        return self.sim.query()

    def __enter__(self) -> "SimStreamHandle":  # noqa: PYI034  (typing.Self needs Python 3.11)
        self._context = self.runtime.gpu.stream(self.sim)
        self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)


class SimEventHandle:
    """torch.cuda.Event on the simulated GPU."""

    def __init__(self, runtime: "SimCuda", *args: object, **kwargs: object) -> None:
        self.runtime, self.sim = runtime, runtime.gpu.event()
        self.mark: tuple[int, int] | None = None  # (stream, how much of its work) when recorded

    def record(self, stream: SimStreamHandle | None = None) -> None:
        sim = stream.sim if stream is not None else self.runtime.gpu.current_stream
        self.sim.record(sim)
        self.mark = (sim.id, self.runtime.queued.get(sim.id, 0))

    def wait(self, stream: SimStreamHandle | None = None) -> None:
        sim = stream.sim if stream is not None else self.runtime.gpu.current_stream
        self.sim.wait(sim)
        if self.mark is not None:
            self.runtime.wait(sim.id, *self.mark)

    def synchronize(self) -> None:
        self.sim.synchronize()
        if self.mark is not None:
            for waiter in [*self.runtime.queued, self.runtime.gpu.current_stream.id]:
                self.runtime.wait(waiter, *self.mark)

    def query(self) -> bool:
        return self.sim.query()


class PinnedSet:
    """The host tensors that are pinned (by identity: tensors compare by value)."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}

    def add(self, tensor: torch.Tensor) -> None:
        self._refs[id(tensor)] = weakref.ref(tensor)

    def __contains__(self, tensor: object) -> bool:
        ref = self._refs.get(id(tensor))
        return ref is not None and ref() is tensor


class SimCuda(TorchFunctionMode):
    """Run PyTorch code written for CUDA on meta tensors, driving a SimulatedGPU and naming operators on
    `prof`.
    """

    def __init__(self, gpu: SimulatedGPU, prof: SimProfiler,
                 host: HostProfile = MACHINES["H100"].host) -> None:
        super().__init__()
        self.gpu, self.prof, self.host = gpu, prof, host
        self.pinned = PinnedSet()
        self.forward_flops = 0.0  # since the last backward: the backward pass costs about twice the forward's
        # Stream order, for uploads used on another stream: how much work each stream has queued, how much of
        # each other stream's work it waits for, and for each uploaded tensor the stream and position of its
        # copy.
        self.queued: dict[int, int] = {}
        self.waited: dict[tuple[int, int], int] = {}
        self.landing: dict[int, tuple[weakref.ref, int, int]] = {}
        self.races: list[str] = []  # kernels that read an upload from another stream without waiting for it
        self._paused = False
        self.handles = {id(gpu.default_stream): SimStreamHandle(self, gpu.default_stream)}
        self.loaders: dict[int, SimLoader] = {}  # DataLoaders made inside the simulated code, by id

    def loader_of(self, loader: DataLoader) -> "SimLoader":
        """Return the SimLoader that stands in for a DataLoader made inside the simulated code."""
        return self.loaders.setdefault(id(loader), SimLoader(loader, self))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Let torch calls run untouched (the loader's own CPU work)."""
        self._paused, before = True, self._paused
        try:
            yield
        finally:
            self._paused = before

    def handle(self, stream: SimStream) -> SimStreamHandle:
        """Return the one handle of a simulated stream."""
        return self.handles.setdefault(id(stream), SimStreamHandle(self, stream))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.device:  # the code may ask which device it was given: it is told "cuda"
            return func(*args, **(kwargs or {}))
        kwargs = {k: _redirect(v) for k, v in (kwargs or {}).items()}
        args = tuple(_redirect(a) for a in args)
        name = getattr(func, "__name__", str(func))
        if name == "cuda" and not self._paused:  # t.cuda(...) is t.to("cuda", ...): the meta device here
            func, args = torch.Tensor.to, (args[0], torch.device("meta"))
            kwargs = {k: v for k, v in kwargs.items() if k == "non_blocking"}
        if self._paused or name in _FREE:
            return func(*args, **kwargs)
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if source is not None and source.device.type == "meta" and name in _SYNCS:
            return self._to_host(name, source, func, args, kwargs)
        if name == "backward":
            with self.prof.op("autograd::engine::evaluate_function"):
                self.gpu.launch(max(KERNEL_MIN_S, 2 * self.forward_flops / self.gpu.profile.flops_per_s),
                                name="backward kernels")
            self.forward_flops = 0.0
            with self.paused():
                return func(*args, **kwargs)
        with self.paused():
            out = func(*args, **kwargs)
        if name in ("to", "cuda", "copy_") and source is not None:
            copied = self._copy(name, source, args, kwargs, out)
            if copied is not None:
                return copied
        if isinstance(out, torch.Tensor) and out.device.type == "meta":
            self._kernel(name, args, out)
        return out

    def _copy(self, name: str, source: torch.Tensor, args: tuple, kwargs: dict, out: Any) -> Any:
        src = args[1] if name == "copy_" and len(args) > 1 else kwargs.get("src", source)
        if not isinstance(out, torch.Tensor) or src.device.type != "cpu" or out.device.type != "meta":
            return None
        non_blocking = bool(kwargs.get("non_blocking", False) or any(a is True for a in args[1:]))
        with self.prof.ops(*TO_OPS):
            copied = self.gpu.copy(src.nbytes, "h2d", pinned=src in self.pinned, non_blocking=non_blocking,
                                   name=f"copy {tuple(src.shape)}")
        del copied
        stream = self.gpu.current_stream.id
        self.landing[id(out)] = (weakref.ref(out), stream, self._queue(stream))
        return out

    def _queue(self, stream: int) -> int:
        """Count one more piece of work on `stream`; return its position there."""
        self.queued[stream] = self.queued.get(stream, 0) + 1
        return self.queued[stream]

    def wait(self, waiter: int, other: int, upto: int) -> None:
        """Record that stream `waiter` waits for the first `upto` pieces of work of stream `other`."""
        self.waited[(waiter, other)] = max(self.waited.get((waiter, other), 0), upto)

    def host_synced(self) -> None:
        """The host waited for the whole device: everything queued so far has landed for every stream."""
        for waiter in [*self.queued, self.gpu.current_stream.id]:
            for other, upto in list(self.queued.items()):
                self.wait(waiter, other, upto)

    def _to_host(self, name: str, source: torch.Tensor, func, args: tuple, kwargs: dict) -> Any:
        if source.numel() == 1 and name != "cpu":
            with self.prof.ops(*ITEM_OPS):
                self.gpu.item()
            value = 0.0 if source.is_floating_point() else 0
            if name == "__format__":
                return format(value, args[1] if len(args) > 1 else "")
            if name == "__repr__":
                return f"tensor({value})"
            return [value] if name == "tolist" and source.dim() else (bool(value) if name == "__bool__"
                                                                      else value)
        with self.prof.ops(*TO_OPS):
            self.gpu.cpu(self.gpu.launch(0.0, nbytes=source.nbytes, name="result"))
        host = torch.zeros(source.shape, dtype=source.dtype)
        return host if name == "cpu" else getattr(host, name)(*args[1:], **kwargs)

    def _kernel(self, name: str, args: tuple, out: torch.Tensor) -> None:
        inner = _inner_size(name, args)
        if inner:
            flops = 2.0 * out.numel() * inner
            self.forward_flops += flops
            seconds = flops / self.gpu.profile.flops_per_s
        else:
            seconds = 3 * out.nbytes / (2 * self.gpu.profile.d2d_Bps)  # read, write: memory-bound
        with self.prof.op(f"aten::{name.strip('_')}"):
            self.gpu.launch(max(KERNEL_MIN_S, seconds), name=name)
        here = self.gpu.current_stream.id
        for arg in args:
            ref, stream, position = self.landing.get(id(arg), (None, here, 0))
            waited = self.waited.get((here, stream), 0)
            if ref is not None and ref() is arg and stream != here and waited < position:
                self.races.append(name)
        self._queue(here)


def _inner_size(name: str, args: tuple) -> int:
    """Return the length of the dot products a matrix multiply or a convolution makes (0 for other ops)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if name in ("conv2d", "conv1d", "conv3d", "convolution") and len(tensors) > 1:
        return math.prod(tensors[1].shape[1:])  # weight: (out_channels, in_channels / groups, *kernel)
    if name == "linear" and len(tensors) > 1:
        return tensors[1].shape[-1]  # weight: (out_features, in_features)
    if name in ("mm", "matmul", "bmm", "__matmul__") and tensors:
        return tensors[0].shape[-1]
    if name == "addmm" and len(tensors) > 1:
        return tensors[1].shape[-1]
    return 0


@contextlib.contextmanager
def simulated_cuda(gpu: SimulatedGPU, prof: SimProfiler,
                   host: HostProfile = MACHINES["H100"].host) -> Iterator[SimCuda]:
    """Inside the block, CUDA code runs on meta tensors and the simulated GPU (streams, events, syncs
    included).
    """
    from unittest import mock

    runtime = SimCuda(gpu, prof, host)
    patches = [
        mock.patch("torch.cuda.Stream", lambda *a, **k: runtime.handle(gpu.new_stream())),
        mock.patch("torch.cuda.Event", lambda *a, **k: SimEventHandle(runtime)),
        mock.patch("torch.cuda.stream", lambda s: s if s is not None else contextlib.nullcontext()),
        mock.patch("torch.cuda.current_stream", lambda *a, **k: runtime.handle(gpu.current_stream)),
        mock.patch("torch.cuda.default_stream", lambda *a, **k: runtime.handle(gpu.default_stream)),
        mock.patch("torch.cuda.synchronize", lambda *a, **k: (gpu.synchronize(), runtime.host_synced())),
        mock.patch("torch.cuda.is_available", lambda: True),
        mock.patch.object(torch.Tensor, "record_stream", lambda self, stream: None),
        mock.patch.object(torch.Tensor, "pin_memory", lambda self, *a: _pin(runtime, self)),
        mock.patch.object(torch.Tensor, "is_pinned", lambda self, *a: self in runtime.pinned),
        mock.patch.object(DataLoader, "__iter__", lambda self: iter(runtime.loader_of(self))),
        mock.patch.object(DataLoader, "__len__", lambda self: len(runtime.loader_of(self))),
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        with runtime:
            yield runtime


def _pin(runtime: "SimCuda", tensor: torch.Tensor) -> torch.Tensor:
    """t.pin_memory(): a host copy into page-locked memory (host time on the simulated clock)."""
    runtime.gpu.host_work(tensor.nbytes / runtime.host.pin_Bps, "pin_memory (host copy)")
    with runtime.paused():
        pinned = tensor.clone()
    runtime.pinned.add(pinned)
    return pinned


@dataclass
class ScriptRun:
    """One epoch of a version of the script on the simulated GPU: its trace, the GPU, and what it returned."""

    trace: dict
    gpu: SimulatedGPU
    result: Any
    seconds: float  # from the first batch until the GPU has finished: the epoch's real (simulated) length
    host_seconds: float  # until run_epoch returned: what a stopwatch without a sync reads
    loader: LoaderPlan
    # kernels that read an uploaded tensor before its copy had landed (a missing stream wait)
    races: list[str]
    steps: int = 0  # batches the loader handed out
    machine: str = "H100"
    order: tuple[int, ...] = ()  # the samples the loaders handed out, in order (indices into the dataset)

    @property
    def shuffled(self) -> bool:
        """Whether the samples came in another order than the dataset's (what `shuffle=True` gives)."""
        return list(self.order) != sorted(self.order)


def profile_script(net: Callable[[], nn.Module] = Net, loader_maker: Callable = build_loader,
                   train: Callable = run_epoch, *, steps: int | None = None, dataset: Dataset | None = None,
                   machine: "str | Machine" = "H100", quiet: bool = True) -> ScriptRun:
    """Run one epoch of the script (your `Net`, `build_loader`, `run_epoch`) on a simulated machine; trace it.

    The epoch is one after the first, as a profile of a training run would be: the script makes its loader
    once, so persistent workers are already running and others start again. Errors a GPU would raise (a
    tensor left on the CPU) are raised here too. `seconds` is the epoch's simulated time, from the first batch
    until the GPU has finished (a sync is added after your loop).
    """
    def epoch(model, data, optimizer, device, runtime):
        with warnings.catch_warnings():  # the simulated host has the cores for them; this machine may not
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            loader = loader_maker(data, device)
        runtime.loaders[id(loader)] = SimLoader(loader, runtime, steps, started=True)
        return train(model, runtime.loaders[id(loader)], optimizer, device)

    return _profile(net, epoch, dataset, machine, quiet)


def profile_training(net: Callable[[], nn.Module], train: Callable, *, dataset: Dataset | None = None,
                     machine: "str | Machine" = "H100", quiet: bool = True) -> ScriptRun:
    """Run `train(model, dataset, optimizer, device)`, which makes its own DataLoader and trains one epoch,
    on a simulated machine; trace it (ps06 grades the capstone's fixed script this way). A loader made in the
    call is new: its workers start, persistent or not, as they would in a real run."""
    def epoch(model, data, optimizer, device, runtime):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            return train(model, data, optimizer, device)

    return _profile(net, epoch, dataset, machine, quiet)


def _profile(net: Callable[[], nn.Module], epoch: Callable, dataset: Dataset | None, machine: "str | Machine",
             quiet: bool) -> ScriptRun:
    chosen = machine_of(machine)
    gpu = SimulatedGPU(chosen.gpu, initialized=True)
    torch.manual_seed(0)
    model = net().to("meta")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = dataset if dataset is not None else Photos()
    out = contextlib.redirect_stdout(_Discard()) if quiet else contextlib.nullcontext()
    with SimProfiler(gpu) as prof, simulated_cuda(gpu, prof, chosen.host) as runtime, out:
        start = gpu.clock()
        result = epoch(model, data, optimizer, torch.device("cuda"), runtime)
        returned = gpu.clock()
        gpu.synchronize()
    loaders = list(runtime.loaders.values())
    plan = loaders[-1].plan if loaders else LoaderPlan(0, 0, False)
    return ScriptRun(prof.trace(), gpu, result, gpu.clock() - start, returned - start, plan, runtime.races,
                     sum(loader.handed for loader in loaders), chosen.name,
                     tuple(i for loader in loaders for i in loader.order))


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


# ----- timing one version against another
# ----------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """One version's timed samples, in seconds."""

    samples: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)


@dataclass(frozen=True)
class Comparison:
    """Two versions timed alternately: `before`, `after`, and how much faster `after` is."""

    before: Spread
    after: Spread

    @property
    def speedup(self) -> float:
        """The ratio of the medians."""
        return self.before.median / self.after.median

    @property
    def beyond_spread(self) -> bool:
        """True when every `after` sample is faster than every `before` sample: the gain is not noise."""
        return self.after.max < self.before.min


def alternate(before: Callable[[], object], after: Callable[[], object], *, sync: Callable[[], object],
              clock: Callable[[], float], runs: int = 7, warmup: int = 1) -> Comparison:
    """Time `before` and `after` in turns, `runs` times each after `warmup` untimed calls of each; each call
    timed from a sync to a sync with `clock`, so that both see the same state of the machine.
    """
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    for _ in range(warmup):
        before()
        after()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        for fn, out in ((before, samples[0]), (after, samples[1])):
            sync()
            start = clock()
            fn()
            sync()
            out.append(clock() - start)
    return Comparison(Spread(tuple(samples[0])), Spread(tuple(samples[1])))


def show_comparison(label: str, comparison: Comparison) -> None:
    """Print a Comparison: min, median and max of each version, and the speedup of the medians."""
    for name, spread in (("before", comparison.before), ("after", comparison.after)):
        print(f"{label:28} {name:6} min {spread.min * 1e3:8.2f} ms  median {spread.median * 1e3:8.2f} ms  "
              f"max {spread.max * 1e3:8.2f} ms  ({len(spread.samples)} runs)")
    verdict = "beyond the spread" if comparison.beyond_spread else "within the spread"
    print(f"{label:28} {comparison.speedup:.2f}x faster (medians), {verdict}")
