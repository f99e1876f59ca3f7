"""Practice for lesson 06: why small copies never reach the link's bandwidth; the photos its DataLoader
section loads with worker processes, and the model of how fast they come."""

import math
import zlib

import torch
from torch.utils.data import Dataset, get_worker_info

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
''', success="Half of the peak is reached at nbytes = peak x latency: about 33,000 bytes (32.7 KiB) on a T4. "  # noqa: E501 (the solution above is shown to students as it is)
             "Batch small copies."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution


class PackedPhotos(Dataset):
    """Photos stored compressed, as PNG files are (zlib's deflate); each is inflated, cropped and flipped.

    `__getitem__` is real host work on one core, done by whichever process calls it: the loop's own with
    `num_workers=0`, a worker process otherwise. It lives in a module, not in a notebook cell, so that a
    worker started with `spawn` or `forkserver` (a fresh Python) can import it. `made` counts the samples
    made, one slot per process (0: the loop's own, 1 + i: worker i), in shared memory, so every worker's
    count shows.
    """

    def __init__(self, n: int = 256, size: int = 256, crop: int = 96, files: int = 8, seed: int = 0):
        if not 0 < crop <= size:
            raise ValueError(f"crop ({crop}) must be between 1 and the photo's size ({size})")
        generator = torch.Generator().manual_seed(seed)
        rows, colours = torch.arange(size), torch.arange(3).view(3, 1, 1)
        self.files = []
        for f in range(files):  # smooth gradients with a little noise: they compress, as photos do
            smooth = (rows.view(1, -1, 1) + rows.view(1, 1, -1) + 37 * f + 50 * colours) // 2
            noise = torch.randint(0, 8, (3, size, size), generator=generator)
            self.files.append(zlib.compress(((smooth + noise) % 256).to(torch.uint8).numpy().tobytes()))
        self.n, self.size, self.crop = n, size, crop
        self.made = torch.zeros(1 + MAX_COUNTED_WORKERS, dtype=torch.int64).share_memory_()

    def __len__(self) -> int:
        return self.n

    def decode(self, i: int) -> torch.Tensor:
        """Return photo `i` whole, inflated from its compressed file: (3, size, size) uint8."""
        raw = bytearray(zlib.decompress(self.files[i % len(self.files)]))
        return torch.frombuffer(raw, dtype=torch.uint8).view(3, self.size, self.size)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image = self.decode(i)
        top, left = torch.randint(0, self.size - self.crop + 1, (2,)).tolist()
        image = image[:, top:top + self.crop, left:left + self.crop]
        if torch.rand(()) < 0.5:
            image = image.flip(-1)  # a horizontal flip
        worker = get_worker_info()
        slot = 0 if worker is None else 1 + worker.id
        if slot < len(self.made):
            self.made[slot] += 1  # each slot has one writer: no lock needed
        return image.contiguous(), i % 10


MAX_COUNTED_WORKERS = 64  # PackedPhotos.made counts workers 0-63; later ones make samples uncounted


def batches_per_second(num_workers: int, cores: int, batch_s: float) -> float:
    """Return how many batches per second a loader delivers when one batch takes `batch_s` of one core.

    The model the lesson's measurement is drawn against: the loop's own process (`num_workers=0`) or each
    worker makes one batch at a time, on one core, and processes beyond the cores only take turns on them.
    Moving batches between processes and the loop's own work are left out.
    """
    if num_workers < 0 or cores < 1 or batch_s <= 0:
        raise ValueError("num_workers >= 0, cores >= 1 and batch_s > 0, please")
    return min(max(num_workers, 1), cores) / batch_s


def plot_rates(rates: dict[int, float], cores: int, batch_s: float, ax=None):
    """Draw measured batches per second against `num_workers`, beside the model's, with the core count."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6.4, 3.2))[1]
    workers = sorted(rates)
    ax.plot(workers, [rates[w] for w in workers], "o-", label="measured on this machine")
    ax.plot(workers, [batches_per_second(w, cores, batch_s) for w in workers], "--", color="grey",
            label="one core per process, no more than the cores")
    ax.axvline(cores, color="tab:red", linewidth=1, label=f"os.cpu_count() = {cores}")
    ax.set(xlabel="num_workers", ylabel="batches per second", xticks=workers, ylim=(0, None))
    ax.legend(loc="lower right", fontsize="small")
    return ax

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
    "eight-workers": Prediction(
        question="On a machine with 2 cores, each batch of `PackedPhotos` takes the host about the time "
                 "measured above. How many batches per second does `num_workers=8` deliver, compared with "
                 "`num_workers=2`?",
        choices=("about 4 times as many", "about twice as many", "about as many"),
        answer="about as many",
        giveaways=("only while each has a core", "while each worker has a core", "take turns on",
                   "buy about what", "suggested max number of worker", "flattens near",
                   "more workers than the cores", "no more than the cores", "help only while"),
        reason="A worker is a process that makes one batch at a time on one core: 2 workers already keep "
               "both cores busy, and 8 share the same two."),
}
ask = asker(PREDICTIONS)
