"""Checks and hints for ps01-tensors-and-devices, and the calls its graded tests make.

ps01's graded test cells run out of process (the cell tag `out-of-process`): the grader runs each one itself,
and every student function the test calls is the grader's stand-in, which runs the function in the student's
kernel with plain data across (autograder/grading/remote_calls.py). A fake set up around such a call on the
grader's side would fake the grader's torch, which the student's code never sees, and a tensor that reports
another device is no plain data. So the helpers below, given a stand-in (it has `in_kernel`), name one of the
fakes of this module for the kernel to set up around that call (`on_machine`, `first_on_device`), or ask for
the arguments back after the call; given the student's own function (their notebook, `check`), they do the
same here. Either way the test reads the same values.
"""

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from unittest import mock

import torch

from devicelab.fakes import fake_machine, on_device
from devicelab.feedback import Exercise, checker


def _in_kernel(function) -> Callable | None:
    """Return the grader's way to call `function` in the student's kernel, or None for a function of here."""
    return getattr(function, "in_kernel", None)


@dataclasses.dataclass(frozen=True)
class Machine:
    """A machine the tests pretend to be on: `cuda` CUDA GPUs, MPS or not.

    `cuda_available` is what torch.cuda.is_available() answers, when it is not simply "there are GPUs"
    (None): each of the three questions has its own answer, so a test can fake one at a time.
    """

    cuda: int = 0
    mps: bool = False
    cuda_available: bool | None = None

    def __str__(self) -> str:
        text = f"{self.cuda} CUDA GPU(s) and {'' if self.mps else 'no '}MPS"
        if self.cuda_available is not None and self.cuda_available != (self.cuda > 0):
            text += f", torch.cuda.is_available() {self.cuda_available}"
        return text

    @contextlib.contextmanager
    def faked(self) -> Iterator[None]:
        """Fake this machine here (devicelab.fakes.fake_machine) until the `with` block ends."""
        with fake_machine(cuda=self.cuda, mps=self.mps), contextlib.ExitStack() as stack:
            if self.cuda_available is not None and self.cuda_available != (self.cuda > 0):
                stack.enter_context(mock.patch("torch.cuda.is_available", return_value=self.cuda_available))
            yield

    def call(self, function, *args):
        """Return function(*args) on this machine: faked in the student's kernel, around that call, when
        `function` is the grader's stand-in; faked here otherwise."""
        in_kernel = _in_kernel(function)
        if in_kernel is not None:
            return in_kernel(args, fake=f"{__name__}:on_machine", params=dataclasses.asdict(self)).value
        with self.faked():
            return function(*args)


def on_machine(function, **machine) -> Callable:
    """The fake the kernel sets up for Machine.call: `function`, called on Machine(**machine)."""
    faked = Machine(**machine)

    def call(*args, **kwargs):
        with faked.faked():
            return function(*args, **kwargs)

    return call


def reported_on(function, tensor: torch.Tensor, device: str):
    """Return function(t), t being `tensor`'s data as a tensor that reports `device` (devicelab.fakes'
    on_device): made in the student's kernel when `function` is the grader's stand-in."""
    in_kernel = _in_kernel(function)
    if in_kernel is not None:
        return in_kernel((tensor,), fake=f"{__name__}:first_on_device", params={"device": str(device)}).value
    return function(on_device(tensor, device))


def first_on_device(function, device: str) -> Callable:
    """The fake the kernel sets up for reported_on: `function`, called with its first argument (a tensor)
    made into one that reports `device`."""

    def call(tensor, *args, **kwargs):
        return function(on_device(tensor, device), *args, **kwargs)

    return call


def value_and_arguments(function, *args) -> tuple:
    """Return (function(*args), the arguments as they are after the call), so that a test can see whether
    the function changed them: copies of them as the student's kernel holds them after the call (gradients
    included) when `function` is the grader's stand-in, the arguments themselves otherwise."""
    in_kernel = _in_kernel(function)
    if in_kernel is not None:
        answer = in_kernel(args, keep=True)
        return answer.value, tuple(answer.args)
    return function(*args), args


def _this_machine() -> str:
    return str(Machine(torch.cuda.device_count(), torch.backends.mps.is_available()))


