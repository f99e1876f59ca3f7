"""Lesson 08's capstone: a small, slow, buggy training script, and the same script on the simulated GPU.

The script (`SlowNet`, `make_dataset`, `slow_loader`, `slow_train`, `stopwatch`, `main`) is real code that runs on
any device; `show_script()` prints it. It has four mistakes, each one a fact the course teaches:

1. `SlowNet.forward` makes a tensor without `device=`: it lands on the CPU whatever the input's device is;
2. `.item()` every step (and in the progress print): on a GPU each call makes the host wait for the device;
3. an unpinned loader and blocking `.to(device)` copies: each copy is a sync point, from pageable memory;
4. a naive stopwatch: no warm-up, no sync, one sample.

`simulate_epoch` runs the same loop on `devicelab.simgpu.SimulatedGPU` (a model of a T4, a virtual clock), so that
the before and after can be timed and profiled without a GPU. Its figures come from the model, never from a GPU.
"""

import inspect
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from devicelab.simgpu import SimulatedGPU
from devicelab.units import MiB

# ----- the buggy script ---------------------------------------------------------------------------------------


class SlowNet(nn.Module):
    """A small regression model that adds a little input noise while training."""

    def __init__(self, features=32, hidden=64, noise=0.01):
        super().__init__()
        self.noise = noise
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x):
        if self.training:
            x = x + self.noise * torch.randn(x.shape)      # BUG 1: made on the CPU, wherever x is
        return self.body(x).squeeze(-1)


def make_dataset(n=256, features=32, seed=0):
    """Return a TensorDataset of `n` random inputs and a target that a small MLP can learn."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    y = x[:, :4].sum(dim=1).tanh()
    return TensorDataset(x, y)


def slow_loader(dataset, batch_size=32):
    """Return the script's DataLoader."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)  # BUG 3: never pinned


def slow_train(model, loader, optimizer, device):
    """Train one epoch; return the loss of every step."""
    losses = []
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)                    # BUG 3: blocking copies
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())                           # BUG 2: the host waits for the device, every step
        if step % 4 == 0:
            print(f"step {step}: loss {loss.item():.4f}")   # BUG 2 again
    return losses


def stopwatch(fn):
    """Return how long fn() took, in seconds."""
    start = time.perf_counter()                              # BUG 4: no warm-up, no sync, one sample
    fn()
    return time.perf_counter() - start


def main(device):
    """The whole script: train one epoch on `device` and report its time."""
    torch.manual_seed(0)
    model = SlowNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = slow_loader(make_dataset())
    seconds = stopwatch(lambda: slow_train(model, loader, optimizer, device))
    print(f"one epoch: {seconds * 1e3:.1f} ms")


SCRIPT = (SlowNet, make_dataset, slow_loader, slow_train, stopwatch, main)


def show_script() -> None:
    """Print the buggy script's source, as it is in this module."""
    print("\n\n".join(inspect.getsource(part).rstrip() for part in SCRIPT))


def with_forward(forward) -> type:
    """Return a SlowNet subclass whose forward is `forward` (a function written as `def forward(self, x):`)."""
    return type("FixedNet", (SlowNet,), {"forward": forward, "__module__": __name__})


# ----- the same loop on the simulated GPU -----------------------------------------------------------------------

# Host and device costs of one step of the script at a realistic size, on the simulated T4. The kernel durations and
# the host's batch-making time are ASSUMPTIONS (round figures for a small model), not measurements; copy and launch
# costs come from the simulated GPU's profile (devicelab.simgpu.describe_profile). Pinning a batch is a host copy
# of it, modelled at HOST_COPY_Bps (an ASSUMPTION, near the 10.9 GB/s docs/facts.md measured for host copies).
BATCH_BYTES = 8 * MiB
TARGET_BYTES = 4096
LOAD_S = 0.0003
FORWARD_S = 0.0004
BACKWARD_S = 0.0008
UPDATE_S = 0.0001
HOST_COPY_Bps = 10e9


def simulate_epoch(gpu: SimulatedGPU, prof=None, *, steps: int = 8, item_each_step: bool = True,
                   pinned: bool = False, non_blocking: bool = False, noise_copied: bool = False) -> None:
    """Queue one epoch of the script on `gpu`, with or without each fix, naming operators on `prof` if given.

    item_each_step: bug 2 (`loss.item()` every step); pinned / non_blocking: the fixes of bug 3; noise_copied:
    forward makes its noise on the CPU and copies it with `.to(x.device)` (a half fix of bug 1). The host does not
    wait for the device at the end: time the epoch with a sync, as an honest stopwatch does.
    """
    def op(name):
        return prof.op(name) if prof is not None else nullcontext()

    for _ in range(steps):
        gpu.host_work(LOAD_S, "make the batch (DataLoader)")
        if pinned:
            gpu.host_work((BATCH_BYTES + TARGET_BYTES) / HOST_COPY_Bps, "pin the batch (DataLoader)")
        for nbytes, name in ((BATCH_BYTES, "x"), (TARGET_BYTES, "y")):
            with op("aten::to"):
                gpu.copy(nbytes, "h2d", pinned=pinned, non_blocking=non_blocking, name=name)
        if noise_copied:
            with op("aten::to"):
                gpu.copy(BATCH_BYTES, "h2d", pinned=False, name="noise")
        with op("aten::addmm"):
            gpu.launch(FORWARD_S, name="forward")
        with op("autograd::engine::evaluate_function: AddmmBackward0"):
            gpu.launch(BACKWARD_S, name="backward")
        with op("aten::_foreach_add_"):
            gpu.launch(UPDATE_S, name="sgd update")
        if item_each_step:
            with op("aten::item"), op("aten::_local_scalar_dense"):
                gpu.item()
