"""Stand-ins for GPU hardware, so that graded tests and `check()` run on any machine.

- `fake_machine(cuda=2, mps=False, current=0)`: inside the `with` block, PyTorch's availability questions
  (`torch.cuda.is_available()`, `torch.cuda.device_count()`, `torch.cuda.current_device()`,
  `torch.backends.mps.is_available()`) answer as on a machine with that many CUDA GPUs, MPS or not, and GPU
  number `current` as the current CUDA device. Everything is restored when the block ends, even after an
  error.
- `on_device(tensor, "cuda:1")`: a tensor that keeps its data on the CPU but reports another device, and
  behaves like a tensor there where device and NumPy matters are concerned: `.numpy()` refuses it as PyTorch
  refuses a CUDA tensor, `.cpu()` and `.to("cpu")` copy it into an ordinary CPU tensor, and `.to(device)`
  returns the tensor itself exactly when PyTorch would (plain `cuda` means the current CUDA device), else a
  copy on the new device.

Nothing here knows any exercise's answer; the problem sets import these so that their test cells stay short.
"""

import contextlib
from collections.abc import Iterator
from unittest import mock

import torch

__all__ = ["OnDevice", "fake_machine", "on_device"]


def answering(value):
    """Return a function that answers `value` whatever it is asked (a stand-in for a PyTorch question)."""

    def answer(*_args, **_kwargs):
        return value

    return answer


@contextlib.contextmanager
def fake_machine(cuda: int = 0, mps: bool = False, current: int = 0) -> Iterator[None]:
    """Pretend, inside the `with` block, that this machine has `cuda` CUDA GPUs (GPU `current` is the current
    one) and MPS or not. On a machine without CUDA, asking for the current CUDA device raises, as in
    PyTorch.
    """
    if cuda and not 0 <= current < cuda:
        raise ValueError(f"current={current} is not one of the {cuda} GPUs")

    def current_device() -> int:  # takes no arguments, as PyTorch's own
        if not cuda:
            raise RuntimeError("Found no NVIDIA driver on your system (a machine faked without CUDA)")
        return current

    # plain functions, not MagicMocks: a MagicMock costs a millisecond to make, and the graded tests fake a
    # machine around thousands of calls (13 s of the exercise tests' CPU went to making them)
    patches = [
        mock.patch("torch.cuda.is_available", new=answering(cuda > 0)),
        mock.patch("torch.cuda.device_count", new=answering(cuda)),
        mock.patch("torch.cuda.current_device", new=current_device),
        mock.patch("torch.backends.mps.is_available", new=answering(mps)),
    ]
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "current_device_index"):
        patches.append(mock.patch("torch.accelerator.current_device_index", new=current_device))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield


def _device_asked_for(args, kwargs) -> torch.device | None:
    """Return the device in Tensor.to / Tensor.cuda style arguments (None when only a dtype is given)."""
    for arg in [*args, kwargs.get("device")]:
        if isinstance(arg, torch.Tensor):
            return arg.device
        if isinstance(arg, (str, torch.device)):
            return torch.device(arg)
    return None


def _to_arguments(args, kwargs) -> tuple[torch.device | None, torch.dtype | None, bool]:
    """Return (device, dtype, copy) from the arguments of Tensor.to (after self)."""
    rest = list(args)
    device, dtype, copy = kwargs.get("device"), kwargs.get("dtype"), kwargs.get("copy", False)
    if rest and isinstance(rest[0], torch.Tensor):
        other = rest.pop(0)
        device, dtype = other.device, other.dtype
    elif rest and isinstance(rest[0], torch.dtype):
        dtype = rest.pop(0)
    elif rest and isinstance(rest[0], (str, torch.device)):
        device = rest.pop(0)
        if rest and isinstance(rest[0], torch.dtype):
            dtype = rest.pop(0)
    if len(rest) >= 2:  # non_blocking, copy
        copy = rest[1]
    return (None if device is None else torch.device(device)), dtype, bool(copy)


def _with_index(device: torch.device) -> torch.device:
    """Plain `cuda` means the current CUDA device, as in PyTorch's `.to()` (other index-less devices stay)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class OnDevice(torch.Tensor):
    """A CPU tensor that reports the device `where` of its class (see `on_device`)."""

    where = torch.device("cuda:0")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        where = cls.where
        if func == torch.Tensor.device.__get__:
            return where
        if func == torch.Tensor.is_cuda.__get__:
            return where.type == "cuda"
        if func == torch.Tensor.is_cpu.__get__:
            return where.type == "cpu"
        if func == torch.Tensor.is_meta.__get__:
            return where.type == "meta"
        if func == torch.Tensor.get_device:
            return -1 if where.index is None else where.index
        if func in (torch.Tensor.numpy, torch.Tensor.__array__) and not kwargs.get("force", False):
            raise TypeError(f"can't convert {where} device type tensor to numpy. "
                            "Use Tensor.cpu() to copy the tensor to host memory first.")
        plain = args[0].as_subclass(torch.Tensor) if args and isinstance(args[0], OnDevice) else None
        if func is torch.Tensor.numpy:  # numpy(force=True) copies to the host first
            return plain.detach().clone().numpy()
        if func is torch.Tensor.cpu:
            return plain.clone()  # a copy from another device is always a new tensor
        if func is torch.Tensor.to and plain is not None:
            return cls._to(args[0], plain, *_to_arguments(args[1:], kwargs))
        if func is torch.Tensor.cuda and plain is not None:
            target = _device_asked_for(args[1:], kwargs) or torch.device("cuda")
            if isinstance(target, torch.device) and target.type != "cuda":
                target = torch.device("cuda", target.index)
            return cls._to(args[0], plain, target, None, False)
        with torch._C.DisableTorchFunctionSubclass():
            result = func(*args, **kwargs)
        # What an op on a real tensor there would put on the host stays an ordinary CPU tensor: a result asked
        # for on the cpu (torch.empty_like(t, device="cpu")), or a host tensor written in place
        # (host.copy_(t)).
        asked = kwargs.get("device")
        on_host = (asked is not None and torch.device(asked).type == "cpu") or (
            args and isinstance(args[0], torch.Tensor) and not isinstance(args[0], OnDevice)
            and result is args[0])
        if on_host or not isinstance(result, torch.Tensor) or isinstance(result, OnDevice):
            return result
        return result.as_subclass(cls)

    @classmethod
    def _to(cls, tensor, plain, device, dtype, copy):
        """Tensor.to: the tensor itself when nothing changes (as PyTorch decides it), else a new tensor."""
        target = cls.where if device is None else _with_index(device)
        dtype = plain.dtype if dtype is None else dtype
        if target == cls.where and dtype == plain.dtype and not copy:
            return tensor
        with torch._C.DisableTorchFunctionSubclass():
            if target.type in ("cpu", "meta"):
                return plain.to(target, dtype, copy=True)
            return plain.to(dtype=dtype, copy=True).as_subclass(_class_for(target))


_CLASSES: dict[torch.device, type] = {}


def _class_for(device: torch.device) -> type:
    if device not in _CLASSES:
        _CLASSES[device] = type(f"On_{device.type}_{device.index}", (OnDevice,), {"where": device})
    return _CLASSES[device]


def on_device(tensor: torch.Tensor, device) -> torch.Tensor:
    """Return `tensor`'s data (on the CPU) as a tensor that reports `device`, e.g. "cuda:1" (no GPU needed).

    Give an index for CUDA: a real tensor on a GPU always reports one."""
    return tensor.as_subclass(_class_for(torch.device(device)))
