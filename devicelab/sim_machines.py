"""The machines lesson 08's capstone is simulated on: a GPU's profile and its host's, each figure with its
source, and the choices the simulation makes that are no machine's figures (`MODELLING`).

`MACHINES["H100"]` is calibrated to the course's recordings on an H100 (copy rates, pinning, the cost per
PyTorch op, starting workers), `MACHINES["T4"]` to published figures; the ones marked ASSUMPTION are not
measurements. `Machine.describe()` lists them all, as the lesson prints them.
"""

from dataclasses import dataclass

from devicelab.simgpu import H100_PCIE5, T4_PCIE3, GPUProfile, describe_profile


@dataclass(frozen=True)
class HostProfile:
    """What the host's side of loading costs on a simulated machine: seconds, and bytes per second."""

    name: str
    decode_s_per_image: float  # Photos.__getitem__: decode, crop and flip one image, in one thread
    collate_Bps: float  # the DataLoader stacking a batch's images (a host copy)
    pin_Bps: float  # pinning a batch (a host copy into page-locked memory)
    worker_handoff_s: float  # receiving a batch from a worker process
    worker_start_s: float  # starting workers: a loader's first epoch, then every epoch unless persistent
    cores: int  # CPU cores: the loop's process keeps one, the workers share the rest
    sources: tuple[tuple[str, str], ...]  # (field, where its figure comes from)


@dataclass(frozen=True)
class Machine:
    """A simulated machine for the capstone: a GPU's profile and its host's, each figure with its source."""

    name: str
    gpu: GPUProfile
    host: HostProfile

    def describe(self) -> str:
        """Return everything the simulated machine runs on, each with its source: the GPU's figures
        (simgpu.describe_profile), the host's, and the choices of the model that turn the script's work into
        time (MODELLING)."""
        lines = [f"{self.name} (SIMULATED): {self.gpu.name}; host: {self.host.name}", "  the GPU:"]
        lines += [f"  {line}" for line in describe_profile(self.gpu).splitlines()[1:]]
        lines.append("  the host:")
        lines += [f"    {field:30} {_shown(field, getattr(self.host, field)):>12}   {source}"
                  for field, source in self.host.sources]
        lines.append("  how the simulation turns the script's work into time (choices of the model, not "
                     "measurements):")
        lines += [f"    {what:30} {how}" for what, how in MODELLING]
        return "\n".join(lines)


def _shown(field: str, value: float) -> str:
    """A host figure in the units a person reads: GB/s for a rate, us or ms for a time, a count as it is."""
    if isinstance(value, int):
        return str(value)
    if field.endswith("_Bps"):
        return f"{value / 1e9:.1f} GB/s"
    return f"{value * 1e6:.0f} us" if value < 1e-3 else f"{value * 1e3:.0f} ms"


_DECODE_SOURCE = ("ASSUMPTION: 90 us, what Photos.__getitem__ took per image (256 images, one thread, with "
                  "collating) on the course's 2-core CPU machine, 2026-11-28; benchmarks/capstone_gpu.py "
                  "prints the GPU host's own figure")
MACHINES = {
    "H100": Machine("H100", H100_PCIE5, HostProfile(
        name="the course's H100 host", decode_s_per_image=90e-6, collate_Bps=10.9e9, pin_Bps=43e9,
        worker_handoff_s=50e-6, worker_start_s=0.10, cores=16,
        sources=(("decode_s_per_image", _DECODE_SOURCE),
                 ("collate_Bps", "ASSUMPTION: the 10.9 GB/s host copy measured on the course's CPU machine"),
                 ("cores", ("ASSUMPTION: 16, what the GPU machines lent to the course have; the H100's host "
                            "was not counted")),
                 ("pin_Bps", ("derived from two medians recorded on an H100's host (lesson 06): a 64 MiB "
                             "upload took 2.83 ms with x.pin_memory() before it and 1.28 ms from memory "
                             "already pinned, so pinning took about 1.55 ms")),
                 ("worker_handoff_s", "ASSUMPTION: a round figure for passing a batch between processes"),
                 ("worker_start_s", ("recorded on an H100's host: 97-170 ms for a new 2-worker loader's "
                                    "first batch (benchmarks/capstone_gpu.py, 2026-11-27)"))))),
    "T4": Machine("T4", T4_PCIE3, HostProfile(
        name="a Colab-like T4 host", decode_s_per_image=90e-6, collate_Bps=10.9e9, pin_Bps=10.9e9,
        worker_handoff_s=50e-6, worker_start_s=0.10, cores=2,
        sources=(("decode_s_per_image", _DECODE_SOURCE),
                 ("collate_Bps", "ASSUMPTION: the 10.9 GB/s host copy measured on the course's CPU machine"),
                 ("cores", ("ASSUMPTION: 2, the vCPUs a free Colab T4 session reports (os.cpu_count()); "
                            "not counted by the course")),
                 ("pin_Bps", "ASSUMPTION: a host copy at the same 10.9 GB/s"),
                 ("worker_handoff_s", "ASSUMPTION: a round figure for passing a batch between processes"),
                 ("worker_start_s", "ASSUMPTION: the H100 host's recorded 97-170 ms, rounded")))),
}
KERNEL_MIN_S = 3e-6  # the shortest kernel (ASSUMPTION: a few microseconds, as small elementwise kernels take)
# How SimCuda and SimLoader turn the script's work into time: every choice the model makes that is not a
# figure of a machine. Machine.describe() lists them; tests/lessons/test_lesson08.py checks each against the
# code.
MODELLING = (
    ("convolutions, matrix products",
     ("ASSUMPTION: 2 x output elements x inner size FLOPs, at the GPU's whole FP32 peak (no tensor cores, "
      "no lost efficiency)")),
    ("the backward pass", "ASSUMPTION: one kernel of 2 x the FLOPs of the forward since the last backward"),
    ("every kernel", f"ASSUMPTION: at least {KERNEL_MIN_S * 1e6:.0f} us, however little it does"),
    ("every other op (elementwise)",
     ("ASSUMPTION: memory-bound: three times its output's bytes (two reads, a write) at the memory "
      "bandwidth, twice the device-to-device copy rate")),
    ("DataLoader workers",
     ("ASSUMPTION: n workers make batches n times as fast while each has a core of its own (the loop's "
      "process keeps one core, the workers share the rest evenly, with no cost for switching between them); "
      "one thread pins their batches, on no core of its own")),
    ("prefetching", ("ASSUMPTION: as PyTorch's loader: batch b is handed to a worker once batch "
                     "b - num_workers x prefetch_factor has reached the loop; workers take batches in turn")),
    ("starting workers", ("ASSUMPTION: worker_start_s for any number of workers, at a loader's first epoch, "
                          "persistent or not, and again every epoch unless persistent_workers=True. "
                          "profile_script's epoch is a later one of a loader made once")),
)


def machine_of(machine: "str | Machine") -> Machine:
    """Return the Machine named `machine` (a key of MACHINES), or `machine` itself."""
    if isinstance(machine, Machine):
        return machine
    if machine not in MACHINES:
        raise ValueError(f"machine must be one of {sorted(MACHINES)} or a Machine, got {machine!r}")
    return MACHINES[machine]
