"""Checks and hints for ps01-tensors-and-devices, and the calls its graded tests make.

ps01's graded test cells run out of process (the cell tag `out-of-process`): the functions they call on a
faked machine (`Machine.call`), on a tensor that reports another device (`reported_on`) or to see their
argument after the call (`value_and_arguments`) come from devicelab.exercises.calls, which fakes in the
student's kernel when the function is the grader's stand-in and here otherwise.
"""

import torch

from devicelab.exercises.calls import Machine, reported_on, value_and_arguments
from devicelab.feedback import Exercise, checker

__all__ = ["Machine", "reported_on", "value_and_arguments"]  # re-exported for the notebook: calls' helpers


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
