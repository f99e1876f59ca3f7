"""Practice for lesson 08, the capstone: each check tests what a fix does, never how it is written.

forward: on the meta device (a real device mismatch without a GPU), with no tensor made on the CPU on the way;
train: ps05's LoopWatcher sees no sync inside the loop, and the losses are right; fast_epoch: the loader is pinned
exactly when the target is a CUDA device, and the watched copies are non-blocking; time_it: against the simulated
GPU's virtual clock, where a naive stopwatch measures only the launch.
"""

import math
import statistics
import warnings
from unittest import mock

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader

from devicelab.capstone import SlowNet, make_dataset, with_forward
from devicelab.exercises.ps05 import LoopWatcher
from devicelab.feedback import Exercise, checker
from devicelab.simgpu import KernelSequence, SimulatedGPU


class _MadeOnCPU(TorchFunctionMode):
    """Record every torch function that returns a CPU tensor (inside a forward that should make none)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.device.type == "cpu":
            self.made.append(getattr(func, "__name__", str(func)))
        return out


def _reference_forward(self, x):
    if self.training:
        x = x + self.noise * torch.randn_like(x)
    return self.body(x).squeeze(-1)


def _forward(forward) -> None:
    net = with_forward(forward)
    torch.manual_seed(0)
    model = net().to("meta")
    x = torch.randn(16, 32, device="meta")
    watch = _MadeOnCPU()
    try:
        with watch:
            out = model(x)
    except RuntimeError as error:
        if "device" not in str(error) and "CUDA" not in str(error) and "NVIDIA" not in str(error):
            raise
        raise AssertionError(
            f"On the meta device forward raised: {error}. A tensor made inside forward must be made where x is: "
            "torch.randn_like(x), or torch.randn(x.shape, device=x.device) (not a hard-coded 'cuda', not the "
            "notebook's global `device`).") from error
    made = [name for name in watch.made if name not in ("__get__", "device")]
    assert not made, (
        f"forward made a tensor on the CPU ({', '.join(sorted(set(made)))}) and then moved it: on a GPU that is a "
        "blocking host-to-device copy, a sync point, every step. Make it on x's device directly "
        "(torch.randn_like(x), or device=x.device).")
    assert isinstance(out, torch.Tensor) and out.device.type == "meta", "forward should return a tensor on x's device."
    assert tuple(out.shape) == (16,), f"For 16 inputs forward should return shape (16,), not {tuple(out.shape)}."

    torch.manual_seed(1)
    mine = net()
    reference = with_forward(_reference_forward)()
    reference.load_state_dict(mine.state_dict())
    x = torch.randn(16, 32)
    for training in (False, True):
        mine.train(training)
        reference.train(training)
        torch.manual_seed(2)
        got = mine(x)
        torch.manual_seed(2)
        expected = reference(x)
        mode = "training" if training else "evaluation"
        assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-6), (
            f"In {mode} mode forward gives different values from the script's: keep what it computes (in training "
            "mode, noise of 0.01 * randn of x's shape added to x; no noise in evaluation mode); change only where "
            "the noise is made.")


def _reference_losses(data, lr=0.05):
    torch.manual_seed(0)
    model = SlowNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    torch.manual_seed(1)
    losses = []
    for x, y in DataLoader(data, batch_size=32, shuffle=True):
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, model


def _check_result(result, losses, model, reference) -> None:
    assert isinstance(result, torch.Tensor), (
        f"Return the losses as one tensor (torch.stack(losses)), not {type(result).__name__}: a Python number or "
        "list of numbers needs a sync to make.")
    assert not result.requires_grad, (
        "The losses still require grad: each keeps its step's whole graph alive. Keep loss.detach().")
    assert result.shape == (len(losses),), (
        f"Return one loss per step: {len(losses)} steps, so shape ({len(losses)},), not {tuple(result.shape)}.")
    assert torch.allclose(result.float().cpu(), torch.tensor(losses), atol=1e-5), (
        f"The losses differ from the script's: expected {[round(v, 4) for v in losses]}. For every batch: the "
        "loss, zero_grad(), backward(), step(), and keep that step's loss.")
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(model.parameters(), reference.parameters(), strict=True)), (
        "After the epoch the weights differ from the script's: for every batch zero the gradients, compute the "
        "loss, call backward(), then step().")


def _train(train) -> None:
    data = make_dataset(n=128)
    losses, reference = _reference_losses(data)
    torch.manual_seed(0)
    model = SlowNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(1)
    watcher = LoopWatcher(DataLoader(data, batch_size=32, shuffle=True))
    with watcher.patched():
        result = train(model, watcher, optimizer, "cpu")
    assert not watcher.syncs, (
        f"Inside the loop your code called {sorted(set(watcher.syncs))}: on a GPU each makes the host wait for the "
        "device at every step (print and f-strings of a tensor too). Keep each loss as a tensor, loss.detach(), "
        "and read them after the loop.")
    _check_result(result, losses, model, reference)


class _StopHere(Exception):
    """Raised instead of iterating a loader for a GPU this machine may not have."""


def _loaders_made(fast_epoch, device) -> list[dict]:
    """Call fast_epoch for `device`, record every DataLoader it makes, stop when it starts iterating one."""
    made = []
    original = DataLoader.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append({"pin_memory": self.pin_memory, "batch_size": self.batch_size})

    def stop(self):
        raise _StopHere

    torch.manual_seed(0)
    model = SlowNet()
    with mock.patch.object(DataLoader, "__init__", init), mock.patch.object(DataLoader, "__iter__", stop), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fast_epoch(model, make_dataset(n=64), torch.optim.SGD(model.parameters(), lr=0.05), device)
        except _StopHere:
            pass
    return made


def _fast_epoch(fast_epoch) -> None:
    for device in ("cuda", "cuda:0", torch.device("cuda")):
        made = _loaders_made(fast_epoch, device)
        assert made, "fast_epoch should make its DataLoader from the dataset (DataLoader(dataset, ...))."
        assert made[-1]["pin_memory"], (
            f"For device={device!r} the loader should pin its batches (pin_memory=True), whether or not this machine "
            "has a GPU: decide from the target device (torch.device(device).type == 'cuda'), not from "
            "torch.cuda.is_available().")
        assert made[-1]["batch_size"] == 32, f"Keep batch_size (32 here), not {made[-1]['batch_size']}."
    for device in ("cpu", "meta"):
        made = _loaders_made(fast_epoch, device)
        assert made and not made[-1]["pin_memory"], (
            f"For device={device!r} there is nothing to pin for: pin_memory=True only when the target is a CUDA "
            "device.")

    data = make_dataset(n=128)
    losses, reference = _reference_losses(data)
    torch.manual_seed(0)
    model = SlowNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    original_iter = DataLoader.__iter__

    class _Plain:
        """The loader fast_epoch made, iterated the ordinary way (inside the watcher)."""

        def __init__(self, loader):
            self.loader = loader

        def __iter__(self):
            return original_iter(self.loader)

    watcher = LoopWatcher(None)

    def watched(self):
        watcher.loader = _Plain(self)
        return iter(watcher)

    torch.manual_seed(1)
    with mock.patch.object(DataLoader, "__iter__", watched), watcher.patched():
        result = fast_epoch(model, data, optimizer, "cpu")
    assert watcher.batches, "fast_epoch should iterate over the DataLoader it makes."
    assert not watcher.syncs, (
        f"Inside the loop your code called {sorted(set(watcher.syncs))}: each is a sync point on a GPU. Keep the "
        "losses as tensors (your fix of train).")
    moved = list(watcher.moves.values())
    assert all(moved), "Move both x and y to the device with .to(device, non_blocking=True)."
    blocking = [calls for calls in moved if not all(nb for _, nb in calls)]
    assert not blocking, (
        "A batch tensor was copied with a blocking .to(device): add non_blocking=True, so that the host does not wait "
        "for the stream at every copy (from a pinned batch the call only queues the copy).")
    _check_result(result, losses, model, reference)


def _steps(gpu: SimulatedGPU, durations: list[float]) -> KernelSequence:
    return KernelSequence(gpu, durations, caller="time_it", name="training step")


def _close(got, expected) -> bool:
    return isinstance(got, int | float) and math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)


def _time_it(time_it) -> None:
    gpu = SimulatedGPU(initialized=True)
    launch = gpu.profile.launch_s
    got = time_it(lambda: gpu.launch(0.010), gpu.synchronize, gpu.clock)
    assert isinstance(got, int | float), f"time_it should return seconds as a number, not {type(got).__name__}."
    assert not _close(got, launch), (
        "You measured only the launch (5 us): the step was still running on the device when you read the clock. "
        "Call sync() after fn() and before reading the clock.")
    assert got > 1e-3, (
        f"A 10 ms step measured {got:.3g} s: read the time with the clock you were given, clock(), not "
        "time.perf_counter() (here the clock is the simulated GPU's virtual clock).")
    assert _close(got, 0.010 + launch), (
        f"A 10 ms step (plus its 5 us launch) takes 0.010005 s on the simulated GPU; you returned {got!r}. Return "
        "the time of one call, not the total.")

    gpu = SimulatedGPU(initialized=True)
    fn = _steps(gpu, [0.010] * 7)
    time_it(fn, gpu.synchronize, gpu.clock, warmup=2, repeats=5)
    assert fn.calls == 7, f"With warmup=2 and repeats=5, call fn 7 times; you called it {fn.calls} times."

    gpu = SimulatedGPU(initialized=True)
    gpu.launch(0.5, name="earlier work")
    got = time_it(_steps(gpu, [0.010]), gpu.synchronize, gpu.clock, warmup=0, repeats=1)
    assert _close(got, 0.010 + launch), (
        f"Work queued before the timed call leaked into your time ({got:.3g} s): call sync() before you start the "
        "clock too.")

    gpu = SimulatedGPU(initialized=True)
    got = time_it(_steps(gpu, [0.300, 0.020]), gpu.synchronize, gpu.clock, warmup=1, repeats=1)
    assert _close(got, 0.020 + launch), (
        f"The slow first call (cold caches, CUDA start-up) was timed ({got:.3g} s): run `warmup` calls untimed first.")

    gpu = SimulatedGPU(initialized=True)
    got = time_it(_steps(gpu, [0.01, 0.05, 0.01, 0.30, 0.02]), gpu.synchronize, gpu.clock, warmup=0, repeats=5)
    expected = statistics.median([0.01, 0.05, 0.01, 0.30, 0.02]) + launch
    assert _close(got, expected), (
        f"Steps of 10, 50, 10, 300 and 20 ms have a median of 20 ms (plus the launch); you returned {got:.4g} s. "
        "Report the median, not the mean, the minimum or the total.")


_FORWARD = '''
def forward(self, x):
    """SlowNet.forward, with its noise made where x is."""
    if self.training:
        x = x + self.noise * torch.randn_like(x)
    return self.body(x).squeeze(-1)
'''

_TRAIN = '''
def train(model, loader, optimizer, device):
    """Train one epoch without a sync inside the loop; return every step's loss as one tensor."""
    losses = []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())       # a tensor on the device: no sync
    return torch.stack(losses)             # read it (print, .tolist()) after the loop, once
