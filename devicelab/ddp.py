"""A real DistributedDataParallel run on the CPU: processes started with `spawn`, the `gloo` backend.

Lesson 10 calls `train_ranks` from a notebook. A spawned process imports the function it runs by its module's
name, so the function each rank runs lives here, never in a notebook cell. Each rank reports plain numbers
back through a queue; nothing here needs a GPU.
"""

import datetime
import multiprocessing
import os
import queue
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

HOST = "127.0.0.1"


def small_model() -> nn.Module:
    """Return the model every rank trains: 4 inputs, 8 hidden units, 1 output."""
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def dataset(samples: int = 16) -> TensorDataset:
    """Return the same small regression data set on every rank (seeded)."""
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def flat(parameters) -> list[float]:
    """Return every value of the parameters, in order, as one list of Python floats."""
    return torch.cat([p.detach().reshape(-1) for p in parameters]).tolist()


def _rank_main(rank: int, world_size: int, port: int, steps: int, timeout_s: float, results) -> None:
    """Run one rank: join the group, wrap the model in DDP, train `steps` steps, report what it saw."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))  # as torchrun sets
    torch.set_num_threads(1)
    try:
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cpu")  # on GPUs: torch.cuda.set_device(local_rank); device = cuda:local_rank
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(HOST, port, world_size, is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
        try:
            torch.manual_seed(100 + rank)  # on purpose: each rank builds different weights
            model = small_model().to(device)  # move first, then wrap
            built = flat(model.parameters())
            ddp = DDP(model)  # a CPU module: device_ids and output_device stay None
            wrapped = flat(model.parameters())
            data = dataset()
            sampler = DistributedSampler(data, shuffle=True, seed=0)  # num_replicas, rank: from the group
            loader = DataLoader(data, batch_size=2, sampler=sampler)
            optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
            after_steps, local_grads, ddp_grads = [], [], []
            sampler.set_epoch(0)
            shard = list(iter(sampler))
            batches = iter(loader)
            for _ in range(steps):
                x, y = next(batches)
                x, y = x.to(device), y.to(device)
                alone = small_model().to(device)  # the same weights, outside DDP: this rank's own gradient
                alone.load_state_dict(model.state_dict())
                nn.functional.mse_loss(alone(x), y).backward()
                local_grads.append(flat(p.grad for p in alone.parameters()))
                optimizer.zero_grad()
                nn.functional.mse_loss(ddp(x), y).backward()  # DDP all-reduces the gradients here
                ddp_grads.append(flat(p.grad for p in model.parameters()))
                optimizer.step()
                after_steps.append(flat(model.parameters()))
            results.put({"rank": rank, "local_rank": local_rank, "pid": os.getpid(), "shard": shard,
                         "built": built, "wrapped": wrapped, "after_steps": after_steps,
                         "local_grads": local_grads, "ddp_grads": ddp_grads,
                         "backend": dist.get_backend(), "world_size": dist.get_world_size()})
        finally:
            dist.destroy_process_group()
    except Exception as error:  # noqa: BLE001 (any failure is reported, so the parent never waits for it)
        results.put({"rank": rank, "error": f"{type(error).__name__}: {error}"})


@dataclass
class Run:
    """What each rank of a DDP run reported, in rank order."""

    ranks: list[dict] = field(default_factory=list)

    def same_across_ranks(self, key: str, step: int | None = None) -> bool:
        """Return True when every rank reported the same values for `key` (at `step`, for per-step keys)."""
        values = [r[key] if step is None else r[key][step] for r in self.ranks]
        first = torch.tensor(values[0])
        return all(torch.equal(first, torch.tensor(v)) for v in values[1:])

    def max_difference(self, key: str, step: int | None = None) -> float:
        """Return the largest difference between rank 0's values for `key` and another rank's."""
        values = [torch.tensor(r[key] if step is None else r[key][step]) for r in self.ranks]
        return max(float((v - values[0]).abs().max()) for v in values[1:])

    def mean_of_local_grads_matches(self, step: int) -> bool:
        """Return True when DDP's gradient is the average of the ranks' own gradients at `step`."""
        mean = torch.stack([torch.tensor(r["local_grads"][step]) for r in self.ranks]).mean(dim=0)
        return all(torch.allclose(torch.tensor(r["ddp_grads"][step]), mean, atol=1e-6) for r in self.ranks)


def train_ranks(world_size: int = 2, steps: int = 3, timeout_s: float = 60.0) -> Run:
    """Start `world_size` processes with `spawn`, each a DDP rank on the CPU (gloo), and gather their reports.

    The parent holds the rendezvous store on a port the OS chose (port 0), so no port is picked and bound
    later; every wait has a timeout, and a rank still alive at the end is terminated.
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(HOST, 0, world_size + 1, is_master=True, timeout=timeout, wait_for_workers=False)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=_rank_main, args=(rank, world_size, store.port, steps, timeout_s,
                                                          results), daemon=True)
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    reports: list[dict] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(reports) < world_size:
            try:
                reports.append(results.get(timeout=0.25))
                if "error" in reports[-1]:
                    break  # the other ranks may wait for it in a collective: stop them all
                continue
            except queue.Empty:
                pass
            reported = {r["rank"] for r in reports}
            died = [rank for rank, p in enumerate(processes) if p.exitcode not in (None, 0)
                    and rank not in reported]
            if died:
                code = processes[died[0]].exitcode
                raise RuntimeError(f"DDP rank {died[0]} exited with code {code} before reporting (a script "
                                   "that starts processes with `spawn` needs `if __name__ == \"__main__\":`)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"a DDP rank did not report within {timeout_s:.0f} s")
    finally:
        for process in processes:
            process.join(timeout=10 if not any("error" in r for r in reports) else 1)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        del store
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise RuntimeError(f"a DDP rank failed: {errors[0]}")
    return Run(sorted(reports, key=lambda r: r["rank"]))


def add_one(tensor: torch.Tensor) -> None:
    """Add 1 to `tensor` in place: run in a child process, it shows whether the parent's tensor was shared."""
    tensor.add_(1)


def touch_cuda() -> str:
    """Make a tensor on the current CUDA device; return "ok", or the error's first line."""
    try:
        torch.ones(1, device="cuda")
        return "ok"
    except RuntimeError as error:
        return str(error).splitlines()[0]
