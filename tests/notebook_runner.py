"""Execute a notebook top to bottom the way the test suite and CI do, skipping GPU-only cells without a GPU.
"""

import copy
import functools
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

REQUIRES_CUDA = "requires-cuda"


@dataclass(frozen=True)
class ExecutionResult:
    """An executed notebook, how long it took, and which cells were skipped."""

    notebook: nbformat.NotebookNode
    seconds: float
    skipped_cells: int


@functools.cache
def cuda_present() -> bool:
    """Return True when the machine running the tests has a usable CUDA GPU (checked in a subprocess, once per
    test process: each check imports torch)."""
    import subprocess
    import sys

    # Asking in this process would initialise CUDA before nbclient forks kernels.
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


def without_gpu_cells(nb: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, int]:
    """Return a copy of the notebook without the cells tagged requires-cuda, and how many were dropped."""
    nb = copy.deepcopy(nb)
    kept = [c for c in nb.cells if REQUIRES_CUDA not in c.get("metadata", {}).get("tags", [])]
    dropped = len(nb.cells) - len(kept)
    nb.cells = kept
    return nb, dropped


def execute_notebook(path: Path, *, gpu: bool, timeout: int = 120, env: dict | None = None,
                     kernel_name: str = "python3") -> ExecutionResult:
    """Run every cell of the notebook in a fresh kernel started in its folder; raise on the first error.

    Cells tagged raises-exception may fail (nbclient's own rule); cells tagged requires-cuda are
    dropped when `gpu` is False. The kernel is forked from a server that imported torch already
    (tests/warm_kernels.py), unless DEVICELAB_COLD_KERNELS is set. The client waits for messages in slices
    (autograder/grading/channels.py).
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    from autograder.grading.channels import CLIENT_CLASS
    from tests.warm_kernels import warm_kernels

    nb = nbformat.read(path, as_version=4)
    skipped = 0
    if not gpu:
        nb, skipped = without_gpu_cells(nb)
    warm = warm_kernels().data_folder(kernel_name, env)
    # its channels cannot sleep through a reply on a loaded machine (autograder/grading/channels.py)
    km = AsyncKernelManager(kernel_name=kernel_name, client_class=CLIENT_CLASS)
    if warm is not None:
        km.kernel_spec_manager = KernelSpecManager(kernel_dirs=[f"{warm}/kernels"])
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel_name, km=km,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    # a kernel manager given to nbclient is not shut down by it unless asked (cleanup_kc)
    client.execute(cleanup_kc=True, **({"env": env} if env is not None else {}))
    return ExecutionResult(nb, time.perf_counter() - start, skipped)
