"""Problem set 8, several devices: the scripts it shows, checks, hints, and the stand-ins its tests use.

Part 1 runs a train function as a real DDP job on the CPU: `run_ranks` forks one process per rank (fork, so
that a function defined in a notebook cell runs as it is; the ranks meet through a file, so that the notebook
starts no thread that a fork could catch holding a lock), each joins a `gloo` group and calls the function
on its own `Recorded` copy of the data, which notes every index it is asked for. Every wait has a time limit;
a rank still running at the end is killed, so a hang fails in seconds instead of stalling the notebook.
`reference` replays, in one process, what the ranks should have computed from the indices they read.

Part 2 writes checkpoints as the rank on `cuda:1` of a DDP job saves them (`ddp_checkpoint`: keys prefixed
with `module.`, storages labelled `cuda:1`).

Part 3's `workers_off_device()` makes a DataLoader worker behave as a forked worker does once its parent has
used CUDA: any touch of the device (`meta` stands in for the GPU) or of `torch.cuda` inside a worker raises
PyTorch's own error, while the main process moves batches as usual. It also counts the torch calls each
worker makes, to show that the workers did the loading.
"""

import contextlib
import datetime
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import (  # the comparisons the graded tests judge with are bound here: see `weight_problems`
    allclose,
    equal,
    nn,
)
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, Dataset, get_worker_info

from devicelab.exercises.ps07 import Payload, like_a_gpu, payload_ran
from devicelab.feedback import Exercise, checker

__all__ = ["Payload", "like_a_gpu", "payload_ran"]  # re-exported for the notebook: ps07's stand-ins

# A healthy two-rank run of `run_ranks` takes about 0.3 s on a 2-core machine (fork, gloo, 2 epochs); the
# limit is about 60 times that, for a loaded machine, and a hang still fails within it.
TIME_LIMIT_S = 20.0
LR = 0.05
BATCH_SIZE = 4


# ----------------------------------------------------------------------------------------------------------
# Part 1: a DDP job on the CPU


def small_model() -> nn.Module:
    """Return the model every rank trains, with the same weights at every call (4 inputs, 8 hidden, 1 out)."""
    generator = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    return model


class Recorded(Dataset):
    """A small regression data set (seeded) that notes, in `seen`, every index it is asked for."""

    def __init__(self, samples: int = 32, seed: int = 1234) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(samples, 4, generator=generator)
        self.y = self.x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(samples, 1, generator=generator)
        self.seen: list[int] = []

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index):
        self.seen.append(int(index))
        return self.x[index], self.y[index]


