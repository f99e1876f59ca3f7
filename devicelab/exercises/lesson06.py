"""Practice for lesson 06: why small copies never reach the link's bandwidth."""

import math

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker
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
''', success="Half of the peak is reached at nbytes = peak x latency: about 33,000 bytes (33 KiB) on a T4. "  # noqa: E501 (the solution above is shown to students as it is)
             "Batch small copies."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "half-peak": Prediction(
        question="A pinned copy's bandwidth grows with its size. Roughly what size reaches half of the "
                 "simulated T4's 12.4 GB/s peak?",
        choices=("4 KiB", "32 KiB", "1 MiB", "16 MiB"),
        answer="32 KiB",
        giveaways=("between 32 kib and 64 kib", "31-36 kib", "half of the peak arrives",
                   "half of its peak around"),
        reason="Each copy pays a fixed few microseconds before its bytes move at the peak rate; the two are "
               "equal at peak x latency, about 33,000 bytes on the simulated T4 (published T4 measurements: "
               "31-36 KiB)."),
    "loader-device": Prediction(
        question="A DataLoader made with `pin_memory=True` hands out a batch. On which device is the batch?",
        choices=("on the CPU", "on the GPU when there is one, else on the CPU",
                 "on `device`, whatever it is"),
        answer="on the CPU",
        giveaways=("leaves to you", "dataloader does not move", "never moves them",
                   "batches stay cpu tensors", "batch is on the cpu"),
        reason="The DataLoader pins batches but never moves them: you still call `.to(device, "
               "non_blocking=True)`. Without a GPU it warns and hands out ordinary, unpinned batches."),
    "one-stream-overlap": Prediction(
        question="Pinned memory and `non_blocking=True` (the second way): does the copy of the next batch "
                 "overlap the current step's compute?",
        choices=("yes, fully", "partly", "no"),
        answer="no",
        giveaways=("runs its work in order", "still waits for step", "not on one stream",
                   "needs a side stream", "on a side stream it", "second stream", "second cuda stream",
                   "never overlapping", "one stream runs in order", "overlap needs"),
        reason="The host no longer waits, but a stream runs its work in order: the next copy starts only "
               "when the step queued before it has finished. Overlap needs a second stream."),
}
ask = asker(PREDICTIONS)
