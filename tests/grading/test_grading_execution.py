"""nbgrader's Execute as the grader runs it (GraderExecute), on its own: skipped cells, capped output, and the
guard's verification, which fails every graded test cell when the kernel never reports (a kernel without the
guard, or one whose guard was silenced)."""

import nbformat
import pytest

from autograder.grading.execution import NOT_RUN, GraderExecute
from autograder.grading.guard_verdicts import UNCONFIRMED
from tests.factories import graded_cell_meta, solution_cell_meta

pytestmark = pytest.mark.notebook


def notebook() -> nbformat.NotebookNode:
    v4 = nbformat.v4
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [v4.new_code_cell("def double(x):\n    return 2 * x", metadata=solution_cell_meta("double")),
                v4.new_code_cell("print('x' * 300)"),
                v4.new_code_cell("assert double(2) == 4", metadata=graded_cell_meta("double-tests", 1))]
    return nb


def run(nb, tmp_path, **traits) -> nbformat.NotebookNode:
    executor = GraderExecute(kernel_name="python3", progress_file=str(tmp_path / "progress.json"), **traits)
    executor.preprocess(nb, {"metadata": {"path": str(tmp_path)}, "nbgrader": {"notebook": "tiny"}})
    return nb


def errors(cell) -> list[str]:
    return [o.ename for o in cell.outputs if o.output_type == "error"]


def test_a_skipped_cell_fails_without_running_and_the_rest_runs(tmp_path):
    nb = run(notebook(), tmp_path, skip={"tiny": {"0": "not run: it crashed the kernel before"}})
    assert errors(nb.cells[0]) == [NOT_RUN]
    assert errors(nb.cells[2]) == ["NameError"]  # double was never defined


def test_output_past_the_cell_allowance_is_cut_and_said_first(tmp_path):
    nb = run(notebook(), tmp_path, cell_output_chars=100)
    outputs = nb.cells[1].outputs
    assert "more characters of output were dropped" in outputs[0].text
    assert sum(len(o.get("text", "")) for o in outputs[1:]) <= 100


def test_a_cell_whose_output_a_loaded_grader_reads_slowly_still_passes(tmp_path, monkeypatch):
    """After a cell's reply, nbclient waits iopub_timeout for the rest of its output (4 s by default), and
    nbgrader raises when it runs out: a right answer that prints a lot, read by a grader that a loaded machine
    slows, failed with "Timeout waiting for IOPub output" (issue 63: a deadline shorter than a loaded machine
    needs). Here each message takes the grader 30 ms, 6 s for the cell's 200."""
    import time

    reads = GraderExecute.output

    def slowly(self, *args, **kwargs):
        time.sleep(0.03)
        return reads(self, *args, **kwargs)

    monkeypatch.setattr(GraderExecute, "output", slowly)
    nb = notebook()
    nb.cells[1].source = "for i in range(200):\n    print(i, flush=True)\nimport time; time.sleep(0.3)"
    nb = run(nb, tmp_path)
    assert not errors(nb.cells[1]) and not errors(nb.cells[2]), [c.outputs[-1:] for c in nb.cells]


def test_without_the_guard_s_records_a_test_cell_earns_nothing(tmp_path):
    """A plain IPython kernel writes nothing to the channel: the grader cannot confirm the test, so it fails.
    """
    nb = run(notebook(), tmp_path, guard_channel=str(tmp_path / "guard.fifo"))
    assert errors(nb.cells[2]) == [UNCONFIRMED]
    assert not errors(nb.cells[0]) and not errors(nb.cells[1])  # only graded test cells need the guard's word


def test_a_killed_kernel_is_seen_gone_in_steps_of_5_ms_not_a_tenth_of_a_second(tmp_path, monkeypatch):
    import asyncio

    from autograder.grading.execution import QuickStopKernelManager

    naps = []
    sleep = asyncio.sleep

    async def noted(seconds, *args, **kwargs):
        naps.append(seconds)
        return await sleep(seconds, *args, **kwargs)

    async def start_and_kill() -> bool:
        km = QuickStopKernelManager(kernel_name="python3")
        await km.start_kernel(cwd=str(tmp_path))
        monkeypatch.setattr(asyncio, "sleep", noted)
        await km.shutdown_kernel(now=True)
        monkeypatch.setattr(asyncio, "sleep", sleep)
        return await km.is_alive()

    assert asyncio.run(start_and_kill()) is False
    # jupyter_client's own manager waits in steps of 0.1 s. A kernel already gone at the first look, as on a
    # loaded machine, is not waited for at all and leaves no step (max() of none would fail the test for it):
    # that the steps are of 5 ms is the next test's, which chooses what each look finds.
    assert all(nap < 0.1 for nap in naps), naps


@pytest.mark.parametrize(("manager", "step"), [("quick", 0.005), ("jupyter_client", 0.1)])
def test_a_killed_kernel_is_looked_for_every_5_ms(monkeypatch, manager, step):
    import asyncio

    from jupyter_client.manager import AsyncKernelManager

    from autograder.grading.execution import QuickStopKernelManager

    naps, looks = [], iter([True, True, False])
    sleep = asyncio.sleep

    async def noted(seconds, *args, **kwargs):
        naps.append(seconds)
        return await sleep(0)

    async def alive(self) -> bool:
        return next(looks)

    km = (QuickStopKernelManager if manager == "quick" else AsyncKernelManager)(kernel_name="python3")
    monkeypatch.setattr(type(km), "_async_is_alive", alive)
    monkeypatch.setattr(asyncio, "sleep", noted)
    asyncio.run(km._async_wait())
    monkeypatch.setattr(asyncio, "sleep", sleep)
    assert naps == [step, step]
    assert (0.005 in naps) is (manager == "quick")

