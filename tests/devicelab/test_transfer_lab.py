"""The transfer lab: its choices, the simulated T4, the step-by-step sweep and Stop, the plot, and the widget.
"""

import asyncio
import json
import os
import time

import pytest

from devicelab import copybench as cb
from devicelab import transfer_lab as tl
from devicelab.copybench import CopyResult
from devicelab.transfer_lab import (
    MACHINE,
    SIMULATED,
    LabConfig,
    LabState,
    SweepStepper,
    lab_choices,
    simulated_sweep,
)
from devicelab.ui import INERT_MESSAGE
from devicelab.units import KiB, MiB

ALLOWED_WIDGETS = {"Output", "Button", "Dropdown", "ToggleButtons", "Checkbox", "IntProgress", "HTML", "VBox",
                   "HBox"}


def result(nbytes: int, seconds: float = 1e-3) -> CopyResult:
    return CopyResult("h2h", "pageable", False, nbytes, seconds, seconds, repeats=1)


# ----- what may be chosen ---------------------------------------------------------------------------------


def test_without_a_gpu_this_machine_offers_host_copies_and_says_why_pinned_is_off():
    choices = lab_choices(MACHINE, cuda=False)
    assert choices.directions == ("h2h",)
    assert not choices.host_enabled and not choices.non_blocking_enabled
    assert "pin_memory() raises" in choices.reason and "simulated T4" in choices.reason


def test_the_simulated_t4_offers_gpu_copies_with_pinned_memory_even_without_a_gpu():
    choices = lab_choices(SIMULATED, "h2d", cuda=False)
    assert choices.directions == ("h2d", "d2h", "d2d")
    assert choices.host_enabled and choices.non_blocking_enabled and choices.reason == ""
    d2d = lab_choices(SIMULATED, "d2d", cuda=False)
    assert not d2d.host_enabled and "no host memory" in d2d.reason


def test_with_a_gpu_this_machine_offers_every_direction():
    assert lab_choices(MACHINE, "h2d", cuda=True).directions == cb.DIRECTIONS
    h2h = lab_choices(MACHINE, "h2h", cuda=True)
    assert h2h.host_enabled and not h2h.non_blocking_enabled and "always synchronous" in h2h.reason
    with pytest.raises(ValueError, match="unknown backend"):
        lab_choices("elsewhere")


def test_normalise_switches_off_what_the_choices_do_not_allow():
    config = tl.normalise(LabConfig(MACHINE, "h2d", "pinned", True), cuda=False)
    assert (config.direction, config.host, config.non_blocking) == ("h2h", "pageable", False)
    kept = tl.normalise(LabConfig(SIMULATED, "d2h", "pinned", True), cuda=False)
    assert (kept.direction, kept.host, kept.non_blocking) == ("d2h", "pinned", True)


def test_backend_menu_labels_the_simulated_gpu():
    labels = dict(tl.backend_options(cuda=False))
    assert any("simulated T4" in label for label in labels) and "CPU only" in next(iter(labels))
    assert LabConfig(SIMULATED, "h2d", "pinned", True).label() == "h2d pinned, non-blocking (simulated T4)"
    assert LabConfig(MACHINE).label() == "h2h pageable (this machine)"


# ----- the simulated T4 -----------------------------------------------------------------------------------


def test_simulated_copies_follow_the_t4_figures():
    [pinned] = simulated_sweep([256 * MiB], "h2d", "pinned")
    [pageable] = simulated_sweep([256 * MiB], "h2d", "pageable")
    assert pinned.gbps == pytest.approx(12.4, rel=0.01), "FACTS.md: ~12.4 GB/s pinned h2d on a T4"
    assert pageable.gbps < pinned.gbps / 2
    assert pinned.link_gbps == pytest.approx(15.75) and 0.7 < pinned.share_of_link < 0.85
    assert pinned.method == tl.METHOD_SIMULATED and pinned.device == "simulated T4"
    [half] = simulated_sweep([34 * KiB], "h2d", "pinned")
    assert half.gbps == pytest.approx(12.4 / 2, rel=0.1), "FACTS.md: half of peak around 31-36 KiB"
    [d2d] = simulated_sweep([MiB], "d2d", "pinned")
    assert d2d.host == "" and d2d.link_gbps is None


