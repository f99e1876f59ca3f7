"""Time the capstone's fixes on a real GPU in stages, each against the one before; print a table.

    python benchmarks/capstone_gpu.py [--runs 7]

The stages are benchmarks/stand_ins/capstone_stages.py: the script with its crash fixed, then no syncs, then
pinned batches and `non_blocking` copies, then persistent workers, then side-stream prefetch (the
reference fix). Each pair is timed in turns (`devicelab.capstone.alternate`): one epoch of 50 steps each,
warmed up once, then `--runs` times each, synchronised before each clock read; each row gives min, median and
max. The goal on an H100: the whole fix at least 3x, each stage's gain beyond its spread (every run of the
stage faster than every run of the one before). The simulated H100's prediction for the same stages comes
last, labelled. It also prints what decoding one image costs on this host, the figure the simulated host
assumes. Needs a CUDA GPU.
"""

import argparse
import contextlib
import io
import itertools
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "stand_ins")]

from capstone_stages import Stage, stages  # found through the path above

from devicelab import capstone


def epoch_of(stage: Stage, device: torch.device):
    """Return a function that trains one epoch of `stage` (its model, optimizer and loader made once)."""
    torch.manual_seed(0)
    model = stage.net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = stage.build_loader(capstone.Photos(), device)
    return lambda: stage.run_epoch(model, loader, optimizer, device)


def decode_us_per_image(images: int = 256) -> float:
    """Return the microseconds Photos.__getitem__ takes per image on this host, one thread, with collating."""
    photos = capstone.Photos(n=images)
    start = time.perf_counter()
    torch.stack([photos[i][0] for i in range(images)])
    return (time.perf_counter() - start) / images * 1e6


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args(argv).runs
    if not torch.cuda.is_available():
        print("This benchmark needs a CUDA GPU.", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    print(f"decoding one image on this host: {decode_us_per_image():.0f} us (one thread, with collating)")
    versions = stages()
    medians = []
    for before, after in itertools.pairwise(versions):
        with contextlib.redirect_stdout(io.StringIO()):  # the script's run_epoch prints its losses
            result = capstone.alternate(epoch_of(before, device), epoch_of(after, device),
                                        sync=torch.cuda.synchronize, clock=time.perf_counter, runs=runs)
        capstone.show_comparison(after.name, result)
        medians.append(result)
    whole = medians[0].before.median / medians[-1].after.median
    print(f"whole fix: {whole:.2f}x (medians of the first and last timings)")
    print("SIMULATED H100 (devicelab.capstone.MACHINES['H100']), per epoch:")
    for stage in versions:
        run = capstone.profile_script(stage.net, stage.build_loader, stage.run_epoch, machine="H100")
        print(f"  {run.seconds * 1e3:8.1f} ms  {stage.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
