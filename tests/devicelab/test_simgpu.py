"""The simulated GPU: one test per fact the course teaches, plus determinism and the plotting helper."""

import itertools
from dataclasses import replace

import pytest

from devicelab.simgpu import (
    A100_PCIE4,
    T4_PCIE3,
    NotReadyError,
    SimulatedGPU,
    StaleData,
    TimelineRecord,
    describe_profile,
    plot_timeline,
)
from devicelab.timing import time_it, time_naive
from devicelab.units import GB, MiB

KERNEL = 0.010  # seconds
LAUNCH = T4_PCIE3.launch_s


@pytest.fixture
def gpu() -> SimulatedGPU:
    """A simulated T4 whose context already exists, so tests see steady-state behaviour."""
    return SimulatedGPU(initialized=True)


def overlaps(a: TimelineRecord, b: TimelineRecord) -> bool:
    return a.start < b.end and b.start < a.end


def only(timeline, engine):
    [record] = [r for r in timeline if r.engine == engine]
    return record


# ----- asynchronous execution and timing --------------------------------------------------------


def test_a_launch_costs_the_host_a_few_microseconds_and_returns(gpu):
    out = gpu.launch(KERNEL)
    assert gpu.clock() == pytest.approx(LAUNCH)
    assert 4e-6 <= LAUNCH <= 6e-6, "FACTS.md: a kernel launch costs ~4-6 us"
    assert not out.is_ready(), "the kernel is still running when launch() returns"


def test_unsynchronised_timing_measures_only_the_enqueue(gpu):
    result = time_naive(lambda: gpu.launch(KERNEL), repeats=5, clock=gpu.clock)
    assert result.samples == pytest.approx((LAUNCH,) * 5)
    assert result.median < KERNEL / 1000, "a 10 ms kernel 'takes' 5 us without a sync"


def test_synchronised_timing_measures_the_kernel(gpu):
    result = time_it(lambda: gpu.launch(KERNEL), sync=gpu.synchronize, clock=gpu.clock, warmup=1, repeats=5)
    assert result.median == pytest.approx(KERNEL + LAUNCH)
    assert result.max - result.min == pytest.approx(0.0, abs=1e-12)


def test_cuda_events_measure_the_gpu_timeline(gpu):
    start, end = gpu.event(), gpu.event()
    gpu.launch(0.050)  # earlier work still running: the start marker waits for it
    start.record()
    gpu.launch(KERNEL)
    end.record()
    with pytest.raises(NotReadyError):
        start.elapsed_time(end)
    end.synchronize()
    assert start.elapsed_time(end) == pytest.approx(KERNEL * 1e3), "milliseconds, kernel only"


def test_events_need_timing_enabled(gpu):
    start, end = gpu.event(enable_timing=False), gpu.event(enable_timing=False)
    start.record()
    end.record()
    with pytest.raises(ValueError, match="enable_timing"):
        start.elapsed_time(end)


def test_event_query_and_stream_query_follow_the_device(gpu):
    gpu.launch(KERNEL)
    event = gpu.default_stream.record_event()
    assert not event.query() and not gpu.default_stream.query()
    gpu.default_stream.synchronize()
    assert event.query() and gpu.default_stream.query()
    assert gpu.event().query(), "an event never recorded counts as complete"


def test_a_full_launch_queue_makes_naive_timing_absorb_gpu_time():
    gpu = SimulatedGPU(replace(T4_PCIE3, queue_depth=4), initialized=True)
    result = time_naive(lambda: gpu.launch(0.001), repeats=10, clock=gpu.clock)
    assert result.samples[:4] == pytest.approx((LAUNCH,) * 4)
    assert result.samples[-1] == pytest.approx(0.001, rel=0.01), "once the queue is full, each launch waits"


def test_flops_give_a_duration_from_the_profile(gpu):
    out = gpu.launch(flops=8.1e12 / 100)
    assert out.ready_at - LAUNCH == pytest.approx(0.01)


