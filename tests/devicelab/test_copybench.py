"""The copy benchmark core and the `bench` command: honest timing, one result at a time, clear errors."""

import csv
import gc
import re
import sys
import types
import weakref
from contextlib import nullcontext

import pytest
import torch

from devicelab import copybench as cb
from devicelab.__main__ import main
from devicelab.copybench import CopyMemoryError, CopyResult, LinkLimit, NoGPUError
from devicelab.units import GB, GiB, KiB, MiB

# ----- sizes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "nbytes"), [
    ("4096", 4096), ("4KiB", 4096), ("4 kib", 4096), ("4K", 4096), ("1MiB", MiB), ("1.5MiB", 3 * MiB // 2),
    ("256MiB", 256 * MiB), ("256m", 256 * MiB), ("1GiB", GiB), ("512B", 512), ("64k", 64 * KiB), (4096, 4096),
])
def test_sizes_read_with_powers_of_1024(text, nbytes):
    assert cb.parse_size(text) == nbytes


@pytest.mark.parametrize(("text", "words"), [
    ("0", "at least 1 byte"), ("-4KiB", "at least 1 byte"), ("4XB", "unknown unit"), ("abc", "cannot read"),
    ("0.5", "whole number"), (0, "at least 1 byte"), (-1, "at least 1 byte"),
])
def test_bad_sizes_say_what_is_wrong(text, words):
    with pytest.raises(ValueError, match=words):
        cb.parse_size(text)


@pytest.mark.parametrize(("text", "fix"),
                         [("4KB", "4KiB"), ("4 kb", "4KiB"), ("1MB", "1MiB"), ("1.5GB", "1.5GiB")])
def test_decimal_labels_are_refused_with_the_binary_spelling(text, fix):
    with pytest.raises(ValueError, match=f"write {re.escape(fix)} "):
        cb.parse_size(text)


def test_size_lists_and_ranges():
    assert cb.parse_sizes("4KiB,1MiB,256MiB") == [4 * KiB, MiB, 256 * MiB]
    with pytest.raises(ValueError, match="no sizes"):
        cb.parse_sizes(" , ")
    assert cb.size_range() == list(cb.DEFAULT_SIZES)
    assert cb.DEFAULT_SIZES[0] == 4 * KiB and cb.DEFAULT_SIZES[-1] == 256 * MiB and len(
        cb.DEFAULT_SIZES) == 17
    assert cb.size_range(3000, 20000) == [4096, 8192, 16384]
    with pytest.raises(ValueError, match="above the largest"):
        cb.size_range(MiB, KiB)
    with pytest.raises(TypeError):
        cb.check_size(True)
    row = cb.table_row(CopyResult("h2h", "pageable", False, bytes=3 * MiB // 2, median_s=1e-3, min_s=1e-3,
                                  repeats=1))
    assert " 1.5 MiB " in row and "MB" not in row


# ----- the link limit -------------------------------------------------------------------------------------


def test_pcie_link_limits_match_the_published_figures():
    assert cb.pcie_gbps(3, 16) == pytest.approx(15.75, abs=0.01)
    assert cb.pcie_gbps(4, 16) == pytest.approx(31.5, abs=0.01)
    assert cb.pcie_gbps(5, 16) == pytest.approx(63.0, abs=0.02)
    assert cb.pcie_gbps(4, 8) == pytest.approx(cb.pcie_gbps(4, 16) / 2)
    with pytest.raises(ValueError):
        cb.pcie_gbps(9, 16)


class FakeNVML(types.ModuleType):
    """A stand-in for pynvml that reports one GPU on a PCIe link."""

    class NVMLError(Exception):
        pass

    def __init__(self, generation=4, width=16, fail=False):
        super().__init__("pynvml")
        self.generation, self.width, self.fail = generation, width, fail
        self.calls: list[str] = []

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        self.calls.append(f"bus {bus_id}")
        return "handle"

    def nvmlDeviceGetHandleByIndex(self, index):
        return "handle"

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        if self.fail:
            raise self.NVMLError("Not Supported")
        return self.generation

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self.width


@pytest.fixture
def fake_gpu(monkeypatch):
    """Pretend one CUDA device exists, for the code paths that only ask about it."""
    monkeypatch.setattr(cb, "cuda_usable", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)


