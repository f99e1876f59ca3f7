"""Checks and hints for ps03-device-mismatch, and part 4's training step (`train_step`, its helpers, and
`HostCopySpy` from ps04), graded on the CPU and on `meta`."""

import re

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from devicelab.exercises.calls import call
from devicelab.exercises.ps04 import HostCopySpy
from devicelab.fakes import on_device
from devicelab.feedback import Exercise, checker


def call_keeping_the_model(forward_on_model_device, model, x):
    """Return forward_on_model_device(model, x), turning 'the model was copied off meta' into a clear failure.

    The graded test cells use it."""
    try:
        return forward_on_model_device(model, x)
    except NotImplementedError as exc:
        if "meta" not in str(exc):
            raise
        raise AssertionError(
            f"forward_on_model_device tried to copy the model's meta tensors to the cpu ({exc}): move x to "
            "the model's device, never the model"
        ) from exc
    except RuntimeError as exc:
        if "device" not in str(exc):
            raise
        raise AssertionError(
            f"calling the model raised {exc!r}: move x to the device of the model's first parameter"
        ) from exc


def expect_conflict(check_same_device, *tensors, names=()) -> None:
    """Check that check_same_device(*tensors) raises RuntimeError naming every device in `names`; a tensor
    made with devicelab.fakes.on_device reports its device where check_same_device runs (calls.call).

    The graded test cells use it."""
    where = ", ".join(f"{'0-dim ' if t.dim() == 0 else ''}{t.device}" for t in tensors)
    try:
        got = call(check_same_device, *tensors)
    except NotImplementedError:
        raise
    except RuntimeError as exc:
        message = str(exc)
    except Exception as exc:
        raise AssertionError(
            f"check_same_device({where}) raised {type(exc).__name__}: {exc}; raise RuntimeError instead"
        ) from exc
    else:
        raise AssertionError(
            f"check_same_device({where}) returned {got!r}, but these tensors cannot be combined: raise "
            "RuntimeError"
        )
    for name in names:
        device = torch.device(name)
        # "cuda:1" must be named itself: "cuda:10" does not name it
        named = re.search(re.escape(str(device)) + r"(?!\d)", message) is not None
        assert named or repr(device) in message, (
            f"the RuntimeError for tensors on {where} should name the device {str(device)!r}; "
            f"its message was {message!r}"
        )


def _forward_on_model_device(forward_on_model_device) -> None:
    model = nn.Linear(3, 2).to("meta")
    out = forward_on_model_device(model, torch.ones(4, 3))
    assert out.device.type == "meta", "the output should come from the model's device: move x, not the model."
    assert next(model.parameters()).device.type == "meta", "the model moved: leave it where it is and move x."
    double = nn.Linear(3, 2).double()
    out = forward_on_model_device(double, torch.ones(4, 3))
    assert out.dtype == torch.float64, (
        "match the dtype of the model's first parameter too: x.to(device, dtype).")
    ids = forward_on_model_device(nn.Embedding(5, 2).double(), torch.tensor([1, 3]))
    assert ids.shape == (2, 2), (
        "token ids keep their integer dtype: convert x only when x.is_floating_point().")
    x = torch.ones(2)
    assert torch.equal(forward_on_model_device(nn.ReLU(), x), x), (
        "a model without parameters gets x as it is.")


def _off_device(off_device) -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    net[1].to("meta")
    got = off_device(net, "cpu")
    expected = ["1.bias", "1.num_batches_tracked", "1.running_mean", "1.running_var", "1.weight"]
    assert list(got) == expected, (
        f"off_device(net, 'cpu') should be {expected} (buffers too, sorted), not {got!r}.")
    assert off_device(net, "meta") == ["0.bias", "0.weight"], (
        "names come from named_parameters()/named_buffers().")
    gpu = nn.Linear(2, 2)
    # a buffer that reports cuda:1 (no GPU needed)
    gpu.register_buffer("table", on_device(torch.ones(3), "cuda:1"))
    for device, expected in [("cuda", ["bias", "weight"]), ("cuda:1", ["bias", "weight"]),
                             ("cuda:0", ["bias", "table", "weight"])]:
        got = off_device(gpu, device)
        assert got == expected, (
            f"With a buffer on cuda:1, off_device(model, {device!r}) should be {expected}, not {got!r}: "
            "asking about plain cuda (no index) asks about the type only, any GPU will do; with an index, "
            "only that GPU.")