@pytest.mark.parametrize("kwargs", [{}, {"duration_s": 1.0, "flops": 1.0}, {"duration_s": -1.0}])
def test_launch_rejects_bad_durations(gpu, kwargs):
    with pytest.raises(ValueError):
        gpu.launch(**kwargs)


# ----- sync points --------------------------------------------------------------------------------


def test_cpu_waits_for_all_earlier_work_on_its_stream(gpu):
    for _ in range(3):
        y = gpu.launch(KERNEL, nbytes=4 * MiB, data="logits")
    host = gpu.cpu(y)
    copy = T4_PCIE3.copy_seconds(4 * MiB, "d2h", pinned=False)
    assert gpu.clock() == pytest.approx(LAUNCH + 3 * KERNEL + copy)
    assert host.location == "host" and not host.pinned, ".cpu() lands in ordinary pageable memory"
    assert host.read() == "logits"


def test_cpu_does_not_wait_for_other_streams(gpu):
    x = gpu.copy(MiB, "h2d", pinned=True, non_blocking=True, data="x")
    side = gpu.new_stream()
    gpu.launch(0.5, stream=side)
    assert gpu.cpu(x).read() == "x"
    assert gpu.clock() < 0.1, ".cpu() syncs its own stream (cudaStreamSynchronize), not the whole device"


def test_item_is_a_sync_point(gpu):
    y = gpu.launch(KERNEL, data=3.5)
    assert gpu.item(y) == 3.5
    assert gpu.clock() >= KERNEL


def test_synchronize_waits_for_every_stream(gpu):
    side = gpu.new_stream()
    gpu.launch(0.5, stream=side)
    gpu.launch(KERNEL)
    gpu.synchronize()
    assert gpu.clock() == pytest.approx(LAUNCH + 0.5 + KERNEL), "one compute engine: kernels take turns"


# ----- copies -------------------------------------------------------------------------------------


def test_an_early_read_of_a_non_blocking_d2h_copy_gives_stale_data_not_an_error(gpu):
    y = gpu.launch(KERNEL, nbytes=64 * MiB, data=[1, 2, 3])
    host = gpu.to_cpu(y, non_blocking=True)
    assert gpu.clock() < KERNEL, "to('cpu', non_blocking=True) returns at once"
    assert host.pinned, "PyTorch writes a non-blocking D2H copy into pinned memory"
    assert not host.is_ready()
    early = host.read()  # a CPU read, as in PyTorch: no sync and no error
    assert isinstance(early, StaleData) and early.old is None, "fresh memory: uninitialised"
    assert "STALE" in repr(early) and "uninitialised" in repr(early)
    gpu.synchronize()
    assert host.read() == [1, 2, 3]


def test_an_early_read_of_a_copy_into_an_existing_buffer_gives_its_old_contents(gpu):
    old = gpu.host_buffer(4 * MiB, pinned=True, data="batch 0")  # like torch.empty(..., pin_memory=True)
    y = gpu.launch(KERNEL, nbytes=4 * MiB, data="batch 1")
    same = gpu.to_cpu(y, non_blocking=True, out=old)  # like old.copy_(y, non_blocking=True)
    assert same is old and gpu.clock() < KERNEL
    assert old.read() == StaleData("batch 0", old.name, old.ready_at, gpu.clock())
    gpu.synchronize()
    assert old.read() == "batch 1"


def test_out_must_be_a_host_buffer(gpu):
    with pytest.raises(ValueError, match="host buffer"):
        gpu.to_cpu(gpu.launch(KERNEL, nbytes=8), out=gpu.launch(KERNEL, nbytes=8))


def test_elapsed_time_before_the_end_event_still_raises_as_in_pytorch(gpu):
    start, end = gpu.event(), gpu.event()
    start.record()
    gpu.launch(KERNEL)
    end.record()
    with pytest.raises(NotReadyError):
        start.elapsed_time(end)


