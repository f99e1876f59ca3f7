"""Problem set 7, devices in real code: checks, hints, and the stand-ins its tests use instead of a GPU.

`like_a_gpu()` makes `meta` behave like a second device for a resume: parameters keep their identity when
the model moves (as they do between CPU and CUDA, where `Module.to` sets `param.data`), and a checkpoint
loaded with `map_location` on meta is read onto the CPU (meta holds no values to copy into a CPU model), its
tensors counted as on meta where `load_state_dict(..., assign=True)` puts them in a model.
`save_as_if_from_gpu` writes a checkpoint whose tensors say they were saved on `cuda:0`. `OOMStep` is a
training step that runs out of memory above a batch size, as a GPU's would, and notes what is still alive.
"""

import collections
import contextlib
import tempfile
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from devicelab.feedback import Exercise, checker

payload_ran: list[str] = []


def _run_payload(marker: str) -> None:
    payload_ran.append(marker)


class Payload:
    """An object whose unpickling calls a function: what a hostile checkpoint would hide."""

    def __reduce__(self):
        return (_run_payload, ("the checkpoint ran code",))


def small_model(seed: int = 0) -> nn.Module:
    """Return the small model the tests train, save and resume."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int = 1) -> None:
    """Run `steps` optimizer steps of a toy regression on the model's device."""
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    for _ in range(steps):
        x = torch.randn(16, 4, generator=generator).to(device)
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def save_as_if_from_gpu(obj, path: Path) -> None:
    """Save `obj` with every tensor labelled as saved from `cuda:0`, as a GPU machine writes it."""
    from torch import serialization

    original = serialization.location_tag
    serialization.location_tag = lambda storage: "cuda:0"
    try:
        torch.save(obj, path)
    finally:
        serialization.location_tag = original