def test_simulated_sweeps_are_deterministic_and_lazy():
    first = [r.median_s for r in simulated_sweep([4 * KiB, MiB], "d2h", "pinned", True)]
    second = [r.median_s for r in simulated_sweep([4 * KiB, MiB], "d2h", "pinned", True)]
    assert first == second
    with pytest.raises(ValueError, match="h2d, d2h or d2d"):
        simulated_sweep([4 * KiB], "h2h")
    with pytest.raises(ValueError, match="at least 1 byte"):
        simulated_sweep([0])


def test_start_sweep_checks_the_request_up_front(monkeypatch):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    with pytest.raises(cb.NoGPUError):
        tl.start_sweep(LabConfig(MACHINE, "h2d"))
    with pytest.raises(ValueError, match="above the largest"):
        tl.start_sweep(LabConfig(MACHINE, "h2h", smallest=MiB, largest=KiB))
    sweep = tl.start_sweep(LabConfig(MACHINE, "h2h", largest=8 * KiB, repeats=1))
    assert [r.bytes for r in sweep] == [4 * KiB, 8 * KiB]


# ----- one step at a time ---------------------------------------------------------------------------------


class FakeLoop:
    """A scheduler that holds callbacks until the test runs them, like an event loop between messages."""

    def __init__(self):
        self.queue = []

    def schedule(self, callback):
        self.queue.append(callback)

    def run_one(self):
        self.queue.pop(0)()

    def run_all(self):
        while self.queue:
            self.run_one()


class Sweep:
    """A generator of results that records whether it was closed (as a real sweep frees its buffers)."""

    def __init__(self, count=5, fail_at=None):
        self.count, self.fail_at, self.closed, self.made = count, fail_at, False, 0

    def __iter__(self):
        try:
            for i in range(self.count):
                if i == self.fail_at:
                    raise cb.CopyMemoryError("does not fit")
                self.made += 1
                yield result(4 * KiB * 2**i)
        finally:
            self.closed = True


def stepper_for(sweep, loop):
    got, finished = [], []
    stepper = SweepStepper(iter(sweep), loop.schedule if loop else None, got.append,
                           lambda state, error: finished.append((state, error)))
    return stepper, got, finished


def test_each_step_measures_one_size_and_schedules_the_next():
    loop, sweep = FakeLoop(), Sweep(3)
    stepper, got, finished = stepper_for(sweep, loop)
    stepper.start()
    assert got == [] and len(loop.queue) == 1, "start() only schedules: nothing waits, nothing runs yet"
    loop.run_one()
    assert len(got) == 1 and sweep.made == 1 and len(loop.queue) == 1
    loop.run_all()
    assert [r.bytes for r in got] == [4 * KiB, 8 * KiB, 16 * KiB]
    assert finished == [("done", None)] and stepper.state == "done" and sweep.closed


def test_stop_between_steps_ends_the_sweep_and_frees_it():
    loop, sweep = FakeLoop(), Sweep(10)
    stepper, got, finished = stepper_for(sweep, loop)
    stepper.start()
    loop.run_one()
    loop.run_one()
    stepper.stop()  # the kernel handled a click on Stop between two steps
    loop.run_all()
    assert len(got) == 2 and sweep.made == 2
    assert finished == [("stopped", None)] and sweep.closed and not stepper.running
    stepper.step()  # a stray late callback does nothing
    assert len(got) == 2 and len(finished) == 1
    with pytest.raises(RuntimeError, match="already stopped"):
        stepper.start()


def test_an_error_mid_sweep_ends_it_cleanly():
    loop, sweep = FakeLoop(), Sweep(5, fail_at=2)
    stepper, got, finished = stepper_for(sweep, loop)
    stepper.start()
    loop.run_all()
    assert len(got) == 2 and stepper.state == "error" and sweep.closed
    [(state, error)] = finished
    assert state == "error" and isinstance(error, cb.CopyMemoryError)


def test_without_a_scheduler_the_sweep_runs_at_once():
    sweep = Sweep(4)
    stepper, got, finished = stepper_for(sweep, None)
    stepper.start()
    assert len(got) == 4 and finished == [("done", None)]


