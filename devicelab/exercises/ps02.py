"""Checks and hints for ps02-moving-tensors, and part 5's stand-in GPU.

Part 5 (`fixed_fit`) is a fitting script, `fit`, that trains on the CPU and trains nothing on a GPU, where
`.to(device)` returns a new tensor. `like_a_gpu()` shows that on any machine: inside it, `cuda` is played by
the CPU (`CopyingCuda`, a `TorchFunctionMode`), values included, so that losses can be compared with
`reference_loss`.
"""

import contextlib
import math
from collections import OrderedDict, namedtuple
from collections.abc import Iterator

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from devicelab.exercises.calls import Machine
from devicelab.fakes import _to_arguments, on_device
from devicelab.feedback import Exercise, checker

Pair = namedtuple("Pair", ["x", "y"])


def _to_device(to_device) -> None:
    batch = {"x": torch.ones(2), "pair": Pair(torch.zeros(1), 3), "items": [torch.ones(1), "label"]}
    moved = to_device(batch, "meta")
    assert isinstance(moved, dict), f"a dict should come back as a dict, not {type(moved).__name__}."
    assert moved["x"].device.type == "meta", (
        "the tensor under 'x' stayed behind: move every tensor with .to().")
    assert type(moved["pair"]) is Pair, (
        "the namedtuple came back as something else: rebuild it with type(obj)(*items).")
    assert moved["pair"].x.device.type == "meta" and moved["pair"].y == 3, (
        "move the tensors, keep the other items.")
    assert isinstance(moved["items"], list) and moved["items"][1] == "label", (
        "lists stay lists; strings are left alone.")
    assert batch["x"].device.type == "cpu", "the input was changed: build new containers, never modify obj."
    assert type(to_device((torch.ones(1),), "meta")) is tuple, "a tuple should stay a tuple."
    ordered = to_device(OrderedDict(b=torch.ones(1), a=2), "meta")
    assert type(ordered) is OrderedDict and list(ordered) == ["b", "a"], (
        "an OrderedDict should stay an OrderedDict, keys in order: rebuild a dict with type(obj)(...).")


def _to_is_noop(to_is_noop) -> None:
    t = torch.zeros(3)
    for device, dtype, expected in [("cpu", None, True), ("cpu", torch.float32, True),
                                    ("cpu", torch.float64, False),
                                    ("meta", None, False), (torch.device("cpu"), None, True)]:
        got = to_is_noop(t, device, dtype)
        assert got is expected, (
            f"to_is_noop(float32 cpu tensor, {device!r}, {dtype}) should be {expected}, not {got!r}.")
    machine = Machine(cuda=2, current=1)  # two pretend GPUs, cuda:1 the current one
    for where, device, expected in [("cuda:1", "cuda", True), ("cuda:0", "cuda", False),
                                    ("cuda:0", "cuda:0", True),
                                    ("cuda:1", torch.device("cuda", 0), False)]:
        got = machine.call(to_is_noop, on_device(torch.zeros(3), where), device)
        assert got is expected, (
            f"With cuda:1 the current GPU, to_is_noop(a tensor on {where}, {device!r}) should be "
            f"{expected}, not {got!r}: t.to('cuda') goes to the current GPU, so plain cuda means cuda:1 "
            "here.")


def _make_leaf(make_leaf) -> None:
    w = make_leaf((3, 4), "meta")
    assert isinstance(w, torch.Tensor), f"make_leaf should return a tensor, not {type(w).__name__}."
    assert tuple(w.shape) == (3, 4), f"the shape should be (3, 4), not {tuple(w.shape)}."
    assert w.device.type == "meta", f"the tensor should be on the requested device (meta), not {w.device}."
    assert w.requires_grad, "the tensor must require grad."
    assert w.is_leaf, (
        "the tensor is not a leaf: create it on the device with requires_grad=True instead of moving it.")


def _as_numpy(as_numpy) -> None:
    t = torch.arange(4.0, requires_grad=True)
    a = as_numpy(t)
    assert isinstance(a, np.ndarray), f"as_numpy should return a NumPy array, not {type(a).__name__}."
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0] and a.dtype == np.float32, "keep the values and the dtype."
    a[0] = 99.0
    assert t[0].item() == 0.0, ("writing into the array changed the tensor: on the CPU .cpu() returns the "
                                "same tensor, so make a real copy.")


# ----- part 5: a fit that trains nothing on a GPU


