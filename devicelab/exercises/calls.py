"""The calls the problem sets' graded tests make: a student's function on a faked machine, with tensors that
report other devices, or with its arguments as they are after the call.

A graded test cell tagged `out-of-process` runs in the grader's own process, and every student function it
calls is the grader's stand-in, which runs the function in the student's kernel with plain data across
(autograder/grading/remote_calls.py). A fake set up around such a call on the grader's side would fake the
grader's torch, which the student's code never sees, and a tensor that reports another device is no plain
data. So the helpers below, given a stand-in (it has `in_kernel`), name the one fake of this module, `faked`,
for the kernel to set up around that call: the machine, and a device for each argument that reports one. Given
the student's own function (a guarded cell, their notebook, `check`), they do the same here. Either way the
test reads the same values. ps01, ps02 and ps03 use them.
"""

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from unittest import mock

import torch

from devicelab.fakes import OnDevice, answering, fake_machine, on_device


def _in_kernel(function) -> Callable | None:
    """Return the grader's way to call `function` in the student's kernel, or None for a function of here."""
    return getattr(function, "in_kernel", None)


@dataclasses.dataclass(frozen=True)
class Machine:
    """A machine the tests pretend to be on: `cuda` CUDA GPUs (`current` the current one), MPS or not.

    `cuda_available` is what torch.cuda.is_available() answers, when it is not simply "there are GPUs"
    (None): each of the questions has its own answer, so a test can fake one at a time.
    """

    cuda: int = 0
    mps: bool = False
    cuda_available: bool | None = None
    current: int = 0

    def __str__(self) -> str:
        text = f"{self.cuda} CUDA GPU(s) and {'' if self.mps else 'no '}MPS"
        if self.cuda_available is not None and self.cuda_available != (self.cuda > 0):
            text += f", torch.cuda.is_available() {self.cuda_available}"
        if self.current:
            text += f", cuda:{self.current} the current GPU"
        return text

    @contextlib.contextmanager
    def faked(self) -> Iterator[None]:
        """Fake this machine here (devicelab.fakes.fake_machine) until the `with` block ends."""
        machine = fake_machine(cuda=self.cuda, mps=self.mps, current=self.current)
        with machine, contextlib.ExitStack() as stack:
            if self.cuda_available is not None and self.cuda_available != (self.cuda > 0):
                stack.enter_context(mock.patch("torch.cuda.is_available", new=answering(self.cuda_available)))
            yield

    def call(self, function, *args):
        """Return function(*args) on this machine (see `call`)."""
        return call(function, *args, machine=self)


def reported_device(value) -> str | None:
    """Return the device a tensor made by devicelab.fakes.on_device reports, None for anything else."""
    return str(type(value).where) if isinstance(value, OnDevice) else None


def call(function, *args, machine: Machine | None = None):
    """Return function(*args) on `machine` (the machine as it is, when None), each argument made with
    devicelab.fakes.on_device reporting its device where the function runs.

    When `function` is the grader's stand-in, the machine is faked in the student's kernel around that call,
    and each such argument crosses as its plain CPU data, made there again into a tensor that reports its
    device; otherwise both happen here.
    """
    in_kernel = _in_kernel(function)
    devices = [reported_device(arg) for arg in args]
    if in_kernel is None or (machine is None and not any(devices)):
        with contextlib.nullcontext() if machine is None else machine.faked():
            return function(*args)
    plain = tuple(arg if where is None else arg.as_subclass(torch.Tensor)
                  for arg, where in zip(args, devices, strict=True))
    params = {"machine": None if machine is None else dataclasses.asdict(machine), "devices": devices}
    return in_kernel(plain, fake=f"{__name__}:faked", params=params).value


def faked(function, machine: dict | None = None, devices: list | None = None) -> Callable:
    """The fake the kernel sets up for `call`: `function`, called on Machine(**machine) when one is given,
    with its i-th argument made into a tensor that reports devices[i] where that is not None."""
    on = None if machine is None else Machine(**machine)
    where = list(devices or [])

    def faked_call(*args, **kwargs):
        if len(where) > len(args):
            raise TypeError(f"{len(where)} devices for {len(args)} arguments")
        args = [arg if device is None else on_device(arg, device)
                for arg, device in zip(args, where + [None] * (len(args) - len(where)), strict=True)]
        with contextlib.nullcontext() if on is None else on.faked():
            return function(*args, **kwargs)

    return faked_call


def reported_on(function, tensor: torch.Tensor, device: str):
    """Return function(t), t being `tensor`'s data as a tensor that reports `device` (see `call`)."""
    return call(function, on_device(tensor, device))


def value_and_arguments(function, *args) -> tuple:
    """Return (function(*args), the arguments as they are after the call), so that a test can see whether
    the function changed them: copies of them as the student's kernel holds them after the call (gradients
    included) when `function` is the grader's stand-in, the arguments themselves otherwise."""
    in_kernel = _in_kernel(function)
    if in_kernel is not None:
        answer = in_kernel(args, keep=True)
        return answer.value, tuple(answer.args)
    return function(*args), args
