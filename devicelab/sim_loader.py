"""The host's side of a DataLoader on a simulated machine: a loader's batches, and what making, pinning and
handing them over costs the host (`SimLoader`), as lesson 08's capstone runs them."""

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from devicelab.sim_machines import HostProfile
from devicelab.simgpu import SimulatedGPU


class LoaderRuntime(Protocol):
    """What a simulated loader needs of the simulated CUDA it runs under (sim_cuda.SimCuda is one)."""

    gpu: SimulatedGPU  # whose clock the host's waits and work go on
    host: HostProfile  # what making, pinning and handing over a batch costs
    pinned: Any  # the set of pinned tensors, which a pinned batch joins

    def paused(self) -> AbstractContextManager[None]:
        """Run torch calls untouched by the simulation (the loader's own CPU work)."""



@dataclass(frozen=True)
class LoaderPlan:
    """What the script's DataLoader asks for, read from the loader itself."""

    batch_size: int
    num_workers: int
    pin_memory: bool
    persistent_workers: bool = False
    prefetch_factor: int = 2  # batches each worker may have ready ahead (PyTorch's default with workers)


class SimLoader:
    """Iterate a DataLoader's dataset in its batches, charging the simulated host what loading them costs.

    The batches follow the loader's own batch sampler (shuffled or not, `drop_last` or not), and the samples
    it hands out, in order, are kept in `order`. Workers (as `_MultiProcessingDataLoaderIter` hands out
    work): each makes every num_workers-th batch, at most num_workers x prefetch_factor batches are asked for
    ahead of the loop, the workers share the host's cores but the one the loop's process keeps, one pinning
    thread pins their batches in turn, and the loop waits for a batch that is not ready. The workers start at
    the loader's first epoch, and again every epoch unless `persistent_workers=True` (MODELLING).
    """

    def __init__(self, loader: DataLoader, runtime: LoaderRuntime, steps: int | None = None,
                 started: bool = False) -> None:
        self.plan = LoaderPlan(loader.batch_size or 1, loader.num_workers, bool(loader.pin_memory),
                               bool(getattr(loader, "persistent_workers", False)),
                               getattr(loader, "prefetch_factor", None) or 2)
        self.started = started  # whether this loader has run an epoch before (its workers were started)
        self.loader = loader
        self.dataset = loader.dataset
        self.collate = loader.collate_fn
        self.runtime = runtime
        self.steps = steps
        self.handed = 0  # batches handed out so far
        self.order: list[int] = []  # the samples handed out, as indices into the dataset under any Subset

    def __len__(self) -> int:  # DataLoader's own __len__ is this one while the simulation runs
        sampler = self.loader.batch_sampler if self.loader.batch_sampler is not None else self.loader.sampler
        n = len(sampler)
        return n if self.steps is None else min(n, self.steps)

    def _indices(self) -> Iterator[list[int]]:
        """Yield each batch's indices into the loader's dataset, as the loader's batch sampler draws them."""
        if self.loader.batch_sampler is None:  # batch_size=None: one sample per step
            yield from ([i] for i in self.loader.sampler)
        else:
            yield from self.loader.batch_sampler

    def _batches(self) -> Iterator[tuple[Any, int]]:
        """Yield each batch and its number of samples: the first made for real, the rest stand-ins."""
        first, drawn = None, self._indices()
        for _ in range(len(self)):
            with self.runtime.paused():  # the loader's own CPU work (a shuffle draws on torch), untouched
                indices = [int(i) for i in next(drawn)]
                size = len(indices)
                self.order.extend(_underlying(self.dataset, indices))
                if first is None or size != first[1]:
                    first = batch = (self.collate([self.dataset[i] for i in indices]), size)
                else:
                    batch = (_empty_like(first[0]), size)
            yield batch

    def __iter__(self) -> Iterator[Any]:
        gpu, plan, host = self.runtime.gpu, self.plan, self.runtime.host
        workers = plan.num_workers
        if workers and (not self.started or not plan.persistent_workers):
            gpu.host_work(host.worker_start_s, "DataLoader: start the workers")
        self.started = True
        start = pinned_until = gpu.clock()
        # n workers share the cores the loop's process leaves (at least one): each at that share of a core
        slowdown = workers / min(workers, max(1, host.cores - 1)) if workers else 1.0
        ahead = workers * plan.prefetch_factor  # batches asked for before the loop has taken any
        free_at = [start] * workers  # when each worker has finished its last batch
        handed_at: list[float] = []  # when each batch reached the loop
        for b, (batch, size) in enumerate(self._batches()):
            nbytes = sum(t.nbytes for t in _tensors(batch))
            make = size * host.decode_s_per_image + nbytes / host.collate_Bps
            pin = nbytes / host.pin_Bps if plan.pin_memory else 0.0
            if workers == 0:
                gpu.host_work(make, "DataLoader: make the batch (main thread)")
                if pin:
                    gpu.host_work(pin, "DataLoader: pin the batch (main thread)")
            else:
                asked = start if b < ahead else handed_at[b - ahead]  # sent to a worker when one came back
                ready = free_at[b % workers] = max(free_at[b % workers], asked) + make * slowdown
                pinned_until = max(ready, pinned_until) + pin  # one pinning thread, batch after batch
                if pinned_until > gpu.clock():  # the loop's thread waits for the worker (not a CUDA call)
                    gpu.host_work(pinned_until - gpu.clock(), "DataLoader: wait for a worker's batch")
                gpu.host_work(host.worker_handoff_s, "DataLoader: receive the batch from a worker")
            if plan.pin_memory:
                for t in _tensors(batch):
                    self.runtime.pinned.add(t)
            self.handed += 1
            handed_at.append(gpu.clock())
            yield batch


def _underlying(dataset: Dataset, indices: list[int]) -> list[int]:
    """Return `indices` into `dataset` as indices into the dataset under its `Subset`s (a shuffled Subset is a
    shuffle too)."""
    while isinstance(dataset, Subset):
        indices = [int(dataset.indices[i]) for i in indices]
        dataset = dataset.dataset
    return indices


def _empty_like(batch: Any) -> Any:
    """Return a batch of the same structure with new, empty tensors of the same shapes."""
    if isinstance(batch, torch.Tensor):
        return torch.empty_like(batch)
    if isinstance(batch, dict):
        return {k: _empty_like(v) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_empty_like(v) for v in batch)
    return batch


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        return [t for v in batch.values() for t in _tensors(v)]
    if isinstance(batch, list | tuple):
        return [t for v in batch for t in _tensors(v)]
    return []
