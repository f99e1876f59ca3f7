"""Lesson 08's capstone: a slow training script, and a profiler that runs any version of it on a simulated
GPU.

The script (`Net`, `Photos`, `encode`, `decode`, `build_loader`, `run_epoch`, `stopwatch`, `main`) is real
PyTorch code that runs on any device; `show_script()` prints it. Its dataset does real work on the host for
every image (decoding bytes, a random crop and flip, in torch on the CPU), and its model real work on the GPU
(four convolutions over batches of 256 images of 3x224x224 bytes, 36.8 MiB, 50 steps an epoch). It is slow on
a GPU, and the lesson does not say why: the student finds out from a trace of their own code.

`profile_script(Net, build_loader, run_epoch, machine="H100")` runs the student's versions of those three on
the simulated GPU (`devicelab.simgpu`, on a virtual clock) and records a chrome trace with `SimProfiler`. The
code runs for real, with `meta` tensors standing in for CUDA ones: every `device="cuda"` is redirected to
`meta`, every PyTorch call is seen by a `TorchFunctionMode`, and each one drives the simulated GPU as its CUDA
counterpart would:

| the script does | the simulated GPU does |
| --- | --- |
| `x.to("cuda")`, `.cuda()`, `gpu.copy_(x)` | a host-to-device copy of `x`'s bytes (pageable or pinned) |
| an op on a CUDA tensor (`model(x)`, `loss.backward()`, `optimizer.step()`) | kernels, timed from FLOPs or
bytes |
| `.item()`, `float(t)`, `f"{t:.4f}"`, `.tolist()`, `.cpu()` | a device-to-host copy and a host wait |
| `torch.cuda.Stream()`, `torch.cuda.stream(s)`, `wait_stream`, events | the simulated streams and events |
| iterating the `DataLoader` | host time to decode, collate and pin each batch (main thread or workers) |

The simulation lives in three modules: `devicelab.sim_cuda` (CUDA played by `meta` and the simulated GPU),
`devicelab.sim_loader` (the host's side of a DataLoader) and `devicelab.sim_machines` (a `Machine` is the
simulated GPU's profile and its host's, each figure with its source; `MACHINES` is re-exported here). The
first batch is made for real (so a dataset's errors surface); later batches are empty tensors of the same
shapes, their making charged from the host's profile. Meta tensors hold no values: losses read on the
simulated GPU are placeholders (0.0). What the trace shows (which calls wait, which copies are pageable, what
overlaps) is the point, and every figure it gives is simulated.
"""

import contextlib
import inspect
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from devicelab.sim_cuda import simulated_cuda
from devicelab.sim_loader import LoaderPlan, SimLoader
from devicelab.sim_machines import MACHINES, Machine, machine_of
from devicelab.sim_trace import SimProfiler
from devicelab.simgpu import SimulatedGPU
from devicelab.trace_measures import TraceSummary, show_summary, summarize

# read a trace here too, as lesson 08 does; the machines and the simulated CUDA live in their own modules
__all__ = ["MACHINES", "Machine", "TraceSummary", "show_summary", "summarize"]

# ----- the script
# -----------------------------------------------------------------------------------------------


class Net(nn.Module):
    """A small convolutional image classifier that adds a little input noise while training."""

    def __init__(self, classes=10, noise=0.01):
        super().__init__()
        self.noise = noise
        self.body = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, classes))

    def forward(self, x):
        x = x.float() / 255                      # the images arrive as bytes
        if self.training:
            x = x + self.noise * torch.randn(x.shape)
        return self.body(x)


def encode(image):
    """Return an image's bytes as its file holds them: each row stored as differences between pixels."""
    return image.diff(dim=-1, prepend=torch.zeros_like(image[..., :1])).numpy().tobytes()


def decode(data, size):
    """Return the (3, size, size) image of bytes that `encode` stored in `data`."""
    deltas = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(3, size, size)
    return deltas.cumsum(-1, dtype=torch.uint8)


class Photos(Dataset):
    """Colour photos stored as encoded files; each is decoded, cropped and flipped at random when loaded."""

    def __init__(self, n=50 * 256, size=256, crop=224, files=16, seed=0):
        generator = torch.Generator().manual_seed(seed)
        images = torch.randint(0, 256, (files, 3, size, size), generator=generator, dtype=torch.uint8)
        self.files = [encode(image) for image in images]
        self.n, self.size, self.crop = n, size, crop

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        image = decode(self.files[i % len(self.files)], self.size)
        top, left = torch.randint(0, self.size - self.crop + 1, (2,)).tolist()
        image = image[:, top:top + self.crop, left:left + self.crop]
        if torch.rand(()) < 0.5:
            image = image.flip(-1)                 # a horizontal flip
        return image.contiguous(), i % len(self.files) % 10


def build_loader(dataset, device):
    """Return the script's DataLoader for training on `device`."""
    return DataLoader(dataset, batch_size=256, shuffle=True)


def run_epoch(model, loader, optimizer, device):
    """Train one epoch; return the loss of every step."""
    losses = []
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % 10 == 0:
            print(f"step {step}: loss {losses[-1]:.4f}")
    return losses


def stopwatch(fn):
    """Return how long fn() took, in seconds."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(device, images=50 * 256):
    """The whole script: train one epoch of `images` photos on `device` and report its time."""
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = build_loader(Photos(n=images), device)
    seconds = stopwatch(lambda: run_epoch(model, loader, optimizer, device))
    print(f"one epoch: {seconds * 1e3:.1f} ms")


SCRIPT = (Net, encode, decode, Photos, build_loader, run_epoch, stopwatch, main)


def show_script() -> None:
    """Print the script's source, as it is in this module."""
    print("\n\n".join(inspect.getsource(part).rstrip() for part in SCRIPT))


