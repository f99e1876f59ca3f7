"""Practice for lesson 08, the capstone: each check tests what the code does, never how it is written.

run_epoch: your version of the script (your `Net`, `build_loader` and `run_epoch`, read from the notebook)
runs one epoch on the simulated H100, and the check reads its trace's measures (`devicelab.trace_measures`:
host waits per step, uploads from pageable memory, the GPU's busy share, copy overlap), the same a real
profile gives: what it reports are measures off target, never their cause or the fix. time_it: against the
simulated GPU's virtual clock, where a naive stopwatch measures only the launch.
"""

import functools
import math
import statistics

import torch

from devicelab import capstone, trace_measures
from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker
from devicelab.simgpu import KernelSequence, SimulatedGPU


class NoiseOnDevice(capstone.Net):
    """The script's Net with only the crash fixed (the "before" every later fix is compared with)."""

    def forward(self, x):
        x = x.float() / 255
        if self.training:
            x = x + self.noise * torch.randn_like(x)
        return self.body(x)


def symptoms(run: capstone.ScriptRun) -> list[str]:
    """Return what a trace of one simulated epoch still shows off target, in the words of the trace."""
    measures = trace_measures.measure(run.trace, max(run.steps, 1))
    found = []
    if run.races:
        found.append(f"{len(run.races)} kernels ({', '.join(sorted(set(run.races)))}) read a batch copied on "
                     "another stream before that copy had landed: on a GPU they may read the memory before "
                     "the copy arrives (wrong results, no error)")
    uploads = measures.pageable_uploads + measures.pinned_uploads
    if run.steps and uploads > 2 * run.steps:
        found.append(f"{uploads} host-to-device copies for {run.steps} batches of one x and one y: something "
                     "else crosses from the host to the GPU every step")
    return found + trace_measures.shortfalls(measures)


@functools.cache
def _script_seconds() -> float:
    """The simulated epoch of the script with only its crash fixed (the "before")."""
    return capstone.profile_script(NoiseOnDevice).seconds


def _train_epoch(run_epoch) -> None:
    names = getattr(run_epoch, "__globals__", {})
    net, loader_maker = names.get("Net", capstone.Net), names.get("build_loader", capstone.build_loader)
    try:
        run = capstone.profile_script(net, loader_maker, run_epoch)
    except NotImplementedError:
        raise
    except RuntimeError as error:
        raise AssertionError(
            f"On the simulated GPU your script stops with RuntimeError: {error}. A GPU stops at the same "
            "line (with 'cuda:0 and cpu' in the message): some tensor is not where the model's input "
            "is.") from error
    result = run.result
    assert result is not None and len(result) == run.steps, (
        f"run_epoch should still return one loss per step ({run.steps}), got {type(result).__name__}"
        f"{'' if result is None else f' of length {len(result)}'}.")
    found = symptoms(run)
    before = _script_seconds()
    assert not found, (
        f"Your simulated epoch takes {run.seconds * 1e3:.1f} ms on the simulated {run.machine}. Its trace "
        "still misses:\n- " + "\n- ".join(found)
        + "\nRun the profile cell (section 3) and open the traces/mine.json it writes in Perfetto to find "
        "the rows behind each.")
    print(f"The script took {before * 1e3:.1f} ms per epoch (simulated {run.machine}, crash fixed only); "
          f"yours {run.seconds * 1e3:.1f} ms, {before / run.seconds:.1f}x faster.")


def _steps(gpu: SimulatedGPU, durations: list[float]) -> KernelSequence:
    return KernelSequence(gpu, durations, caller="time_it", name="training step")


def _close(got, expected) -> bool:
    return isinstance(got, int | float) and math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)


