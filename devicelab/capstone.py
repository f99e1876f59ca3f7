"""Lesson 08's capstone: a slow training script, and a profiler that runs any version of it on the simulated
GPU.

The script (`Net`, `Images`, `build_loader`, `run_epoch`, `stopwatch`, `main`) is real PyTorch code that runs
on any device; `show_script()` prints it. It is slow on a GPU, and the lesson does not say why: the student
finds out from a trace of their own code.

`profile_script(Net, build_loader, run_epoch)` runs the student's versions of those three on the simulated GPU
(`devicelab.simgpu`, a model of a T4 on a virtual clock) and records a chrome trace with `SimProfiler`. The
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
| iterating the `DataLoader` | host time to make each batch (main thread or `num_workers`) and pin it |

Meta tensors hold no values: losses read on the simulated GPU are placeholders (0.0). What the trace shows
(which calls wait, which copies are pageable, what overlaps) is the point, not the numbers. The figures marked
ASSUMPTION below are round values for this model, not measurements.
"""

import contextlib
import inspect
import math
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, Dataset

from devicelab.sim_trace import ITEM_OPS, TO_OPS, SimProfiler
from devicelab.simgpu import SimStream, SimulatedGPU

# ----- the script
# -----------------------------------------------------------------------------------------------


class Net(nn.Module):
    """A small image classifier that adds a little input noise while training."""

    def __init__(self, features=3 * 32 * 32, hidden=1024, classes=10, noise=0.01):
        super().__init__()
        self.noise = noise
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        if self.training:
            x = x + self.noise * torch.randn(x.shape)
        return self.body(x)


class Images(Dataset):
    """Random 32x32 colour images, flattened, with a label; each one is augmented when it is loaded."""

    def __init__(self, n=2048, seed=0):
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 3 * 32 * 32, generator=generator)
        self.y = self.x[:, :8].sum(dim=1).gt(0).long() + 2 * self.x[:, 8:16].sum(dim=1).gt(0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i].view(3, 32, 32).flip(-1).reshape(-1)   # a horizontal flip
        return x, self.y[i]


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
        if step % 4 == 0:
            print(f"step {step}: loss {losses[-1]:.4f}")
    return losses


def stopwatch(fn):
    """Return how long fn() took, in seconds."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(device):
    """The whole script: train one epoch on `device` and report its time."""
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = build_loader(Images(), device)
    seconds = stopwatch(lambda: run_epoch(model, loader, optimizer, device))
    print(f"one epoch: {seconds * 1e3:.1f} ms")


SCRIPT = (Net, Images, build_loader, run_epoch, stopwatch, main)


def show_script() -> None:
    """Print the script's source, as it is in this module."""
    print("\n\n".join(inspect.getsource(part).rstrip() for part in SCRIPT))


# ----- the host's side of loading, modelled
# ---------------------------------------------------------------------

# ASSUMPTIONS, not measurements: decoding and augmenting one image on the host (the real cost of a dataset
# that reads JPEG files; this synthetic one only flips), the cost of handing a batch from a worker process to
# the loop, and the rate of the host copy that pinning a batch makes (near the 10.9 GB/s FACTS.md measured for
# host copies). Not modelled: starting the worker processes, paid at every epoch unless
# persistent_workers=True (97-170 ms for 2 workers on the course's H100 host, benchmarks/capstone_gpu.py).
LOAD_S_PER_SAMPLE = 4e-6
WORKER_HANDOFF_S = 50e-6
HOST_COPY_Bps = 10e9
KERNEL_MIN_S = 3e-6  # the shortest kernel (ASSUMPTION: a few microseconds, as small elementwise kernels take)
DEVICE_MEMORY_Bps = 320e9  # T4 memory bandwidth (datasheet), for ops that only move bytes


@dataclass(frozen=True)
class LoaderPlan:
    """What the script's DataLoader asks for, read from the loader itself."""

    batch_size: int
    num_workers: int
    pin_memory: bool