def test_link_limit_comes_from_nvml_by_pci_bus_id(monkeypatch, fake_gpu):
    nvml = FakeNVML(generation=4, width=16)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    link = cb.link_limit()
    assert link == LinkLimit(4, 16, pytest.approx(31.5, abs=0.01))
    assert "bus 00000000:3b:00.0" in nvml.calls and nvml.calls[-1] == "shutdown"
    assert "Gen4 x16" in str(link)


def test_link_limit_is_unknown_without_nvml_or_when_unsupported(monkeypatch, fake_gpu):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert cb.link_limit() is None
    nvml = FakeNVML(fail=True)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert cb.link_limit() is None
    assert nvml.calls[-1] == "shutdown"


def test_link_limit_is_unknown_without_a_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML())
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    assert cb.link_limit() is None


# ----- results --------------------------------------------------------------------------------------------


def test_a_result_reports_gb_per_second_in_powers_of_ten_and_its_share_of_the_link():
    result = CopyResult("h2d", "pinned", True, bytes=256 * MiB, median_s=0.02, min_s=0.019, repeats=5,
                        link_gbps=15.75)
    assert result.gbps == pytest.approx(256 * MiB / 0.02 / GB)
    assert result.peak_gbps > result.gbps
    assert result.share_of_link == pytest.approx(result.gbps / 15.75)
    row = result.as_row()
    assert tuple(row) == cb.CSV_COLUMNS
    assert row["link_gbps"] == 15.75 and row["non_blocking"] is True
    unknown = CopyResult("h2h", "pageable", False, bytes=4096, median_s=1e-6, min_s=1e-6, repeats=3).as_row()
    assert unknown["link_gbps"] == "" and unknown["share_of_link"] == ""


# ----- measuring ------------------------------------------------------------------------------------------


class Recorder:
    """A fake clock and allocator, plus a spy on copy_, that log everything in order."""

    def __init__(self, seconds_per_byte=1e-10, per_copy=1e-6):
        self.log: list[str] = []
        self.now = 0.0
        self.seconds_per_byte, self.per_copy = seconds_per_byte, per_copy
        self.buffers: list[weakref.ref] = []

    def clock(self) -> float:
        self.log.append("clock")
        return self.now

    def allocate(self, nbytes, where, device, pinned):
        self.log.append(f"alloc {nbytes}")
        tensor = torch.zeros(nbytes, dtype=torch.uint8)
        self.buffers.append(weakref.ref(tensor))
        return tensor

    def copy_spy(self):
        original = torch.Tensor.copy_
        recorder = self

        def copy_(dst, src, non_blocking=False):
            recorder.log.append("copy")
            recorder.threads_seen = torch.get_num_threads()
            recorder.now += recorder.per_copy + dst.numel() * recorder.seconds_per_byte
            return original(dst, src, non_blocking)
        return copy_

    def alive(self) -> int:
        gc.collect()
        return sum(ref() is not None for ref in self.buffers)


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(torch.Tensor, "copy_", rec.copy_spy())
    return rec


def test_without_a_gpu_the_default_is_a_host_copy(monkeypatch):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    assert cb.default_direction() == "h2h"
    result = cb.measure_copy(64 * KiB, repeats=3)
    assert (result.direction, result.host, result.non_blocking, result.bytes) == ("h2h", "pageable", False,
                                                                                  64 * KiB)
    assert result.method == cb.METHOD_CLOCK and result.repeats == 3
    assert 0 < result.min_s <= result.median_s and result.gbps > 0 and result.link_gbps is None


def test_buffers_are_made_before_the_clock_starts_and_warmed_up(recorder):
    list(cb.sweep([4 * KiB, MiB], "h2h", repeats=3, clock=recorder.clock, allocate=recorder.allocate))
    log = [event.split()[0] for event in recorder.log]
    starts = [i for i, event in enumerate(log) if event == "alloc"][::2]
    assert len(starts) == 2, recorder.log
    for start, end in zip(starts, [*starts[1:], len(log)], strict=True):
        events = log[start:end]
        assert events[:2] == ["alloc",
                              "alloc"] and "alloc" not in events[2:], "buffers come before any timing"
        assert events[2] == "copy", "an untimed warm-up copy comes before the first clock read"
        assert events.count("clock") == 2 + 2 * 3, "one calibration sample, then `repeats` timed samples"