def test_on_a_real_event_loop_stop_lands_between_steps_without_threads():
    async def scenario():
        def slow_sweep():
            for i in range(50):
                time.sleep(0.02)  # a measurement that holds the loop, as a real copy does
                yield result(4 * KiB * (i + 1))

        got, finished = [], []
        stepper = SweepStepper(slow_sweep(), tl.event_loop_scheduler(), got.append,
                               lambda state, error: finished.append(state))
        stepper.start()
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, stepper.stop)  # stands in for the Stop click's message handler
        while not finished:
            await asyncio.sleep(0.01)
        return got, finished

    got, finished = asyncio.run(scenario())
    assert finished == ["stopped"]
    assert 1 <= len(got) <= 8, (f"Stop should land within a step or two of the click, not after {len(got)} "
                                "steps")


def test_no_event_loop_means_no_scheduler():
    from tornado.ioloop import IOLoop

    if IOLoop.current(instance=False) is None:
        assert tl.event_loop_scheduler() is None


# ----- runs, plot, table ----------------------------------------------------------------------------------


def test_the_plot_keeps_earlier_runs_and_marks_the_link():
    import matplotlib

    matplotlib.use("Agg")
    state = tl.run_quick([LabConfig(SIMULATED, "h2d", "pageable", largest=MiB),
                          LabConfig(SIMULATED, "h2d", "pinned", True, largest=MiB),
                          LabConfig(MACHINE, "h2h", largest=64 * KiB, repeats=1)])
    assert [run.status for run in state.runs] == ["done"] * 3
    assert [len(run.results) for run in state.runs] == [9, 9, 5]
    from matplotlib.figure import Figure

    ax = tl.plot_bandwidth(state.runs, Figure().subplots())
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[:2] == ["#1 h2d pageable (simulated T4)", "PCIe Gen3 x16 limit, 15.75 GB/s (simulated T4)"]
    assert "#3 h2h pageable (this machine)" in labels and len(labels) == 4, "one link line for both T4 runs"
    assert len(ax.collections) == 2, "a band for each run with repeats (the third has one)"
    assert ax.get_xscale() == "log"
    png = tl.render_png(state.runs)
    assert png.startswith(b"\x89PNG")
    assert tl.png_html(png).startswith('<img alt="bandwidth plot" src="data:image/png;base64,')


def test_the_results_table_lists_every_size():
    state = LabState()
    run = state.new_run(LabConfig(SIMULATED, "h2d", "pinned"))
    run.results += list(simulated_sweep([4 * KiB, MiB], "h2d", "pinned"))
    html = tl.results_table_html(run)
    assert html.count("<tr>") == 3 and "4 KiB" in html and "1 MiB" in html and "15.75" in html and "%" in html
    assert tl.results_table_html(None) == ""
    state.clear()
    assert state.runs == []


def test_quick_config_fits_the_machine():
    assert tl.quick_config(cuda=False) == LabConfig(MACHINE, "h2h", "pageable", False,
                                                    largest=tl.QUICK_LARGEST)
    gpu = tl.quick_config(cuda=True)
    assert (gpu.direction, gpu.host, gpu.non_blocking) == ("h2d", "pinned", True)


# ----- the widget -----------------------------------------------------------------------------------------


def widget_types(widget) -> set[str]:
    found = {type(widget).__name__}
    for child in getattr(widget, "children", ()):
        found |= widget_types(child)
    return found


@pytest.fixture
def lab(monkeypatch):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    from devicelab.transfer_lab_widget import TransferLabWidget

    loop = FakeLoop()
    widget = TransferLabWidget(schedule=loop.schedule, cuda=False)
    widget.loop = loop
    return widget


def test_the_widget_uses_only_widgets_that_ipywidgets_7_and_8_share(lab):
    assert widget_types(lab.widget) <= ALLOWED_WIDGETS


def test_without_a_gpu_the_widget_disables_pinned_and_says_why(lab):
    assert tuple(lab.direction.options) == ("h2h",)
    assert lab.host.disabled and lab.host.value == "pageable" and lab.non_blocking.disabled
    assert "pin_memory() raises" in lab.reason.value
    assert lab.plot.value.startswith("<img"), "an empty plot is drawn up front"
    lab.backend.value = SIMULATED
    assert tuple(lab.direction.options) == ("h2d", "d2h", "d2d")
    assert not lab.host.disabled and not lab.non_blocking.disabled and lab.reason.value == ""
    lab.direction.value = "d2d"
    assert lab.host.disabled and "no host memory" in lab.reason.value