def checkpoint(folder: Path, *, epoch: int = 4, lr: float = 0.01, steps: int = 3, seed: int = 0,
               from_gpu: bool = False, extra=None) -> tuple[Path, nn.Module, torch.optim.Optimizer]:
    """Train a small model with Adam, save {"model", "optimizer", "epoch"} in `folder`; return the path,
    the trained model and its optimizer."""
    model = small_model(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    train(model, optimizer, steps)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
    if extra is not None:
        state["extra"] = extra
    path = Path(folder) / f"checkpoint-{seed}-{epoch}.pt"
    (save_as_if_from_gpu if from_gpu else torch.save)(state, path)
    return path, model, optimizer


def fresh(seed: int = 7) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Return a new model (other weights) and a new Adam (another lr) to resume into."""
    model = small_model(seed)
    return model, torch.optim.Adam(model.parameters(), lr=0.5)


@contextlib.contextmanager
def like_a_gpu() -> Iterator[None]:
    """Make `meta` stand in for a GPU during a resume (see the module's docstring); restore everything.

    A checkpoint loaded with `map_location` on meta is read onto the CPU (its values are needed), and its
    tensors count as on meta: `load_state_dict(..., assign=True)` puts them in the model on meta, as it would
    put a file's tensors mapped to a GPU in the model on that GPU."""
    swap = torch.__future__.get_swap_module_params_on_conversion()
    real_load, real_load_state_dict = torch.load, nn.Module.load_state_dict
    on_meta: dict[int, weakref.ref] = {}  # id -> the tensor a load onto meta read onto the CPU

    def load(*args, **kwargs):
        where = kwargs.get("map_location")
        if where is None or callable(where) or isinstance(where, dict) or torch.device(where).type != "meta":
            return real_load(*args, **kwargs)
        loaded = real_load(*args, **{**kwargs, "map_location": "cpu"})
        on_meta.update((id(t), weakref.ref(t)) for t in tree_leaves(loaded) if isinstance(t, torch.Tensor))
        return loaded

    def meta_if_loaded_so(value):
        known = on_meta.get(id(value)) if isinstance(value, torch.Tensor) else None
        return value.to("meta") if known is not None and known() is value else value

    def load_state_dict(self, state_dict, strict=True, assign=False):
        if assign:
            moved = collections.OrderedDict((k, meta_if_loaded_so(v)) for k, v in state_dict.items())
            if hasattr(state_dict, "_metadata"):
                moved._metadata = state_dict._metadata
            state_dict = moved
        return real_load_state_dict(self, state_dict, strict=strict, assign=assign)

    torch.__future__.set_swap_module_params_on_conversion(True)
    torch.load, nn.Module.load_state_dict = load, load_state_dict
    try:
        with warnings.catch_warnings():  # copying values into meta parameters is a no-op, and it says so
            warnings.filterwarnings("ignore", message=".*non-meta parameter.*")
            yield
    finally:
        torch.load, nn.Module.load_state_dict = real_load, real_load_state_dict
        torch.__future__.set_swap_module_params_on_conversion(swap)


def off_device(model: nn.Module, optimizer: torch.optim.Optimizer, device) -> list[str]:
    """Return what is not where a resume onto `device` should leave it (parameters, optimizer state)."""
    device = torch.device(device)
    problems = [f"the parameter {name} is on {p.device}, not on {device}"
                for name, p in model.named_parameters() if p.device != device]
    known = {id(p) for p in model.parameters()}
    for group in optimizer.param_groups:
        if any(id(p) not in known for p in group["params"]):
            problems.append("the optimizer updates tensors that are no longer the model's parameters")
            break
    for param, state in optimizer.state.items():
        problems += [f"the optimizer's {key} is on {value.device}, its parameter on {param.device}"
                     for key, value in state.items()
                     if key != "step" and isinstance(value, torch.Tensor) and value.device != param.device]
    if not optimizer.state:
        problems.append("the optimizer has no state: load the checkpoint's optimizer state_dict")
    return problems


def state_matches(optimizer: torch.optim.Optimizer, reference: torch.optim.Optimizer) -> bool:
    """Return True when both optimizers hold equal Adam averages and the same learning rate."""
    mine, theirs = optimizer.state_dict(), reference.state_dict()
    if [g["lr"] for g in mine["param_groups"]] != [g["lr"] for g in theirs["param_groups"]]:
        return False
    if set(mine["state"]) != set(theirs["state"]):
        return False
    return all(torch.equal(mine["state"][i][k].cpu(), theirs["state"][i][k].cpu())
               for i in theirs["state"] for k in ("exp_avg", "exp_avg_sq"))


class OOMStep:
    """A training step that raises `torch.OutOfMemoryError` above `fits` samples (or `error`, if given).

    Each call first allocates its activations, as a real step does before it runs out. `tried` lists the
    batch sizes it was called with; `held` those called while a failed attempt's activations were still alive
    (kept by an exception, its traceback, or a name).
    """

    def __init__(self, fits: int, error: Exception | None = None) -> None:
        self.fits, self.error = fits, error
        self.tried: list[int] = []
        self.held: list[int] = []
        self._failed: list[weakref.ref] = []

    def __call__(self, batch_size: int) -> torch.Tensor:
        if any(ref() is not None for ref in self._failed):
            self.held.append(batch_size)
        self.tried.append(batch_size)
        if batch_size < 1:
            raise ValueError(f"a batch of {batch_size} samples")
        activations = torch.empty(batch_size, 16)
        if self.error is not None:
            raise self.error
        if batch_size > self.fits:
            self._failed.append(weakref.ref(activations))
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {batch_size} MiB.")
        return activations.sum()


def _largest_batch(largest_batch) -> None:
    with torch.device("meta"):
        model = nn.Linear(1024, 1024)            # 1,049,600 float32 parameters: 4,198,400 bytes
    fixed = 4 * 4 * 1_049_600                    # weights, grads, exp_avg, exp_avg_sq
    got = largest_batch(model, 1_000_000, fixed + 10_500_000)
    assert isinstance(got, int), f"Return an int (a number of samples), not {type(got).__name__}."
    if got == 23:
        raise AssertionError("You counted only the weights: training also keeps a gradient and Adam's two "
                             "averages (exp_avg, exp_avg_sq) for every trainable parameter.")
    assert got == 10, (f"Weights, gradients and Adam's two averages take {fixed:,} bytes; 10,500,000 bytes "
                       f"remain, so 10 samples of 1,000,000 bytes fit, not {got}.")
    assert largest_batch(model, 1_000_000, fixed + 999_999) == 0, "Not one sample fits: return 0."
    with torch.device("meta"):
        frozen = nn.Linear(1024, 1024)
    frozen.requires_grad_(False)
    got = largest_batch(frozen, 1_000_000, 4 * 1_049_600 + 2_500_000)
    assert got == 2, (f"A frozen model (requires_grad=False) keeps only its weights: no gradient and no "
                      f"optimizer state; 2 samples fit, you said {got}.")


def _resume(resume) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _resume_in(resume, Path(folder))


def _resume_in(resume, folder: Path) -> None:
    path, trained, trained_optimizer = checkpoint(folder, epoch=4, lr=0.01)
    model, optimizer = fresh()
    got = resume(path, model, optimizer, torch.device("cpu"))
    assert got == 5, (f"The checkpoint was saved after epoch 4: resume from epoch 5 (return "
                      f"checkpoint['epoch'] + 1), not {got!r}.")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                  trained.state_dict().values(), strict=True)), (
        "The model's weights are not the checkpoint's: model.load_state_dict(checkpoint['model']).")
    assert state_matches(optimizer, trained_optimizer), (
        "The optimizer does not hold the checkpoint's state (Adam's averages and its lr): "
        "optimizer.load_state_dict(checkpoint['optimizer']).")
    path, _, _ = checkpoint(folder, epoch=2, from_gpu=True)
    model, optimizer = fresh()
    try:
        resume(path, model, optimizer, torch.device("cpu"))
    except RuntimeError as error:
        raise AssertionError(f"A checkpoint written on a GPU machine failed to load here ({error}): pass "
                             "map_location to torch.load.") from None
    model, optimizer = fresh()
    with like_a_gpu():
        resume(folder / "checkpoint-0-4.pt", model, optimizer, torch.device("meta"))
    problems = off_device(model, optimizer, "meta")
    assert not problems, (f"After a resume onto another device, {problems[0]}: move the model first, then "
                          "load the optimizer's state (load_state_dict puts it on each parameter's device).")


