"""Checks and hints for ps05-pinned-memory."""

import contextlib
import copy
from unittest import mock

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from devicelab.feedback import Exercise, checker

# Tensor methods that read a value on the host: on a GPU each one makes the host wait for the device.
SYNCS = ("item", "cpu", "tolist", "numpy", "__float__", "__int__", "__bool__", "__format__", "__repr__")


def _make_loader(make_loader) -> None:
    dataset = TensorDataset(torch.arange(10.0).reshape(10, 1), torch.arange(10))
    loader = make_loader(dataset, "cpu", batch_size=4)
    assert isinstance(loader, DataLoader), f"make_loader should return a DataLoader, not {type(loader).__name__}."
    assert loader.batch_size == 4, f"make_loader(..., batch_size=4) gave batch_size {loader.batch_size!r}."
    order = [int(v) for _, y in loader for v in y]
    assert order == list(range(10)), (
        f"The samples should come in dataset order, every one of them (no shuffling, no drop_last); got {order}.")
    assert make_loader(dataset, "cpu", num_workers=2).num_workers == 2, "Pass num_workers on to the DataLoader."
    assert not make_loader(dataset, "cpu").pin_memory, "A loader for 'cpu' should not pin memory."
    for device in ("cuda", "cuda:1", torch.device("cuda")):
        assert make_loader(dataset, device).pin_memory, (
            f"A loader for {device!r} should pin memory (pin_memory=True), whether or not this machine has a GPU.")


class LoopWatcher:
    """Wrap a DataLoader; while the training loop's body runs (not while the DataLoader makes a batch), record
    every tensor method in SYNCS that is called, and every .to() call on a batch tensor.

    The one watcher of ps05: `check("train_epoch")` and the graded test cells both use it.
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


def _train_epoch(train_epoch) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(12, 3), torch.randn(12, 1))
    model = nn.Linear(3, 1)
    twin = copy.deepcopy(model)
    watcher = LoopWatcher(DataLoader(data, batch_size=4))
    with watcher.patched():
        result = train_epoch(model, watcher, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), "cpu")
    assert not watcher.syncs, (
        f"Inside the loop your code called {sorted(set(watcher.syncs))}: on a GPU each makes the host wait at every "
        "step. Keep the running total as a tensor.")
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
        "After the epoch the weights differ from a reference run: for every batch zero the gradients, compute the "
        "loss, call backward(), then step().")


_exercises = checker(
    Exercise("make_loader", _make_loader, hints=(
        "Everything is an argument of DataLoader(...): batch_size, shuffle, num_workers, pin_memory.",
        "torch.device(device) accepts both strings and devices; its .type is 'cuda' for 'cuda', 'cuda:1', ...",
        "Decide pin_memory from the device you were given, not from torch.cuda.is_available().",
    )),
    Exercise("train_epoch", _train_epoch, hints=(
        "The loop body is the usual five lines: move x and y, zero_grad, loss, backward, step.",
        "Move each tensor with .to(device, non_blocking=True).",
        ("Start a running total with torch.zeros((), device=device) and add loss.detach() each step; "
         "count the batches."),
        "Return total / number_of_batches: still a tensor on the device, and detached, so no grad.",
    )),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
