"""Checks and hints for ps05-pinned-memory, and the watchers its graded tests use (`LoopWatcher`, `SyncSpy`).
"""

import contextlib
import copy
from unittest import mock

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, TensorDataset

from devicelab.feedback import Exercise, checker

# Tensor methods that read a value on the host: on a GPU each one makes the host wait for the device (but
# .numpy(), which raises TypeError on a GPU tensor; it is watched because t.cpu().numpy() waits in .cpu()).
SYNCS = ("item", "cpu", "tolist", "numpy", "__float__", "__int__", "__bool__", "__format__", "__repr__")


def _make_loader(make_loader) -> None:
    dataset = TensorDataset(torch.arange(10.0).reshape(10, 1), torch.arange(10))
    loader = make_loader(dataset, "cpu", batch_size=4)
    assert isinstance(loader, DataLoader), (
        f"make_loader should return a DataLoader, not {type(loader).__name__}.")
    assert loader.batch_size == 4, f"make_loader(..., batch_size=4) gave batch_size {loader.batch_size!r}."
    order = [int(v) for _, y in loader for v in y]
    assert order == list(range(10)), (
        "The samples should come in dataset order, every one of them (no shuffling, no drop_last); got "
        f"{order}.")
    assert make_loader(dataset, "cpu", num_workers=2).num_workers == 2, (
        "Pass num_workers on to the DataLoader.")
    assert not make_loader(dataset, "cpu").pin_memory, "A loader for 'cpu' should not pin memory."
    for device in ("cuda", "cuda:1", torch.device("cuda")):
        assert make_loader(dataset, device).pin_memory, (
            f"A loader for {device!r} should pin memory (pin_memory=True), whether or not this machine has a "
            "GPU.")


class LoopWatcher:
    """Wrap a DataLoader; while the training loop's body runs (not while the DataLoader makes a batch), record
    every tensor method in SYNCS that is called, and every .to() call on a batch tensor.

    `check("train_epoch")` and train_epoch's graded test cells use it; eval_accuracy's use `SyncSpy`, which
    watches every PyTorch call rather than tensor methods (merging the two is left to a later change).
    """

    def __init__(self, loader):
        self.loader = loader
        self.watching = False
        self.syncs = []
        self.batches = []
        self.moves = {}  # id of a batch tensor -> [(device, non_blocking), ...]

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def __iter__(self):
        self.watching = False
        for batch in self.loader:  # the DataLoader's own work (it calls .item() itself) is not watched
            self.batches.append(batch)
            self.moves.update({id(t): [] for t in batch})
            self.watching = True
            yield batch
            self.watching = False

    @contextlib.contextmanager
    def patched(self):
        """Spy on the sync methods and .to() of every tensor while the block runs."""
        def spy(name):
            original = getattr(torch.Tensor, name)

            def method(tensor, *args, **kwargs):
                if self.watching:
                    self.syncs.append(name)
                return original(tensor, *args, **kwargs)
            return method

        original_to = torch.Tensor.to

        def to(tensor, *args, **kwargs):
            if self.watching and id(tensor) in self.moves:
                target = kwargs.get("device", args[0] if args else None)
                blocking = kwargs.get("non_blocking", next((a for a in args if isinstance(a, bool)), False))
                self.moves[id(tensor)].append((target, blocking))
            return original_to(tensor, *args, **kwargs)

        with contextlib.ExitStack() as stack:
            for name in SYNCS:
                stack.enter_context(mock.patch.object(torch.Tensor, name, spy(name)))
            stack.enter_context(mock.patch.object(torch.Tensor, "to", to))
            yield self


# On a GPU each of these makes the host wait for the device (.numpy() raises there instead), by the name
# `__torch_function__` gives the call:
# reading values into Python (and printing or formatting a tensor, which reads it) ...
_READS = {"item": ".item()", "tolist": ".tolist()", "numpy": ".numpy()", "cpu": ".cpu()",
          "__float__": "float(tensor)", "__int__": "int(tensor)",
          "__index__": "a tensor used as a Python index", "__complex__": "complex(tensor)",
          "__bool__": "bool(tensor) (an `if`, `while`, `and` or `max()` on a tensor)",
          "__repr__": "printing a tensor", "__format__": "formatting a tensor (f-string)",
          "equal": "torch.equal (a Python bool)", "allclose": "torch.allclose (a Python bool)",
          "is_nonzero": "torch.is_nonzero"}
# ... and operations whose output shape depends on the values, so the host must read them to allocate the
# result.
_SHAPE_FROM_VALUES = {"nonzero": "nonzero()", "argwhere": "argwhere()", "masked_select": "masked_select()",
                      "unique": "unique()", "unique_consecutive": "unique_consecutive()",
                      "bincount": "bincount()"}


def _flat(index) -> list:
    return [i for part in index for i in _flat(part)] if isinstance(index, tuple | list) else [index]


