"""The simulated GPU's trace export: the format torch.profiler writes, labelled simulated."""

import json

import pytest

from devicelab import sim_trace
from devicelab.simgpu import SimulatedGPU
from devicelab.units import MiB


def complete(trace: dict, cat: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["cat"] == cat]


def names(trace: dict, cat: str) -> list[str]:
    return [e["name"] for e in complete(trace, cat)]


def test_a_trace_says_everywhere_that_it_is_simulated():
    trace = sim_trace.example_trace()
    assert sim_trace.is_simulated(trace) and "SIMULATED" in trace["traceName"]
    assert all("SIMULATED" in p["name"] for p in trace["deviceProperties"])
    processes = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert processes and all("SIMULATED" in p for p in processes)
    assert not sim_trace.is_simulated({"traceEvents": []})


def test_events_have_the_fields_of_a_real_export():
    for event in sim_trace.example_trace()["traceEvents"]:
        assert {"ph", "name", "pid", "tid", "args"} <= set(event)
        if event["ph"] == "X":
            assert {"cat", "ts", "dur"} <= set(event) and event["dur"] >= 0


def test_a_blocking_pageable_copy_is_a_memcpy_then_a_stream_sync():
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof, prof.op("aten::to"):
        gpu.copy(MiB, "h2d", pinned=False)
    trace = prof.trace()
    assert names(trace, "cuda_runtime") == ["cudaMemcpyAsync", "cudaStreamSynchronize"]
    [copy] = complete(trace, "gpu_memcpy")
    assert copy["name"] == "Memcpy HtoD (Pageable -> Device)" and copy["args"]["bytes"] == MiB
    assert copy["args"]["device"] == 0
    [op] = complete(trace, "cpu_op")
    sync = complete(trace, "cuda_runtime")[1]
    assert op["ts"] <= sync["ts"] and sync["ts"] + sync["dur"] <= op["ts"] + op["dur"]
    assert gpu.copy.__func__ is SimulatedGPU.copy, "the profiler puts the GPU back as it was"


def test_a_non_blocking_pageable_copy_holds_the_host_inside_the_memcpy_call():
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.copy(MiB, "h2d", pinned=False, non_blocking=True)
    trace = prof.trace()
    [call] = complete(trace, "cuda_runtime")
    [copy] = complete(trace, "gpu_memcpy")
    assert call["name"] == "cudaMemcpyAsync" and call["dur"] > copy["dur"]


def test_pinned_copies_on_a_side_stream_overlap_kernels():
    gpu = SimulatedGPU(initialized=True)
    side = gpu.new_stream("copies")
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.launch(0.002, name="compute")
        with gpu.stream(side):
            gpu.copy(8 * MiB, "h2d", pinned=True, non_blocking=True)
        done = gpu.event()
        done.record(side)
        done.synchronize()
        gpu.synchronize()
    trace = prof.trace()
    [kernel] = complete(trace, "kernel")
    [copy] = complete(trace, "gpu_memcpy")
    assert copy["name"] == "Memcpy HtoD (Pinned -> Device)" and copy["tid"] != kernel["tid"]
    assert copy["ts"] < kernel["ts"] + kernel["dur"], "the copy starts while the kernel runs"
    assert names(trace, "cuda_runtime") == ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaEventSynchronize",
                                             "cudaDeviceSynchronize"]


def test_item_waits_inside_its_operator_and_microseconds_are_used():
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.launch(0.001)
        with prof.op("aten::item"):
            gpu.item()
    trace = prof.trace()
    [kernel] = complete(trace, "kernel")
    assert kernel["dur"] == pytest.approx(1000.0)  # 1 ms of work is 1000 us
    sync = next(e for e in complete(trace, "cuda_runtime") if e["name"] == "cudaStreamSynchronize")
    [op] = complete(trace, "cpu_op")
    assert op["ts"] < sync["ts"] and sync["ts"] + sync["dur"] < op["ts"] + op["dur"]


def test_export_writes_json_that_loads_back_the_same(tmp_path):
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.launch(0.001)
    path = prof.export_chrome_trace(tmp_path / "t.json")
    assert json.loads(path.read_text()) == prof.trace()


def test_the_example_trace_is_deterministic():
    assert sim_trace.example_trace() == sim_trace.example_trace()
