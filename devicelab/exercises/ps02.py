"""Checks and hints for ps02-moving-tensors."""

from collections import OrderedDict, namedtuple

import numpy as np
import torch

from devicelab.fakes import fake_machine, on_device
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
    with fake_machine(cuda=2, current=1):  # two pretend GPUs, cuda:1 the current one
        for where, device, expected in [("cuda:1", "cuda", True), ("cuda:0", "cuda", False),
                                        ("cuda:0", "cuda:0", True),
                                        ("cuda:1", torch.device("cuda", 0), False)]:
            got = to_is_noop(on_device(torch.zeros(3), where), device)
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
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