def test_run_grows_the_plot_step_by_step_and_stop_ends_it(lab):
    lab.backend.value = SIMULATED
    lab.host.value = "pinned"
    lab.largest.value = MiB
    lab.run_button.click()
    assert lab.stop_button.disabled is False and lab.run_button.disabled is True
    assert lab.progress.max == 9 and lab.progress.value == 0
    lab.loop.run_one()
    assert lab.progress.value == 1 and ">4 KiB</td>" in lab.table.value
    assert lab._first_point_s is not None  # how soon: benchmarks/copy_targets.py
    lab.loop.run_one()
    lab.stop_button.click()
    assert "Stopping" in lab.status.value
    lab.loop.run_all()
    assert lab.progress.value == 2 and "Stopped after 2 of 9" in lab.status.value
    assert lab.run_button.disabled is False and lab.stop_button.disabled is True
    assert lab.state.runs[-1].status == "stopped after 2 of 9 sizes"


def test_a_second_run_is_drawn_next_to_the_first(lab):
    lab.backend.value = SIMULATED
    lab.largest.value = 64 * KiB
    lab.run_button.click()
    lab.loop.run_all()
    lab.host.value = "pinned"
    lab.run_button.click()
    lab.loop.run_all()
    lab.host.value = "pageable"  # the first run's copy again: a line of its own, told apart by its number
    lab.run_button.click()
    lab.loop.run_all()
    assert [run.label for run in lab.state.runs] == ["#1 h2d pageable (simulated T4)",
                                                     "#2 h2d pinned (simulated T4)",
                                                     "#3 h2d pageable (simulated T4)"]
    assert "Done: 5 sizes" in lab.status.value
    lab.clear_button.click()
    assert lab.state.runs == [] and lab.table.value == ""


def test_the_widget_reports_a_request_it_cannot_run(lab):
    lab.smallest.value = MiB
    lab.largest.value = 4 * KiB
    lab.run_button.click()
    assert "Cannot run" in lab.status.value and "above the largest" in lab.status.value
    assert lab.state.runs == [] and lab.stepper is None


def test_a_real_machine_sweep_runs_through_the_widget(lab):
    lab.largest.value = 16 * KiB
    lab.repeats.value = 1
    lab.run_button.click()
    lab.loop.run_all()
    assert lab.progress.value == 3 and lab.state.runs[0].results[0].method == cb.METHOD_CLOCK


