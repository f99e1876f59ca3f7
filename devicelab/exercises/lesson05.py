"""Practice for lesson 05: the GPU as a queue."""

import math
from dataclasses import replace

from devicelab.feedback import Exercise, checker
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
        "Each launch costs the host launch_s; a kernel starts when it has been launched AND the previous one ended.",
        "In a loop: host += launch_s; gpu = max(gpu, host) + seconds.",
    ), solution='''
def gpu_finish_time(kernel_seconds: list[float], launch_s: float = 5e-6) -> float:
    """Return when the GPU finishes kernels launched back to back from time 0."""
    host = gpu = 0.0
    for seconds in kernel_seconds:
        host += launch_s                  # the host spends launch_s queuing this kernel
        gpu = max(gpu, host) + seconds    # it runs once queued and once the GPU is free
    return gpu
''', success="Long kernels: the GPU is the bottleneck. Tiny kernels: the host's launches are. That is the queue."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