def test_the_default_h2d_copy_waits_for_all_earlier_work_on_its_stream(gpu):
    gpu.launch(0.050)
    gpu.copy(MiB, "h2d")  # x.to(device): cudaMemcpyAsync + cudaStreamSynchronize
    assert gpu.clock() > 0.050, "the default copy is a sync point: it waited for the 50 ms kernel"


def test_a_pageable_non_blocking_h2d_copy_is_held_for_staging_but_skips_the_stream_sync(gpu):
    gpu.launch(0.050)
    before = gpu.clock()
    gpu.copy(64 * MiB, "h2d", pinned=False, non_blocking=True)
    held = gpu.clock() - before
    staging = T4_PCIE3.copy_seconds(64 * MiB, "h2d", pinned=False)
    assert held == pytest.approx(LAUNCH + staging), "held for about the copy's duration"
    assert gpu.clock() < 0.050, "but not for the kernel queued before it"


def test_an_upload_and_a_download_overlap_on_two_copy_engines(gpu):
    up, down = gpu.new_stream("up"), gpu.new_stream("down")
    result = gpu.launch(0.0, nbytes=64 * MiB)
    gpu.copy(64 * MiB, "h2d", pinned=True, non_blocking=True, stream=up)
    gpu.to_cpu(result, non_blocking=True, stream=down)
    h2d, d2h = [r for r in gpu.timeline if r.engine == "copy"]
    assert overlaps(h2d, d2h) and (h2d.unit, d2h.unit) == (0, 1)


def test_one_copy_engine_makes_opposite_copies_take_turns():
    gpu = SimulatedGPU(replace(T4_PCIE3, copy_engines=1), initialized=True)
    up, down = gpu.new_stream("up"), gpu.new_stream("down")
    result = gpu.launch(0.0, nbytes=64 * MiB)
    gpu.copy(64 * MiB, "h2d", pinned=True, non_blocking=True, stream=up)
    gpu.to_cpu(result, non_blocking=True, stream=down)
    h2d, d2h = [r for r in gpu.timeline if r.engine == "copy"]
    assert not overlaps(h2d, d2h)


def test_two_uploads_share_one_direction_of_the_link(gpu):
    a, b = gpu.new_stream("a"), gpu.new_stream("b")
    gpu.copy(64 * MiB, "h2d", pinned=True, non_blocking=True, stream=a)
    gpu.copy(64 * MiB, "h2d", pinned=True, non_blocking=True, stream=b)
    first, second = [r for r in gpu.timeline if r.engine == "copy"]
    assert not overlaps(first, second)


def test_describe_profile_labels_the_assumptions():
    text = describe_profile(T4_PCIE3)
    for what in ("launch queue depth", "CUDA context creation", "pageable copy host to device",
                 "copy engines"):
        [line] = [line for line in text.splitlines() if what in line]
        assert "ASSUMPTION" in line, line
    assert "ASSUMPTION" not in next(line for line in text.splitlines() if "pinned copy host" in line)


def test_describe_profile_gives_the_fp32_peak_as_a_rate():
    [line] = [line for line in describe_profile(T4_PCIE3).splitlines() if "FP32 peak" in line]
    assert "8.1 TFLOP/s" in line and " s " not in line.split("FP32 peak")[1], line



def test_the_h100_profile_takes_its_pinned_download_rate_from_the_recording():
    """docs/measurements.md records pinned device-to-host copies on the course's H100 (53.8 GB/s at 256 MiB
    in the run the lessons hold): the profile uses it and says so, not "not recorded"."""
    from autograder import COURSE_ROOT
    from devicelab.simgpu import H100_PCIE5

    source = dict(H100_PCIE5.sources)["d2h_pinned_Bps"]
    assert source.startswith("recorded") and "not recorded" not in source
    assert H100_PCIE5.d2h_pinned_Bps == 53.8 * GB
    assert "53.8 device-to-host" in (COURSE_ROOT / "docs" / "measurements.md").read_text()

def test_an_event_after_the_copy_is_enough_to_read_it(gpu):
    y = gpu.launch(KERNEL, nbytes=MiB, data="ok")
    host = gpu.to_cpu(y, non_blocking=True)
    done = gpu.default_stream.record_event()
    done.synchronize()
    assert host.read() == "ok"