def train(rank: int, world_size: int, data: Dataset, epochs: int):
    """One rank of a DDP job (the process group is joined): train, and log each epoch's loss from rank 0."""
    model = DDP(small_model())                      # a CPU module: no device_ids
    loader = DataLoader(data, batch_size=4, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for epoch in range(epochs):
        total = torch.zeros(())
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.detach()
        mean = total / len(loader)
        if rank == 0:                               # print once, not once per rank
            dist.all_reduce(mean)                   # the mean over the ranks
            mean /= world_size
            print(f"epoch {epoch}: loss {mean.item():.4f}")
        losses.append(mean.item())
    return model, losses


def flat(parameters) -> list[float]:
    """Return every value of the parameters, in order, as one list of Python floats."""
    return torch.cat([p.detach().reshape(-1) for p in parameters]).tolist()


def _plain_losses(losses) -> list[float]:
    return [float(v.item() if isinstance(v, torch.Tensor) else v) for v in losses]


def _rank_main(function, rank: int, world_size: int, store_path: str, epochs: int, samples: int,
               timeout_s: float, connection, log_path: str) -> None:
    """Run one rank in a forked process: join the group, call `function`, send back what it did."""
    log = open(log_path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 (open until os._exit)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    import faulthandler
    import sys

    sys.stdout = sys.stderr = log
    faulthandler.disable()  # an aborted rank's last line stays gloo's message; no dump on the parent's stderr
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      GLOO_SOCKET_IFNAME="lo")  # the ranks share this machine: the loopback is all they need
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=timeout_s)
    report: dict = {"rank": rank}
    try:
        store = dist.FileStore(store_path, world_size)
        store.set_timeout(timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
        try:
            data = Recorded(samples)
            result = function(rank, world_size, data, epochs)
            if not (isinstance(result, tuple) and len(result) == 2):
                raise TypeError(f"return (model, losses), not {type(result).__name__}")
            model, losses = result
            module = model.module if isinstance(model, DDP) else model
            report.update(weights=flat(module.parameters()), losses=_plain_losses(losses), seen=data.seen)
        finally:
            dist.destroy_process_group()
    except Exception as error:  # noqa: BLE001 (any failure is reported, so the parent never waits for it)
        report["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    log.flush()
    connection.send(report)


@dataclass
class Ranks:
    """What each rank of a `run_ranks` job reported, in rank order, and the job's settings."""

    ranks: list[dict]
    world_size: int
    epochs: int
    samples: int
    seconds: float


class RanksFailed(AssertionError):
    """A DDP job did not finish: a rank raised, died, or did not finish within the time limit."""


def _last_lines(path: Path, n: int = 4) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = [line for line in text.splitlines() if line.strip()]
    except OSError:
        return ""
    return " | ".join(line.strip()[:240] for line in lines[-n:])


def run_ranks(function, *, world_size: int = 2, epochs: int = 2, samples: int = 32,
              timeout_s: float | None = None) -> Ranks:
    """Run `function(rank, world_size, data, epochs)` as a DDP job of `world_size` forked processes (gloo).

    Raise `RanksFailed` when a rank raises or dies, or when they have not all finished within `timeout_s`
    (`TIME_LIMIT_S` when None; then every rank still running is killed); each rank's output is kept and shown
    in the message.
    """
    timeout_s = TIME_LIMIT_S if timeout_s is None else timeout_s
    import torch._dynamo.utils  # noqa: F401 (DDP's constructor imports it: 2 s per rank unless done here)

    start = time.monotonic()
    context = multiprocessing.get_context("fork")
    folder = Path(tempfile.mkdtemp(prefix="ps08-ranks-"))
    logs = [folder / f"rank-{rank}.log" for rank in range(world_size)]
    pipes = [context.Pipe(duplex=False) for _ in range(world_size)]
    processes = [context.Process(target=_rank_main, daemon=True,
                                 args=(function, rank, world_size, str(folder / "store"), epochs, samples,
                                       timeout_s, pipes[rank][1], str(logs[rank])))
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    for _, sender in pipes:
        sender.close()
    reports: dict[int, dict] = {}
    problem = ""
    deadline = start + timeout_s
    try:
        while len(reports) < world_size and not problem:
            for rank, (receiver, _) in enumerate(pipes):
                if rank not in reports and receiver.poll(0.02):
                    try:
                        reports[rank] = receiver.recv()
                    except EOFError:
                        reports[rank] = {"rank": rank, "error": "it sent nothing back"}
                    if "error" in reports[rank]:
                        problem = f"rank {rank} raised {reports[rank]['error']}"
            for rank, process in enumerate(processes):
                if rank not in reports and process.exitcode not in (None, 0) and not problem:
                    code = process.exitcode
                    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
                    problem = f"rank {rank} died ({how})"
            if not problem and time.monotonic() > deadline:
                waiting = sorted(set(range(world_size)) - set(reports))
                problem = (f"ranks {waiting} did not finish within {timeout_s:.0f} s (they were stopped): "
                           "a rank waits in a collective that another rank never calls")
    finally:
        for process in processes:
            process.join(timeout=0 if problem else 2)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        for receiver, _ in pipes:
            receiver.close()
    said = "; ".join(f"rank {rank} printed: {text}" for rank, path in enumerate(logs)
                     if (text := _last_lines(path)))
    shutil.rmtree(folder, ignore_errors=True)
    if problem:
        raise RanksFailed(f"the DDP job failed: {problem}" + (f". {said}" if said else ""))
    return Ranks([reports[rank] for rank in range(world_size)], world_size, epochs, samples,
                 time.monotonic() - start)


def reference(run: Ranks) -> tuple[list[float], list[float]]:
    """Return the weights and per-epoch losses one process computes from the indices the ranks read.

    Step t of an epoch averages, over the ranks, the gradient of rank r's loss on its t-th batch of 4
    (what DDP all-reduces); an epoch's loss is the mean of every rank's batch losses before their steps.
    """
    data = Recorded(run.samples)
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    per_epoch = run.samples // run.world_size
    losses = []
    for epoch in range(run.epochs):
        shards = [r["seen"][epoch * per_epoch:(epoch + 1) * per_epoch] for r in run.ranks]
        epoch_losses = []
        for start in range(0, per_epoch, BATCH_SIZE):
            optimizer.zero_grad()
            total = torch.zeros(())
            for shard in shards:
                index = torch.tensor(shard[start:start + BATCH_SIZE])
                loss = F.mse_loss(model(data.x[index]), data.y[index])
                total = total + loss
                epoch_losses.append(loss.detach())
            (total / run.world_size).backward()
            optimizer.step()
        losses.append(float(torch.stack(epoch_losses).mean()))
    return flat(model.parameters()), losses


def shard_problems(run: Ranks) -> list[str]:
    """Return what is wrong with the samples each rank read, epoch by epoch (empty when nothing is)."""
    per_epoch = run.samples // run.world_size
    problems = []
    for rank in run.ranks:
        if len(rank["seen"]) != run.epochs * per_epoch:
            problems.append(f"rank {rank['rank']} read {len(rank['seen'])} samples in {run.epochs} epochs, "
                            f"not {run.epochs * per_epoch}: {run.samples} samples over {run.world_size} "
                            f"ranks give each {per_epoch} per epoch")
    if problems:
        return problems
    for epoch in range(run.epochs):
        shards = [r["seen"][epoch * per_epoch:(epoch + 1) * per_epoch] for r in run.ranks]
        read = [i for shard in shards for i in shard]
        if sorted(read) != list(range(run.samples)):
            twice = sorted({i for i in read if read.count(i) > 1})
            problems.append(f"in epoch {epoch} the ranks together read samples {twice[:6]} more than once "
                            f"and {run.samples - len(set(read))} not at all: each rank should read its own "
                            "shard")
    orders = [run.ranks[0]["seen"][e * per_epoch:(e + 1) * per_epoch] for e in range(run.epochs)]
    if any(a == b for a, b in pairwise(orders)):
        problems.append(f"rank 0 read its samples in the same order in two epochs in a row ({orders[0][:6]} "
                        "...): the data should be reshuffled every epoch")
    return problems


def weight_problems(run: Ranks) -> list[str]:
    """Return what is wrong with the ranks' weights after training (empty when nothing is).

    (It and the other judges compare with `allclose`, `equal` and `pairwise` bound in this module: in a
    grading kernel the module is recorded before any student code and put back before every cell, so a
    builtin a student puts in torch's place, `torch.allclose = "1".format`, does not change their verdict.)
    """
    weights = [torch.tensor(r["weights"]) for r in run.ranks]
    if any(w.shape != weights[0].shape for w in weights):
        return ["the ranks returned models of different sizes: every rank trains small_model()"]
    if not all(equal(weights[0], w) for w in weights[1:]):
        return [("the ranks' weights differ after training: every step must average the gradients over the "
                 "ranks (DDP does it in backward) so that every rank takes the same step")]
    expected, _ = reference(run)
    if weights[0].shape != torch.Size([len(expected)]):
        return [f"the model has {weights[0].numel()} values, small_model() has {len(expected)}"]
    if not allclose(weights[0], torch.tensor(expected), rtol=1e-4, atol=1e-5):
        gap = float((weights[0] - torch.tensor(expected)).abs().max())
        return [(f"the weights differ from one process training on both ranks' batches (largest difference "
                 f"{gap:.2g}): each step's gradient is the mean of the ranks' gradients, SGD lr {LR}, "
                 f"batches of {BATCH_SIZE} per rank, from small_model()'s weights")]
    return []


def loss_problems(run: Ranks) -> list[str]:
    """Return what is wrong with the losses the ranks logged (empty when nothing is)."""
    _, expected = reference(run)
    problems = []
    for r in run.ranks:
        losses = r["losses"]
        if len(losses) != run.epochs:
            problems.append(f"rank {r['rank']} logged {len(losses)} losses in {run.epochs} epochs: one per "
                            "epoch")
        elif not allclose(torch.tensor(losses), torch.tensor(expected), rtol=1e-4, atol=1e-6):
            problems.append(f"rank {r['rank']} logged the losses {[round(v, 4) for v in losses]}, the mean "
                            f"over all ranks' batches is {[round(v, 4) for v in expected]}: the same mean on "
                            "every rank")
    return problems


# ----------------------------------------------------------------------------------------------------------
# Part 2: a checkpoint from cuda:1


def save_as_if_from(obj, path: Path, location: str = "cuda:1") -> None:
    """Save `obj` with every storage labelled as saved from `location`, as that GPU writes it."""
    from torch import serialization

    original = serialization.location_tag
    serialization.location_tag = lambda storage: location
    try:
        torch.save(obj, path)
    finally:
        serialization.location_tag = original


class Block(nn.Module):
    """A residual block that keeps its layer under the name `module`, as some libraries' wrappers do."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.module = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.module(self.norm(x))


class Tagger(nn.Module):
    """A small model with an embedding, a residual block and a BatchNorm (buffers too)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.block = Block(8)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.bn(self.block(self.embed(tokens).mean(dim=1))))


def build(kind: str, seed: int) -> nn.Module:
    """Return a new model of `kind` ("mlp" or "tagger") with weights drawn from `seed`."""
    torch.manual_seed(seed)
    if kind == "mlp":
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model = Tagger()
    with torch.no_grad():
        model.bn.running_mean.normal_()
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.num_batches_tracked.fill_(7 + seed)
    return model


class _Prefixed(nn.Module):
    """Holds a model as `module`, so that its state_dict's keys start with `module.`, as DDP's do."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


def ddp_checkpoint(folder: Path, *, kind: str = "mlp", seed: int = 0, prefixed: bool = True,
                   location: str = "cuda:1", extra=None) -> tuple[Path, nn.Module]:
    """Write what the rank on `location` of a DDP job saves with `model.state_dict()` (keys `module.`...,
    storages labelled `location`), with an SGD optimizer's state and the epoch; return the path and the model
    whose weights it holds."""
    model = build(kind, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    state = {"model": (_Prefixed(model) if prefixed else model).state_dict(),
             "optimizer": optimizer.state_dict(), "epoch": 3}
    if extra is not None:
        state["extra"] = extra
    path = Path(folder) / f"{kind}-{seed}-{'ddp' if prefixed else 'plain'}-{location.replace(':', '')}.pt"
    save_as_if_from(state, path, location)
    return path, model


def _tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Return the model's parameters and buffers by name, read with nn.Module's own methods (not ones an
    answer may have put on the instance)."""
    return {**dict(nn.Module.named_parameters(model)), **dict(nn.Module.named_buffers(model))}


def weight_differences(model: nn.Module, reference_model: nn.Module) -> list[str]:
    """Return, as sentences, how the parameters and buffers of `model` differ from the reference model's: a
    name one of them lacks, or values that differ (one sentence when none of the values match)."""
    ours, theirs = _tensors(model), _tensors(reference_model)
    if not ours:
        return ["the model holds no parameters or buffers: nothing of the checkpoint is in it"]
    missing = [f"the model has no {name}, which the checkpoint's model holds"
               for name in sorted(theirs.keys() - ours.keys())]
    extra = [f"the model holds {name}, which the checkpoint's model does not"
             for name in sorted(ours.keys() - theirs.keys())]
    shared = sorted(ours.keys() & theirs.keys())
    differ = [name for name in shared if not equal(ours[name].detach().cpu(), theirs[name].detach().cpu())]
    if shared and len(differ) == len(shared):
        values = [(f"none of the model's {len(shared)} parameters and buffers holds the checkpoint's values: "
                   "the model was not loaded from it")]
    else:
        values = [f"{name} does not hold the checkpoint's values" for name in differ]
    return missing + extra + values


def off_device(model: nn.Module, device) -> list[str]:
    """Return, as sentences, the parameters and buffers of `model` that are not on `device` (a model that
    holds none is reported as such: it is on no device)."""
    device = torch.device(device)
    tensors = _tensors(model)
    if not tensors:
        return ["the model holds no parameters or buffers"]
    return [f"{name} is on {t.device}, not on {device}" for name, t in tensors.items() if t.device != device]


# ----------------------------------------------------------------------------------------------------------
# Part 3: DataLoader workers and CUDA

FORK_ERROR = ("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must "
              "use the 'spawn' start method")


class Samples(Dataset):
    """Images (uint8) and labels, each sample sent to the GPU as it is read."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, device) -> None:
        self.images, self.labels, self.device = images, labels, device

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index):
        image = self.images[index].to(self.device).float() / 255
        return image, self.labels[index].to(self.device)


def batches(images: torch.Tensor, labels: torch.Tensor, device, batch_size: int = 64, num_workers: int = 2):
    """The loader of the script: shuffled batches of samples already on the GPU."""
    return DataLoader(Samples(images, labels, device), batch_size=batch_size, shuffle=True,
                      num_workers=num_workers)


def images_and_labels(n: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Return `n` small uint8 images (3 x 4 x 4) and distinct int64 labels, drawn from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, 4, 4), dtype=torch.uint8, generator=generator)
    return images, torch.randperm(n, generator=generator)


def _mentions(obj, device_type: str) -> bool:
    if isinstance(obj, torch.Tensor):
        return obj.device.type == device_type
    if isinstance(obj, torch.device):
        return obj.type == device_type
    if isinstance(obj, str):
        return obj.split(":")[0] in (device_type, "cuda")
    if isinstance(obj, (list, tuple)):
        return any(_mentions(o, device_type) for o in obj)
    if isinstance(obj, dict):
        return any(_mentions(o, device_type) for o in obj.values())
    return False


class WorkersOffDevice(TorchFunctionMode):
    """Inside a DataLoader worker, raise CUDA's fork error at any touch of `device_type` (or of `cuda`), and
    count each worker's torch calls in `worker_calls` (shared memory, so the main process sees them)."""

    def __init__(self, device_type: str = "meta", workers: int = 64) -> None:
        super().__init__()
        self.device_type = device_type
        self.worker_calls = torch.zeros(workers, dtype=torch.int64).share_memory_()
        self.touched: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        info = get_worker_info()
        if info is not None:
            with torch._C.DisableTorchFunction():
                self.worker_calls[info.id % len(self.worker_calls)] += 1
            if _mentions(args, self.device_type) or _mentions(kwargs, self.device_type):
                raise RuntimeError(FORK_ERROR)
            out = func(*args, **kwargs)
            if _mentions(out, self.device_type):
                raise RuntimeError(FORK_ERROR)
            return out
        return func(*args, **kwargs)

    def workers_used(self) -> int:
        """Return how many workers made torch calls (read samples)."""
        return int((self.worker_calls > 0).sum())


@contextlib.contextmanager
def workers_off_device(device_type: str = "meta") -> Iterator[WorkersOffDevice]:
    """Make DataLoader workers fail as forked workers of a process that has used CUDA do (see the module)."""
    real_lazy_init = torch.cuda._lazy_init

    def lazy_init():
        if get_worker_info() is not None:
            raise RuntimeError(FORK_ERROR)
        return real_lazy_init()

    trap = WorkersOffDevice(device_type)
    torch.cuda._lazy_init = lazy_init
    try:
        with trap:
            yield trap
    finally:
        torch.cuda._lazy_init = real_lazy_init


def read_all(loader) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Return the x and y batches of one pass over `loader`; stop its workers at once if the pass fails."""
    xs, ys = [], []
    iterator = iter(loader)
    try:
        for batch in iterator:
            assert isinstance(batch, (tuple, list)) and len(batch) == 2, (
                f"each batch should be a pair (x, y), not {type(batch).__name__}")
            xs.append(batch[0])
            ys.append(batch[1])
    except BaseException as error:
        # The frames of a failed pass hold its DataLoader iterator; left to the garbage collector, its
        # workers are joined 5 s each. Cleared now, the iterator shuts them down at once.
        traceback.clear_frames(error.__traceback__)
        raise
    finally:  # a failed pass's workers must not outlive it (a later fork would inherit them)
        if hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        if hasattr(iterator, "close"):
            iterator.close()
    return xs, ys


# ----------------------------------------------------------------------------------------------------------
# Instant feedback


def _fixed_train(fixed_train) -> None:
    try:  # no epochs and no process group: the stub raises at once, an answer fails fast (or does nothing)
        fixed_train(0, 1, Recorded(4), 0)
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001, S110 (an answer needs the process group that run_ranks makes)
        pass
    try:
        run = run_ranks(fixed_train, world_size=2, epochs=2)
    except RanksFailed as error:
        raise AssertionError(f"{error}. On GPUs (NCCL) the same job hangs: every rank must call the same "
                             "collectives, in the same order.") from None
    problems = shard_problems(run) + weight_problems(run) + loss_problems(run)
    assert not problems, problems[0]


def _load_for_one(load_for_one) -> None:
    with tempfile.TemporaryDirectory() as folder:
        for kind, location, prefixed in (("mlp", "cuda:1", True), ("tagger", "cuda:0", True),
                                         ("tagger", "cuda:1", False)):
            path, trained = ddp_checkpoint(Path(folder), kind=kind, location=location, prefixed=prefixed)
            saved = f"the {kind} file saved on {location}" + ("" if prefixed else " from model.module")
            model = build(kind, seed=5)
            try:
                got = load_for_one(path, model, "cpu")
            except NotImplementedError:
                raise
            except RuntimeError as error:
                raise AssertionError(f"Loading {saved} failed: {str(error)[:400]}") from None
            assert got is model, "Load into the model you were given and return it."
            differ = weight_differences(model, trained)
            assert not differ, f"After loading {saved}: {differ[0]}."
        path, _ = ddp_checkpoint(Path(folder), location="cuda:1")
        model = build("mlp", seed=5)
        with like_a_gpu():
            load_for_one(path, model, torch.device("meta"))
        missed = off_device(model, "meta")
        assert not missed, f"After loading onto meta (inside like_a_gpu()): {missed[0]}."
        payload_ran.clear()
        path, _ = ddp_checkpoint(Path(folder), seed=1, extra=Payload())
        with contextlib.suppress(Exception):
            load_for_one(path, build("mlp", seed=5), "cpu")
        assert not payload_ran, "Loading the file ran code hidden in it: torch.load(..., weights_only=True)."


def _fixed_batches(fixed_batches) -> None:
    images, labels = images_and_labels(24)
    with workers_off_device("meta") as trap:
        try:
            xs, ys = read_all(fixed_batches(images, labels, "meta", batch_size=8, num_workers=2))
        except NotImplementedError:
            raise
        except RuntimeError as error:
            raise AssertionError(f"A worker touched the device: {str(error).splitlines()[0]} ... "
                                 f"({FORK_ERROR[:40]}...)") from None
    assert trap.workers_used() == 2, (f"{trap.workers_used()} workers read samples, not 2: keep the loading "
                                      "in num_workers worker processes.")
    assert all(x.device.type == "meta" for x in xs + ys), "Move each batch (x and y) to the device."


_exercises = checker(
    Exercise("fixed_train", _fixed_train, hints=(
        ("Two problems: what does each rank call when it logs, and which samples does each rank's loader "
         "give it? A collective (all_reduce) must be called by every rank."),
        ("Give the DataLoader a DistributedSampler(data, shuffle=True) instead of shuffle=True, and call "
         "sampler.set_epoch(epoch) at the start of each epoch."),
        "Call dist.all_reduce on every rank, divide by world_size, and print only on rank 0.",
    )),
    Exercise("load_for_one", _load_for_one, hints=(
        ("Three things stand between that file and this machine: the devices its storages name, the keys "
         "DDP gave the weights, and what unpickling may run."),
        ("torch.load(path, map_location=device, weights_only=True); then strip the leading 'module.' from "
         "each key that has it (str.removeprefix), and only there."),
        "model.to(device), then model.load_state_dict(state), then return model.",
    )),
    Exercise("fixed_batches", _fixed_batches, hints=(
        ("The workers are forked processes: nothing that runs in them (__getitem__, collate_fn) may touch "
         "the GPU. What runs in the main process?"),
        ("Let the dataset return CPU tensors, and move each batch with .to(device) in the loop that reads "
         "the DataLoader: a generator function (yield) does that."),
        "Keep shuffle=True, the batch size and num_workers; make floats and divide by 255 on either side.",
    )),
)
check, hint = _exercises.check, _exercises.hint