def _fit_batch(fit_batch) -> None:
    step = OOMStep(fits=20)
    got = fit_batch(step, 64)
    assert step.tried[:3] == [64, 32, 16], (
        f"Start at 64 and halve after each out-of-memory error (64, 32, 16); you tried {step.tried}.")
    assert got == 16, f"16 samples ran: return 16 (the batch size), not {got!r}."
    assert step.tried == [64, 32, 16], f"Stop at the first batch that runs; you tried {step.tried}."
    step = OOMStep(fits=0)
    try:
        fit_batch(step, 4)
    except torch.OutOfMemoryError:
        pass
    else:
        raise AssertionError("Not even 1 sample fits: raise the out-of-memory error again.")
    assert step.tried == [4, 2, 1], f"Try 4, 2, then 1, and stop there; you tried {step.tried}."
    step = OOMStep(fits=100, error=RuntimeError("Expected all tensors to be on the same device"))
    try:
        fit_batch(step, 64)
    except RuntimeError as error:
        assert not isinstance(error, torch.OutOfMemoryError) and step.tried == [64], (
            "Only torch.OutOfMemoryError means the batch is too big: let other errors through at once.")
    else:
        raise AssertionError("A device-mismatch RuntimeError should reach the caller, not be retried.")
    step = OOMStep(fits=8)
    fit_batch(step, 32)
    assert not step.held, (
        "The next try started while the failed one's tensors were still alive: retry after the except block "
        "ends, and keep no reference to the error.")


_exercises = checker(
    Exercise("largest_batch", _largest_batch, hints=(
        ("Add up three things: bytes every parameter and buffer takes once; for each trainable parameter, "
         "three more of its size (its gradient, Adam's exp_avg and exp_avg_sq); then the activations."),
        ("p.numel() * p.element_size() is a tensor's bytes in its own dtype (it works on meta too); "
         "model.parameters() lists a shared parameter once; p.requires_grad says whether it trains."),
        "What is left after the fixed part, divided by the bytes per sample, rounded down; never below 0.",
    )),
    Exercise("resume", _resume, hints=(
        ("Four steps: torch.load(path, map_location=..., weights_only=True); model.to(device); "
         "model.load_state_dict(...); optimizer.load_state_dict(...)."),
        ("The order matters: load_state_dict casts the optimizer's state to each parameter's device at the "
         "moment you call it; a later model.to() moves the parameters and leaves that state behind."),
        "The checkpoint holds the epoch that finished: return checkpoint['epoch'] + 1.",
    )),
    Exercise("fit_batch", _fit_batch, hints=(
        ("A loop: try step(batch_size) and return batch_size when it runs; on torch.OutOfMemoryError, halve "
         "batch_size (// 2) and go round again."),
        ("Catch torch.OutOfMemoryError only: a RuntimeError may be a device mismatch, which no batch size "
         "fixes. When batch_size is 1 and it still fails, `raise` it again."),
        ("Do the retry after the except block has ended (the loop's next turn), not inside it, and keep no "
         "name for the error: it holds the failed step's frames, and their tensors."),
    )),
)
check, hint = _exercises.check, _exercises.hint

