"""Print the copy benchmark's figures against the targets of issue 5 (figures, not pass/fail tests).

    .venv/bin/python benchmarks/copy_targets.py

1. Host-to-host bandwidth at 256 MiB measured by devicelab.copybench, against a plain NumPy copy of the same
   buffers in the same process (target: ratio >= 0.9).
2. How long the default CPU sweep (4 KiB to 256 MiB) takes (target: within 5 s).
3. How long after Run the transfer lab shows its first point (target: within 0.5 s).
4. On a GPU only: pinned host-to-device at 256 MiB against raw CUDA events around one copy_ (target: within
   5%).
"""

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devicelab import copybench as cb
from devicelab.units import GB, MiB

SIZE = 256 * MiB
REPEATS = 9


def median_seconds(fn, repeats: int = REPEATS) -> float:
    """Return the median wall time of `fn` after one untimed call."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def host_copy_against_numpy(rounds: int = 5) -> None:
    src = torch.empty(SIZE, dtype=torch.uint8)
    dst = torch.empty(SIZE, dtype=torch.uint8)
    src.fill_(1)
    dst.fill_(0)
    a, b = src.numpy(), dst.numpy()  # the same buffers, seen by NumPy

    def same_buffers(nbytes, where, device, pinned):
        return src if where == "host" and not same_buffers.gave_src else dst

    bench_gbps, numpy_gbps = [], []
    for _ in range(rounds):  # interleaved, so that a busy moment on the machine hits both sides alike
        same_buffers.gave_src = False

        def allocate(nbytes, where, device, pinned):
            buffer = same_buffers(nbytes, where, device, pinned)
            same_buffers.gave_src = True
            return buffer

        [bench] = cb.sweep([SIZE], "h2h", repeats=REPEATS, link=None, allocate=allocate)
        bench_gbps.append(bench.gbps)
        numpy_gbps.append(SIZE / median_seconds(lambda: np.copyto(b, a)) / GB)
    ours, theirs = statistics.median(bench_gbps), statistics.median(numpy_gbps)
    ratio = statistics.median(x / y for x, y in zip(bench_gbps, numpy_gbps, strict=True))
    print(f"1. h2h at 256 MiB: devicelab.copybench {ours:.2f} GB/s ({torch.get_num_threads()} threads), "
          f"NumPy copyto {theirs:.2f} GB/s (medians of {rounds} interleaved rounds of {REPEATS}): ratio "
          f"{ratio:.2f} (target >= 0.9)")
    threaded = SIZE / median_seconds(lambda: dst.copy_(src)) / GB
    clone = SIZE / median_seconds(lambda: src.clone()) / GB
    print(f"   for comparison: dst.copy_(src) with torch's {torch.get_num_threads()} threads {threaded:.2f} "
          f"GB/s; src.clone() (allocates inside the timing) {clone:.2f} GB/s")


def default_sweep_time() -> None:
    direction = cb.default_direction()
    start = time.perf_counter()
    results = list(cb.sweep(direction=direction, link=None))
    seconds = time.perf_counter() - start
    print(f"2. default {direction} sweep ({len(results)} sizes, 4 KiB to 256 MiB, 5 repeats): {seconds:.2f} "
          "s (target within 5 s on CPU)")


def time_to_first_point() -> None:
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is None:
        print("3. transfer lab, Run to first point: skipped, ipywidgets is not installed here")
        return
    from devicelab.transfer_lab_widget import TransferLabWidget

    queue = []
    lab = TransferLabWidget(schedule=queue.append)  # built before Run, as in a notebook
    started = time.perf_counter()
    lab.run_button.click()
    queue.pop(0)()  # the first step: measure 4 KiB, redraw the plot and the table
    seconds = time.perf_counter() - started
    lab.stop_button.click()
    while queue:
        queue.pop(0)()
    print(f"3. transfer lab, Run to first point on the plot (measure + draw): {seconds:.3f} s "
          "(target within 0.5 s; the kernel's event loop adds its 10 ms step gap)")


def pinned_h2d_against_raw_events() -> None:
    if not torch.cuda.is_available():
        print("4. pinned h2d at 256 MiB against raw CUDA events: skipped, no CUDA GPU here")
        return
    [bench] = cb.sweep([SIZE], "h2d", "pinned", True, repeats=REPEATS)
    src = torch.empty(SIZE, dtype=torch.uint8, pin_memory=True).fill_(1)
    dst = torch.empty(SIZE, dtype=torch.uint8, device="cuda")
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    samples = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    raw = SIZE / statistics.median(samples) / GB
    link = f", {bench.share_of_link:.0%} of the {bench.link_gbps:.2f} GB/s link" if bench.link_gbps else ""
    print(f"4. pinned h2d at 256 MiB: devicelab.copybench {bench.gbps:.2f} GB/s{link}; raw events around one "
          f"copy_ {raw:.2f} GB/s: difference {abs(bench.gbps / raw - 1):.1%} (target within 5%)")


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CUDA usable: "
          f"{torch.cuda.is_available()}")
    host_copy_against_numpy()
    default_sweep_time()
    time_to_first_point()
    pinned_h2d_against_raw_events()