def points(seed: int = 0, samples: int = 256, features: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Return a small regression data set `(x, y)` on the CPU, float32: `x` of shape (samples, features), its
    columns on different scales, and `y = x @ w + b` plus a little noise for some `w` and `b != 0`."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.linspace(0.3, 1.5, features)
    x = torch.randn(samples, features, generator=generator) * scales
    w = torch.randn(features, generator=generator) * 2
    b = 1.0 + torch.rand((), generator=generator) * 2
    return x, x @ w + b + 0.1 * torch.randn(samples, generator=generator)


def fit(x: torch.Tensor, y: torch.Tensor, device, steps: int = 100, lr: float = 0.1):
    """Part 5's script: fit y ~ x @ w + b on `device`. It learns on the CPU; on a GPU its loss never moves."""
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([w, b], lr=lr)
    w, b = w.to(device), b.to(device)
    x, y = x.to(device), y.to(device)
    for step in range(steps):
        loss = ((x @ w + b - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:2d}: loss {loss.item():.4f}")
    return w, b


def fit_loss(x: torch.Tensor, y: torch.Tensor, fitted) -> float:
    """Return the mean squared error of `x @ w + b - y` for `fitted = (w, b)`, from their values (any device,
    any shapes holding x.shape[1] weights and one bias); raise AssertionError saying what is wrong with
    `fitted` when it is not such a pair."""
    assert isinstance(fitted, (tuple, list)) and len(fitted) == 2, (
        f"fixed_fit should return a pair (w, b), not {type(fitted).__name__}"
        f"{f' of {len(fitted)}' if isinstance(fitted, (tuple, list)) else ''}")
    w, b = fitted
    assert isinstance(w, torch.Tensor) and isinstance(b, torch.Tensor), (
        f"w and b should be tensors, not {type(w).__name__} and {type(b).__name__}")
    features = x.shape[1]
    assert w.numel() == features and b.numel() == 1, (
        f"w should hold one weight per feature ({features}) and b one value; they hold {w.numel()} and "
        f"{b.numel()}")
    with torch.no_grad():
        w, b = (t.detach().to("cpu", torch.float64).reshape(-1) for t in (w, b))
        x, y = (t.detach().to("cpu", torch.float64) for t in (x, y))
        return float(((x @ w + b - y) ** 2).mean())


def reference_loss(x: torch.Tensor, y: torch.Tensor, steps: int = 100, lr: float = 0.1) -> float:
    """Return `fit_loss` after the fit part 5 asks for, made on the CPU: from w = 0 and b = 0, `steps` steps
    of plain SGD with rate `lr` on the mean squared error."""
    x, y = x.detach().cpu(), y.detach().cpu()
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([w, b], lr=lr)
    for _ in range(steps):
        loss = ((x @ w + b - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return fit_loss(x, y, (w, b))


_GPU = torch.device("cuda", 0)
# Operations that read two tensors without combining their values, so that PyTorch lets their devices differ
# (a copy, indexing, setting .data, backward's own gradient) or that ask a question about them.
_CROSS_DEVICE = {"copy_", "__get__", "__set__", "__getitem__", "__setitem__", "backward", "grad",
                 "_has_compatible_shallow_copy_type"}
_BACKWARD = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)


def _tensors(*objs) -> Iterator[torch.Tensor]:
    """Yield the tensors in `objs`, inside lists, tuples and dicts too (as optimizers pass them)."""
    for obj in objs:
        if isinstance(obj, torch.Tensor):
            yield obj
        elif isinstance(obj, (list, tuple)):
            yield from _tensors(*obj)
        elif isinstance(obj, dict):
            yield from _tensors(*obj.values())


class CopyingCuda(TorchFunctionMode):
    """CUDA played by the CPU, values kept: a tensor is "on cuda:0" when this mode made its storage.

    As on a real GPU: `.to("cuda")` and `.cuda()` of a CPU tensor return a new tensor, a copy autograd records
    (not a leaf, `grad_fn=ToCopyBackward0`), and of a tensor already there the tensor itself; `.cpu()` and
    `.to("cpu")` copy back; a factory given `device="cuda"` makes a tensor there, and so does any operation on
    tensors there; `model.to("cuda")` keeps each parameter (it sets `param.data`, as between CPU and CUDA);
    such a tensor reports `device(type='cuda', index=0)` and `is_cuda`, refuses `.numpy()`, and an operation
    that combines it with a CPU tensor of one or more dimensions raises as on a GPU (a 0-dim CPU tensor is
    read as a number). `torch.cuda` itself still says there is no GPU: code is given the device.
    `backward_passes` counts the backward passes (`backward()`, `torch.autograd.grad`) from a tensor there.
    """

    def __init__(self) -> None:
        super().__init__()
        self.backward_passes = 0
        # by address, each storage kept alive: no CPU tensor made later can take the address of one
        self._storages: dict[int, torch.UntypedStorage] = {}

    def on_gpu(self, t) -> bool:
        """Return True when `t` is a tensor on the stand-in GPU."""
        with torch._C.DisableTorchFunction():
            return self._on_gpu(t)

    def _on_gpu(self, t) -> bool:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            return False
        address = t.untyped_storage().data_ptr()
        return address != 0 and address in self._storages

    def _mark(self, out):
        for t in _tensors(out):
            if t.device.type == "cpu" and t.untyped_storage().data_ptr():
                self._storages[t.untyped_storage().data_ptr()] = t.untyped_storage()
        return out

    @staticmethod
    def _is_gpu(device) -> bool:
        """Return whether `device` (an int, a string or a torch.device) names the stand-in GPU."""
        if isinstance(device, int) and not isinstance(device, bool):
            device = torch.device("cuda", device)
        if not isinstance(device, (str, torch.device)) or torch.device(device).type != "cuda":
            return False
        if torch.device(device).index not in (None, 0):
            raise RuntimeError(f"CUDA error: invalid device ordinal ({device}: the stand-in has one GPU, "
                               "cuda:0)")
        return True

    def _move(self, t: torch.Tensor, to_gpu: bool, dtype, copy: bool, memory_format) -> torch.Tensor:
        extra = {} if memory_format is None else {"memory_format": memory_format}
        if to_gpu == self._on_gpu(t):  # no move: t itself unless the dtype changes or a copy is asked for
            out = t.to(dtype=t.dtype if dtype is None else dtype, copy=copy, **extra)
        else:  # another device: always a new tensor, which autograd records
            out = t.to("cpu", dtype=dtype, copy=True, **extra)
        return self._mark(out) if to_gpu else out

    def _to(self, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
        if args and isinstance(args[0], torch.Tensor):  # t.to(other): other's device and dtype
            other = args[0]
            copy = kwargs.get("copy", len(args) > 2 and args[2])
            return self._move(t, self._on_gpu(other), other.dtype, bool(copy), kwargs.get("memory_format"))
        device, dtype, copy = _to_arguments(args, kwargs)
        if device is not None and device.type not in ("cpu", "cuda"):
            return t.to(*args, **kwargs)
        to_gpu = self._on_gpu(t) if device is None else self._is_gpu(device)
        return self._move(t, to_gpu, dtype, copy, kwargs.get("memory_format"))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        first = args[0] if args else None
        if self._on_gpu(first):
            if func == torch.Tensor.device.__get__:
                return _GPU
            if func == torch.Tensor.is_cuda.__get__:
                return True
            if func == torch.Tensor.is_cpu.__get__:
                return False
            if func is torch.Tensor.get_device:
                return 0
            if func in (torch.Tensor.numpy, torch.Tensor.__array__):
                raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy "
                                "the tensor to host memory first.")
        if func is torch.Tensor.to:
            return self._to(first, args[1:], kwargs)
        if func is torch.Tensor.cuda:
            device = args[1] if len(args) > 1 else kwargs.get("device")
            if not self._is_gpu("cuda" if device is None else device):
                raise RuntimeError(f"Invalid device, must be cuda device: {device}")
            return self._move(first, True, None, False, kwargs.get("memory_format"))
        if func is torch.Tensor.cpu:
            return self._move(first, False, None, False, kwargs.get("memory_format"))
        if "device" in kwargs and self._is_gpu(kwargs["device"]):  # a factory: made on the CPU, marked
            kwargs["device"] = "cpu"
            return self._mark(func(*args, **kwargs))
        tensors = list(_tensors(args, kwargs))
        there = any(self._on_gpu(t) for t in tensors)
        if func in _BACKWARD and any(self._on_gpu(t) for t in _tensors(first)):
            self.backward_passes += 1
        if there and name not in _CROSS_DEVICE and any(
                t.device.type == "cpu" and t.dim() > 0 and not self._on_gpu(t) for t in tensors):
            raise RuntimeError("Expected all tensors to be on the same device, but found at least two "
                               f"devices, cuda:0 and cpu! ({name})")
        out = func(*args, **kwargs)
        if there and kwargs.get("device") is None and name != "copy_":  # what a GPU op makes is there
            self._mark(out)
        return out


@contextlib.contextmanager
def like_a_gpu() -> Iterator[CopyingCuda]:
    """Inside the block, `cuda` is a stand-in GPU that keeps its values on the CPU (see `CopyingCuda`)."""
    with CopyingCuda() as gpu:
        yield gpu


def _close(loss: float, expected: float) -> bool:
    return math.isclose(loss, expected, rel_tol=1e-4, abs_tol=1e-6)


def _fixed_fit(fixed_fit) -> None:
    x, y = points(seed=7, samples=128)
    start, expected = fit_loss(x, y, (torch.zeros(3), torch.zeros(1))), reference_loss(x, y, 30, 0.1)
    with like_a_gpu() as gpu:
        fitted = fixed_fit(x, y, "cuda", 30, 0.1)
        passes = gpu.backward_passes
        loss = fit_loss(x, y, fitted)
        w, b = fitted
        where = [t.device for t in (w, b)]
        on_gpu = all(gpu.on_gpu(t) for t in (w, b))
    if _close(loss, start):
        raise AssertionError(
            f"On the stand-in GPU the fit ends where it started (loss {loss:.4f}): the tensors you return "
            "never changed. Compare the tensors the optimizer updates with the ones the loop computes with.")
    assert passes, "No backward pass ran on the stand-in GPU: fit on the device you were given, not the CPU."
    assert _close(loss, expected), (
        f"30 steps of lr=0.1 on the stand-in GPU should end at loss {expected:.4f} (the reference fit's); "
        f"yours ends at {loss:.4f}. Keep the script's maths: w = 0 and b = 0, plain SGD, the mean squared "
        "error.")
    assert w.is_leaf and b.is_leaf and w.requires_grad and b.requires_grad, (
        "Return the tensors the optimizer updated: leaves that require grad (yours: "
        f"is_leaf {w.is_leaf}, {b.is_leaf}; requires_grad {w.requires_grad}, {b.requires_grad}).")
    assert on_gpu, f"w and b should be on the device you were given (cuda), not on {where[0]} and {where[1]}."
    loss = fit_loss(x, y, fixed_fit(x, y, "cpu", 30, 0.1))
    assert _close(loss, expected), (
        f"On the CPU (device 'cpu') the fit should end at loss {expected:.4f}, like on a GPU; yours ends at "
        f"{loss:.4f}.")


_exercises = checker(
    Exercise("to_device", _to_device, hints=(
        "Write it recursively: a tensor is moved; a dict, list or tuple is rebuilt from its moved items.",
        ("Keep the container's type: type(obj)(...) for lists and tuples; a namedtuple needs "
         "type(obj)(*items)."),
        "Pass non_blocking=non_blocking to every .to() call, also in the recursive calls.",
    )),
    Exercise("to_is_noop", _to_is_noop, hints=(
        "t.to(...) returns t itself exactly when nothing has to change: same device, same dtype.",
        ("Compare t.device with torch.device(device), and t.dtype with dtype when dtype is not None. But a "
         "GPU tensor always reports an index (cuda:0), and plain cuda has none."),
        ("Plain cuda is the current GPU when you put a tensor there: give it the index "
         "torch.cuda.current_device() before comparing (only for cuda without an index)."),
    )),
    Exercise("make_leaf", _make_leaf, hints=(
        "A tensor made by moving another one is not a leaf.",
        "Create it where it lives: torch.randn(shape, device=device, requires_grad=True).",
    )),
    Exercise("as_numpy", _as_numpy, hints=(
        ".numpy() needs a CPU tensor without grad: .detach() and move it to the CPU first.",
        "On a CPU tensor .cpu() is a no-op, so the array would share memory: copy (e.g. .numpy().copy()).",
    )),
    Exercise("fixed_fit", _fixed_fit, hints=(
        ("Copy fit into a cell and run it inside `with like_a_gpu():` on 'cuda', then on 'cpu'. Right after "
         "the move, print w.is_leaf, w.grad_fn and `w is optimizer.param_groups[0]['params'][0]`: does the "
         "optimizer hold the tensor the loop computes with?"),
        ("On a GPU, .to(device) returns a new tensor, a copy that autograd records: backward sends the "
         "gradients through it to the CPU originals, which the optimizer updates, while the loop keeps "
         "computing with the copy. On the CPU .to('cpu') returns the tensor itself: the script works there."),
        ("Make the tensors the optimizer updates the very ones the loop uses, on the device: have them there "
         "(created there, or moved and then made leaves) before you build the optimizer, and return them."),
    )),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