def _check_same_device(check_same_device) -> None:
    meta = torch.ones(2, device="meta")
    assert check_same_device(torch.ones(2), torch.zeros(3)) == torch.device("cpu"), (
        "two CPU tensors share cpu.")
    assert check_same_device(torch.tensor(2.0), meta) == torch.device("meta"), (
        "a 0-dim CPU tensor fits with any device: the answer here is meta.")
    try:
        check_same_device(torch.ones(1), meta)
    except RuntimeError as error:
        assert "cpu" in str(error) and "meta" in str(error), "the message should name both devices."
    else:
        raise AssertionError("torch.ones(1) (1-dim, not a scalar) and a meta tensor conflict: raise "
                             "RuntimeError.")
    try:
        check_same_device()
    except ValueError:
        pass
    else:
        raise AssertionError("with no tensors at all, raise ValueError.")


# ----- part 4: a training step that crashes on a GPU

CLASS_FREQ = torch.tensor([0.6, 0.3, 0.1])  # how often each class appears, measured once on the labels


def train_step(model: nn.Module, batch, optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """Train `model` one step on `batch = (x, y)` and return the loss: runs on the CPU, crashes on a GPU."""
    x, y = batch
    logits = model(x)
    one_hot = (y[:, None] == torch.arange(3)).float()
    target = 0.9 * one_hot + 0.1 * CLASS_FREQ  # label smoothing, towards the class frequencies
    weight = torch.tensor([1.0, 2.0, 5.0])  # the rare classes count more
    loss = F.cross_entropy(logits, target, weight=weight)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def classifier(seed: int = 0) -> nn.Module:
    """Return a small classifier of 4 features into 3 classes, with the same weights for the same seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


def batch_of(size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Return a CPU batch `(x, y)` of `size` samples: features (size, 4), labels in 0..2."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(size, 4, generator=generator), torch.randint(0, 3, (size,), generator=generator)


def meta_batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return a batch `(x, y)` of `size` samples on `meta`."""
    return torch.randn(size, 4, device="meta"), torch.randint(0, 3, (size,), device="meta")


def optimizer_for(model: nn.Module, kind: str = "sgd") -> torch.optim.Optimizer:
    """Return SGD with momentum (`kind="sgd"`) or Adam (`"adam"`) over the model's parameters."""
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=0.01)
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


_RETURN_LOSS = "return the loss as train_step does, a 0-dim tensor on the batch's device"


def expect_same_training(fixed_step, seed: int = 0, sizes=(8,), kind: str = "sgd", device="cpu") -> None:
    """Train two copies of `classifier(seed)` on the CPU, one with `fixed_step` and one with `train_step`,
    one step per batch size in `sizes`; check that every loss and, at the end, every weight agree.

    The graded test cells use it."""
    ours, theirs = classifier(seed), classifier(seed)
    ours_opt, theirs_opt = optimizer_for(ours, kind), optimizer_for(theirs, kind)
    for step, size in enumerate(sizes, start=1):
        batch = batch_of(size, seed=100 * seed + step)
        expected = train_step(theirs, batch, theirs_opt)
        got = fixed_step(ours, batch, ours_opt, device)
        where = f"step {step} (a batch of {size}, {kind}, device={device!r})"
        assert isinstance(got, torch.Tensor), (
            f"At {where} fixed_step returned {type(got).__name__}: {_RETURN_LOSS}.")
        assert got.shape == () and got.device.type == "cpu", (
            f"At {where} the loss has shape {tuple(got.shape)} on {got.device}: {_RETURN_LOSS}.")
        assert not got.requires_grad, (
            f"At {where} the loss still requires grad: return loss.detach(), as train_step does (a loss "
            "that keeps its graph keeps the whole step's activations alive).")
        assert torch.allclose(got, expected), (
            f"At {where} the loss is {got.item():.6f}, train_step's {expected.item():.6f}: compute exactly "
            "what train_step computes (labels smoothed towards CLASS_FREQ, class weights 1, 2 and 5); "
            "change where tensors are made, not the maths.")
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6), (
            f"After {len(sizes)} steps ({kind}, device={device!r}) the weight {name} differs from "
            "train_step's: each call trains one step as train_step does (zero_grad, backward, step).")


_AS_NUMBER = {"__float__": float, "__int__": int, "__index__": int, "__bool__": bool}