def test_a_queued_copy_sends_what_the_host_buffer_holds_when_the_copy_runs(gpu):
    staging = gpu.host_buffer(MiB, pinned=True, data="batch 1")
    gpu.launch(0.004, name="previous step")
    early = gpu.copy(staging, non_blocking=True)  # queued behind the kernel: it has read nothing yet
    gpu.host_write(staging, "batch 2")  # refilled at once, as an unguarded loader does
    assert gpu.cpu(early).read() == "batch 2", "the copy engine reads the buffer when the copy runs"
    safe = gpu.copy(staging, non_blocking=True)
    done = gpu.event()
    done.record()
    done.synchronize()  # wait for the copy before refilling
    gpu.host_write(staging, "batch 3")
    assert gpu.cpu(safe).read() == "batch 2" and staging.read() == "batch 3"
    with pytest.raises(ValueError, match="not host memory"):
        gpu.host_write(early, "x")


def test_a_blocking_d2h_copy_is_ready_at_once(gpu):
    y = gpu.launch(KERNEL, data="ok")
    assert gpu.to_cpu(y).read() == "ok"


def test_the_host_cannot_read_device_memory(gpu):
    y = gpu.launch(KERNEL, data="secret")
    gpu.synchronize()
    with pytest.raises(TypeError, match="cpu"):
        y.read()


@pytest.mark.parametrize("non_blocking", [False, True])
def test_a_pageable_copy_blocks_the_host_even_when_non_blocking(gpu, non_blocking):
    x = gpu.copy(100 * MiB, "h2d", pinned=False, non_blocking=non_blocking)
    assert gpu.clock() == pytest.approx(x.ready_at), "pageable memory goes through a staging buffer"


def test_a_pinned_non_blocking_h2d_copy_returns_at_once(gpu):
    x = gpu.copy(100 * MiB, "h2d", pinned=True, non_blocking=True)
    assert gpu.clock() == pytest.approx(LAUNCH)
    assert x.ready_at > 100 * LAUNCH


def copy_then_compute(pinned: bool, side_stream: bool, non_blocking: bool) -> SimulatedGPU:
    """Queue a 100 MiB H2D copy, then an unrelated kernel on the default stream."""
    gpu = SimulatedGPU(initialized=True)
    stream = gpu.new_stream() if side_stream else gpu.default_stream
    gpu.copy(100 * MiB, "h2d", pinned=pinned, non_blocking=non_blocking, stream=stream)
    gpu.launch(KERNEL)
    gpu.synchronize()
    return gpu


@pytest.mark.parametrize(
    ("pinned", "side_stream", "non_blocking", "overlap"),
    [
        (True, True, True, True),
        (False, True, True, False),
        (True, False, True, False),
        (True, True, False, False),
        (False, False, False, False),
    ],
)
def test_copy_and_compute_overlap_only_with_pinned_memory_a_side_stream_and_non_blocking(
    pinned, side_stream, non_blocking, overlap
):
    gpu = copy_then_compute(pinned, side_stream, non_blocking)
    copy, kernel = only(gpu.timeline, "copy"), only(gpu.timeline, "compute")
    assert overlaps(copy, kernel) is overlap
    if overlap:
        assert gpu.clock() < copy.duration + kernel.duration, "overlap shortens the total"


def test_wait_event_orders_work_across_streams(gpu):
    side = gpu.new_stream()
    with gpu.stream(side):
        gpu.copy(100 * MiB, "h2d", pinned=True, non_blocking=True)
        copied = side.record_event()
    assert gpu.current_stream is gpu.default_stream
    gpu.default_stream.wait_event(copied)
    gpu.launch(KERNEL)
    gpu.synchronize()
    copy, kernel = only(gpu.timeline, "copy"), only(gpu.timeline, "compute")
    assert kernel.start >= copy.end and kernel.stream == 0 and copy.stream == side.id


