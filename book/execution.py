"""Execute a notebook top to bottom the way the test suite and CI do, skipping GPU-only cells without a GPU.

`executed_copy` keeps each executed lesson in build/executed/, for every process of a run and later runs:
tests/lessons/test_lessons.py and the book's build (book/site.py, tests/course/test_book.py) read the same
execution.
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
    (book/warm_kernels.py), unless DEVICELAB_COLD_KERNELS is set. The client waits for messages in slices
    (autograder/grading/channels.py).
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    from autograder.grading.channels import CLIENT_CLASS
    from book.warm_kernels import warm_kernels

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


# --- executed copies, shared by every process of a run (the lesson tests, the book) ------------------------

ROOT = Path(__file__).resolve().parent.parent
EXECUTED = ROOT / "build" / "executed"  # git ignores build/
PACKAGE = ROOT / "devicelab"  # the course's code, which the lessons import
RUNNER = (Path(__file__), Path(__file__).with_name("warm_kernels.py"))  # how a notebook is run
STALE_SECONDS = 3600  # another copy of the same notebook older than this is removed when a new one is written


def _digest_files(digest, root: Path, paths) -> None:
    for path in sorted(paths):
        if path.is_file():
            digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())


def _beside(folder: Path, skip: Path) -> list[Path]:
    """Return the files under `folder` that a notebook there may read (its traces, its data): those git tracks
    when `folder` is in a checkout (not what the lessons write, which git ignores), else every file; never a
    notebook nor anything under `skip`."""
    import subprocess

    listed = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--", "."], capture_output=True,
                            check=False)
    if listed.returncode == 0:
        paths = [folder / name for name in listed.stdout.decode().split("\0") if name]
    else:
        paths = list(folder.rglob("*"))
    return [p for p in paths if p.suffix != ".ipynb" and ".ipynb_checkpoints" not in p.parts
            and not p.is_relative_to(skip)]


def execution_key(path: Path, *, gpu: bool, skip: Path = EXECUTED) -> str:
    """Return what an executed copy of the notebook is filed under: a hash of everything its outputs depend
    on: its bytes, the files beside it, the course's package (devicelab/), how it is run (this runner and the
    warm kernels), the Python and every installed distribution's version (torch's among them), and `gpu`."""
    import hashlib
    import sys

    path = Path(path).resolve()
    digest = hashlib.sha256(f"gpu={gpu}\0{sys.version}\0".encode())
    digest.update(path.read_bytes())
    _digest_files(digest, path.parent, _beside(path.parent, skip))
    _digest_files(digest, PACKAGE, PACKAGE.rglob("*.py"))
    _digest_files(digest, ROOT, RUNNER)
    digest.update("\n".join(_installed()).encode())
    return digest.hexdigest()[:16]


@functools.cache
def _installed() -> tuple[str, ...]:
    """Return `name==version` of every distribution installed in this Python's environment (read once per
    process: 0.3 s); not sys.path's, where pytest's also finds setuptools' vendored packages."""
    import importlib.metadata
    import sysconfig

    where = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    return tuple(sorted({f"{d.metadata['Name']}=={d.version}"
                         for d in importlib.metadata.distributions(path=where) if d.metadata["Name"]}))


def executed_copy(path: Path, *, gpu: bool | None = None, folder: Path = EXECUTED,
                  wait: bool = True) -> Path | None:
    """Return the path of the notebook executed as `execute_notebook` runs it (outputs included), executing it
    only when no copy for its current `execution_key` exists: every process of a test run (each pytest
    worker, the book's build) shares one execution per notebook, and a later run reuses it until the notebook,
    the course's package or an installed version changes.

    `gpu` (default: whether this machine has one) as for execute_notebook; with gpu False on a machine that
    has a GPU, the kernel is also kept from seeing it (CUDA_VISIBLE_DEVICES empty), so that the outputs are a
    CPU's. A process that finds another executing the same notebook waits for it (a lock file per notebook)
    and reads its copy; with `wait` False it returns None instead. A notebook that fails to execute raises, as
    execute_notebook does, and leaves no copy.
    """
    import os
    import tempfile

    from filelock import FileLock, Timeout

    path = Path(path)
    if gpu is None:
        gpu = cuda_present()
    folder.mkdir(parents=True, exist_ok=True)
    key = execution_key(path, gpu=gpu, skip=folder)
    copy_path = folder / f"{path.stem}-{key}.ipynb"
    try:
        held = FileLock(folder / f"{path.stem}.lock").acquire(timeout=-1 if wait else 0)
    except Timeout:
        return None
    with held:  # released when the block ends
        if copy_path.exists():
            return copy_path
        env = None
        if not gpu and cuda_present():
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        result = execute_notebook(path, gpu=gpu, env=env)
        result.notebook.metadata.setdefault("devicelab", {})["executed"] = {
            "key": key, "gpu": gpu, "seconds": round(result.seconds, 2),
            "skipped_cells": result.skipped_cells}
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.stem}-", suffix=".ipynb")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                nbformat.write(result.notebook, out)
            os.chmod(temporary, 0o644)  # as any file written here (mkstemp makes it the owner's alone)
            os.replace(temporary, copy_path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        for other in folder.glob(f"{path.stem}-*.ipynb"):
            if other != copy_path and time.time() - other.stat().st_mtime > STALE_SECONDS:
                other.unlink(missing_ok=True)
    return copy_path


def executed_copies(paths, *, gpu: bool | None = None, folder: Path = EXECUTED) -> dict[Path, Path]:
    """Return each notebook's `executed_copy` (path -> copy): first executing those no other process is
    executing now, then waiting for the others' (a worker running the lessons meets this one halfway)."""
    paths = [Path(p) for p in paths]
    copies = {p: c for p in paths if (c := executed_copy(p, gpu=gpu, folder=folder, wait=False)) is not None}
    copies.update({p: executed_copy(p, gpu=gpu, folder=folder) for p in paths if p not in copies})
    return {p: copies[p] for p in paths}
