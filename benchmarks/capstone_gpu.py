"""Time the capstone's script and its fixes on a real GPU, one change at a time; print a table.

    python benchmarks/capstone_gpu.py

Each row is one epoch (8 batches of 256 images, 3 MiB each) timed like lesson 08's section 7: warmed up once,
then the median of 5, synchronised before each clock read. The fixed loop is the reference fix in
benchmarks/stand_ins/capstone_fixed.py; the rows vary its DataLoader, to show what starting worker processes
every epoch costs against what they save. Needs a CUDA GPU.
"""

import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devicelab import capstone
from devicelab.exercises.lesson08 import NoiseOnDevice
from devicelab.timing import time_it


def fixed_parts() -> dict:
    """Return the reference fix's Net, build_loader and run_epoch."""
    namespace: dict = {}
    exec((ROOT / "benchmarks" / "stand_ins" / "capstone_fixed.py").read_text(), namespace)  # noqa: S102
    return namespace


def loader_with(**options):
    """Return a build_loader that makes the script's DataLoader with these options."""
    return lambda dataset, device: DataLoader(dataset, batch_size=256, shuffle=True, **options)


def epoch(net, make_loader, train, device) -> float:
    """Return the median seconds of one epoch, warmed up and synchronised."""
    torch.manual_seed(0)
    model = net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = make_loader(capstone.Images(), device)
    return time_it(lambda: train(model, loader, optimizer, device), device=device, warmup=1, repeats=5).median


def main() -> int:
    if not torch.cuda.is_available():
        print("This benchmark needs a CUDA GPU.", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    fixed = fixed_parts()
    rows = [
        ("the script, crash fixed only (pageable, blocking, .item() each step)",
         NoiseOnDevice, capstone.build_loader, capstone.run_epoch),
        ("fixed loop, 0 workers, pin_memory=True", fixed["Net"], loader_with(pin_memory=True),
         fixed["run_epoch"]),
        ("fixed loop, 2 workers, pinned, started every epoch", fixed["Net"],
         loader_with(pin_memory=True, num_workers=2), fixed["run_epoch"]),
        ("fixed loop, 2 workers, pinned, persistent_workers=True (the reference fix)", fixed["Net"],
         fixed["build_loader"], fixed["run_epoch"]),
    ]
    with open("/dev/null", "w") as quiet:  # the script's run_epoch prints its losses
        stdout, sys.stdout = sys.stdout, quiet
        try:
            times = [(label, epoch(net, make, train, device)) for label, net, make, train in rows]
        finally:
            sys.stdout = stdout
    start = time.perf_counter()
    next(iter(DataLoader(capstone.Images(), batch_size=256, num_workers=2, pin_memory=True)))
    first = time.perf_counter() - start
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    for label, seconds in times:
        print(f"{seconds * 1e3:8.1f} ms  {times[0][1] / seconds:5.2f}x  {label}")
    print(f"first batch from a new 2-worker pinned loader: {first * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
