"""Practice for lesson 06: why small copies never reach the link's bandwidth."""

import math

from devicelab.feedback import Exercise, checker
from devicelab.simgpu import T4_PCIE3
from devicelab.units import GB, KiB, MiB


def _effective_gbps(effective_gbps) -> None:
    peak_gbps = T4_PCIE3.h2d_pinned_Bps / GB
    latency = T4_PCIE3.copy_latency_s
    for nbytes in (4 * KiB, 34 * KiB, MiB, 8 * MiB, 256 * MiB):
        expected = nbytes / T4_PCIE3.copy_seconds(nbytes, "h2d", pinned=True) / GB
        got = effective_gbps(nbytes, peak_gbps, latency)
        assert isinstance(got, int | float) and math.isclose(got, expected, rel_tol=1e-9), (
            f"effective_gbps({nbytes}, {peak_gbps}, {latency}) should be {expected:.4g} GB/s "
            f"(the simulated T4 agrees), not {got!r}.")
    assert effective_gbps(10**9, 10.0, 0.0) == 10.0, "with no latency, every size reaches the peak."


_exercises = checker(
    Exercise("effective_gbps", _effective_gbps, hints=(
        "A copy takes a fixed latency plus the time to push the bytes at the peak rate.",
        "seconds = latency_s + nbytes / (peak_gbps * 1e9); the achieved rate is nbytes / seconds.",
        "Return GB/s: divide bytes per second by 1e9.",
    ), solution='''
def effective_gbps(nbytes: int, peak_gbps: float, latency_s: float) -> float:
    """Return the bandwidth one copy of `nbytes` achieves, in GB/s, given the link's peak and a fixed latency."""
    seconds = latency_s + nbytes / (peak_gbps * 1e9)
    return nbytes / seconds / 1e9
''', success="Half of the peak is reached at nbytes = peak x latency: about 33,000 bytes (33 KiB) on a T4. Batch small copies."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