def _time_it(time_it) -> None:
    gpu = SimulatedGPU(initialized=True)
    launch = gpu.profile.launch_s
    got = time_it(lambda: gpu.launch(0.010), gpu.synchronize, gpu.clock)
    assert isinstance(got,
                      int | float), f"time_it should return seconds as a number, not {type(got).__name__}."
    assert not _close(got, launch), (
        "You measured only the launch (5 us): the step was still running on the device when you read the "
        "clock. Call sync() after fn() and before reading the clock.")
    assert got > 1e-3, (
        f"A 10 ms step measured {got:.3g} s: read the time with the clock you were given, clock(), not "
        "time.perf_counter() (here the clock is the simulated GPU's virtual clock).")
    assert _close(got, 0.010 + launch), (
        f"A 10 ms step (plus its 5 us launch) takes 0.010005 s on the simulated GPU; you returned {got!r}. "
        "Return the time of one call, not the total.")

    gpu = SimulatedGPU(initialized=True)
    fn = _steps(gpu, [0.010] * 7)
    time_it(fn, gpu.synchronize, gpu.clock, warmup=2, repeats=5)
    assert fn.calls == 7, f"With warmup=2 and repeats=5, call fn 7 times; you called it {fn.calls} times."

    gpu = SimulatedGPU(initialized=True)
    gpu.launch(0.5, name="earlier work")
    got = time_it(_steps(gpu, [0.010]), gpu.synchronize, gpu.clock, warmup=0, repeats=1)
    assert _close(got, 0.010 + launch), (
        f"Work queued before the timed call leaked into your time ({got:.3g} s): call sync() before you "
        "start the clock too.")

    gpu = SimulatedGPU(initialized=True)
    got = time_it(_steps(gpu, [0.300, 0.020]), gpu.synchronize, gpu.clock, warmup=1, repeats=1)
    assert _close(got, 0.020 + launch), (
        f"The slow first call (cold caches, CUDA start-up) was timed ({got:.3g} s): run `warmup` calls "
        "untimed first.")

    gpu = SimulatedGPU(initialized=True)
    got = time_it(_steps(gpu, [0.01, 0.05, 0.01, 0.30, 0.02]), gpu.synchronize, gpu.clock, warmup=0,
                  repeats=5)
    expected = statistics.median([0.01, 0.05, 0.01, 0.30, 0.02]) + launch
    assert _close(got, expected), (
        "Steps of 10, 50, 10, 300 and 20 ms have a median of 20 ms (plus the launch); you returned "
        f"{got:.4g} s. Report the median, not the mean, the minimum or the total.")


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
    Exercise("run_epoch", _train_epoch, hints=(
        ("Take the measures one at a time, in the order check lists them. Run the profile cell, then open "
         "traces/mine.json in Perfetto: every measure off target has rows behind it."),
        ("Host waits: the summary's 'inside' names the operator each wait sits in, and the trace shows the "
         "operator above it: find the line of your loop that calls that. Lesson 05 (What an honest timing "
         "is made of) lists the sync points, lesson 07 section 1 what a default upload waits for. A wait "
         "moved to later in the epoch is still a wait: count them again after each change."),
        ("Uploads from pageable memory: a copy's row names the host memory it came from. Lesson 06 "
         "sections 1 and 5 say where a batch's memory comes from, lesson 07 section 1 what an upload "
         "needs so that the host does not wait for it."),
        ("The GPU's idle time: the host's rows say what it does meanwhile. Section 3 gives the machine "
         "(16 cores, about 90 us a photo, 6 ms of kernels a step); lesson 06 section 6 is about that row."),
        ("Copy overlap: lesson 07 section 4 says what runs at the same time as what, and ends with a "
         "prefetch loop."),
    ), withheld="No worked solution: the capstone is yours. The hints say where to look, not what to change.",
        success=("Your trace reaches every target: no host waits in the loop, pinned uploads, the GPU busy, "
                 "uploads under compute.")),
    Exercise("time_it", _time_it, hints=(
        ("A GPU call returns once the work is queued: sync() before each clock() read, at the start and at "
         "the end."),
        ("First call fn() `warmup` times untimed; then `repeats` times: sync(), clock(), fn(), sync(), "
         "clock()."),
        "Return statistics.median of the per-call times (not the mean, the minimum or the total).",
    ), solution=_TIME_IT, withheld=(
        "No worked solution here: an honest stopwatch is ps04's graded measure(); use what you wrote there."),
    success="On a GPU pass sync=torch.cuda.synchronize and clock=time.perf_counter."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "on-a-gpu": Prediction(
        question="Read the script. Run on a GPU (device='cuda'), what happens first?",
        choices=("it runs, just slowly", "it stops with a device mismatch",
                 "it runs but prints wrong losses"),
        answer="it stops with a device mismatch",
        giveaways=("made without device=", "stops at the same line", "on the cpu, while x is on the gpu"),
        reason=("forward adds torch.randn(x.shape): made without device=, so on the CPU, while x is on the "
                "GPU. The simulated GPU stops at the same line: run the next cell.")),
    "waits-per-step": Prediction(
        question=("With the crash fixed (the noise made on `x`'s device), how many times per step does the "
                  "host wait for the GPU (sync calls or copies that hold the host)? Type a number."),
        answer="3", accept=("three",),
        giveaways=("3 per step", "three waits", "3 waits", "150 in 50 steps", "three times per step"),
        reason=("3 per step, 150 in the 50 steps. The summary under the profile cell says which operator "
                "each one sits inside; the lines of your loop that call those operators are yours to find.")),
    "gpu-busy": Prediction(
        question=("On the simulated H100, for what share of the epoch is the GPU busy (a kernel or a copy "
                  "running)?"),
        choices=("about 30%", "about 60%", "about 95%"),
        answer="about 30%",
        giveaways=("about 30%", "busy 30%", "idle for most"),
        reason=("About 30%: for most of each step the GPU has nothing to do and waits for the host. The "
                "timeline shows what the host does meanwhile.")),
    "naive-stopwatch": Prediction(
        question=("The script as written (crash fixed only), timed with its own stopwatch (perf_counter "
                  "before and after, no sync): does it read more, less or about the same as the epoch really "
                  "takes?"),
        choices=("more", "less", "about the same"),
        answer="about the same",
        giveaways=("agree by accident", "right by accident", "last step waited", "waits inside its last"),
        reason=("The script's loop waits for the GPU inside its last step, so it returns only when the GPU "
                "has finished: the stopwatch is right by accident. A loop with no wait left returns once its "
                "last step is queued, and the same stopwatch reads less. The next cell times both.")),
}
ask = asker(PREDICTIONS)
