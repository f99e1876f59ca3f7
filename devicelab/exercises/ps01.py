"""Checks and hints for ps01-tensors-and-devices."""

import torch

from devicelab.fakes import fake_machine
from devicelab.feedback import Exercise, checker


def _call_on(fn, machine: dict, *args):
    with fake_machine(**machine):
        return fn(*args)


def _this_machine() -> str:
    cuda, mps = torch.cuda.device_count(), torch.backends.mps.is_available()
    return f"{cuda} CUDA GPU(s) and {'' if mps else 'no '}MPS"


def refusal(pick_device, prefer: str) -> str:
    """Call pick_device(prefer), which must raise RuntimeError on this (faked) machine; return its message.

    Raise AssertionError, saying what to fix, when pick_device returns instead or raises something else. The
    graded test cells and `check("pick_device")` both use it.
    """
    try:
        got = pick_device(prefer)
    except NotImplementedError:
        raise
    except RuntimeError as error:
        return str(error)
    except Exception as error:
        raise AssertionError(
            f"on a machine with {_this_machine()}, pick_device({prefer!r}) raised {type(error).__name__}: "
            f"{error}; raise RuntimeError instead") from error
    raise AssertionError(
        f"on a machine with {_this_machine()}, pick_device({prefer!r}) returned {got!r}; that device does "
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
    got = _call_on(pick_device, {})
    assert isinstance(got, torch.device), (
        f"pick_device() should return a torch.device, not {type(got).__name__}.")
    assert got == torch.device("cpu"), f"With no GPU, pick_device() should give cpu; you gave {got}."
    got = _call_on(pick_device, {"cuda": 1, "mps": True})
    assert got == torch.device("cuda"), (
        "With a CUDA GPU, pick_device() should give torch.device('cuda') (no index, CUDA before MPS); got "
        f"{got}.")
    got = _call_on(pick_device, {"mps": True})
    assert got == torch.device("mps"), f"With MPS and no CUDA, pick_device() should give mps; got {got}."
    assert _call_on(pick_device, {}, "meta") == torch.device("meta"), "meta always exists: return it."
    assert _call_on(pick_device, {"cuda": 1}, "cuda") == torch.device("cuda"), (
        "With one GPU, pick_device('cuda') should give torch.device('cuda'): plain cuda exists when "
        "torch.cuda.is_available().")
    message = _call_on(refusal, {"cuda": 1}, pick_device, "cuda:1")
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