class MetaReads(TorchFunctionMode):
    """Let a step read the values of meta tensors (`.item()`, `float()`, `.tolist()`, `.cpu()`, an f-string):
    on a GPU such reads work (the host waits, which part 4 does not grade), on `meta` they would raise. Here
    a read gives zeros (a copy to the CPU: zeros that require grad when the tensor does, off its graph)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        t = args[0] if args else None
        if not (isinstance(t, torch.Tensor) and t.device.type == "meta"):
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        zeros = torch.zeros(t.shape, dtype=t.dtype)
        if name in ("item", *_AS_NUMBER) and t.numel() == 1:
            value = zeros.reshape(()).item()
            return _AS_NUMBER[name](value) if name in _AS_NUMBER else value
        if name == "__format__" and t.dim() == 0:
            return format(zeros.item(), *args[1:])
        if name == "tolist":
            return zeros.tolist()
        if name == "cpu":
            return zeros.requires_grad_(t.requires_grad)
        if name == "to":
            device, dtype = torch._C._nn._parse_to(*args[1:], **kwargs)[:2]
            if device is not None and device.type == "cpu":
                return (zeros if dtype is None else zeros.to(dtype)).requires_grad_(t.requires_grad)
        return func(*args, **kwargs)


def run_step(fixed_step, model: nn.Module, batch, optimizer: torch.optim.Optimizer, device="meta"):
    """Return `fixed_step(model, batch, optimizer, device)`, turning a device error into what to fix.
    Reading a value of a meta tensor (`.item()`) gives 0 here: value reads are not graded.

    The graded test cells use it."""
    try:
        with MetaReads():
            return fixed_step(model, batch, optimizer, device)
    except RuntimeError as exc:
        if "device" not in str(exc):
            raise
        raise AssertionError(
            f"On {device}, fixed_step raised {exc!r}: a tensor the step uses is on another device. On a "
            "GPU this is the traceback's crash, or the next one: every tensor an operation combines must be "
            "on the batch's device (a 0-dim CPU tensor excepted), whichever device an earlier call used."
        ) from exc


def expect_loss_on(loss, device) -> None:
    """Check that `loss` is a 0-dim tensor on `device` (its type: `cuda` for `cuda:0`).

    The graded test cells use it."""
    where = torch.device(device).type
    assert isinstance(loss, torch.Tensor), f"fixed_step returned {type(loss).__name__}: {_RETURN_LOSS}."
    assert loss.device.type == where and loss.shape == (), (
        f"On {where} the loss should be a 0-dim tensor on {where}, not shape {tuple(loss.shape)} on "
        f"{loss.device}: compute it where the batch is.")


def _fixed_step(fixed_step) -> None:
    expect_same_training(fixed_step, seed=0, sizes=(8, 1))
    model = classifier(0).to("meta")
    optimizer = optimizer_for(model)
    expect_loss_on(run_step(fixed_step, model, meta_batch(8), optimizer), "meta")
    assert all(p.device.type == "meta" for p in model.parameters()), "The model should stay on meta."
    with HostCopySpy() as spy:
        run_step(fixed_step, model, meta_batch(5), optimizer)
    assert not spy.copies, (
        f"A second call copied {len(spy.copies)} tensors from the host ({', '.join(spy.copies)}): on a GPU "
        "each is a copy (and a wait) on every step.")

_exercises = checker(
    Exercise("forward_on_model_device", _forward_on_model_device, hints=(
        "Ask the model: next(model.parameters(), None) is its first parameter, or None.",
        "Move the input, with both device and dtype in one call: x.to(p.device, p.dtype).",
        ("Only a floating-point x takes the parameter's dtype (x.is_floating_point()); token ids stay "
         "integers."),
        "Call model(x) as it is: no no_grad(), no eval(), no .detach(), so gradients flow as usual.",
    )),
    Exercise("off_device", _off_device, hints=(
        "module.named_parameters() and module.named_buffers() give qualified names like '1.running_mean'.",
        ("off_device asks where tensors are. A GPU tensor always reports an index (cuda:0), so asking about "
         "plain cuda can only mean the type: any GPU will do. With an index (cuda:1), only that very GPU."),
        "Compare with target = torch.device(device): its .index is None or a number. Then sort the names.",
    )),
    Exercise("check_same_device", _check_same_device, hints=(
        "Leave out the 0-dim CPU tensors (t.dim() == 0 and t.device.type == 'cpu'): they fit anywhere.",
        "Collect the remaining devices in a set: none left means cpu; more than one is a conflict.",
        "Raise RuntimeError naming every device in the conflict; ValueError when no tensor is given.",
    )),
    Exercise("fixed_step", _fixed_step, hints=(
        ("Reproduce the crash without a GPU: move classifier() to meta, make a batch there "
         "(meta_batch(8)) and call train_step on it. Read the error, fix that line in your copy, run "
         "again: the error moves to the next culprit."),
        ("A tensor made in the step from Python numbers (torch.arange, torch.tensor, ...) lands on the CPU "
         "unless you say where; a tensor made once outside the step stays where it was made."),
        ("No crash is not the end: on a GPU, .to(device) and torch.tensor(..., device=device) each copy "
         "from the host. Make what can be computed on the device itself, and move what must come from the "
         "host once per device, then keep it (HostCopySpy shows what a second call copies)."),
    )),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
