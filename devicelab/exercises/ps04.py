"""Checks and hints for ps04-async-timing: `measure` on a simulated GPU, and `bandwidth_gbps`."""

import math

from devicelab.feedback import Exercise, checker
from devicelab.simgpu import KernelSequence, SimulatedGPU


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
        f"A 10 ms kernel (plus a 5 us launch) should measure 0.010005 s on the simulator; you returned {got!r}.")

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
        f"Calls of 10, 50, 10, 300 and 20 ms have a median of 20 ms (plus the launch); you returned {got:.4g} s. "
        "Return the median of the per-call times, not the mean, the minimum or the total.")


def _bandwidth_gbps(bandwidth_gbps) -> None:
    got = bandwidth_gbps(12_400_000_000, 1.0)
    assert isinstance(got, float), f"bandwidth_gbps should return a float, not {type(got).__name__}."
    assert math.isclose(got, 12.4), f"12.4e9 bytes in 1 s is 12.4 GB/s; you returned {got!r}."
    got = bandwidth_gbps(1 << 30, 0.5)
    assert math.isclose(got, 2 * (1 << 30) / 1e9), (
        f"GB/s counts 10**9 bytes per second, not 2**30: 2**30 bytes in 0.5 s is 2.147 GB/s; you returned {got!r}.")
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


_MEASURE_HINTS = (
    ("Start from what a clock read means. fn() returns as soon as its work is queued: when you read clock() right "
     "after it, what has the GPU finished? And when you read clock() before fn(), what may still be running from "
     "earlier (a warm-up call, someone else's work)? Experiments 1 and 3 above show both."),
    ("sync() is your one way to empty the queue. An interval holds exactly one call's work when the queue is empty "
     "at both of its ends: at the start, so that earlier work stays out; at the stop, so that this call's work is "
     "in. Place sync() so that every clock() read happens on an empty queue."),
    ("First calls pay one-off costs (CUDA context creation, cold caches, autotuning) that are not the speed of the "
     "operation: run them, don't time them. Keep each timed call's seconds, then summarise with the median: one "
     "slow call (another process, a page fault) drags the mean, and the minimum reports a lucky run."),
)
_BANDWIDTH_HINTS = (
    "GB/s = bytes / seconds / 1e9 (GB/s counts 10**9 bytes per second, not 2**30).",
    "Check the arguments first: raise ValueError(...) when seconds <= 0 or nbytes < 0. 0 bytes is fine.",
)

_exercises = checker(
    Exercise("measure", _measure, hints=_MEASURE_HINTS),
    Exercise("bandwidth_gbps", _bandwidth_gbps, hints=_BANDWIDTH_HINTS),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
