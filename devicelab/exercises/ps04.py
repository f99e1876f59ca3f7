"""Checks and hints for ps04-async-timing: `measure` on a simulated GPU, `bandwidth_gbps`, and the culprit
hunt (`Tagger`, `fixed_tagger`, graded on `meta` with `HostCopySpy`)."""

import contextlib
import math
from unittest import mock

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from devicelab.feedback import Exercise, checker
from devicelab.simgpu import KernelSequence, SimEvent, SimStream, SimulatedGPU


def _kernels(gpu: SimulatedGPU, durations: list[float]) -> KernelSequence:
    return KernelSequence(gpu, durations, caller="measure")


def _close(got: float, expected: float) -> bool:
    return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)


def _measure(measure) -> None:
    gpu = SimulatedGPU(initialized=True)
    launch = gpu.profile.launch_s
    got = measure(lambda: gpu.launch(0.010), sync=gpu.synchronize, clock=gpu.clock)
    assert isinstance(got, float), f"measure should return a float (seconds), not {type(got).__name__}."
    if _close(got, launch):
        raise AssertionError(
            "You measured only the enqueue (5 us): the work was still running when you read the clock. "
            "Call sync() after fn() and before reading the clock.")
    if got < 1e-3:
        raise AssertionError(
            f"A 10 ms kernel gave {got:.3g} s: read the time with the clock you were given, clock(), "
            "not time.perf_counter().")
    assert not _close(got, 5 * (0.010 + launch)), (
        "That is the total of the 5 timed calls: return the time of one call (the median).")
    assert _close(got, 0.010 + launch), (
        "A 10 ms kernel (plus a 5 us launch) should measure 0.010005 s on the simulator; you returned "
        f"{got!r}.")

    gpu = SimulatedGPU(initialized=True)
    fn = _kernels(gpu, [0.010] * 5)
    measure(fn, sync=gpu.synchronize, clock=gpu.clock, warmup=2, repeats=3)
    assert fn.calls == 5, f"With warmup=2 and repeats=3, call fn 5 times; you called it {fn.calls} times."

    gpu = SimulatedGPU(initialized=True)
    gpu.launch(0.5)  # someone else's work, still queued when measure starts
    got = measure(lambda: gpu.launch(0.010), sync=gpu.synchronize, clock=gpu.clock, warmup=0, repeats=1)
    assert _close(got, 0.010 + launch), (
        f"Work queued before the timed call leaked into your time ({got:.3g} s): call sync() before you "
        "start the clock, so each timed call includes none of the work queued before it.")

    gpu = SimulatedGPU(initialized=True)
    fn = _kernels(gpu, [0.300, 0.020])  # a slow first call, as when caches are cold
    got = measure(fn, sync=gpu.synchronize, clock=gpu.clock, warmup=1, repeats=1)
    assert _close(got, 0.020 + launch), (
        f"The slow first call was timed ({got:.3g} s): make the first `warmup` calls untimed.")

    gpu = SimulatedGPU(initialized=True)
    fn = _kernels(gpu, [0.01, 0.05, 0.01, 0.30, 0.02])
    got = measure(fn, sync=gpu.synchronize, clock=gpu.clock, warmup=0, repeats=5)
    assert _close(got, 0.02 + launch), (
        "Calls of 10, 50, 10, 300 and 20 ms have a median of 20 ms (plus the launch); you returned "
        f"{got:.4g} s. Return the median of the per-call times, not the mean, the minimum or the total.")


def _bandwidth_gbps(bandwidth_gbps) -> None:
    got = bandwidth_gbps(12_400_000_000, 1.0)
    assert isinstance(got, float), f"bandwidth_gbps should return a float, not {type(got).__name__}."
    assert math.isclose(got, 12.4), f"12.4e9 bytes in 1 s is 12.4 GB/s; you returned {got!r}."
    got = bandwidth_gbps(1 << 30, 0.5)
    assert math.isclose(got, 2 * (1 << 30) / 1e9), (
        "GB/s counts 10**9 bytes per second, not 2**30: 2**30 bytes in 0.5 s is 2.147 GB/s; you returned "
        f"{got!r}.")
    try:
        got = bandwidth_gbps(0, 1.0)
    except ValueError as error:
        raise AssertionError(
            "0 bytes in 1 s is a valid (empty) copy: return 0.0; only nbytes < 0 is an error.") from error
    assert got == 0.0, f"0 bytes in 1 s is 0.0 GB/s; you returned {got!r}."
    for nbytes, seconds, what in [(100, 0.0, "seconds=0"), (100, -1.0, "negative seconds"),
                                  (-1, 1.0, "negative nbytes")]:
        try:
            bandwidth_gbps(nbytes, seconds)
        except ValueError:
            continue
        except NotImplementedError:
            raise
        except Exception as error:
            raise AssertionError(f"For {what}, raise ValueError, not {type(error).__name__}.") from error
        raise AssertionError(f"For {what}, raise ValueError.")


