"""The timing-lies core (one operation timed four ways) and its thin widget, inert under nbgrader."""

import threading
import time

import matplotlib
import pytest
import torch

from devicelab import timing_lies, timing_lies_widget
from devicelab.simgpu import T4_PCIE3, SimulatedGPU
from devicelab.timing import TimingResult
from devicelab.timing_lies import (
    BENCHMARK,
    EVENTS,
    METHODS,
    NAIVE,
    SYNCED,
    compare_matmul,
    compare_timings,
    gpu_target,
    matmul_op,
    plot_comparison,
    plot_comparisons,
)
from devicelab.timing_lies_widget import TimingLiesWidget, show_timing_lies, static_timing_lies
from devicelab.ui import INERT_MESSAGE

matplotlib.use("Agg")

LAUNCH = T4_PCIE3.launch_s
KERNEL = 0.010


@pytest.fixture
def gpu() -> SimulatedGPU:
    return SimulatedGPU(initialized=True)


def medians(rows) -> dict[str, float]:
    return {row.method: row.result.median for row in rows}


# ----- the core on the simulated GPU ------------------------------------------------------------


def test_on_the_simulated_gpu_only_the_naive_clock_lies(gpu):
    rows = compare_timings(lambda: gpu.launch(KERNEL), device=gpu, repeats=5)
    assert [row.method for row in rows] == list(METHODS)
    got = medians(rows)
    assert got[NAIVE] == pytest.approx(LAUNCH), "no sync: the clock sees only the 5 us launch"
    assert got[SYNCED] == pytest.approx(KERNEL + LAUNCH)
    assert got[EVENTS] == pytest.approx(KERNEL
                                        + LAUNCH), "on an idle queue the start marker precedes the launch"
    assert got[BENCHMARK] == pytest.approx(KERNEL + LAUNCH)
    assert "enqueue" in rows[0].note


def test_results_are_labelled_as_simulated(gpu):
    rows = compare_timings(lambda: gpu.launch(KERNEL), device=gpu, repeats=2)
    for row in rows:
        assert row.result.device == "simulated NVIDIA T4, PCIe Gen3 x16"
        assert isinstance(row.result, TimingResult)


def test_benchmark_timer_runs_on_the_virtual_clock_and_batches_tiny_calls(gpu):
    rows = compare_timings(lambda: gpu.launch(1e-6), device=gpu, repeats=3, min_run_time=0.01)
    bench = rows[3].result
    assert bench.calls_per_sample >= 10, "tiny work: Timer puts many calls in each block"
    assert bench.median == pytest.approx(LAUNCH, rel=0.2), "back to back, tiny kernels are launch-bound"
    assert "back-to-back" in rows[3].note


def test_the_simulated_comparison_is_deterministic():
    def run():
        gpu = SimulatedGPU(initialized=True)
        return [row.result.samples
                for row in compare_timings(lambda: gpu.launch(0.003), device=gpu, repeats=4)]

    assert run() == run()


def test_a_first_call_cost_shows_up_in_the_naive_samples():
    gpu = SimulatedGPU()  # the CUDA context does not exist yet
    rows = compare_timings(lambda: gpu.launch(KERNEL), device=gpu, repeats=5)
    naive = rows[0].result
    assert naive.max >= T4_PCIE3.context_init_s, "the naive run has no warm-up, so it pays the start-up"
    assert naive.median == pytest.approx(LAUNCH)
    assert "one-off start-up cost" in rows[0].note
    assert rows[1].result.max == pytest.approx(KERNEL + LAUNCH), "the synchronised run warmed up first"


def test_progress_names_each_method_before_it_runs(gpu):
    seen = []
    compare_timings(lambda: gpu.launch(KERNEL), device=gpu, repeats=2, progress=seen.append)
    assert seen == list(METHODS)


# ----- the core on the CPU ----------------------------------------------------------------------


def test_on_the_cpu_all_four_agree():
    rows = compare_timings(lambda: time.sleep(0.01), device="cpu", repeats=3, min_run_time=0.03)
    got = medians(rows)
    # each method sees at least the 10 ms sleep (how much more: benchmarks)
    for method, seconds in got.items():
        assert seconds >= 0.0095, f"{method}: {seconds}"
    assert all(row.result.device == "CPU" for row in rows)
    notes = " ".join(row.note for row in rows)
    assert "no events to record" in notes and "before the call returns" in notes