@dataclass
class ScriptRun:
    """One epoch of a version of the script on the simulated GPU: its trace, the GPU, and what it returned."""

    trace: dict
    gpu: SimulatedGPU
    result: Any
    seconds: float  # from the first batch until the GPU has finished: the epoch's real (simulated) length
    host_seconds: float  # until run_epoch returned: what a stopwatch without a sync reads
    loader: LoaderPlan
    # kernels that read an uploaded tensor before its copy had landed (a missing stream wait)
    races: list[str]
    steps: int = 0  # batches the loader handed out
    machine: str = "H100"
    order: tuple[int, ...] = ()  # the samples the loaders handed out, in order (indices into the dataset)

    @property
    def shuffled(self) -> bool:
        """Whether the samples came in another order than the dataset's (what `shuffle=True` gives)."""
        return list(self.order) != sorted(self.order)


def profile_script(net: Callable[[], nn.Module] = Net, loader_maker: Callable = build_loader,
                   train: Callable = run_epoch, *, steps: int | None = None, dataset: Dataset | None = None,
                   machine: "str | Machine" = "H100", quiet: bool = True) -> ScriptRun:
    """Run one epoch of the script (your `Net`, `build_loader`, `run_epoch`) on a simulated machine; trace it.

    The epoch is one after the first, as a profile of a training run would be: the script makes its loader
    once, so persistent workers are already running and others start again. Errors a GPU would raise (a
    tensor left on the CPU) are raised here too. `seconds` is the epoch's simulated time, from the first batch
    until the GPU has finished (a sync is added after your loop).
    """
    def epoch(model, data, optimizer, device, runtime):
        with warnings.catch_warnings():  # the simulated host has the cores for them; this machine may not
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            loader = loader_maker(data, device)
        runtime.loaders[id(loader)] = SimLoader(loader, runtime, steps, started=True)
        return train(model, runtime.loaders[id(loader)], optimizer, device)

    return _profile(net, epoch, dataset, machine, quiet)


def profile_training(net: Callable[[], nn.Module], train: Callable, *, dataset: Dataset | None = None,
                     machine: "str | Machine" = "H100", quiet: bool = True) -> ScriptRun:
    """Run `train(model, dataset, optimizer, device)`, which makes its own DataLoader and trains one epoch,
    on a simulated machine; trace it (ps06 grades the capstone's fixed script this way). A loader made in the
    call is new: its workers start, persistent or not, as they would in a real run."""
    def epoch(model, data, optimizer, device, runtime):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            return train(model, data, optimizer, device)

    return _profile(net, epoch, dataset, machine, quiet)


def _profile(net: Callable[[], nn.Module], epoch: Callable, dataset: Dataset | None, machine: "str | Machine",
             quiet: bool) -> ScriptRun:
    chosen = machine_of(machine)
    gpu = SimulatedGPU(chosen.gpu, initialized=True)
    torch.manual_seed(0)
    model = net().to("meta")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = dataset if dataset is not None else Photos()
    out = contextlib.redirect_stdout(_Discard()) if quiet else contextlib.nullcontext()
    with SimProfiler(gpu) as prof, simulated_cuda(gpu, prof, chosen.host) as runtime, out:
        start = gpu.clock()
        result = epoch(model, data, optimizer, torch.device("cuda"), runtime)
        returned = gpu.clock()
        gpu.synchronize()
    loaders = list(runtime.loaders.values())
    plan = loaders[-1].plan if loaders else LoaderPlan(0, 0, False)
    return ScriptRun(prof.trace(), gpu, result, gpu.clock() - start, returned - start, plan, runtime.races,
                     sum(loader.handed for loader in loaders), chosen.name,
                     tuple(i for loader in loaders for i in loader.order))


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


# ----- timing one version against another
# ----------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """One version's timed samples, in seconds."""

    samples: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)


@dataclass(frozen=True)
class Comparison:
    """Two versions timed alternately: `before`, `after`, and how much faster `after` is."""

    before: Spread
    after: Spread

    @property
    def speedup(self) -> float:
        """The ratio of the medians."""
        return self.before.median / self.after.median

    @property
    def beyond_spread(self) -> bool:
        """True when every `after` sample is faster than every `before` sample: the gain is not noise."""
        return self.after.max < self.before.min


def alternate(before: Callable[[], object], after: Callable[[], object], *, sync: Callable[[], object],
              clock: Callable[[], float], runs: int = 7, warmup: int = 1) -> Comparison:
    """Time `before` and `after` in turns, `runs` times each after `warmup` untimed calls of each; each call
    timed from a sync to a sync with `clock`, so that both see the same state of the machine.
    """
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    for _ in range(warmup):
        before()
        after()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        for fn, out in ((before, samples[0]), (after, samples[1])):
            sync()
            start = clock()
            fn()
            sync()
            out.append(clock() - start)
    return Comparison(Spread(tuple(samples[0])), Spread(tuple(samples[1])))


def show_comparison(label: str, comparison: Comparison) -> None:
    """Print a Comparison: min, median and max of each version, and the speedup of the medians."""
    for name, spread in (("before", comparison.before), ("after", comparison.after)):
        print(f"{label:28} {name:6} min {spread.min * 1e3:8.2f} ms  median {spread.median * 1e3:8.2f} ms  "
              f"max {spread.max * 1e3:8.2f} ms  ({len(spread.samples)} runs)")
    verdict = "beyond the spread" if comparison.beyond_spread else "within the spread"
    print(f"{label:28} {comparison.speedup:.2f}x faster (medians), {verdict}")