class _WatchedStream(SimStream):
    def synchronize(self) -> None:
        self.gpu.waits.append((f"stream {self.name}.synchronize()", self.gpu.steps_queued))
        super().synchronize()


class _WatchedEvent(SimEvent):
    def synchronize(self) -> None:
        self.gpu.waits.append(("event.synchronize()", self.gpu.steps_queued))
        super().synchronize()

    def query(self) -> bool:
        done = super().query()
        if not done:  # a polling loop: let host time pass, as it would, so that the loop ends
            self.gpu.host_work(1e-6, "poll")
        return done


class EventTimedGPU(SimulatedGPU):
    """The simulated GPU `step_times_ms` is graded on: `step()` queues the next of `durations` (seconds) as
    one kernel, and every host wait asked for (`synchronize()` of the GPU, a stream or an event) is logged in
    `waits` with the number of steps queued by then. `cuda_on(gpu)` makes torch.cuda's calls reach it."""

    def __init__(self, durations: list[float]) -> None:
        self.waits: list[tuple[str, int]] = []
        self.durations = list(durations)
        self.steps_queued = 0
        super().__init__(initialized=True)

    def new_stream(self, name: str | None = None) -> SimStream:
        stream = _WatchedStream(self, len(self._streams), name or f"stream{len(self._streams)}")
        self._streams.append(stream)
        return stream

    def event(self, enable_timing: bool = True) -> SimEvent:
        return _WatchedEvent(self, enable_timing)

    def synchronize(self) -> None:
        self.waits.append(("torch.cuda.synchronize()", self.steps_queued))
        super().synchronize()

    def step(self) -> None:
        """Queue the next step's kernel (call it once per step)."""
        if self.steps_queued >= len(self.durations):
            raise AssertionError(f"step() was called more than n = {len(self.durations)} times")
        self.launch(self.durations[self.steps_queued], name=f"step {self.steps_queued}")
        self.steps_queued += 1

    def waits_inside(self) -> list[str]:
        """Return the host waits made after the first step was queued and before the last one was."""
        return [what for what, queued in self.waits if 0 < queued < len(self.durations)]


@contextlib.contextmanager
def cuda_on(gpu: SimulatedGPU):
    """Inside the block, torch.cuda.synchronize, current_stream and Event reach the simulated `gpu`."""
    with mock.patch("torch.cuda.synchronize", lambda *a, **k: gpu.synchronize()), \
         mock.patch("torch.cuda.current_stream", lambda *a, **k: gpu.current_stream), \
         mock.patch("torch.cuda.Event", lambda enable_timing=False, **k: gpu.event(enable_timing)):
        yield gpu


def _step_times_ms(step_times_ms) -> None:
    durations = [0.010, 0.020, 0.005, 0.030]
    gpu = EventTimedGPU(durations)
    with cuda_on(gpu):
        got = step_times_ms(gpu.step, 4, gpu.event)
    assert not gpu.waits_inside(), (
        f"The host waited inside the loop ({gpu.waits_inside()[0]}): record the events, and wait only once, "
        "after the last step is queued (for example on the last event).")
    assert isinstance(got, list) and len(got) == 4, f"Return a list of 4 times (one per call), not {got!r}."
    expected = [d * 1e3 for d in durations]
    assert all(abs(g - e) < 0.01 for g, e in zip(got, expected, strict=True)), (
        f"Calls of 10, 20, 5 and 30 ms on the device should give about {expected} ms; you returned {got}. "
        "One start and one end event per call, start.elapsed_time(end) in milliseconds.")