def test_an_idle_engine_runs_ready_work_from_another_stream(gpu):
    side = gpu.new_stream()
    with gpu.stream(side):
        gpu.copy(100 * MiB, "h2d", pinned=True, non_blocking=True)
    gpu.default_stream.wait_stream(side)
    waiting = gpu.launch(KERNEL, name="needs the copy")
    ready = gpu.launch(0.001, stream=gpu.new_stream(), name="independent")
    assert ready.ready_at <= waiting.ready_at - KERNEL, ("independent work fills the gap; it does not queue "
                                                         "behind")


def test_copy_infers_direction_and_pinning_from_a_buffer(gpu):
    y = gpu.launch(KERNEL, nbytes=MiB, data="d")
    host = gpu.copy(y, pinned=True)  # device buffer: d2h, blocking
    assert host.location == "host" and host.read() == "d"
    back = gpu.copy(host, non_blocking=True)  # pinned host buffer: h2d, returns at once
    assert back.location == "device" and back.data == "d" and not back.is_ready()
    with pytest.raises(ValueError):
        gpu.copy(host, "d2h")
    with pytest.raises(ValueError):
        gpu.copy(MiB, "sideways")


# ----- the figures ----------------------------------------------------------------------------------


def test_first_device_call_pays_the_context_cost():
    gpu = SimulatedGPU()
    first = time_naive(lambda: gpu.launch(KERNEL), repeats=3, clock=gpu.clock)
    assert first.samples[0] == pytest.approx(T4_PCIE3.context_init_s + LAUNCH)
    assert 1.0 <= T4_PCIE3.context_init_s <= 4.0, "FACTS.md: first-call CUDA initialisation 1-4 s"
    assert first.samples[1:] == pytest.approx((LAUNCH, LAUNCH))
    assert first.median == pytest.approx(LAUNCH), "the median shrugs off the first call; the mean does not"
    assert [r.kind for r in gpu.timeline].count("init") == 1


def test_context_cost_is_configurable():
    gpu = SimulatedGPU(replace(T4_PCIE3, context_init_s=0.25))
    gpu.synchronize()
    assert gpu.clock() == pytest.approx(0.25)


@pytest.mark.parametrize(("direction", "gbps"), [("h2d", 12.4), ("d2h", 13.1)])
def test_default_bandwidth_is_the_measured_t4_figure(gpu, direction, gbps):
    nbytes = 256 * MiB
    seconds = T4_PCIE3.copy_seconds(nbytes, direction, pinned=True)
    assert nbytes / seconds / GB == pytest.approx(gbps, rel=1e-3)
    assert nbytes / seconds < T4_PCIE3.link_peak_Bps == 15.75e9
    pageable = T4_PCIE3.copy_seconds(nbytes, direction, pinned=False)
    assert 1.2 <= pageable / seconds <= 9, "FACTS.md: pageable copies are ~1.2x to ~9x slower"


def test_a_big_simulated_copy_runs_at_the_profile_bandwidth(gpu):
    x = gpu.copy(256 * MiB, "h2d", pinned=True)
    copy = only(gpu.timeline, "copy")
    assert x.ready_at == copy.end
    assert 256 * MiB / copy.duration == pytest.approx(12.4e9, rel=1e-3)


def test_small_copies_reach_half_of_peak_near_33_kib():
    def efficiency(nbytes):
        return nbytes / T4_PCIE3.copy_seconds(nbytes, "h2d") / T4_PCIE3.h2d_pinned_Bps

    assert efficiency(32_000) < 0.5 < efficiency(36_000), "FACTS.md: half of peak around 31-36 KiB"
    assert efficiency(8 * MiB) >= 0.97, "FACTS.md: ~97% from 8 MiB"


def test_a_synchronous_one_byte_copy_costs_microseconds(gpu):
    gpu.copy(1, "h2d", pinned=True)
    assert 6e-6 <= gpu.clock() <= 12e-6, "FACTS.md: a synchronous 1-byte copy ~6-12 us"