def test_median_and_min_are_per_copy_and_tiny_copies_are_repeated(recorder):
    [small, large] = cb.sweep([4 * KiB, 64 * MiB], "h2h", repeats=5, clock=recorder.clock,
                              allocate=recorder.allocate)
    small_copy = recorder.per_copy + 4 * KiB * recorder.seconds_per_byte
    assert small.median_s == pytest.approx(small_copy) and small.min_s == pytest.approx(small_copy)
    assert small.calls_per_sample == round(cb.TARGET_SAMPLE_S / small_copy)
    assert large.calls_per_sample == 1
    assert large.gbps == pytest.approx(64 * MiB / (recorder.per_copy + 64 * MiB * 1e-10) / GB)


def test_results_arrive_one_by_one_and_each_size_frees_its_buffers(recorder):
    results = cb.sweep([4 * KiB, 8 * KiB, 16 * KiB], "h2h", repeats=2, clock=recorder.clock,
                       allocate=recorder.allocate)
    first = next(results)
    assert first.bytes == 4 * KiB
    assert [e for e in recorder.log if e.startswith("alloc")] == ["alloc 4096", "alloc 4096"], (
        "nothing is measured ahead of time")
    assert recorder.alive() == 0, "a size's buffers are freed before its result is handed out"
    assert next(results).bytes == 8 * KiB


def test_closing_a_sweep_early_stops_it_and_frees_everything(recorder):
    results = cb.sweep([4 * KiB, 8 * KiB, 16 * KiB], "h2h", repeats=2, clock=recorder.clock,
                       allocate=recorder.allocate)
    next(results)
    results.close()
    assert list(results) == []
    assert recorder.alive() == 0
    assert len([e for e in recorder.log if e.startswith("alloc")]) == 2


def test_host_copies_use_torchs_threads_unless_told_and_the_setting_is_restored(recorder):
    before = torch.get_num_threads()
    list(cb.sweep([4 * KiB], "h2h", repeats=1, clock=recorder.clock, allocate=recorder.allocate))
    assert recorder.threads_seen == before
    list(cb.sweep([4 * KiB], "h2h", repeats=1, threads=1, clock=recorder.clock, allocate=recorder.allocate))
    assert recorder.threads_seen == 1
    assert torch.get_num_threads() == before


# ----- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["h2d", "d2h", "d2d"])
def test_gpu_directions_need_a_gpu(monkeypatch, direction):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    with pytest.raises(NoGPUError, match=f"{direction}.*needs a CUDA GPU"):
        cb.sweep([4 * KiB], direction)


def test_pinned_memory_needs_a_gpu(monkeypatch):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    with pytest.raises(NoGPUError, match=r"pin_memory\(\) raises"):
        cb.sweep([4 * KiB], "h2h", "pinned")


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"direction": "x2y"}, ValueError, "unknown direction 'x2y'.*h2d, d2h, d2d, h2h"),
    ({"direction": "h2h", "host": "locked"}, ValueError, "pageable' or 'pinned'"),
    ({"direction": "h2h", "repeats": 0}, ValueError, "repeats must be at least 1"),
    ({"direction": "h2h", "sizes": [0]}, ValueError, "at least 1 byte"),
    ({"direction": "h2h", "sizes": [-5]}, ValueError, "at least 1 byte"),
    ({"direction": "h2h", "sizes": []}, ValueError, "no sizes"),
    ({"direction": "h2h", "sizes": [1.5]}, TypeError, "int number of bytes"),
])
def test_bad_requests_fail_before_anything_is_measured(kwargs, error, words):
    with pytest.raises(error, match=words):
        cb.sweep(**kwargs)


def test_sizes_that_do_not_fit_in_host_memory_fail_before_allocating(monkeypatch, recorder):
    monkeypatch.setattr(cb, "available_host_bytes", lambda: 100 * MiB)
    with pytest.raises(CopyMemoryError, match=r"needs 128 MiB of host memory.*choose smaller sizes"):
        cb.sweep([4 * KiB, 64 * MiB], "h2h", allocate=recorder.allocate)
    assert recorder.log == []
    assert isinstance(CopyMemoryError("x"), MemoryError)