def refusal(pick_device, prefer: str, machine: Machine | None = None) -> str:
    """Call pick_device(prefer) on `machine` (Machine.call; this machine, faked or not, when None), which must
    raise RuntimeError there; return its message.

    Raise AssertionError, saying what to fix, when pick_device returns instead or raises something else. The
    graded test cells and `check("pick_device")` both use it.
    """
    where = _this_machine() if machine is None else str(machine)
    try:
        got = pick_device(prefer) if machine is None else machine.call(pick_device, prefer)
    except NotImplementedError:
        raise
    except RuntimeError as error:
        return str(error)
    except Exception as error:
        raise AssertionError(
            f"on a machine with {where}, pick_device({prefer!r}) raised {type(error).__name__}: "
            f"{error}; raise RuntimeError instead") from error
    raise AssertionError(
        f"on a machine with {where}, pick_device({prefer!r}) returned {got!r}; that device does "
        "not exist there, so raise RuntimeError (don't fall back to another device)")


def _describe(describe) -> None:
    info = describe(torch.zeros(2, 3))
    assert isinstance(info, dict), f"describe should return a dict, not {type(info).__name__}."
    assert set(info) == {"shape", "dtype", "device", "nbytes"}, (
        f"Use exactly the keys 'shape', 'dtype', 'device', 'nbytes'; you returned {sorted(info)}.")
    assert type(info["shape"]) is tuple, (
        f"'shape' should be a plain tuple, not {type(info['shape']).__name__}: wrap it in tuple(...).")
    assert info["shape"] == (2, 3), f"torch.zeros(2, 3) has shape (2, 3), you returned {info['shape']!r}."
    assert isinstance(info["dtype"], torch.dtype), (
        "'dtype' should be a torch.dtype such as torch.float32, not a string.")
    assert isinstance(info["device"], torch.device), "'device' should be a torch.device, not a string."
    assert info["nbytes"] == 24, f"6 float32 elements take 6 * 4 = 24 bytes; you returned {info['nbytes']!r}."
    doubles = describe(torch.zeros(5, dtype=torch.float64))
    assert doubles["nbytes"] == 40, (
        "float64 elements take 8 bytes each: use the tensor's element size, not 4.")
    param = describe(torch.nn.Parameter(torch.zeros(4, dtype=torch.float16)))
    assert param["nbytes"] == 8 and param["shape"] == (4,), (
        "An nn.Parameter is a tensor too (a torch.Tensor subclass): describe it like any other tensor.")
    view = describe(torch.arange(12.0)[:3])
    assert view["nbytes"] == 12, (
        "x[:3] holds 3 elements (12 bytes): count the tensor's elements, not its storage.")


def _pick_device(pick_device) -> None:
    got = Machine().call(pick_device)
    assert isinstance(got, torch.device), (
        f"pick_device() should return a torch.device, not {type(got).__name__}.")
    assert got == torch.device("cpu"), f"With no GPU, pick_device() should give cpu; you gave {got}."
    got = Machine(cuda=1, mps=True).call(pick_device)
    assert got == torch.device("cuda"), (
        "With a CUDA GPU, pick_device() should give torch.device('cuda') (no index, CUDA before MPS); got "
        f"{got}.")
    got = Machine(mps=True).call(pick_device)
    assert got == torch.device("mps"), f"With MPS and no CUDA, pick_device() should give mps; got {got}."
    assert Machine().call(pick_device, "meta") == torch.device("meta"), "meta always exists: return it."
    assert Machine(cuda=1).call(pick_device, "cuda") == torch.device("cuda"), (
        "With one GPU, pick_device('cuda') should give torch.device('cuda'): plain cuda exists when "
        "torch.cuda.is_available().")
    message = refusal(pick_device, "cuda:1", Machine(cuda=1))
    assert "cuda:1" in message, "The RuntimeError's message should name the device asked for, 'cuda:1'."


_exercises = checker(
    Exercise("describe", _describe, hints=(
        "A tensor knows its own shape, dtype and device: t.shape, t.dtype, t.device.",
        "t.shape is a torch.Size; the contract asks for a plain tuple: tuple(t.shape).",
        "Bytes = number of elements * bytes per element: t.numel() and t.element_size().",
    )),
    Exercise("pick_device", _pick_device, hints=(
        ("Without a preference, try torch.cuda.is_available(), then torch.backends.mps.is_available(), then "
         "cpu."),
        "With a preference, build torch.device(prefer) and look at its .type and .index.",
        ("cpu and meta always exist; plain cuda exists when torch.cuda.is_available(); cuda:i when, in "
         "addition, i < torch.cuda.device_count()."),
        "Otherwise raise RuntimeError(f'... {prefer} ...') so the message names the device.",
    )),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