def test_a100_profile_uses_the_gen4_figures():
    assert A100_PCIE4.bandwidth("h2d") == 25.7e9 and A100_PCIE4.bandwidth("d2h", pinned=False) == 10.8e9
    assert A100_PCIE4.link_peak_Bps == 31.5e9


# ----- determinism, grading and plotting --------------------------------------------------------


def scripted_session() -> SimulatedGPU:
    gpu = SimulatedGPU()
    side = gpu.new_stream()
    for step in range(5):
        with gpu.stream(side):
            gpu.copy(8 * MiB, "h2d", pinned=True, non_blocking=True)
        gpu.host_work(0.001, "load batch")
        gpu.default_stream.wait_stream(side)
        y = gpu.launch(flops=2e9 * (step + 1), nbytes=4)
    gpu.item(y)
    return gpu


def test_same_calls_give_the_same_numbers():
    a, b = scripted_session(), scripted_session()
    assert a.clock() == b.clock()
    assert a.timeline == b.timeline
    assert len(a.timeline) > 10


def measure_right(fn, *, sync, clock, warmup, repeats):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        sync()
        start = clock()
        fn()
        sync()
        samples.append(clock() - start)
    return sorted(samples)[len(samples) // 2]


def measure_without_first_sync(fn, *, sync, clock, warmup, repeats):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = clock()
        fn()
        sync()
        samples.append(clock() - start)
    return samples[0]


def test_the_simulator_can_grade_a_students_measure_function(gpu):
    right = measure_right(lambda: gpu.launch(KERNEL), sync=gpu.synchronize, clock=gpu.clock, warmup=1,
                          repeats=5)
    assert right == pytest.approx(KERNEL + LAUNCH)
    gpu = SimulatedGPU(initialized=True)
    wrong = measure_without_first_sync(
        lambda: gpu.launch(KERNEL), sync=gpu.synchronize, clock=gpu.clock, warmup=1, repeats=5
    )
    assert wrong == pytest.approx(2 * KERNEL), "without a sync before start, the warm-up kernel leaks in"


def test_plot_timeline_draws_one_row_per_engine():
    from matplotlib.figure import Figure

    gpu = copy_then_compute(pinned=True, side_stream=True, non_blocking=True)
    ax = Figure().subplots()
    assert plot_timeline(gpu.timeline, ax=ax) is ax
    assert [t.get_text() for t in ax.get_yticklabels()] == ["copy", "compute", "host"]
    assert len(ax.collections) == len(gpu.timeline)
    assert ax.get_xlabel() == "virtual time (ms)"


def test_plot_timeline_gives_the_second_copy_engine_its_own_row(gpu):
    from matplotlib.figure import Figure

    up = gpu.new_stream("up")
    result = gpu.launch(0.0, nbytes=MiB)
    gpu.copy(MiB, "h2d", pinned=True, non_blocking=True, stream=up)
    gpu.to_cpu(result, non_blocking=True)
    ax = plot_timeline(gpu.timeline, ax=Figure().subplots())
    assert [t.get_text() for t in ax.get_yticklabels()] == ["copy 1", "copy", "compute", "host"]


def test_a_graph_replay_pays_one_launch_for_many_kernels():
    eager, graph = SimulatedGPU(initialized=True), SimulatedGPU(initialized=True)
    for _ in range(100):
        eager.launch(2e-6)
    eager.synchronize()
    graph.launch_graph([2e-6] * 100)
    graph.synchronize()
    assert eager.clock() == pytest.approx(100 * eager.profile.launch_s
                                          + 2e-6), "launch-bound: the host's pace"
    assert graph.clock() == pytest.approx(graph.profile.launch_s
                                          + 100 * 2e-6), "one launch, kernels back to back"
    kernels = [r for r in graph.timeline if r.engine == "compute"]
    assert len(kernels) == 100 and all(b.start == pytest.approx(a.end) for a,
                                       b in itertools.pairwise(kernels))
    with pytest.raises(ValueError):
        graph.launch_graph([])