def test_pinned_buffers_may_take_only_half_of_the_free_memory():
    with pytest.raises(CopyMemoryError, match="pinned"):
        cb.check_fits(60 * MiB, "h2d", "pinned", None, host_bytes=100 * MiB)
    cb.check_fits(60 * MiB, "h2d", "pageable", None, host_bytes=100 * MiB)


def test_sizes_that_do_not_fit_on_the_device_fail_before_allocating():
    with pytest.raises(CopyMemoryError, match=r"needs 2 GiB on cuda:0.*free"):
        cb.check_fits(GiB, "d2d", "pageable", torch.device("cuda", 0), host_bytes=100 * GiB, device_bytes=GiB)
    cb.check_fits(GiB, "h2d", "pageable", torch.device("cuda", 0), host_bytes=100 * GiB, device_bytes=GiB)


def test_out_of_memory_while_allocating_frees_what_was_made(recorder):
    def allocate(nbytes, where, device, pinned):
        if where == "device":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 MiB")
        return recorder.allocate(nbytes, where, device, pinned)

    with pytest.raises(CopyMemoryError, match=r"out of memory.*Nothing stays allocated"), \
            cb.copy_buffers(MiB, "h2d", "pageable", None, allocate):
        pass
    assert recorder.buffers and recorder.alive() == 0


def test_other_allocation_errors_are_not_disguised():
    def allocate(*args):
        raise RuntimeError("some other failure")

    with pytest.raises(RuntimeError, match="some other failure"), cb.copy_buffers(MiB, "h2h",
                                                                                  allocate=allocate):
        pass


# ----- the GPU path, with a fake device -------------------------------------------------------------------


class FakeEvent:
    """A CUDA event on a fake device clock that the copy spy advances."""

    recorder: Recorder

    def __init__(self, enable_timing=False):
        self.time = None

    def record(self, stream=None):
        self.time = self.recorder.now

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.time - self.time) * 1e3


def test_gpu_copies_are_timed_with_cuda_events_and_carry_the_link(monkeypatch, fake_gpu, recorder):
    FakeEvent.recorder = recorder
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "device", lambda device: nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(cb, "available_device_bytes", lambda device: 16 * GiB)

    def never(*args):
        raise AssertionError("GPU copies must not be timed with the host clock")

    link = LinkLimit(3, 16, cb.pcie_gbps(3, 16))
    [result] = cb.sweep([256 * MiB], "h2d", "pinned", True, repeats=3, link=link, clock=never,
                        allocate=recorder.allocate)
    assert result.method == cb.METHOD_EVENTS and result.device == "cuda:0"
    assert result.calls_per_sample == 1
    assert result.median_s == pytest.approx(recorder.per_copy + 256 * MiB * recorder.seconds_per_byte)
    assert result.link_gbps == pytest.approx(15.75, abs=0.01) and 0 < result.share_of_link
    [d2d] = cb.sweep([MiB], "d2d", repeats=2, link=link, clock=never, allocate=recorder.allocate)
    assert d2d.host == "" and d2d.link_gbps is None, "no host memory and no PCIe link in a d2d copy"


# ----- the command line -----------------------------------------------------------------------------------


