"""The notebook runner drops GPU-only cells without a GPU and honours raises-exception."""

import os

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from book.execution import execute_notebook, without_gpu_cells
from book.warm_kernels import COLD

pytestmark = pytest.mark.notebook
warm_only = pytest.mark.skipif(bool(os.environ.get(COLD)), reason=f"warm kernels switched off ({COLD})")


def _notebook(tmp_path, *cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    return path


def test_requires_cuda_cells_are_dropped_without_a_gpu(tmp_path):
    gpu_cell = nbformat.v4.new_code_cell("raise SystemError('must not run')",
                                         metadata={"tags": ["requires-cuda"]})
    path = _notebook(tmp_path, nbformat.v4.new_code_cell("x = 1"), gpu_cell)
    result = execute_notebook(path, gpu=False)
    assert result.skipped_cells == 1 and len(result.notebook.cells) == 1
    with pytest.raises(CellExecutionError, match="must not run"):
        execute_notebook(path, gpu=True)


def test_raises_exception_tag_allows_a_deliberate_error(tmp_path):
    ok = nbformat.v4.new_code_cell("1 / 0", metadata={"tags": ["raises-exception"]})
    path = _notebook(tmp_path, ok, nbformat.v4.new_code_cell("y = 2"))
    assert execute_notebook(path, gpu=False).seconds > 0
    path = _notebook(tmp_path, nbformat.v4.new_code_cell("1 / 0"))
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        execute_notebook(path, gpu=False)


def test_without_gpu_cells_leaves_the_original_alone():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("a", metadata={"tags": ["requires-cuda"]}),
                nbformat.v4.new_code_cell("b")]
    copy, dropped = without_gpu_cells(nb)
    assert dropped == 1 and [c.source for c in copy.cells] == ["b"] and len(nb.cells) == 2


# --- warm kernels (book/warm_kernels.py): forked from a server that imported torch, yet fresh each -------

PROBE = ("import os, sys\nwarm = 'torch' in sys.modules\nimport numpy, torch\n"
         "print(os.getpid(), warm, numpy.random.randint(1 << 30), int(torch.randint(1 << 30, (1,))), "
         "os.getcwd(), os.environ.get('DL_PROBE'))")


@warm_only
def test_each_notebook_gets_a_warm_kernel_of_its_own(tmp_path):
    path = _notebook(tmp_path, nbformat.v4.new_code_cell(PROBE))
    seen = [execute_notebook(path, gpu=False, env={**os.environ, "DL_PROBE": f"run-{n}"})
            .notebook.cells[0].outputs[0]["text"].split() for n in range(2)]
    (pid1, warm1, np1, torch1, cwd1, env1), (pid2, warm2, np2, torch2, _, env2) = seen
    assert warm1 == warm2 == "True"  # torch was imported before the notebook ran
    assert pid1 != pid2 and np1 != np2 and torch1 != torch2  # its own process, its own seeds
    assert cwd1 == str(tmp_path) and (env1, env2) == ("run-0", "run-1")


def _warm_kernel():
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    from book.warm_kernels import warm_kernels

    folder = warm_kernels().data_folder("python3")
    specs = KernelSpecManager(kernel_dirs=[f"{folder}/kernels"])
    km = KernelManager(kernel_name="python3", kernel_spec_manager=specs)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    said = []
    kc.execute_interactive("import os; print(os.getpid())", timeout=60,
                           output_hook=lambda msg: said.append(msg["content"].get("text", "")))
    return km, kc, int("".join(said).strip())


def _gone(pid: int, seconds: float = 10) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@warm_only
def test_an_interrupt_reaches_a_warm_kernel_and_killing_its_launcher_ends_it():
    import signal

    km, kc, pid = _warm_kernel()
    try:
        assert pid != km.provisioner.process.pid  # the launcher is not the kernel

        def interrupt_once_running(msg) -> None:
            # Only once the cell says it runs: an interrupt on a timer could reach a loaded kernel before the
            # cell did, and an idle kernel lets it pass; the cell would then sleep its whole time.
            if msg["msg_type"] == "stream" and "sleeping" in msg["content"]["text"]:
                km.interrupt_kernel()

        reply = kc.execute_interactive("import time\nprint('sleeping', flush=True)\ntime.sleep(600)",
                                       timeout=300, output_hook=interrupt_once_running)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        km.provisioner.process.send_signal(signal.SIGKILL)
        assert _gone(pid), "the kernel outlived its launcher"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@warm_only
def test_a_shut_down_warm_kernel_leaves_no_process():
    km, kc, pid = _warm_kernel()
    launcher = km.provisioner.process.pid
    kc.stop_channels()
    km.shutdown_kernel()
    assert _gone(pid) and _gone(launcher)