def _device_of(args: tuple, kwargs: dict) -> torch.device | None:
    """Return the device asked for in Tensor.to-style arguments (after the tensor), or None."""
    for arg in [kwargs.get("device"), *args]:
        if isinstance(arg, torch.Tensor):
            return arg.device
        if isinstance(arg, str | torch.device):
            return torch.device(arg)
    return None


def sync_reason(func, args: tuple, kwargs: dict) -> str | None:
    """Return why `func(*args, **kwargs)` would make the host wait for a GPU holding these tensors, or None.
    """
    name = getattr(func, "__name__", "")
    if name in _READS:
        return _READS[name]
    if name in _SHAPE_FROM_VALUES:
        return f"{_SHAPE_FROM_VALUES[name]} (its output shape depends on the values)"
    if name == "where" and len(args) + len(kwargs) == 1:
        return ("torch.where(condition) with one argument (a nonzero(): its output shape depends on the "
                "values)")
    if name == "repeat_interleave" and isinstance(kwargs.get("repeats", args[1] if len(args) > 1 else None),
                                                   torch.Tensor) and kwargs.get("output_size") is None:
        return ("repeat_interleave with tensor repeats and no output_size (its output shape depends on the "
                "values)")
    if name == "__getitem__" and len(args) == 2 and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in _flat(args[1])):
        return "boolean-mask indexing, tensor[mask] (its output shape depends on the values)"
    if name in ("tensor", "as_tensor") and args and any(isinstance(i, torch.Tensor) for i in _flat(args[0])):
        return f"torch.{name}() of a list of tensors (each one is read into Python)"
    if name in ("to", "cuda") and args and isinstance(args[0], torch.Tensor):
        target = torch.device("cuda") if name == "cuda" else _device_of(args[1:], kwargs)
        flags = [a for a in args[1:] if isinstance(a, bool)]  # to(device, dtype, non_blocking, copy)
        non_blocking = kwargs.get("non_blocking", flags[0] if flags else False)
        if target is None or non_blocking or target.type == args[0].device.type:
            return None
        if target.type == "cpu":
            return ".to('cpu') (a copy to the host)"
        return f"a blocking copy, .{name}(...) without non_blocking=True"
    return None


class SyncSpy(TorchFunctionMode):
    """Inside `with SyncSpy() as spy:`, record in `spy.syncs` every PyTorch call that would make the host wait
    for a GPU holding the tensors (see `sync_reason`); work done while `spy.paused` (a loader making a batch)
    is not watched.

    Use `spy.watch(loader)` in place of `loader` to watch only the loop's body, not the loader's own work.
    """

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []
        self.paused = False
        self.batches: list = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.paused:
            why = sync_reason(func, args, kwargs)
            if why is not None:
                self.syncs.append(why)
        return func(*args, **kwargs)

    def watch(self, loader) -> "Watched":
        """Return `loader` wrapped so that the spy does not watch the loader's own work."""
        return Watched(self, loader)


class Watched:
    """An iterable over a loader's batches whose fetching the spy does not watch (see `SyncSpy.watch`)."""

    def __init__(self, spy: SyncSpy, loader) -> None:
        self.spy, self.loader = spy, loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        was, self.spy.paused = self.spy.paused, True
        try:
            iterator = iter(self.loader)
        finally:
            self.spy.paused = was
        while True:
            was, self.spy.paused = self.spy.paused, True
            try:
                batch = next(iterator)
            except StopIteration:
                return
            finally:
                self.spy.paused = was
            self.spy.batches.append(batch)
            yield batch


IGNORE = -100  # the label of a padded sample: nn.CrossEntropyLoss's default ignore_index


class Recorder(nn.Module):
    """A model that returns its input as the logits and remembers, for each call, (training, grad enabled)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[bool, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append((self.training, torch.is_grad_enabled()))
        return x


def labelled_batches(seed: int, sizes: list[int], classes: int = 4, padded: float = 0.3) -> list:
    """Return batches (logits, labels) of the given sizes; about `padded` of the labels are IGNORE."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for size in sizes:
        logits = torch.randn(size, classes, generator=generator)
        labels = torch.randint(0, classes, (size,), generator=generator)
        labels[torch.rand(size, generator=generator) < padded] = IGNORE
        batches.append((logits, labels))
    return batches


def expected_accuracy(batches: list) -> float:
    """Return the accuracy over every labelled sample of `batches` whose logits are the model's output."""
    logits = torch.cat([x for x, _ in batches])
    labels = torch.cat([y for _, y in batches])
    keep = labels != IGNORE
    return (logits.argmax(dim=1)[keep] == labels[keep]).double().mean().item()