class SimLoader:
    """Iterate a DataLoader's dataset in its batches, charging the simulated host what loading them costs."""

    def __init__(self, loader: DataLoader, runtime: "SimCuda", steps: int | None = None) -> None:
        self.plan = LoaderPlan(loader.batch_size or 1, loader.num_workers, bool(loader.pin_memory))
        self.dataset = loader.dataset
        self.collate = loader.collate_fn
        self.runtime = runtime
        self.steps = steps

    def __len__(self) -> int:
        n = math.ceil(len(self.dataset) / self.plan.batch_size)
        return n if self.steps is None else min(n, self.steps)

    def __iter__(self) -> Iterator[Any]:
        gpu, plan = self.runtime.gpu, self.plan
        start, pinned_until = gpu.clock(), gpu.clock()
        for b in range(len(self)):
            with self.runtime.paused():
                items = [self.dataset[i] for i in range(b * plan.batch_size,
                                                        min((b + 1) * plan.batch_size, len(self.dataset)))]
                batch = self.collate(items)
            nbytes = sum(t.nbytes for t in _tensors(batch))
            load, pin = LOAD_S_PER_SAMPLE * len(items), (nbytes / HOST_COPY_Bps if plan.pin_memory else 0.0)
            if plan.num_workers == 0:
                gpu.host_work(load, "DataLoader: make the batch (main thread)")
                if pin:
                    gpu.host_work(pin, "DataLoader: pin the batch (main thread)")
            else:
                # each worker makes every num_workers-th batch
                ready = start + (b // plan.num_workers + 1) * load
                pinned_until = max(ready, pinned_until) + pin  # one pinning thread, batch after batch
                if pinned_until > gpu.clock():  # the loop's thread waits for the worker (not a CUDA call)
                    gpu.host_work(pinned_until - gpu.clock(), "DataLoader: wait for a worker's batch")
                gpu.host_work(WORKER_HANDOFF_S, "DataLoader: receive the batch from a worker")
            if plan.pin_memory:
                for t in _tensors(batch):
                    self.runtime.pinned.add(t)
            yield batch


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

    def __init__(self, gpu: SimulatedGPU, prof: SimProfiler) -> None:
        super().__init__()
        self.gpu, self.prof = gpu, prof
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
        kwargs = {k: _redirect(v) for k, v in (kwargs or {}).items()}
        args = tuple(_redirect(a) for a in args)
        name = getattr(func, "__name__", str(func))
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
            seconds = 3 * out.nbytes / DEVICE_MEMORY_Bps
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
    """Return the length of the dot products a matrix multiply makes (0 for other ops)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if name == "linear" and len(tensors) > 1:
        return tensors[1].shape[-1]  # weight: (out_features, in_features)
    if name in ("mm", "matmul", "bmm", "__matmul__") and tensors:
        return tensors[0].shape[-1]
    if name == "addmm" and len(tensors) > 1:
        return tensors[1].shape[-1]
    return 0


@contextlib.contextmanager
def simulated_cuda(gpu: SimulatedGPU, prof: SimProfiler) -> Iterator[SimCuda]:
    """Inside the block, CUDA code runs on meta tensors and the simulated GPU (streams, events, syncs
    included).
    """
    from unittest import mock

    runtime = SimCuda(gpu, prof)
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
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        with runtime:
            yield runtime


def _pin(runtime: SimCuda, tensor: torch.Tensor) -> torch.Tensor:
    """t.pin_memory(): a host copy into page-locked memory (host time on the simulated clock)."""
    runtime.gpu.host_work(tensor.nbytes / HOST_COPY_Bps, "pin_memory (host copy)")
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


def profile_script(net: Callable[[], nn.Module] = Net, loader_maker: Callable = build_loader,
                   train: Callable = run_epoch, *, steps: int | None = None, dataset: Dataset | None = None,
                   quiet: bool = True) -> ScriptRun:
    """Run one epoch of the script (your `Net`, `build_loader`, `run_epoch`) on the simulated GPU; trace it.

    Errors a GPU would raise (a tensor left on the CPU) are raised here too. `seconds` is the epoch's
    simulated time, from the first batch until the GPU has finished (a sync is added after your loop).
    """
    gpu = SimulatedGPU(initialized=True)
    torch.manual_seed(0)
    model = net().to("meta")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = loader_maker(dataset if dataset is not None else Images(), torch.device("cuda"))
    out = contextlib.redirect_stdout(_Discard()) if quiet else contextlib.nullcontext()
    with SimProfiler(gpu) as prof, simulated_cuda(gpu, prof) as runtime, out:
        sim_loader = SimLoader(loader, runtime, steps)
        start = gpu.clock()
        result = train(model, sim_loader, optimizer, torch.device("cuda"))
        returned = gpu.clock()
        gpu.synchronize()
    return ScriptRun(prof.trace(), gpu, result, gpu.clock() - start, returned - start, sim_loader.plan,
                     runtime.races)


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


# ----- reading a trace
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceSummary:
    """What a trace says about host waits, copies and the GPU's busy time (seconds)."""

    waits: dict[str, int]  # innermost operator (or "(no operator)") -> host waits inside it
    # host time in sync calls and in copies that held the host (cudaMemcpyAsync longer than 50 us)
    wait_s: float
    copies: dict[str, int]  # gpu_memcpy name -> count
    copy_s: float
    kernel_s: float
    overlap: float  # fraction of h2d copy time with a kernel running
    loader_s: float  # host time spent in the DataLoader
    span_s: float  # from the first event to the last
    gpu_busy_s: float  # time with a kernel or a copy running on the GPU


# The host's rows for getting batches: the simulated GPU's, and torch.profiler's around each next() of a
# DataLoader iterator (`enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__`).
LOADER_ROWS = ("DataLoader", "enumerate(DataLoader)")


def summarize(trace: dict) -> TraceSummary:
    """Return the TraceSummary of a chrome trace (real or simulated)."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    ops = sorted((e for e in events if e["cat"] == "cpu_op"), key=lambda e: e["dur"])
    syncs = [e for e in events if e["cat"] == "cuda_runtime" and e["name"].endswith("Synchronize")]
    copies_ = [e for e in events if e["cat"] == "gpu_memcpy"]
    # A real trace links each call to its copy (args.correlation): only a copy from or to pageable memory
    # holds the host; a long call for a pinned one is the host being slow, not a wait for the GPU.
    copy_names = {c["args"]["correlation"]: c["name"] for c in copies_ if "correlation" in c.get("args", {})}
    held = [e for e in events if e["cat"] == "cuda_runtime" and e["name"] == "cudaMemcpyAsync"
            and e["dur"] > 50 and "Pinned" not in copy_names.get(e.get("args", {}).get("correlation"), "")]

    def innermost(call: dict) -> dict | None:
        return next((o for o in ops if o["pid"] == call["pid"] and o["tid"] == call["tid"]
                     and o["ts"] <= call["ts"] and call["ts"] + call["dur"] <= o["ts"] + o["dur"]), None)

    def name(op: dict | None) -> str:
        return "(no operator)" if op is None else op["name"]

    sync_starts = {(e["pid"], e["tid"], e["ts"]) for e in syncs}
    synced_ops = {id(op) for op in map(innermost, syncs) if op is not None}
    # a held copy followed by its stream sync (in the same operator) is one wait
    alone = [e for e in held if (e["pid"], e["tid"], round(e["ts"] + e["dur"], 3)) not in sync_starts
             and (innermost(e) is None or id(innermost(e)) not in synced_ops)]
    waits: dict[str, int] = {}
    for call in syncs + alone:
        waits[name(innermost(call))] = waits.get(name(innermost(call)), 0) + 1
    kernels = [e for e in events if e["cat"] == "kernel"]
    h2d = [c for c in copies_ if "HtoD" in c["name"]]
    covered = sum(_covered(c, kernels) for c in h2d)
    counts: dict[str, int] = {}
    for c in copies_:
        counts[c["name"]] = counts.get(c["name"], 0) + 1
    span = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) if events else 0.0
    return TraceSummary(
        waits=waits, wait_s=sum(e["dur"] for e in syncs + held) / 1e6, copies=counts,
        copy_s=sum(c["dur"] for c in copies_) / 1e6, kernel_s=sum(k["dur"] for k in kernels) / 1e6,
        overlap=covered / sum(c["dur"] for c in h2d) if h2d and sum(c["dur"] for c in h2d) else 0.0,
        loader_s=sum(e["dur"] for e in events if e["cat"] == "user_annotation" and
                     e["name"].startswith(LOADER_ROWS)) / 1e6,
        span_s=span / 1e6, gpu_busy_s=_union(copies_ + kernels) / 1e6)


def _union(events: list[dict]) -> float:
    total, reach = 0.0, -math.inf
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        a = max(a, reach)
        if b > a:
            total, reach = total + b - a, b
    return total


def _covered(copy: dict, kernels: list[dict]) -> float:
    start, end = copy["ts"], copy["ts"] + copy["dur"]
    pieces = sorted((max(k["ts"], start), min(k["ts"] + k["dur"], end)) for k in kernels)
    total, reach = 0.0, start
    for a, b in pieces:
        a = max(a, reach)
        if b > a:
            total, reach = total + b - a, b
    return total


def show_summary(summary: TraceSummary) -> None:
    """Print a TraceSummary in the units a person reads."""
    waits = sum(summary.waits.values())
    print(f"host waits        {waits:4d}, {summary.wait_s * 1e3:7.2f} ms, inside {summary.waits}")
    print(f"host in loader          {summary.loader_s * 1e3:7.2f} ms")
    print(f"copies            {sum(summary.copies.values()):4d}, {summary.copy_s * 1e3:7.2f} ms: "
          f"{summary.copies}")
    print(f"kernels                 {summary.kernel_s * 1e3:7.2f} ms on the GPU; "
          f"{summary.overlap:.0%} of the upload time under a kernel")
    print(f"whole trace             {summary.span_s * 1e3:7.2f} ms, "
          f"the GPU busy for {summary.gpu_busy_s * 1e3:.2f} ms")

