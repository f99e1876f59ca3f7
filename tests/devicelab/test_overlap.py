"""The overlap timeline: only pinned memory, a non-blocking copy and a side stream let copies hide behind
compute.
"""

import pytest

from devicelab import overlap
from devicelab.overlap import MODES, OverlapRun, compare, simulate_steps
from devicelab.simgpu import T4_PCIE3
from devicelab.units import MiB


@pytest.fixture(scope="module")
def runs() -> dict[str, OverlapRun]:
    return {run.mode: run for run in compare(steps=4, on_gpu=False)}


def spans(run: OverlapRun, engine: str):
    return sorted((r for r in run.timeline if r.engine == engine), key=lambda r: r.start)


def test_only_the_side_stream_overlaps_copy_and_compute(runs):
    assert runs["pageable-blocking"].overlap_s() == 0
    assert runs["pinned-same-stream"].overlap_s() == 0, "one stream runs its work in order"
    side = runs["pinned-side-stream"]
    assert side.overlap_s() > 0.5 * side.busy_s("copy"), "most of the copying hides behind compute"


def test_the_side_stream_finishes_first_and_pageable_last(runs):
    totals = [runs[mode].total_s
              for mode in ("pinned-side-stream", "pinned-same-stream", "pageable-blocking")]
    assert totals == sorted(totals) and totals[0] < 0.75 * totals[1]
    assert all(run.source == overlap.SIMULATED for run in runs.values())


def test_compute_is_the_same_work_in_every_mode_and_pageable_copies_are_slower(runs):
    compute = {mode: run.busy_s("compute") for mode, run in runs.items()}
    assert all(seconds == pytest.approx(4 * 3e-3) for seconds in compute.values())
    copy = {mode: run.busy_s("copy") for mode, run in runs.items()}
    assert copy["pageable-blocking"] > 2 * copy["pinned-side-stream"]
    assert copy["pinned-same-stream"] == pytest.approx(copy["pinned-side-stream"])


def test_every_step_computes_only_after_its_own_batch_arrived(runs):
    for run in runs.values():
        copies, kernels = spans(run, "copy"), spans(run, "compute")
        assert len(copies) == len(kernels) == 4
        for step, (copy, kernel) in enumerate(zip(copies, kernels, strict=True)):
            assert copy.name == f"batch {step}" and kernel.name == f"step {step}"
            assert kernel.start >= copy.end - 1e-12, (f"{run.mode}: step {step} started before its batch "
                                                      "arrived")


def test_the_next_batch_is_copied_while_the_current_one_computes(runs):
    side = runs["pinned-side-stream"]
    copies, kernels = spans(side, "copy"), spans(side, "compute")
    for step in range(3):
        assert copies[step
                      + 1].start < kernels[step].end, f"batch {step + 1} should arrive during step {step}"


def test_pageable_copies_make_the_host_wait_and_pinned_ones_do_not(runs):
    def waits(run):
        return [r for r in run.timeline if r.engine == "host" and "copy" in r.name and r.kind == "wait"]

    assert waits(runs["pageable-blocking"]), "the host waits for every pageable copy"
    assert waits(runs["pinned-same-stream"]) == [] and waits(runs["pinned-side-stream"]) == []


def test_the_default_batch_matches_the_t4_figures():
    run = simulate_steps("pinned-side-stream", 1, batch_bytes=32 * MiB)
    [copy] = spans(run, "copy")
    assert copy.duration == pytest.approx(T4_PCIE3.copy_seconds(32 * MiB, "h2d", pinned=True))
    assert copy.duration == pytest.approx(32 * MiB / 12.4e9, rel=0.01)


@pytest.mark.parametrize(("mode", "steps", "words"), [
    ("sideways", 4, "unknown mode"), ("pinned-side-stream", 0, "positive int"),
    (MODES[0], True, "positive int"),
])
def test_bad_requests_are_refused(mode, steps, words):
    with pytest.raises(ValueError, match=words):
        simulate_steps(mode, steps)


def test_measuring_needs_a_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"needs a CUDA GPU.*simulate_steps"):
        overlap.measure_steps("pinned-side-stream")
    assert [run.source for run in compare(steps=2)] == [overlap.SIMULATED] * 3


def test_the_plot_has_one_panel_per_mode(runs):
    import matplotlib

    matplotlib.use("Agg")
    figure = overlap.plot_overlap(list(runs.values()))
    titles = [ax.get_title(loc="left") for ax in figure.axes]
    assert len(titles) == 3
    for title, mode in zip(titles, MODES, strict=True):
        assert title.startswith(overlap.MODE_LABELS[mode]) and "simulated T4" in title
    assert figure.axes[-1].get_xlabel() == "virtual time (ms)"
