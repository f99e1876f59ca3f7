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


def test_a_blocking_pageable_copy_waits_inside_the_memcpy_call_then_syncs_at_once():
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof, prof.ops(*sim_trace.TO_OPS):
        gpu.launch(0.002, name="earlier work")
        gpu.copy(MiB, "h2d", pinned=False)
    trace = prof.trace()
    assert names(trace, "cuda_runtime") == ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize"]
    _, memcpy, sync = complete(trace, "cuda_runtime")
    [copy] = complete(trace, "gpu_memcpy")
    assert copy["name"] == "Memcpy HtoD (Pageable -> Device)" and copy["args"]["bytes"] == MiB
    assert copy["args"]["device"] == 0
    assert memcpy["dur"] > 2000, "the host waits for the stream and the staging inside cudaMemcpyAsync"
    assert sync["dur"] == 0 and sync["ts"] == pytest.approx(memcpy["ts"] + memcpy["dur"])
    innermost = min((o for o in complete(trace, "cpu_op") if o["ts"] <= sync["ts"] <= o["ts"] + o["dur"]),
                    key=lambda o: o["dur"])
    assert innermost["name"] == "aten::copy_", "a real trace nests aten::to > aten::_to_copy > aten::copy_"
    assert gpu.copy.__func__ is SimulatedGPU.copy, "the profiler puts the GPU back as it was"


def test_a_blocking_pinned_copy_waits_in_the_stream_sync():
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.launch(0.002)
        gpu.copy(MiB, "h2d", pinned=True)
    _, memcpy, sync = complete(prof.trace(), "cuda_runtime")
    assert memcpy["name"] == "cudaMemcpyAsync" and memcpy["dur"] < 10
    assert sync["name"] == "cudaStreamSynchronize" and sync["dur"] > 2000


def test_a_copy_into_pageable_memory_holds_the_host_inside_the_memcpy_call():
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.cpu(gpu.launch(0.001, nbytes=MiB))
    calls = complete(prof.trace(), "cuda_runtime")
    assert [c["name"] for c in calls] == ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize"]
    assert calls[1]["dur"] > 1000 and calls[2]["dur"] == 0


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


def test_a_pinned_copy_held_by_a_full_launch_queue_is_linked_to_its_copy_and_is_no_host_wait():
    """As in a real trace, each cudaMemcpyAsync and its gpu_memcpy share args.correlation: a pinned copy's
    call that a full launch queue held (the GPU sets the pace) is not a wait for a sync."""
    from devicelab import trace_measures
    from devicelab.simgpu import T4_PCIE3

    gpu = SimulatedGPU(T4_PCIE3, initialized=True)
    with sim_trace.SimProfiler(gpu) as prof:
        for _ in range(2000):
            gpu.launch(0.001, name="compute")
        gpu.copy(8 * MiB, "h2d", pinned=True, non_blocking=True)
    trace = prof.trace()
    [call] = [e for e in complete(trace, "cuda_runtime") if e["name"] == "cudaMemcpyAsync"]
    [copy] = complete(trace, "gpu_memcpy")
    assert call["args"]["correlation"] == copy["args"]["correlation"]
    assert call["dur"] > 100, "the queue was full: the call held the host"
    assert trace_measures.host_waits(trace) == 0


def test_item_copies_into_pinned_memory_and_waits_inside_its_operator_in_microseconds():
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.launch(0.001)
        with prof.ops(*sim_trace.ITEM_OPS):
            gpu.item()
    trace = prof.trace()
    [kernel] = complete(trace, "kernel")
    assert kernel["dur"] == pytest.approx(1000.0)  # 1 ms of work is 1000 us
    assert names(trace,
                 "gpu_memcpy") == ["Memcpy DtoH (Device -> Pinned)"], "_local_scalar_dense copies to pinned"
    sync = next(e for e in complete(trace, "cuda_runtime") if e["name"] == "cudaStreamSynchronize")
    assert sync["dur"] > 900, "the wait for the kernel is in the stream sync (the copy itself is pinned)"
    item, scalar = complete(trace, "cpu_op")
    assert (item["name"], scalar["name"]) == sim_trace.ITEM_OPS
    assert scalar["ts"] < sync["ts"] and sync["ts"] + sync["dur"] < scalar["ts"] + scalar["dur"]


def test_streams_are_named_like_a_real_trace():
    gpu = SimulatedGPU(initialized=True)
    side = gpu.new_stream("copies")
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.launch(0.001)
        gpu.copy(MiB, "h2d", pinned=True, non_blocking=True, stream=side)
    trace = prof.trace()
    threads = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
               if e.get("name") == "thread_name" and e["pid"] == sim_trace.GPU_PID}
    [kernel], [copy] = complete(trace, "kernel"), complete(trace, "gpu_memcpy")
    assert kernel["tid"] == kernel["args"]["stream"] == 7 and threads[7] == "stream 7 (default)"
    assert copy["tid"] == copy["args"]["stream"] != 7 and "copies" in threads[copy["tid"]]


def test_export_writes_json_that_loads_back_the_same(tmp_path):
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.launch(0.001)
    path = prof.export_chrome_trace(tmp_path / "t.json")
    assert json.loads(path.read_text()) == prof.trace()


def test_the_example_trace_is_deterministic():
    assert sim_trace.example_trace() == sim_trace.example_trace()


def test_a_graph_replay_is_one_graph_launch_for_all_its_kernels():
    gpu = SimulatedGPU(initialized=True)
    with sim_trace.SimProfiler(gpu) as prof:
        gpu.launch_graph([2e-6] * 5)
    trace = prof.trace()
    assert names(trace, "cuda_runtime") == ["cudaGraphLaunch"] and len(complete(trace, "kernel")) == 5
