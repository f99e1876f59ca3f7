"""Practice for lesson 05: the GPU as a queue."""

import math
from dataclasses import replace

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker
from devicelab.simgpu import T4_PCIE3, SimulatedGPU


def _simulated_finish(kernel_seconds: list[float], launch_s: float) -> float:
    gpu = SimulatedGPU(replace(T4_PCIE3, launch_s=launch_s), initialized=True)
    for seconds in kernel_seconds:
        gpu.launch(seconds)
    gpu.synchronize()
    return gpu.clock()


def _gpu_finish_time(gpu_finish_time) -> None:
    cases = [([0.010], 5e-6), ([0.001, 0.002, 0.003], 5e-6), ([1e-6] * 10, 5e-6), ([0.004, 1e-6, 1e-6], 5e-6),
             ([], 5e-6), ([0.002, 0.002], 1e-3)]
    for kernels, launch in cases:
        expected = _simulated_finish(kernels, launch)
        got = gpu_finish_time(kernels, launch)
        assert isinstance(got, int | float) and math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12), (
            f"gpu_finish_time({kernels}, launch_s={launch}) should be {expected:.6g} s "
            f"(the simulated GPU says so), not {got!r}.")


_exercises = checker(
    Exercise("gpu_finish_time", _gpu_finish_time, hints=(
        "Keep two clocks: when the host is done launching, and when the GPU is done computing.",
        ("Each launch costs the host launch_s; a kernel starts when it has been launched AND the previous "
         "one ended."), "In a loop: host += launch_s; gpu = max(gpu, host) + seconds.",
    ), solution='''
def gpu_finish_time(kernel_seconds: list[float], launch_s: float = 5e-6) -> float:
    """Return when the GPU finishes kernels launched back to back from time 0."""
    host = gpu = 0.0
    for seconds in kernel_seconds:
        host += launch_s                  # the host spends launch_s queuing this kernel
        gpu = max(gpu, host) + seconds    # it runs once queued and once the GPU is free
    return gpu
''', success="Long kernels: the GPU is the bottleneck. Tiny kernels: the host's launches are. That is the "
             "queue."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "queue-3000": Prediction(
        question="The host queues 3000 kernels of 1 ms each inside a naive stopwatch. How far does the "
                 "host's clock move before the loop ends?",
        choices=("about 15 ms", "about 1 s", "about 2 s", "about 3 s"),
        answer="about 2 s",
        giveaways=("limited depth", "queue is full", "free slot", "about 2 s", "1.98 s", "kernel 1976",
                   "blocking after about 1000"),
        reason="About 2 s on the simulated T4: its launch queue holds 1024 kernels, and once it is full each "
               "launch waits for a free slot, so the loop ends when kernel 1976 is done. Neither the "
               "launches (15 ms) nor the work (3 s)."),
    "default-h2d": Prediction(
        question="50 ms of work is queued, then the host copies the next batch (1 MiB) to the GPU with a "
                 "plain `x.to(device)`. How long does the host wait in that line?",
        choices=("about the copy itself, well under 1 ms", "about 50 ms", "nothing: the copy is only queued"),
        answer="about 50 ms",
        giveaways=("stream sync", "default x.to(device) among them", "host-to-device copy ... sync point",
                   "most common sync point", "cudamemcpyasync then", "waits for everything queued",
                   "copies that do not", "in almost every training loop"),
        reason="The default host-to-device copy ends with a stream sync: the host waits for everything "
               "queued before the copy, not only for the copy. The cell also times a pinned "
               "`non_blocking=True` copy."),
    "stale-read": Prediction(
        question='As before, a 20 ms kernel makes "batch 1" and `copy_(..., non_blocking=True)` copies it '
                 'into a host buffer that holds "batch 0"; but this buffer is ordinary, pageable memory. We '
                 "read it at once. What do we read?",
        choices=("last step's values", "the new values", "an error"),
        answer="the new values",
        giveaways=("whatever non_blocking says", "once the data has landed", "a pageable download waits",
                   "copy into pageable memory waits", "into pageable memory returns", "waits for the copy"),
        reason="A copy into pageable memory returns only once the data has landed: the copy engine cannot "
               "write there, so CUDA lands the data in a pinned buffer of the driver's and copies it into "
               "yours before the call returns. The read is safe, and the host waited for the kernel."),
}
ask = asker(PREDICTIONS)
