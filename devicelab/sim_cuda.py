"""CUDA, played by the meta device and the simulated GPU: PyTorch code written for CUDA runs for real on
`meta` tensors, and each call drives `devicelab.simgpu.SimulatedGPU` as its CUDA counterpart would (lesson
08's capstone; `devicelab.capstone` has the table of what each call does).
"""

import contextlib
import math
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader

from devicelab.sim_loader import SimLoader
from devicelab.sim_machines import KERNEL_MIN_S, MACHINES, HostProfile
from devicelab.sim_trace import ITEM_OPS, TO_OPS, SimProfiler
from devicelab.simgpu import SimStream, SimulatedGPU

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