'''

_FAST_EPOCH = '''
def fast_epoch(model, dataset, optimizer, device, batch_size=32):
    """Make a loader pinned for a CUDA target, train one epoch with non-blocking copies, return the losses."""
    pin = torch.device(device).type == "cuda"
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, pin_memory=pin)
    losses = []
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)
'''

_TIME_IT = '''
def time_it(fn, sync, clock, warmup=1, repeats=5):
    """Return the median seconds of one call of fn: warmed up, synchronised before each clock read."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        sync()
        start = clock()
        fn()
        sync()
        samples.append(clock() - start)
    return statistics.median(samples)
'''

_exercises = checker(
    Exercise("forward", _forward, hints=(
        "torch.randn(x.shape) has no device=, so it is made on the CPU, whatever x's device is.",
        ("Make it where x is: torch.randn_like(x) (same shape, dtype and device), or torch.randn(x.shape, "
         "device=x.device)."),
        "Not .to(x.device) after the fact: that makes the noise on the CPU and copies it, a sync point every step.",
    ), solution=_FORWARD, success="On a GPU the noise is now made on the GPU: no copy, no mismatch."),
    Exercise("train", _train, hints=(
        "loss.item() copies the value to the host, so the host waits for the device. print(f'{loss:.4f}') too.",
        "Keep loss.detach() in a list: a 0-dim tensor on the device, without the graph.",
        "After the loop return torch.stack(losses); print or .tolist() it there, once.",
    ), solution=_TRAIN, success="One sync per epoch instead of one (or two) per step."),
    Exercise("fast_epoch", _fast_epoch, hints=(
        "DataLoader(dataset, batch_size=batch_size, shuffle=True, pin_memory=...) as in the script, plus pinning.",
        "pin_memory=torch.device(device).type == 'cuda': decided from the target, not torch.cuda.is_available().",
        "In the loop: x.to(device, non_blocking=True) and the same for y; keep the losses as in your train.",
    ), solution=_FAST_EPOCH, withheld=(
        "No worked solution here: choosing pin_memory from the target device and copying without blocking is "
        "graded in ps05 (make_loader, train_epoch); use what you wrote there."),
        success="From a pinned batch each copy only queues: the host goes on to the next batch."),
    Exercise("time_it", _time_it, hints=(
        "A GPU call returns once the work is queued: sync() before each clock() read, at the start and at the end.",
        "First call fn() `warmup` times untimed; then `repeats` times: sync(), clock(), fn(), sync(), clock().",
        "Return statistics.median of the per-call times (not the mean, the minimum or the total).",
    ), solution=_TIME_IT, withheld=(
        "No worked solution here: an honest stopwatch is ps04's graded measure(); use what you wrote there."),
    success="On a GPU pass sync=torch.cuda.synchronize and clock=time.perf_counter."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