def accuracy_syncs(eval_accuracy, batches: list, device="meta") -> tuple[list[str], object]:
    """Run eval_accuracy on `device` (meta by default: no values, like a GPU seen from the host) under a
    SyncSpy; return (the syncs its loop made, its result or the exception it raised)."""
    model = Recorder().to(device)
    with SyncSpy() as spy:
        try:
            result = eval_accuracy(model, spy.watch(batches), device)
        except NotImplementedError as error:
            if "meta" not in str(error):
                raise  # the student's placeholder: not attempted yet
            result = error
        except Exception as error:  # noqa: BLE001  (on meta a read fails: the sync it tried is the answer)
            result = error
    return spy.syncs, result


def _train_epoch(train_epoch) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(12, 3), torch.randn(12, 1))
    model = nn.Linear(3, 1)
    twin = copy.deepcopy(model)
    watcher = LoopWatcher(DataLoader(data, batch_size=4))
    with watcher.patched():
        result = train_epoch(model, watcher, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), "cpu")
    assert not watcher.syncs, (
        f"Inside the loop your code called {sorted(set(watcher.syncs))}: on a GPU each makes the host wait "
        "at every step. Keep the running total as a tensor.")
    assert isinstance(result, torch.Tensor), (
        f"Return the mean loss as a tensor, not {type(result).__name__} (no .item() or float()).")
    assert result.dim() == 0, f"The mean loss should be a 0-dim tensor, not shape {tuple(result.shape)}."
    assert not result.requires_grad, "The result still requires grad: add up loss.detach(), not loss."
    optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    losses = []
    for x, y in DataLoader(data, batch_size=4):
        optimizer.zero_grad()
        loss = nn.MSELoss()(twin(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    expected = sum(losses) / len(losses)
    assert abs(float(result) - expected) < 1e-5, (
        f"The mean of the 3 batch losses is {expected:.5f}; you returned {float(result):.5f}.")
    assert torch.allclose(model.weight, twin.weight, atol=1e-6), (
        "After the epoch the weights differ from a reference run: for every batch zero the gradients, "
        "compute the loss, call backward(), then step().")


def _eval_accuracy(eval_accuracy) -> None:
    batches = labelled_batches(0, [5, 3, 6])
    syncs, result = accuracy_syncs(eval_accuracy, batches)
    assert not syncs, (
        f"Inside the loop your code made the host wait: {syncs[0]}. Keep the counts as tensors on the "
        "device: add up ((pred == y) & keep).sum() and keep.sum() instead of indexing with the mask or "
        "reading values.")
    if isinstance(result, Exception):
        raise AssertionError(  # noqa: TRY004  (a failed check, not a type error)
            f"On 'meta' (a device whose values the host cannot read) your function raised {result!r}: keep "
            "every tensor on `device`.") from result
    assert isinstance(result, torch.Tensor) and result.dim() == 0 and result.device.type == "meta", (
        f"Return a 0-dim tensor on `device`, not {result!r}.")
    model = Recorder()
    got = eval_accuracy(model, batches, "cpu")
    assert model.calls and all(not training and not grad for training, grad in model.calls), (
        "Evaluate in eval mode (model.eval()) and without autograd (with torch.no_grad():).")
    expected = expected_accuracy(batches)
    assert isinstance(got, torch.Tensor) and got.is_floating_point(), (
        f"Return the accuracy as a floating-point tensor, not {got!r}.")
    assert abs(float(got) - expected) < 1e-6, (
        f"14 samples, {sum(int((y != IGNORE).sum()) for _, y in batches)} labelled: the accuracy is "
        f"{expected:.4f}, you returned {float(got):.4f}. Count only labelled samples (label != -100), over "
        "all batches together.")


_exercises = checker(
    Exercise("make_loader", _make_loader, hints=(
        "Everything is an argument of DataLoader(...): batch_size, shuffle, num_workers, pin_memory.",
        ("torch.device(device) accepts both strings and devices; its .type is 'cuda' for 'cuda', 'cuda:1', "
         "..."),
        "Decide pin_memory from the device you were given, not from torch.cuda.is_available().",
    )),
    Exercise("train_epoch", _train_epoch, hints=(
        "The loop body is the usual five lines: move x and y, zero_grad, loss, backward, step.",
        "Move each tensor with .to(device, non_blocking=True).",
        ("Start a running total with torch.zeros((), device=device) and add loss.detach() each step; "
         "count the batches."),
        "Return total / number_of_batches: still a tensor on the device, and detached, so no grad.",
    )),
    Exercise("eval_accuracy", _eval_accuracy, hints=(
        ("Find the three places where the slow loop makes the host wait: the blocking copies, the mask used "
         "as an index (pred[keep]: its length depends on the values) and .item()."),
        ("Instead of dropping padded samples, count with the mask: ((pred == y) & keep).sum() is the number "
         "right among the labelled ones, keep.sum() the number labelled. Both stay tensors on the device."),
        ("Start both totals with torch.zeros((), dtype=torch.long, device=device), add to them in the loop, "
         "and return correct / labelled (a float tensor) after it; model.eval() and torch.no_grad() around "
         "the loop."),
    )),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
