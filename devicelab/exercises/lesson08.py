"""Practice for lesson 08, the capstone: each check tests what the code does, never how it is written.

run_epoch: your version of the script (your `Net`, `build_loader` and `run_epoch`, read from the notebook)
runs one epoch on the simulated GPU, and the check reads its trace: what it reports are symptoms in the trace,
the same ones a real profile shows, never the fix. time_it: against the simulated GPU's virtual clock, where a
naive stopwatch measures only the launch.
"""

import math
import statistics

import torch

from devicelab import capstone
from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker
from devicelab.simgpu import KernelSequence, SimulatedGPU


class NoiseOnDevice(capstone.Net):
    """The script's Net with only the crash fixed (the "before" every later fix is compared with)."""

    def forward(self, x):
        if self.training:
            x = x + self.noise * torch.randn_like(x)
        return self.body(x)


def symptoms(run: capstone.ScriptRun) -> list[str]:
    """Return what a trace of one simulated epoch still shows wrong, in the words of the trace."""
    summary = capstone.summarize(run.trace)
    events = [e for e in run.trace["traceEvents"] if e.get("ph") == "X"]
    steps = (sum(1 for e in events if e["cat"] == "user_annotation"
                 and e["name"].startswith("DataLoader: make"))
             or sum(1 for e in events if e["cat"] == "user_annotation"
                    and e["name"].startswith("DataLoader: receive")))
    found = []
    if run.races:
        found.append(f"{len(run.races)} kernels ({', '.join(sorted(set(run.races)))}) read a batch copied on "
                     "another stream without waiting for that copy: on a GPU they may read the memory before "
                     "the copy has landed (wrong results, no error)")
    uploads = sum(n for name, n in summary.copies.items() if "HtoD" in name)
    if steps and uploads > 2 * steps:
        found.append(f"{uploads} host-to-device copies for {steps} batches of one x and one y: something "
                     "else crosses from the host to the GPU every step")
    waits = {op: n for op, n in summary.waits.items() if op != "(no operator)"}
    # the check's own, at the end
    device_syncs = sum(1 for e in events if e["name"] == "cudaDeviceSynchronize") - 1
    if waits or device_syncs > 0:
        where = ", ".join(f"{n} in {op}" for op, n in sorted(waits.items()))
        if device_syncs > 0:
            where += f"{', ' if where else ''}{device_syncs} cudaDeviceSynchronize"
        found.append(f"the host waits for the GPU inside the loop ({where})")
    pageable = sum(n for name, n in summary.copies.items() if "Pageable -> Device" in name)
    if pageable:
        found.append(f"{pageable} uploads come from pageable memory (Memcpy HtoD (Pageable -> Device))")
    if summary.loader_s > 0.25 * run.seconds and summary.gpu_busy_s < 0.7 * run.seconds:
        found.append(f"the host spends {summary.loader_s * 1e3:.1f} ms of the {run.seconds * 1e3:.1f} ms "
                     "epoch in the DataLoader (user_annotation rows), and the GPU is idle for "
                     f"{(run.seconds - summary.gpu_busy_s) * 1e3:.1f} ms")
    if summary.overlap < 0.5:
        found.append(f"only {summary.overlap:.0%} of the upload time runs under a kernel: copies and compute "
                     "take turns on the GPU")
    return found


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
    loader = loader_maker(capstone.Images(), "cuda")
    batches = math.ceil(len(loader.dataset) / (loader.batch_size or 1))
    assert result is not None and len(result) == batches, (
        f"run_epoch should still return one loss per step ({batches}), got {type(result).__name__}"
        f"{'' if result is None else f' of length {len(result)}'}.")
    found = symptoms(run)
    before = capstone.profile_script(NoiseOnDevice).seconds
    assert not found, (
        f"Your simulated epoch takes {run.seconds * 1e3:.2f} ms. Its trace still shows:\n- "
        + "\n- ".join(found)
        + "\nOpen traces/mine.json in Perfetto (or summarize it) and find where each comes from.")
    print(f"The script took {before * 1e3:.2f} ms per epoch (simulated, noise fix only); yours "
          f"{run.seconds * 1e3:.2f} ms, {before / run.seconds:.1f}x faster.")


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
        ("Run the profile cell and read the summary line by line: each wait sits inside an operator; find "
         "the line of your loop that calls it."),
        ("Lessons 07 and 06: a blocking .to() and .item() are sync points; a pageable batch is staged by the "
         "driver; DataLoader(num_workers=..., pin_memory=...) moves loading and pinning off the loop's "
         "thread, and persistent_workers=True keeps the workers from one epoch to the next."),
        ("Copies under compute need the copy on another stream than the kernels: torch.cuda.Stream(), "
         "wait_stream, record_stream (lesson 07, section 5; ps06's copy_then_run)."),
    ), withheld="No worked solution: the capstone is yours. The hints point at the lessons that have each "
             "piece.",
        success=("Your trace is clean: no host wait in the loop, pinned uploads under compute, the loader "
                 "off the loop's thread.")),
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
        question=("With the crash fixed, how many times per step does the host wait for the GPU (sync calls "
                  "or copies that hold the host)? Type a number."),
        answer="3", accept=("three",),
        giveaways=("3 per step", "three waits", "3 waits", "24 in 8 steps", "three times per step"),
        reason=("x.to(device) and y.to(device) are blocking copies (each waits for the stream), and "
                "loss.item() copies the loss to the host and waits: 3 per step, 24 in 8 steps; the trace "
                "below shows them.")),
    "gpu-busy": Prediction(
        question="For what share of the epoch is the GPU busy (a kernel or a copy running)?",
        choices=("about 25%", "about 60%", "about 95%"),
        answer="about 60%",
        giveaways=("about 60%", "busy for about 12", "12 of the 20 ms"),
        reason=("The simulated T4 is busy for about 12 of the 20 ms: the rest of the time it waits for the "
                "host, which makes every batch in the loop's own thread and waits in every blocking copy and "
                ".item(). The summary's last line and the timeline show it.")),
    "naive-stopwatch": Prediction(
        question=("The script as written (crash fixed, `.item()` every step), timed with its own "
                  "stopwatch (perf_counter before and after, no sync): does it read more, less or about the "
                  "same as the epoch really takes?"),
        choices=("more", "less", "about the same"),
        answer="about the same",
        giveaways=("agree by accident", "right by accident", "last .item() waited", "the last .item() waits"),
        reason=("Its last `.item()` waits for the GPU, so the loop returns only when the GPU has finished: "
                "the stopwatch is right by accident. Your fixed copy has no sync left in the loop, so it "
                "returns once its last step is queued, and the same stopwatch reads less. The next cell "
                "times both.")),
}
ask = asker(PREDICTIONS)