_MEASURE_HINTS = (
    ("Start from what a clock read means. fn() returns as soon as its work is queued: when you read clock() "
     "right after it, what has the GPU finished? And when you read clock() before fn(), what may still be "
     "running from earlier (a warm-up call, someone else's work)? Experiments 1 and 3 above show both."),
    ("sync() is your one way to empty the queue. An interval holds exactly one call's work when the queue is "
     "empty at both of its ends: at the start, so that earlier work stays out; at the stop, so that this "
     "call's work is in. Place sync() so that every clock() read happens on an empty queue."),
    ("First calls pay one-off costs (CUDA context creation, cold caches, autotuning) that are not the speed "
     "of the operation: run them, don't time them. Keep each timed call's seconds, then summarise with the "
     "median: one slow call (another process, a page fault) drags the mean, and the minimum reports a lucky "
     "run."),
)
_BANDWIDTH_HINTS = (
    "GB/s = bytes / seconds / 1e9 (GB/s counts 10**9 bytes per second, not 2**30).",
    "Check the arguments first: raise ValueError(...) when seconds <= 0 or nbytes < 0. 0 bytes is fine.",
)

# ----- part 4: the culprit hunt


class Tagger(nn.Module):
    """Tag every token of a batch of sequences: a shared body, one head per group of tags, averaged."""

    def __init__(self, features: int = 16, groups: int = 2, tags: int = 3) -> None:
        super().__init__()
        self.body = nn.Linear(features, features)
        self.heads = [nn.Linear(features, tags) for _ in range(groups)]
        self.temperature = torch.tensor(0.5)
        self.bias = torch.zeros(tags)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1]) / x.shape[1]
        hidden = torch.relu(self.body(x)) + positions[None, :, None]
        scores = torch.stack([head(hidden) for head in self.heads]).mean(dim=0)
        return scores / self.temperature + self.bias


_MADE_FROM_HOST_DATA = ("tensor", "as_tensor", "asarray", "new_tensor")  # on a device: the data is copied
_INDEXING = ("__getitem__", "__setitem__", "index_put", "index_put_")


def _described(t: torch.Tensor) -> str:
    return f"{tuple(t.shape)} {t.dtype}"


