"""The timing core: sync before each clock read, untimed warm-up, a median, clear errors; CUDA paths with
fakes.
"""

import statistics

import pytest
import torch
from torch.utils.benchmark.utils.common import Measurement, TaskSpec

from devicelab import timing
from devicelab.timing import (
    TimingResult,
    format_seconds,
    time_it,
    time_naive,
    time_with_benchmark,
    time_with_events,
)


class Script:
    """A fake clock, sync and workload that log every call and advance time deterministically."""

    def __init__(self, durations=(1.0,)):
        self.log: list[str] = []
        self.now = 0.0
        self.durations = list(durations)
        self.calls = 0

    def clock(self) -> float:
        self.log.append("clock")
        return self.now

    def sync(self) -> None:
        self.log.append("sync")

    def fn(self) -> None:
        self.log.append("call")
        self.now += self.durations[self.calls % len(self.durations)]
        self.calls += 1


@pytest.fixture
def no_cuda_sync(monkeypatch):
    """Fail the test if anything calls torch.cuda.synchronize."""

    def forbidden(*args, **kwargs):
        raise AssertionError("torch.cuda.synchronize must not be called here")

    monkeypatch.setattr(torch.cuda, "synchronize", forbidden)


def test_syncs_before_starting_and_before_stopping_the_clock_after_untimed_warmup():
    script = Script()
    time_it(script.fn, warmup=2, repeats=2, clock=script.clock, sync=script.sync)
    repeat = ["sync", "clock", "call", "sync", "clock"]
    assert script.log == ["call", "call", *repeat, *repeat]


def test_warmup_calls_are_not_in_the_samples():
    script = Script(durations=(100.0, 100.0, 1.0))
    result = time_it(script.fn, warmup=2, repeats=1, clock=script.clock, sync=script.sync)
    assert result.samples == (1.0,)


def test_reports_median_not_mean():
    script = Script(durations=(5.0, 1.0, 9.0, 2.0, 3.0))
    result = time_it(script.fn, warmup=0, repeats=5, clock=script.clock, sync=script.sync)
    assert result.samples == (5.0, 1.0, 9.0, 2.0, 3.0)
    assert result.median == 3.0
    assert result.mean == 4.0
    assert (result.min, result.max) == (1.0, 9.0)


def test_cpu_uses_a_plain_clock_and_never_touches_cuda(no_cuda_sync):
    result = time_it(lambda: sum(range(20_000)), repeats=5)
    assert result.method == timing.METHOD_CLOCK
    assert result.device == "cpu"
    assert len(result.samples) == 5
    assert all(s > 0 for s in result.samples)
    assert result.min <= result.median <= result.max


def test_cuda_device_synchronises_that_device(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    script = Script()
    result = time_it(script.fn, device="cuda:1", warmup=1, repeats=3, clock=script.clock)
    assert synced == [torch.device("cuda:1")] * 6, "sync before start and before stop, every repeat"
    assert result.method == timing.METHOD_SYNCED
    assert result.device == "cuda:1"


def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="cuda"):
        time_it(lambda: None, device="cuda")


def test_an_explicit_sync_works_for_any_device_label(no_cuda_sync):
    script = Script()
    result = time_it(script.fn, device="simulated", repeats=1, clock=script.clock, sync=script.sync)
    assert result.device == "simulated"
    assert script.log.count("sync") == 2


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"repeats": 0}, ValueError),
        ({"repeats": -3}, ValueError),
        ({"warmup": -1}, ValueError),
        ({"repeats": 2.5}, TypeError),
        ({"warmup": True}, TypeError),
    ],
)
def test_rejects_bad_counts(kwargs, error):
    for timer in (time_it, time_naive):
        with pytest.raises(error, match=r"warmup|repeats"):
            timer(lambda: None, **kwargs)


@pytest.mark.parametrize("not_a_function", [None, 3, "fn()"])
def test_rejects_a_non_callable(not_a_function):
    for timer in (time_it, time_naive, time_with_events, time_with_benchmark):
        with pytest.raises(TypeError, match="callable"):
            timer(not_a_function)


def test_naive_timing_never_syncs_and_times_the_first_call(no_cuda_sync):
    script = Script(durations=(7.0, 1.0))
    result = time_naive(script.fn, repeats=2, clock=script.clock)
    assert "sync" not in script.log
    assert result.samples == (7.0, 1.0), "warmup defaults to 0, so the first call is timed"
    assert result.method == timing.METHOD_NAIVE


def test_timing_result_statistics_match_torch_benchmark():
    samples = (4.0, 1.0, 3.0, 2.0, 10.0, 6.0)
    result = TimingResult(samples=samples, method="m", device="cpu")
    measurement = Measurement(number_per_run=1, raw_times=list(samples),
                              task_spec=TaskSpec(stmt="", setup=""))
    assert result.median == pytest.approx(measurement.median)
    assert result.iqr == pytest.approx(measurement.iqr)
    assert result.stdev == pytest.approx(statistics.stdev(samples))
    assert "median" in str(result)
    with pytest.raises(ValueError):
        TimingResult(samples=(), method="m", device="cpu")


def test_single_sample_has_no_spread():
    result = TimingResult(samples=(2.0,), method="m", device="cpu")
    assert (result.stdev, result.iqr, result.median) == (0.0, 0.0, 2.0)