def test_bench_without_a_gpu_measures_host_copies_and_writes_the_csv(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    target = tmp_path / "copies.csv"
    assert main(["bench", "--sizes", "4KiB,64KiB", "--repeats", "2", "--csv", str(target)]) == 0
    out = capsys.readouterr().out
    assert "No CUDA GPU" in out and "h2h" in out
    assert "GB/s" in out and "64 KiB" in out and "wrote 2 rows" in out
    with open(target, newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(target) as handle:
        assert handle.readline().strip() == ",".join(cb.CSV_COLUMNS)
    assert [r["bytes"] for r in rows] == ["4096", "65536"]
    assert rows[0]["direction"] == "h2h" and rows[0]["host"] == "pageable" and rows[0][
        "non_blocking"] == "False"
    assert float(rows[1]["gbps"]) > 0 and rows[1]["link_gbps"] == "" and rows[1]["share_of_link"] == ""


def test_bench_passes_the_thread_count_on(monkeypatch, capsys):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    seen = []
    real_sweep = cb.sweep
    monkeypatch.setattr(cb, "sweep", lambda *a, **k: seen.append(k["threads"]) or real_sweep(*a, **k))
    assert main(["bench", "--sizes", "4KiB", "--repeats", "1", "--threads", "1"]) == 0
    assert main(["bench", "--sizes", "4KiB", "--repeats", "1"]) == 0
    assert seen == [1, None]


@pytest.mark.parametrize(("argv", "words"), [
    (["--direction", "h2d"], "--direction h2d needs a CUDA GPU"),
    (["--direction", "d2d"], "--direction d2d needs a CUDA GPU"),
    (["--host", "pinned"], "--host pinned needs a CUDA GPU"),
    (["--sizes", "0"], "at least 1 byte"),
    (["--sizes", "4XB"], "unknown unit"),
    (["--sizes", "4KB"], "write 4KiB"),
    (["--repeats", "0"], "at least 1"),
    (["--direction", "sideways"], "invalid choice"),
    (["--threads", "-1"], "--threads must be 0"),
])
def test_bench_refuses_bad_requests_with_exit_code_2(monkeypatch, capsys, argv, words):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *argv])
    assert exit_info.value.code == 2
    assert words in capsys.readouterr().err


def test_bench_refuses_sizes_that_do_not_fit(monkeypatch, capsys):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    monkeypatch.setattr(cb, "available_host_bytes", lambda: GiB)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--sizes", "4KiB,1GiB"])
    assert exit_info.value.code == 2
    assert "choose smaller sizes" in capsys.readouterr().err


# ----- copies that waited for busy cores ------------------------------------------------------------------


def host_result(nbytes: int, median_s: float, min_s: float | None = None) -> CopyResult:
    return CopyResult("h2h", "pageable", False, bytes=nbytes, median_s=median_s,
                      min_s=median_s if min_s is None else min_s, repeats=5, method=cb.METHOD_CLOCK)


def test_a_copy_slower_than_a_larger_one_or_far_above_its_fastest_sample_waited_for_cores():
    steady = [host_result(64 * KiB, 3e-6), host_result(MiB, 15e-6), host_result(64 * MiB, 4e-3)]
    assert cb.waited_for_cores(steady) == []
    stalled = host_result(MiB, 8e-3)  # the 1 MiB copy at 8 ms, slower than the 64 MiB one
    unsteady = host_result(4 * MiB, 2e-4, min_s=5e-5)
    found = cb.waited_for_cores([steady[0], stalled, unsteady, steady[2]])
    assert found == [stalled, unsteady]
    advice = cb.contention_advice(found, threads=16)
    assert "1 MiB, 4 MiB" in advice and "16 threads" in advice and "--threads 1" in advice


def test_gpu_copies_timed_with_events_are_not_judged_by_the_host_rule():
    event_timed = CopyResult("h2d", "pinned", False, bytes=MiB, median_s=1e-3, min_s=1e-4, repeats=5,
                             method=cb.METHOD_EVENTS)
    assert cb.waited_for_cores([event_timed, host_result(64 * MiB, 1e-4)]) == []


def test_bench_explains_copies_that_waited_for_busy_cores(monkeypatch, capsys):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    fake = [host_result(MiB, 8e-3), host_result(64 * MiB, 4e-3)]
    monkeypatch.setattr(cb, "sweep", lambda *a, **k: iter(fake))
    assert main(["bench", "--sizes", "1MiB,64MiB", "--threads", "4"]) == 0
    out = capsys.readouterr().out
    assert "waited for busy CPU cores" in out and "1 MiB" in out and "4 threads" in out
    monkeypatch.setattr(cb, "sweep", lambda *a, **k: iter(fake[::-1][:1]))
    assert main(["bench", "--sizes", "64MiB"]) == 0
    assert "busy CPU cores" not in capsys.readouterr().out


def test_bench_prints_no_progress_bar_into_a_piped_table(monkeypatch, capsys):
    monkeypatch.setattr(cb, "cuda_usable", lambda: False)
    assert main(["bench", "--sizes", "4KiB,8KiB", "--repeats", "1"]) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.out + captured.err and "copies:" not in captured.err