def test_under_nbgrader_the_lab_is_a_static_quick_sweep(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    from devicelab.transfer_lab_widget import StaticTransferLab, transfer_lab

    lab = transfer_lab()
    assert isinstance(lab, StaticTransferLab)
    measured = [r for run in lab.state.runs for r in run.results]
    assert max(r.bytes for r in measured) <= tl.QUICK_LARGEST and max(r.repeats
                                                                      for r in measured) <= 3, "quick"
    assert all(run.status == "done" for run in lab.state.runs)
    assert lab.state.runs[0].config.label() == "h2h pageable (this machine)"
    assert INERT_MESSAGE in repr(lab) and "h2h pageable (this machine): done" in repr(lab)


def test_outside_a_kernel_the_lab_is_static_too(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    from devicelab.transfer_lab_widget import StaticTransferLab, transfer_lab

    assert isinstance(transfer_lab(), StaticTransferLab)


# ----- in a real kernel -----------------------------------------------------------------------------------

# A sweep that never ends on its own: only Stop ends it, however late a loaded machine delivers the click.
KERNEL_SETUP = """
import itertools, time
from devicelab import transfer_lab_widget as lw
from devicelab.copybench import CopyResult

def slow_sweep(config):
    def results():
        for i in itertools.count():
            time.sleep(0.05)
            yield CopyResult("h2h", "pageable", False, 4096 * (i + 1), 1e-6, 1e-6, repeats=1)
    return results()

lw.start_sweep = slow_sweep
lab = lw.TransferLabWidget(cuda=False)
print(__import__("json").dumps({"run": lab.run_button.model_id, "stop": lab.stop_button.model_id,
                                "progress": lab.progress.model_id, "status": lab.status.model_id}))
"""


@pytest.mark.notebook
def test_stop_is_received_while_a_sweep_runs_in_a_real_kernel():
    """Click Run and Stop through comm messages, as JupyterLab and Colab send them; no thread is involved."""
    from jupyter_client.manager import KernelManager

    env = {k: v for k, v in os.environ.items() if k != "NBGRADER_EXECUTION"}
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=env, cwd=str(tl.__file__).rsplit("/devicelab/", 1)[0])
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)

        def execute(code):
            msg_id = client.execute(code)
            text = []
            while True:
                msg = client.get_iopub_msg(timeout=60)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    text.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    raise AssertionError("\n".join(msg["content"]["traceback"]))
                elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    return "".join(text)

        ids = json.loads(execute(KERNEL_SETUP).strip().splitlines()[-1])

        def click(model_id):
            client.shell_channel.send(client.session.msg(
                "comm_msg",
                {"comm_id": model_id, "data": {"method": "custom", "content": {"event": "click"}}}))

        def widget_values(model_id, seconds=120):
            """Yield each new value the kernel sends for a widget, for at most `seconds` (a ceiling)."""
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                msg = client.get_iopub_msg(timeout=seconds)
                content = msg["content"]
                if msg["msg_type"] == "comm_msg" and content.get("comm_id") == model_id:
                    value = content["data"].get("state", {}).get("value")
                    if value is not None:
                        yield value

        click(ids["run"])
        progress = next((value for value in widget_values(ids["progress"]) if value >= 3), 0)
        assert progress >= 3, "the sweep did not advance on the kernel's event loop"
        click(ids["stop"])
        # the sweep ends only by Stop: wait until the kernel says so (it takes effect before the next step)
        said = next((value for value in widget_values(ids["status"]) if "Stopped after" in value), "")
        assert "Stopped after" in said, "Stop did not end the sweep"
        state = json.loads(execute(
            'print(__import__("json").dumps([lab.stepper.state, len(lab.current.results), lab.status.value]))'
        ).strip())
        assert state[0] == "stopped" and state[1] >= progress and "Stopped after" in state[2], state
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_python_sees_no_thread_started_by_the_lab(lab):
    import threading

    before = threading.active_count()
    lab.backend.value = SIMULATED
    lab.largest.value = 64 * KiB
    lab.run_button.click()
    lab.loop.run_all()
    assert threading.active_count() == before


def test_step_gap_grows_with_a_slow_step_within_bounds():
    assert tl.step_gap(0.0) == tl.STEP_GAP_S
    assert tl.step_gap(0.1) == 0.05
    assert tl.step_gap(10.0) == tl.STEP_GAP_MAX_S


def test_the_results_table_lays_out_its_columns_apart():
    state = LabState()
    run = state.new_run(LabConfig(SIMULATED, "h2d", "pinned"))
    run.results += list(simulated_sweep([128 * KiB], "h2d", "pinned"))
    html = tl.results_table_html(run)
    cells = html.split("<tr>")[2].split("</td>")
    assert len(cells) == 7 and all("padding" in c for c in cells[:6]), "each value in a padded column"


def test_without_a_gpu_the_lab_says_what_it_shows_and_one_click_simulates_a_gpu(lab):
    """Issue 60: on a CPU machine the lab opened on host-to-host copies with nothing saying so first."""
    assert "No CUDA GPU on this machine" in lab.banner.value
    assert lab.switch_button.layout.display != "none" and lab.switch_button.description == "Simulate a T4 GPU"
    lab.switch_button.click()
    assert lab.backend.value == SIMULATED and lab.direction.value == "h2d" and not lab.host.disabled
    assert "Nothing here is measured" in lab.banner.value
    assert lab.switch_button.description == "Back to this machine"
    lab.switch_button.click()
    assert lab.backend.value == MACHINE and "No CUDA GPU" in lab.banner.value


def test_with_a_gpu_the_lab_measures_it_and_offers_no_switch(monkeypatch):
    from devicelab import transfer_lab_widget
    from devicelab.transfer_lab_widget import TransferLabWidget

    monkeypatch.setattr(cb, "cuda_usable", lambda: True)
    monkeypatch.setattr(transfer_lab_widget, "backend_options",  # (its menu names the GPU)
                        lambda cuda=None: [("this machine (a GPU)", MACHINE), ("simulated T4", SIMULATED)])

    widget = TransferLabWidget(schedule=FakeLoop().schedule, cuda=True)
    assert widget.banner.value == "" and widget.switch_button.layout.display == "none"