@pytest.mark.parametrize(
    ("seconds", "text"), [(1.5, "1.5 s"), (0.0123, "12.3 ms"), (5e-6, "5 us"), (2.5e-8, "25 ns")]
)
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


# ----- CUDA events, with fakes ------------------------------------------------------------------


class FakeGPU:
    """A fake CUDA device: fn() adds work to its clock; events read it when the GPU reaches them."""

    def __init__(self, kernel_ms=(2.0,)):
        self.now_ms = 0.0
        self.kernel_ms = list(kernel_ms)
        self.calls = 0
        self.log: list[str] = []
        self.events: list[FakeGPU.Event] = []
        gpu = self

        class Event:
            def __init__(self, enable_timing=False, blocking=False, interprocess=False):
                assert enable_timing, "timing events need enable_timing=True"
                self.t_ms = None
                self.synced = False
                gpu.events.append(self)

            def record(self, stream=None):
                gpu.log.append("record")
                self.t_ms = gpu.now_ms

            def synchronize(self):
                gpu.log.append("event.synchronize")
                self.synced = True

            def elapsed_time(self, end):
                assert self.t_ms is not None and end.t_ms is not None, "both events must be recorded"
                assert gpu.log[-1] in ("synchronize", "event.synchronize"), "read only after a sync"
                gpu.log.append("elapsed_time")
                return end.t_ms - self.t_ms

        self.Event = Event

    def fn(self):
        self.log.append("call")
        self.now_ms += self.kernel_ms[self.calls % len(self.kernel_ms)]
        self.calls += 1

    def synchronize(self, device=None):
        self.log.append("synchronize")


@pytest.fixture
def fake_gpu(monkeypatch):
    gpu = FakeGPU(kernel_ms=(50.0, 2.0, 4.0, 3.0))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", gpu.Event)
    monkeypatch.setattr(torch.cuda, "synchronize", gpu.synchronize)
    return gpu


def test_events_bracket_each_call_and_sync_before_reading(fake_gpu):
    time_with_events(fake_gpu.fn, warmup=1, repeats=3)
    one = ["record", "call", "record", "synchronize", "elapsed_time"]
    assert fake_gpu.log == ["call", *one, *one,
                            *one], "warm-up untimed, then record / call / record / sync / read"
    assert len(fake_gpu.events) == 6


def test_events_convert_milliseconds_to_seconds(fake_gpu):
    result = time_with_events(fake_gpu.fn, warmup=1, repeats=3)
    assert result.samples == pytest.approx((0.002, 0.004, 0.003))
    assert result.median == pytest.approx(0.003)
    assert result.method == timing.METHOD_EVENTS
    assert result.device == "cuda"


def test_events_select_the_requested_device(fake_gpu, monkeypatch):
    entered = []

    class FakeDeviceContext:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            entered.append(("enter", self.device))

        def __exit__(self, *exc):
            entered.append(("exit", self.device))
            return False

    monkeypatch.setattr(torch.cuda, "device", FakeDeviceContext)
    result = time_with_events(fake_gpu.fn, warmup=0, repeats=1, device=1)
    assert entered == [("enter", 1), ("exit", 1)]
    assert result.device == "cuda:1"


def test_events_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA"):
        time_with_events(lambda: None)


# ----- torch.utils.benchmark --------------------------------------------------------------------


def test_benchmark_times_a_cpu_function_for_real():
    result = time_with_benchmark(lambda: sum(range(200)), min_run_time=0.02)
    assert result.method == timing.METHOD_BENCHMARK
    assert result.calls_per_sample >= 1
    assert len(result.samples) >= 1
    assert 0 < min(result.samples) <= result.median <= max(result.samples)


def test_benchmark_wrapper_uses_timer_and_its_measurement(monkeypatch):
    made = {}
    measurement = Measurement(number_per_run=10, raw_times=[0.05, 0.02, 0.03],
                              task_spec=TaskSpec("fn()", "pass"))

    class FakeTimer:
        def __init__(self, **kwargs):
            made.update(kwargs)

        def blocked_autorange(self, min_run_time):
            made["blocked"] = min_run_time
            return measurement

        def adaptive_autorange(self, min_run_time):
            made["adaptive"] = min_run_time
            return measurement

    monkeypatch.setattr(torch.utils.benchmark, "Timer", FakeTimer)

    def fn():
        return None

    result = time_with_benchmark(fn, min_run_time=0.5)
    assert made["stmt"] == "fn()" and made["globals"] == {"fn": fn}
    assert made["num_threads"] == 1, "Timer defaults to one thread; say so rather than hide it"
    assert made["blocked"] == 0.5
    assert result.samples == pytest.approx((0.005, 0.002,
                                            0.003)), "samples are per call: block time / block size"
    assert result.median == pytest.approx(measurement.median)
    assert result.calls_per_sample == 10

    time_with_benchmark(fn, min_run_time=0.1, adaptive=True)
    assert made["adaptive"] == 0.1


def test_benchmark_rejects_bad_settings(monkeypatch):
    with pytest.raises(ValueError, match="min_run_time"):
        time_with_benchmark(lambda: None, min_run_time=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="cuda"):
        time_with_benchmark(lambda: None, device="cuda")