class HostCopySpy(TorchFunctionMode):
    """Record every tensor copied from the CPU to another device while the mode is on: by `.to`, `.cuda`
    or `copy_`; made on a device from host data (`torch.tensor(..., device=...)`, `torch.as_tensor`,
    `torch.asarray`, `t.new_tensor`: the data starts on the host); and a CPU index tensor or value in
    indexing a tensor on another device (`t[idx]`, `t[idx] = v`, `index_put_`), which PyTorch copies there.
    A 0-dim CPU index (PyTorch reads it as a number) or value is left out."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_leaves

        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        out = func(*args, **kwargs)
        if name in ("to", "cuda", "copy_"):
            source = args[1] if name == "copy_" and len(args) > 1 else (args[0] if args else None)
            if isinstance(source, torch.Tensor) and isinstance(out, torch.Tensor) and (
                    source.device.type == "cpu" and out.device.type != "cpu"):
                self.copies.append(_described(source))
        elif name in _MADE_FROM_HOST_DATA and isinstance(out, torch.Tensor) and out.device.type != "cpu":
            data = args[1] if name == "new_tensor" and len(args) > 1 else (
                args[0] if name != "new_tensor" and args else kwargs.get("data"))
            if not (isinstance(data, torch.Tensor) and data.device.type != "cpu"):
                self.copies.append(_described(out))
        elif name in _INDEXING and isinstance(args[0] if args else None, torch.Tensor) and (
                args[0].device.type != "cpu"):
            for t in tree_leaves((args[1:], kwargs)):
                if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0:
                    self.copies.append(_described(t))
        return out


def left_behind(model: nn.Module, x: torch.Tensor | None = None) -> list[str]:
    """Run `model` (moved to `meta`) on a `meta` input; return the tensors it read that `model.to()` left on
    the CPU (`LeftBehindSpy`), whether or not the call then failed."""
    spy = LeftBehindSpy()
    try:
        with spy:
            model(torch.randn(2, 5, 16, device="meta") if x is None else x)
    except RuntimeError:
        pass  # a CPU tensor beside meta ones: the spy saw it before the operation refused it
    return spy.tensors


class LeftBehindSpy(TorchFunctionMode):
    """Record every tensor an operation reads on the CPU that the code under the mode did not make itself (a
    tensor `model.to()` left behind: a plain attribute, a list, a closure's), while the model runs on another
    device. A 0-dim CPU tensor is left out: operations on any device read it as a number."""

    def __init__(self) -> None:
        super().__init__()
        self.tensors: list[str] = []
        self._made: dict[int, torch.Tensor] = {}  # by id, kept alive so that no other tensor takes one's id

    def __torch_function__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_leaves

        kwargs = kwargs or {}
        for t in tree_leaves((args, kwargs)):
            left = isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0
            if left and id(t) not in self._made and f"{tuple(t.shape)} {t.dtype}" not in self.tensors:
                self.tensors.append(f"{tuple(t.shape)} {t.dtype}")
        out = func(*args, **kwargs)
        self._made.update((id(t), t) for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def copy_weights(model: nn.Module, reference: Tagger) -> None:
    """Give `model` the weights of `reference` (its body and its heads, by position)."""
    with torch.no_grad():
        model.body.load_state_dict(reference.body.state_dict())
        for head, original in zip(model.heads, reference.heads, strict=True):
            head.load_state_dict(original.state_dict())


def _fixed_tagger(fixed_tagger) -> None:
    model = fixed_tagger()
    assert isinstance(model, nn.Module), f"fixed_tagger() should return a model (nn.Module), not {model!r}."
    assert isinstance(getattr(model, "body", None), nn.Linear) and len(getattr(model, "heads", ())) == 2, (
        "Keep the layers' names: a `body` and two `heads`.")
    reference = Tagger()
    copy_weights(model, reference)
    x = torch.randn(2, 5, 16)
    got = model(x)
    # the graded test's tolerance: float32 rounding, far below what a change to the maths makes
    assert isinstance(got, torch.Tensor) and torch.allclose(got, reference(x), atol=1e-5), (
        "On the CPU the fixed model should compute what Tagger computes: fix where tensors live, not the "
        "maths.")
    assert len(list(model.parameters())) == 6, (
        f"The model has {len(list(model.parameters()))} parameters; its body and both heads have 6: an "
        "optimizer given model.parameters() would not train some of its layers.")
    model.to("meta")
    tensors = [*model.named_parameters(), *model.named_buffers()]
    left = [name for name, t in tensors if t.device.type != "meta"]
    assert not left, f"After model.to('meta') these stayed on the CPU: {left}."
    behind = left_behind(model)
    assert not behind, (f"forward reads tensors that model.to('meta') left on the CPU ({', '.join(behind)}): "
                        "model.to() moves parameters and buffers only (register_buffer).")
    try:
        with HostCopySpy() as spy:
            out = model(torch.randn(2, 5, 16, device="meta"))
    except RuntimeError as error:
        raise AssertionError(f"On meta the model should run, but it raised: {error}") from None
    assert out.device.type == "meta", f"The output should be on the input's device (meta), not {out.device}."
    assert not spy.copies, (
        f"Each call copies {len(spy.copies)} tensors from the host ({', '.join(spy.copies)}): on a GPU each "
        "is a copy (and a wait) per call. Make them where they are used, or let model.to() move them once.")


_exercises = checker(
    Exercise("fixed_tagger", _fixed_tagger, hints=(
        ("Move a Tagger to meta and call it on a meta input; tensor_table(model) (lesson 04) shows what "
         "stayed on the CPU, and explain(error) reads the message."),
        ("Check everything model.to() moves: model.parameters() and model.buffers(). Anything else a forward "
         "uses, made in __init__ or in forward, is yours to place."),
        "Fix one culprit, run it on meta again: the error moves to the next one.",
    )),
    Exercise("measure", _measure, hints=_MEASURE_HINTS),
    Exercise("bandwidth_gbps", _bandwidth_gbps, hints=_BANDWIDTH_HINTS),
    Exercise("step_times_ms", _step_times_ms, hints=(
        ("The sync in the slow loop is torch.cuda.synchronize(): twice per step. Events let the GPU write "
         "the times down itself: record one before and one after each step(), keep them in two lists."),
        ("After the loop, make the host wait once: ends[-1].synchronize() (the earlier events come before it "
         "on the same stream). elapsed_time raises if an event has not completed yet."),
        "Return [start.elapsed_time(end) for start, end in zip(starts, ends)]: already milliseconds.",
    )),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
