"""The graded trace measures: pure functions of a chrome trace that read a real H100 trace and a simulated one
alike."""

import json

import pytest

from autograder import COURSE_ROOT
from devicelab import trace_measures
from devicelab.exercises.ps06 import kernel, memcpy, op, runtime, trace
from devicelab.trace_measures import Targets, TraceMeasures, measure, shortfalls

TRACES = COURSE_ROOT / "notebooks" / "traces"
REAL = json.loads((TRACES / "recorded-gpu-step.json").read_text())  # an H100's, torch.profiler
SIMULATED = json.loads((TRACES / "simulated-training-step.json").read_text())


@pytest.mark.parametrize("recorded", [REAL, SIMULATED], ids=["h100", "simulated"])
def test_the_same_loop_measures_the_same_on_a_gpu_and_in_the_simulator(recorded):
    """Three steps, each with a pageable blocking batch copy and an .item(): both traces say so."""
    got = measure(recorded, steps=3)
    assert got.pageable_uploads == 3 and got.pinned_uploads == 0
    assert got.copy_overlap == 0.0
    assert 2 <= got.waits_per_step <= 2.5, "a blocking copy and an .item() each step, one more at the end"


def test_busy_share_counts_the_union_of_kernels_and_copies_from_the_first_upload():
    events = trace(kernel(100, 100), memcpy("h2d", 50, 100), kernel(120, 30), op("aten::mm", 0, 400))
    assert trace_measures.gpu_busy_share(events) == pytest.approx(150 / 350)
    alone = trace(kernel(0, 100), op("aten::mm", 0, 400))
    assert trace_measures.gpu_busy_share(alone) == pytest.approx(0.25), "no upload: from the GPU's first work"
    assert trace_measures.gpu_busy_share(trace()) == 0.0


def test_what_comes_before_the_first_batch_reaches_the_gpu_is_not_idle_time():
    """Starting the loader's workers and making the first batch leave the GPU nothing to do yet: a kernel
    before that (a tensor of zeros for the losses) does not make that wait count."""
    events = trace(kernel(0, 10), op("DataLoader: start the workers", 10, 990), memcpy("h2d", 1000, 100),
                   kernel(1100, 900))
    assert trace_measures.gpu_busy_share(events) == pytest.approx(1.0)
    summary = trace_measures.summarize(events)
    assert summary.span_s == pytest.approx(2000e-6) and summary.gpu_span_s == pytest.approx(1000e-6)


def test_copy_overlap_is_the_share_of_upload_time_under_a_kernel():
    events = trace(memcpy("h2d", 0, 100), kernel(60, 100), memcpy("d2h", 0, 100))
    assert trace_measures.copy_overlap(events) == pytest.approx(0.4), "downloads do not count"


def test_uploads_split_by_host_memory_and_ignore_host_side_calls():
    events = trace(memcpy("h2d", 0, 10), memcpy("h2d", 20, 10, name="Memcpy HtoD (Pageable -> Device)"),
                   memcpy("d2h", 40, 10), runtime("cudaMemcpyAsync", 0, 5))
    assert trace_measures.uploads(events) == (1, 1)


def test_waits_count_sync_calls_and_copies_that_held_the_host():
    events = trace(op("aten::item", 0, 100), runtime("cudaStreamSynchronize", 10, 80),
                   op("aten::copy_", 200, 900), runtime("cudaMemcpyAsync", 210, 800),
                   memcpy("h2d", 220, 780, name="Memcpy HtoD (Pageable -> Device)"))
    assert trace_measures.host_waits(events) == 2
    assert measure(events, steps=2).waits_per_step == 1.0
    with pytest.raises(ValueError, match="steps"):
        measure(events, steps=0)


def test_shortfalls_name_each_measure_off_target_and_none_on_target():
    clean = TraceMeasures(steps=50, waits_per_step=0.02, pageable_uploads=0, pinned_uploads=100,
                          gpu_busy_share=0.9, copy_overlap=0.97)
    assert shortfalls(clean) == []
    bad = TraceMeasures(steps=50, waits_per_step=3.0, pageable_uploads=100, pinned_uploads=0,
                        gpu_busy_share=0.3, copy_overlap=0.0)
    found = shortfalls(bad)
    assert [f.split(":")[0] for f in found] == ["host waits per step", "uploads from pageable memory",
                                                "the GPU is busy 30% of the trace (target", "copy overlap"]
    assert shortfalls(bad, Targets(max_waits_per_step=5, max_pageable_uploads=100, min_gpu_busy_share=0.2,
                                   min_copy_overlap=0.0)) == []


def test_a_trace_is_drawn_a_row_per_host_thread_and_gpu_stream_without_a_browser():
    """The offline view of a trace (Perfetto needs a browser and the network): host rows first, each named as
    the trace names its threads, the GPU's streams after; `until_us` keeps only the first stretch."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    made = trace(op("aten::item", 100, 40), runtime("cudaStreamSynchronize", 110, 25),
                 memcpy("h2d", 120, 30, 4096), kernel(160, 10), kernel(900, 10))
    made["traceEvents"].append({"ph": "M", "name": "thread_name", "pid": 0, "tid": 7,
                                "args": {"name": "stream 7"}})
    rows = trace_measures.trace_rows(made)
    assert [r.label for r in rows][-1] == "stream 7" and len(rows) == 2
    assert rows[0].bars[0] == (0, 40, "cpu_op") and ("kernel" in {c for _, _, c in rows[1].bars})
    assert len(trace_measures.trace_rows(made, until_us=500)[1].bars) == 2, "the late kernel left out"
    ax = trace_measures.plot_trace(made, Figure().subplots())
    assert [t.get_text() for t in ax.get_yticklabels()][-1] == "stream 7"
    assert len(ax.collections) == 4  # host: operators, runtime calls; GPU: copies, kernels
    for recorded in (REAL, SIMULATED):  # both course traces draw, host rows first
        rows = trace_measures.trace_rows(recorded)
        assert rows and any(c == "kernel" for _, _, c in rows[-1].bars)
    assert trace_measures.trace_rows(trace()) == []