def test_on_the_cpu_benchmark_timer_uses_pytorchs_thread_count(monkeypatch):
    seen = {}

    def fake_benchmark(fn, *, device, min_run_time, num_threads):
        seen["num_threads"] = num_threads
        return TimingResult(samples=(0.001,), method="torch.utils.benchmark", device=str(device))

    monkeypatch.setattr(timing_lies, "time_with_benchmark", fake_benchmark)
    rows = compare_timings(lambda: None, device="cpu", repeats=1)
    assert seen["num_threads"] == torch.get_num_threads()
    assert f"num_threads={torch.get_num_threads()}" in rows[3].note


# ----- the core on a CUDA GPU (faked: no GPU here) -------------------------------------------------


def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        compare_timings(lambda: None, device="cuda")


def test_cuda_path_syncs_and_uses_events_and_the_benchmark_timer(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")

    def fake_events(fn, *, warmup, repeats, device):
        calls.append(("events", warmup, repeats, device))
        return TimingResult(samples=(0.002,) * repeats, method="CUDA events", device="cuda")

    def fake_benchmark(fn, *, device, min_run_time):
        calls.append(("benchmark", str(device)))
        return TimingResult(samples=(0.002,), method="torch.utils.benchmark", device=str(device))

    monkeypatch.setattr(timing_lies, "time_with_events", fake_events)
    monkeypatch.setattr(timing_lies, "time_with_benchmark", fake_benchmark)
    rows = compare_timings(lambda: calls.append("op"), device="cuda", repeats=2, warmup=1)
    assert [row.method for row in rows] == list(METHODS)
    assert all(row.result.device == "Tesla T4 (cuda)" for row in rows)
    assert calls[:3] == ["op", "op", "synchronize"], "naive: two calls, no sync, then drain the queue"
    assert ("events", 1, 2, None) in calls and ("benchmark", "cuda") in calls


# ----- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error"), [({"repeats": 0}, ValueError), ({"warmup": -1}, ValueError),
                                               ({"min_run_time": 0}, ValueError),
                                               ({"device": "meta"}, ValueError),
                                               ({"repeats": 2.5}, TypeError)])
def test_rejects_bad_settings(kwargs, error):
    with pytest.raises(error):
        compare_timings(lambda: None, **kwargs)


def test_rejects_a_non_callable():
    with pytest.raises(TypeError, match="callable"):
        compare_timings(torch.ones(2) @ torch.ones(2), device="cpu")


def test_an_operation_that_raises_propagates_from_the_core(gpu):
    def broken():
        raise RuntimeError("CUDA out of memory (pretend)")

    with pytest.raises(RuntimeError, match="out of memory"):
        compare_timings(broken, device=gpu)


# ----- work, targets and plots ------------------------------------------------------------------


def test_matmul_op_on_the_simulator_queues_2n3_flops(gpu):
    matmul_op(1024, gpu)()
    [kernel] = [r for r in gpu.timeline if r.kind == "kernel"]
    assert kernel.duration == pytest.approx(2 * 1024**3 / T4_PCIE3.flops_per_s)


def test_matmul_op_on_the_cpu_multiplies():
    assert matmul_op(8, "cpu")().shape == (8, 8)
    with pytest.raises(ValueError, match="positive int"):
        matmul_op(0, "cpu")


def test_gpu_target_is_a_simulated_t4_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    target = gpu_target()
    assert isinstance(target, SimulatedGPU) and target.profile is T4_PCIE3
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpu_target() == torch.device("cuda")


def test_compare_matmul_covers_the_gpu_and_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    steps = []
    comparisons = compare_matmul(32, repeats=2, min_run_time=0.01, progress=steps.append)
    assert [rows[0].result.device for rows in comparisons] == ["simulated NVIDIA T4, PCIe Gen3 x16", "CPU"]
    assert len(steps) == 8 and steps[0].startswith("simulated") and steps[-1] == f"CPU: {BENCHMARK}"


def test_plot_comparison_draws_one_bar_per_method(gpu):
    import matplotlib.pyplot as plt

    rows = compare_timings(lambda: gpu.launch(KERNEL), device=gpu, repeats=3)
    ax = plot_comparison(rows)
    assert len(ax.patches) == 4
    assert "simulated" in ax.get_title() and "T4" in ax.get_title()
    assert ax.get_yscale() == "log", "5 us next to 10 ms needs a log scale"
    assert ax.get_xticklabels()[0].get_text() == "naive\nclock"
    plt.close(ax.figure)


