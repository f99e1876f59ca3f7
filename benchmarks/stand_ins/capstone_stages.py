"""The capstone's fixes in stages, each a (Net, build_loader, run_epoch) built on the one before.

0. the script with only its crash fixed; 1. no syncs (no `.item()` per step); 2. pinned batches and
`non_blocking` copies; 3. persistent worker processes; 4. the next batch copied on a side stream (the
reference fix, benchmarks/stand_ins/capstone_fixed.py). benchmarks/capstone_gpu.py times each against the one
before on a GPU; tests/lessons/test_lesson08.py runs them on the simulated H100 and T4. Not shipped to
students.
"""

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from devicelab import capstone
from devicelab.exercises.lesson08 import NoiseOnDevice

FIXED = Path(__file__).with_name("capstone_fixed.py")


class Stage(NamedTuple):
    """One version of the script: what changed, and its three parts."""

    name: str
    net: Callable
    build_loader: Callable
    run_epoch: Callable


def fixed_parts() -> dict:
    """Return the reference fix's Net, build_loader and run_epoch."""
    namespace: dict = {}
    exec(FIXED.read_text(), namespace)  # noqa: S102  (the course's own file)
    return namespace


def loader_with(**options) -> Callable:
    """Return a build_loader that makes the script's DataLoader with these options."""
    return lambda dataset, device: DataLoader(dataset, batch_size=256, shuffle=True, **options)


def run_epoch_without_syncs(model, loader, optimizer, device, non_blocking=False):
    """The script's loop with the losses kept on the device (no .item() per step)."""
    losses = []
    for x, y in loader:
        x, y = x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def run_epoch_non_blocking(model, loader, optimizer, device):
    """The loop without syncs, its copies queued with non_blocking=True."""
    return run_epoch_without_syncs(model, loader, optimizer, device, non_blocking=True)


def stages() -> list[Stage]:
    """Return the five versions, from the script to the reference fix."""
    fixed = fixed_parts()
    workers = fixed["WORKERS"]
    return [
        Stage("the script, crash fixed", NoiseOnDevice, capstone.build_loader, capstone.run_epoch),
        Stage("1. no syncs", NoiseOnDevice, capstone.build_loader, run_epoch_without_syncs),
        Stage("2. pinned, non_blocking", NoiseOnDevice, loader_with(pin_memory=True), run_epoch_non_blocking),
        Stage(f"3. {workers} persistent workers", NoiseOnDevice,
              loader_with(pin_memory=True, num_workers=workers, persistent_workers=True),
              run_epoch_non_blocking),
        Stage("4. side-stream prefetch", fixed["Net"], fixed["build_loader"], fixed["run_epoch"]),
    ]
