"""Report what this Python session can run on: torch, GPUs, Colab, nbgrader."""

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from html import escape

import torch

from devicelab.devices import best_device
from devicelab.units import GiB


@dataclass(frozen=True)
class GpuInfo:
    """One CUDA device as PyTorch sees it."""

    index: int
    name: str
    memory_gib: float
    capability: tuple[int, int]


@dataclass(frozen=True)
class EnvironmentReport:
    """A snapshot of the facts a lesson needs about where it runs."""

    python: str
    platform: str
    torch_version: str
    torch_cuda_build: str | None
    compiled_accelerator: str | None
    cuda_available: bool
    mps_available: bool
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)
    driver: str | None = None
    on_colab: bool = False
    nbgrader_execution: str | None = None
    best_device: str = "cpu"

    def rows(self) -> list[tuple[str, str]]:
        """Return the report as (label, value) pairs, in reading order."""
        rows = [
            ("Python", self.python),
            ("Platform", self.platform),
            ("PyTorch", self.torch_version),
            ("Built with CUDA", self.torch_cuda_build or "no (CPU-only or other build)"),
            ("Compiled-in accelerator", self.compiled_accelerator or "none"),
            ("CUDA GPU usable now", _yes_no(self.cuda_available)),
            ("Apple MPS usable now", _yes_no(self.mps_available)),
        ]
        for gpu in self.gpus:
            major, minor = gpu.capability
            rows.append(
                (f"GPU cuda:{gpu.index}",
                 f"{gpu.name}, {gpu.memory_gib:.1f} GiB, compute capability {major}.{minor}")
            )
        if self.driver:
            rows.append(("NVIDIA driver", self.driver))
        rows += [
            ("Google Colab", _yes_no(self.on_colab)),
            ("Run by nbgrader", self.nbgrader_execution or "no"),
            ("Course default device", self.best_device),
        ]
        return rows

    def __str__(self) -> str:
        width = max(len(label) for label, _ in self.rows())
        return "\n".join(f"{label:<{width}}  {value}" for label, value in self.rows())

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><th style='text-align:left'>{escape(k)}</th><td "
                       f"style='text-align:left'>{escape(v)}</td></tr>"
                       for k, v in self.rows())
        return f"<table>{body}</table>"


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def _compiled_accelerator() -> str | None:
    """Return the accelerator type this torch build was compiled for, available or not."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return None
    device = accelerator.current_accelerator()
    return device.type if device is not None else None


def _gpus() -> tuple[GpuInfo, ...]:
    if not torch.cuda.is_available():
        return ()
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(GpuInfo(index, props.name, props.total_memory / GiB, (props.major, props.minor)))
    return tuple(gpus)


def _nvml_driver() -> str | None:
    """Return the driver version from NVML (package nvidia-ml-py), or None when NVML is unusable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def _nvidia_driver() -> str | None:
    """Return the NVIDIA driver version through NVML, or nvidia-smi, or None."""
    version = _nvml_driver()
    if version:
        return version
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def collect_environment() -> EnvironmentReport:
    """Gather the environment report (asks the GPU driver only when a GPU is usable)."""
    cuda = torch.cuda.is_available()
    return EnvironmentReport(
        python=sys.version.split()[0],
        platform=f"{platform.system()} {platform.machine()}",
        torch_version=torch.__version__,
        torch_cuda_build=torch.version.cuda,
        compiled_accelerator=_compiled_accelerator(),
        cuda_available=cuda,
        mps_available=torch.backends.mps.is_available(),
        gpus=_gpus(),
        driver=_nvidia_driver() if cuda else None,
        on_colab="google.colab" in sys.modules,
        nbgrader_execution=os.environ.get("NBGRADER_EXECUTION") or None,
        best_device=str(best_device()),
    )


def show_environment() -> EnvironmentReport:
    """Collect the environment report and return it, so a notebook displays it as a table."""
    return collect_environment()