def test_plot_comparisons_puts_targets_side_by_side(gpu):
    import matplotlib.pyplot as plt

    rows = compare_timings(lambda: gpu.launch(KERNEL), device=gpu, repeats=2)
    fig = plot_comparisons([rows, rows])
    assert len(fig.axes) == 2
    plt.close(fig)


# ----- the widget -------------------------------------------------------------------------------


def _sim_only() -> list:
    return [SimulatedGPU(initialized=True)]


def test_inert_without_a_kernel_runs_once_and_shows_a_static_chart(monkeypatch, capsys):
    monkeypatch.setattr(timing_lies_widget, "TimingLiesWidget", None)  # building the UI would fail loudly
    shown = []
    monkeypatch.setattr(timing_lies_widget, "_display", shown.append)
    show_timing_lies(inert_size=32, inert_repeats=2, targets=_sim_only())
    out = capsys.readouterr().out
    assert INERT_MESSAGE in out
    assert "simulated NVIDIA T4" in out and "naive clock" in out
    assert len(shown) == 1 and isinstance(shown[0], matplotlib.figure.Figure)


class _FakeShell:
    kernel = object()


def test_live_in_a_kernel_but_inert_under_nbgrader(monkeypatch, capsys):
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: _FakeShell())
    shown = []
    monkeypatch.setattr(timing_lies_widget, "_display", shown.append)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    show_timing_lies(size=128, repeats=2, targets=_sim_only())
    assert type(shown[0]).__name__ == "VBox", "in a kernel the widget is displayed, then run once"
    assert INERT_MESSAGE not in capsys.readouterr().out

    shown.clear()
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    show_timing_lies(inert_size=32, inert_repeats=2, targets=_sim_only())
    assert INERT_MESSAGE in capsys.readouterr().out
    assert [type(obj).__name__ for obj in shown] == ["Figure"]


def test_widget_builds_without_a_kernel_and_runs(monkeypatch):
    monkeypatch.setattr(timing_lies_widget, "_display", lambda obj: None)
    widget = TimingLiesWidget(size=256, repeats=3, targets=_sim_only())
    assert widget.run() is True
    assert widget.progress.value == widget.progress.max == 4
    assert widget.progress.bar_style == "success"
    assert not widget.button.disabled
    assert [row.method for row in widget.results[0]] == list(METHODS)
    assert widget.results[0][1].result.median == pytest.approx(2 * 256**3 / T4_PCIE3.flops_per_s + LAUNCH)


def test_widget_survives_an_operation_that_raises(monkeypatch):
    monkeypatch.setattr(timing_lies_widget, "_display", lambda obj: None)

    def broken_factory(n, target):
        def op():
            raise RuntimeError("CUDA out of memory (pretend)")

        return op

    widget = TimingLiesWidget(size=128, targets=_sim_only(), op_factory=broken_factory)
    assert widget.run() is False
    assert "RuntimeError" in widget.status.value and "out of memory" in widget.status.value
    assert widget.progress.bar_style == "danger"
    assert not widget.button.disabled, "still usable after the error"
    assert isinstance(widget.error, RuntimeError)
    widget.op_factory = matmul_op
    assert widget.run() is True and widget.error is None


def test_widget_uses_only_widgets_that_ipywidgets_7_and_8_share():
    widget = TimingLiesWidget(targets=_sim_only())
    shared = {"VBox", "HBox", "Dropdown", "IntSlider", "Button", "IntProgress", "HTML", "Output"}

    def walk(w):
        yield w
        for child in getattr(w, "children", ()):
            yield from walk(child)

    assert {type(w).__name__ for w in walk(widget.box)} <= shared


def test_widget_runs_on_the_calling_thread(monkeypatch):
    monkeypatch.setattr(timing_lies_widget, "_display", lambda obj: None)
    before = set(threading.enumerate())
    widget = TimingLiesWidget(size=128, targets=_sim_only())
    widget._on_click(widget.button)
    assert widget.results is not None, "the click handler finished the work before returning"
    assert set(threading.enumerate()) <= before, "no background threads (Colab does not render their updates)"


def test_widget_rejects_a_size_it_does_not_offer():
    with pytest.raises(ValueError, match="offered sizes"):
        TimingLiesWidget(size=300)


def test_static_comparison_returns_results_and_a_figure():
    import matplotlib.pyplot as plt

    results, figure = static_timing_lies(size=32, repeats=2, targets=_sim_only())
    assert len(results) == 1 and len(figure.axes) == 1
    plt.close(figure)
