"""Lesson 08, the capstone: the script's problems show in a trace of the code itself, and fixes change the
trace.

The script runs on the simulated GPU (devicelab.capstone.profile_script): the unfixed script's trace misses
every target of devicelab.trace_measures, the fixed one reaches them all, each realistic wrong fix leaves a
measure off target, and `check` says so in the trace's terms, never naming the cause. The fixes in stages
(benchmarks/stand_ins/capstone_stages.py) each pay on the simulated H100, the whole fix at least 3x.
"""

import dataclasses
import itertools
import math
import re
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from autograder import COURSE_ROOT
from devicelab import capstone, sim_cuda, sim_machines, trace_measures
from devicelab.exercises import lesson08
from devicelab.feedback import Outcome, evaluate
from devicelab.simgpu import SimulatedGPU

sys.path.insert(0, str(COURSE_ROOT / "benchmarks" / "stand_ins"))
import capstone_stages  # the reference fixes live beside the benchmark, not in the package

EXERCISES = lesson08._exercises.exercises
IMPORTS = """
import statistics
import time
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from devicelab.capstone import Net as ScriptNet
"""
NET_FIXED = """
class Net(ScriptNet):
    def forward(self, x):
        x = x.float() / 255
        if self.training:
            x = x + self.noise * torch.randn_like(x)
        return self.body(x)
"""
LOADER = """
def build_loader(dataset, device):
    pin = torch.device(device).type == "cuda"
    return DataLoader(dataset, batch_size=256, shuffle=True, pin_memory={pin}, num_workers={workers},
                      persistent_workers={persistent})
"""
SIDE_STREAM_LOOP = """
def run_epoch(model, loader, optimizer, device):
    side = torch.cuda.Stream()
    batches = iter(loader)

    def upload(batch):
        with torch.cuda.stream(side):
            return [t.to(device, non_blocking=True) for t in batch]

    losses, following = [], upload(next(batches))
    for step in range(len(loader)):
        {wait}
        x, y = following
        x.record_stream(torch.cuda.current_stream())
        y.record_stream(torch.cuda.current_stream())
        if step + 1 < len(loader):
            following = upload(next(batches))
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append({keep})
    return torch.stack(losses)
"""
PLAIN_LOOP = """
def run_epoch(model, loader, optimizer, device):
    losses = []
    for x, y in loader:
        x, y = x.to(device{nb}), y.to(device{nb})
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append({keep})
    return {result}
"""


def script(net=NET_FIXED, pin="pin", workers="8 if pin else 0", persistent="pin", loop=SIDE_STREAM_LOOP,
           **parts) -> str:
    defaults = {"wait": "torch.cuda.current_stream().wait_stream(side)", "keep": "loss.detach()", "nb": "",
                "result": "torch.stack(losses)"}
    return (IMPORTS + net + LOADER.format(pin=pin, workers=workers, persistent=persistent)
            + loop.format(**{**defaults, **parts}))


def namespace_of(source: str) -> dict:
    namespace: dict = {}
    exec(source, namespace)
    return namespace


def run_of(source: str) -> capstone.ScriptRun:
    ns = namespace_of(source)
    return capstone.profile_script(ns["Net"], ns["build_loader"], ns["run_epoch"])


# The reference fix is one file, the one `make gpu-record` runs in place of the lesson's cell; script()
# builds the realistic wrong fixes from the same parts.
FIXED = (COURSE_ROOT / "benchmarks" / "stand_ins" / "capstone_fixed.py").read_text()


def test_the_script_runs_on_the_cpu_and_stops_on_the_simulated_gpu_as_on_a_gpu(capsys):
    capstone.main("cpu", images=8)
    assert "one epoch:" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="device"):
        capstone.profile_script()


def test_the_simulated_cuda_is_put_back_after_a_run():
    import torch

    originals = (torch.cuda.Stream, torch.cuda.synchronize, torch.cuda.is_available, torch.Tensor.pin_memory,
                 torch.Tensor.record_stream, torch.Tensor.is_pinned)
    run_of(FIXED)
    assert originals == (torch.cuda.Stream, torch.cuda.synchronize, torch.cuda.is_available,
                         torch.Tensor.pin_memory, torch.Tensor.record_stream, torch.Tensor.is_pinned)
    assert torch.randn(2).device.type == "cpu" and not torch.cuda.is_available()
    assert torch.ones(2).to("meta").device.type == "meta"


def test_the_unfixed_script_shows_every_problem_in_its_trace():
    run = capstone.profile_script(lesson08.NoiseOnDevice)
    summary = capstone.summarize(run.trace)
    assert run.steps == 50
    assert summary.waits == {"aten::copy_": 100,
                             "aten::_local_scalar_dense": 50}, "3 waits a step, as predicted"
    assert summary.copies["Memcpy HtoD (Pageable -> Device)"] == 100
    assert summary.copies["Memcpy DtoH (Device -> Pinned)"] == 50, ".item() copies into pinned memory"
    measures = trace_measures.measure(run.trace, run.steps)
    assert measures.copy_overlap == 0.0 and measures.waits_per_step == 3
    assert 0.25 < measures.gpu_busy_share < 0.35, "the lesson's prediction says about 30% busy"
    found = lesson08.symptoms(run)
    for words in ("host waits per step", "pageable memory", "GPU is busy", "copy overlap"):
        assert any(words in f for f in found), (words, found)


CAUSES = ("item", "_local_scalar_dense", "pin_memory", "non_blocking", "num_workers", "persistent", "Stream",
          "wait_stream", "record_stream", "DataLoader(")


def test_check_hints_and_reveals_never_name_a_cause():
    """The student finds the causes in the trace: the check's words are measures, not fixes."""
    run = capstone.profile_script(lesson08.NoiseOnDevice)
    exercise = EXERCISES["run_epoch"]
    spoken = [*lesson08.symptoms(run), *exercise.hints, exercise.success, exercise.withheld,
              *(p.reason for p in lesson08.PREDICTIONS.values())]
    for words in spoken:
        assert not any(cause in words for cause in CAUSES), words


def test_the_fixed_script_has_a_clean_trace_with_copies_under_compute():
    run = run_of(FIXED)
    summary = capstone.summarize(run.trace)
    assert lesson08.symptoms(run) == []
    assert set(summary.copies) == {"Memcpy HtoD (Pinned -> Device)"} and summary.overlap > 0.8
    assert summary.waits == {"(no operator)": 1}, "one wait: the sync after the epoch"
    before = capstone.profile_script(lesson08.NoiseOnDevice)
    assert before.seconds > 3 * run.seconds, "the simulated H100 meets the capstone's target"
    assert run.host_seconds < run.seconds, "a stopwatch without a sync stops before the GPU has finished"
    assert len(run.result) == 50


def test_check_confirms_the_fixed_script_and_lists_what_the_unfixed_one_misses():
    assert evaluate(EXERCISES["run_epoch"], namespace_of(FIXED)).outcome is Outcome.CORRECT
    unfixed = evaluate(EXERCISES["run_epoch"], {"run_epoch": capstone.run_epoch})
    assert unfixed.outcome is Outcome.INCORRECT and "stops with RuntimeError" in unfixed.message
    noise_only = namespace_of(IMPORTS + NET_FIXED)
    noise_only.update(build_loader=capstone.build_loader, run_epoch=capstone.run_epoch)
    exec("def run_epoch(model, loader, optimizer, device):\n"
         "    return _script(model, loader, optimizer, device)\n",
         {**noise_only, "_script": capstone.run_epoch}, noise_only)
    feedback = evaluate(EXERCISES["run_epoch"], noise_only)
    assert feedback.outcome is Outcome.INCORRECT and "host waits per step: 3.00" in feedback.message


WRONG_FIXES = [
    ("noise made on the CPU and moved", script(net=NET_FIXED.replace("torch.randn_like(x)",
                                                                     "torch.randn(x.shape).to(x.device)")),
     "host-to-device copies for 50 batches"),
    ("item() kept in the loop", script(keep="loss.detach()); print(f'{loss.item():.3f}'"),
     "host waits per step: 1.0"),
    ("a device-wide sync each step", script(keep="loss.detach()); torch.cuda.synchronize("),
     "host waits per step: 1.0"),
    ("no pinning", script(pin="False"), "uploads from pageable memory: 100 of 100"),
    ("pinned, blocking copies, no side stream", script(loop=PLAIN_LOOP), "host waits per step: 2.0"),
    ("pinned, non-blocking, one stream", script(loop=PLAIN_LOOP, nb=", non_blocking=True"),
     "copy overlap: 0%"),
    ("no workers", script(workers="0", persistent="False"), "the GPU is busy"),
    ("a side stream without the wait", script(wait="pass"), "before that copy had landed"),
]


@pytest.mark.parametrize(("why", "source", "words"), WRONG_FIXES, ids=[w[0] for w in WRONG_FIXES])
def test_each_realistic_wrong_fix_leaves_a_measure_off_target(why, source, words):
    feedback = evaluate(EXERCISES["run_epoch"], namespace_of(source))
    assert feedback.outcome is Outcome.INCORRECT, f"{why}: {feedback}"
    assert words in feedback.message, f"{why}: {feedback.message}"


def test_a_loop_that_drops_losses_is_not_accepted():
    feedback = evaluate(EXERCISES["run_epoch"], namespace_of(script(loop=PLAIN_LOOP, nb=", non_blocking=True",
                                                                      result="torch.stack(losses[:1])")))
    assert feedback.outcome is Outcome.INCORRECT and "one loss per step" in feedback.message


def test_the_predictions_answers_are_what_the_simulation_shows():
    run = capstone.profile_script(lesson08.NoiseOnDevice)
    waits = sum(capstone.summarize(run.trace).waits.values())
    assert lesson08.PREDICTIONS["waits-per-step"].answer == str(waits // run.steps)
    assert lesson08.PREDICTIONS["gpu-busy"].answer == (
        f"about {round(trace_measures.gpu_busy_share(run.trace) * 10) * 10}%")
    assert lesson08.PREDICTIONS["on-a-gpu"].answer == "it stops with a device mismatch"
    assert math.isclose(run.host_seconds, run.seconds, rel_tol=0.01), "the script's own stopwatch is right"
    assert lesson08.PREDICTIONS["naive-stopwatch"].answer == "about the same"
    fixed = run_of(FIXED)
    assert fixed.host_seconds < 0.9 * fixed.seconds, "the reveal says a fixed loop's stopwatch reads less"


STAGES = capstone_stages.stages()


def test_each_stage_of_the_fix_pays_on_the_simulated_h100_and_the_whole_fix_at_least_3x():
    seconds = [capstone.profile_script(s.net, s.build_loader, s.run_epoch, machine="H100").seconds
               for s in STAGES]
    for (before, after), stage in zip(itertools.pairwise(seconds), STAGES[1:], strict=True):
        assert after < 0.95 * before, f"{stage.name}: {before * 1e3:.1f} -> {after * 1e3:.1f} ms"
    assert seconds[0] > 3 * seconds[-1]


def test_on_the_simulated_t4_the_gpu_sets_the_pace():
    """The same fixes on a T4: the first stage lets the GPU work while the host decodes; after it the GPU is
    busy almost all the time, so the rest gain little (the lesson's per-GPU story)."""
    runs = [capstone.profile_script(s.net, s.build_loader, s.run_epoch, machine="T4") for s in STAGES[:2]]
    assert runs[0].seconds > 1.3 * runs[1].seconds
    assert trace_measures.gpu_busy_share(runs[1].trace) > 0.95


@pytest.mark.parametrize("machine", sorted(capstone.MACHINES))
def test_the_reference_fix_meets_every_target_on_every_simulated_machine(machine):
    final = STAGES[-1]
    run = capstone.profile_script(final.net, final.build_loader, final.run_epoch, machine=machine)
    assert not lesson08.symptoms(run), (machine, lesson08.symptoms(run))


def test_on_the_2_vcpu_t4_the_fix_pays_without_workers_and_workers_buy_nothing():
    """A Colab T4 session has 2 vCPUs: the fixes that need no host core (no syncs, pinned non_blocking copies)
    pay there; eight workers on the one core the loop leaves cost their start and first batches."""
    script, _, pinned, workers, _ = (capstone.profile_script(s.net, s.build_loader, s.run_epoch, machine="T4")
                                     for s in STAGES)
    assert script.seconds > 1.4 * pinned.seconds
    assert workers.seconds >= pinned.seconds


def test_every_simulated_machine_names_the_source_of_each_figure():
    for machine in capstone.MACHINES.values():
        host_fields = {f.name for f in dataclasses.fields(machine.host)} - {"name", "sources"}
        assert set(dict(machine.host.sources)) == host_fields, machine.name
        assert "SIMULATED" in machine.describe()
        assert re.search(rf"cores +{machine.host.cores} +ASSUMPTION", machine.describe()), "a count, not ms"
    h100 = dict(capstone.MACHINES["H100"].gpu.sources)
    assert {"launch_s", "h2d_pinned_Bps", "h2d_pageable_Bps", "context_init_s"} <= set(h100)
    assert all(source.startswith(("recorded", "ASSUMPTION", "NVIDIA", "PCIe")) for source in h100.values())


def test_alternate_times_each_version_in_turns_and_reports_its_spread():
    gpu = SimulatedGPU(initialized=True)
    order = []

    def version(name, seconds):
        def run():
            order.append(name)
            gpu.launch(seconds.pop(0), name=name)
        return run

    before = version("before", [0.05, 0.010, 0.012, 0.011, 0.013, 0.010, 0.014, 0.011])
    after = version("after", [0.05, 0.004, 0.005, 0.004, 0.006, 0.004, 0.005, 0.004])
    result = capstone.alternate(before, after, sync=gpu.synchronize, clock=gpu.clock, runs=7)
    assert order == ["before", "after"] * 8, "warm-up, then one of each in turn"
    assert len(result.before.samples) == len(result.after.samples) == 7
    launch = gpu.profile.launch_s
    assert result.before.min == pytest.approx(0.010 + launch)
    assert result.before.max == pytest.approx(0.014 + launch)
    assert result.after.median == pytest.approx(0.004 + launch)
    assert result.beyond_spread and result.speedup == pytest.approx((0.011 + launch) / (0.004 + launch))
    overlapping = capstone.Comparison(capstone.Spread((1.0, 2.0)), capstone.Spread((1.5, 1.6)))
    assert not overlapping.beyond_spread


def time_it_outcome(source: str):
    return evaluate(EXERCISES["time_it"], namespace_of(IMPORTS + source))


CORRECT_TIME_IT = [
        """
def time_it(fn, sync, clock, warmup=1, repeats=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = clock()
        fn()
        sync()
        times.append(clock() - t0)
    times.sort()
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
""",
    lesson08._TIME_IT,
]
WRONG_TIME_IT = [
        ("the naive stopwatch", """
def time_it(fn, sync, clock, warmup=1, repeats=5):
    start = clock()
    fn()
    return clock() - start
""", "only the launch"),
        ("sync only at the end", """
def time_it(fn, sync, clock, warmup=1, repeats=5):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = clock()
        fn()
        sync()
        samples.append(clock() - start)
    return statistics.median(samples)
""", "sync() before you start"),
        ("perf_counter", """
def time_it(fn, sync, clock, warmup=1, repeats=5):
    fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start
""", "clock()"),
        ("no warm-up", """
def time_it(fn, sync, clock, warmup=1, repeats=5):
    samples = []
    for _ in range(warmup + repeats):
        sync()
        start = clock()
        fn()
        sync()
        samples.append(clock() - start)
    return statistics.median(samples)
""", "warmup"),
        ("the mean", """
def time_it(fn, sync, clock, warmup=1, repeats=5):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        sync()
        start = clock()
        fn()
        sync()
        samples.append(clock() - start)
    return sum(samples) / len(samples)
""", "median"),
        ("the total", """
def time_it(fn, sync, clock, warmup=1, repeats=5):
    for _ in range(warmup):
        fn()
    sync()
    start = clock()
    for _ in range(repeats):
        fn()
    sync()
    return clock() - start
""", "one call"),
]


@pytest.mark.parametrize("source", CORRECT_TIME_IT)
def test_honest_timers_pass(source):
    assert time_it_outcome(source).outcome is Outcome.CORRECT


@pytest.mark.parametrize(("why", "source", "words"), WRONG_TIME_IT, ids=[w[0] for w in WRONG_TIME_IT])
def test_each_dishonest_timer_is_caught(why, source, words):
    feedback = time_it_outcome(source)
    assert feedback.outcome is Outcome.INCORRECT and words in feedback.message, f"{why}: {feedback}"


def test_stubs_are_not_attempted_and_no_capstone_solution_ships():
    stubs = namespace_of(IMPORTS + """
def run_epoch(model, loader, optimizer, device):
    raise NotImplementedError("your code here")

def time_it(fn, sync, clock, warmup=1, repeats=5):
    raise NotImplementedError("your code here")
""")
    assert all(evaluate(e, stubs).outcome is Outcome.NOT_ATTEMPTED for e in EXERCISES.values())
    assert EXERCISES["run_epoch"].solution is None and EXERCISES["run_epoch"].withheld


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 8 workers, for the H100's host
def test_the_reference_fix_gpu_record_runs_is_clean_on_the_simulated_gpu():
    """benchmarks/stand_ins/capstone_fixed.py (what `make gpu-record` runs in place of `my-script`)."""
    ns = namespace_of(FIXED)
    outcome = evaluate(EXERCISES["run_epoch"], ns)
    assert outcome.outcome is Outcome.CORRECT, outcome.message
    loader = ns["build_loader"](capstone.Photos(n=256), "cuda")
    assert loader.persistent_workers, "workers started once, not every epoch"


def _event(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def test_a_real_trace_s_loader_rows_count_as_time_in_the_loader():
    """torch.profiler names them enumerate(DataLoader)#..., the simulated GPU DataLoader: ..."""
    trace = {"traceEvents": [
        _event("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 3000),
        _event("user_annotation", "Optimizer.step#SGD.step", 3000, 500),
        _event("kernel", "gemm", 3100, 100, tid=7)]}
    assert capstone.summarize(trace).loader_s == pytest.approx(3e-3)


def test_a_real_trace_s_slow_call_for_a_pinned_copy_is_not_a_host_wait():
    """Real traces link a call to its copy (correlation): only pageable copies hold the host."""
    trace = {"traceEvents": [
        _event("cpu_op", "aten::copy_", 0, 1000),
        _event("cuda_runtime", "cudaMemcpyAsync", 10, 200, correlation=1),
        _event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 50, 60, tid=7, correlation=1),
        _event("cpu_op", "aten::copy_", 2000, 1000),
        _event("cuda_runtime", "cudaMemcpyAsync", 2010, 800, correlation=2),
        _event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 2050, 700, tid=7, correlation=2)]}
    assert capstone.summarize(trace).waits == {"aten::copy_": 1}


def test_a_held_copy_and_its_stream_sync_in_one_operator_are_one_wait():
    """A blocking pageable .to() on a GPU: cudaMemcpyAsync, then cudaStreamSynchronize a few us later."""
    trace = {"traceEvents": [
        _event("cpu_op", "aten::copy_", 0, 1000),
        _event("cuda_runtime", "cudaMemcpyAsync", 10, 800, correlation=1),
        _event("cuda_runtime", "cudaStreamSynchronize", 815, 20),
        _event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 50, 700, tid=7, correlation=1)]}
    assert capstone.summarize(trace).waits == {"aten::copy_": 1}


def test_a_training_function_that_makes_its_own_loader_is_simulated_too():
    """profile_training (ps06's grader): a DataLoader made inside the code, `.cuda()` and `torch.device`."""
    seen = {}

    def train(model, dataset, optimizer, device):
        seen["device"] = torch.device(device).type
        loader = DataLoader(dataset, batch_size=256, pin_memory=True)
        losses = []
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.to(device, non_blocking=True)
            losses.append(F.cross_entropy(model(x), y).detach())
        return losses

    run = capstone.profile_training(lesson08.NoiseOnDevice, train, dataset=capstone.Photos(n=3 * 256 + 10))
    assert seen["device"] == "cuda", "the code is told it runs on cuda"
    assert run.steps == 4 and len(run.result) == 4 and run.loader.pin_memory
    assert capstone.summarize(run.trace).copies == {"Memcpy HtoD (Pinned -> Device)": 8}



def _simulated(machine="H100"):
    from devicelab.sim_trace import SimProfiler

    chosen = capstone.MACHINES[machine] if isinstance(machine, str) else machine
    gpu = SimulatedGPU(chosen.gpu, initialized=True)
    return gpu, sim_cuda.simulated_cuda(gpu, SimProfiler(gpu), chosen.host)


def _loading(workers: int, machine="H100", batches=32, epochs=1, **options) -> list[float]:
    """Simulated seconds of each epoch iterating `batches` small batches of one loader with `workers` workers,
    and of the start of the workers in each."""
    from torch.utils.data import TensorDataset

    gpu, simulated = _simulated(machine)
    times = []
    with simulated, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # more workers than this machine's cores: the simulated host has them
        loader = DataLoader(TensorDataset(torch.zeros(8 * batches, 8)), batch_size=8, num_workers=workers,
                            **options)
        for _ in range(epochs):
            start = gpu.clock()
            for _ in loader:
                pass
            times.append(gpu.clock() - start)
    return times


def _steady(workers: int, machine="H100", **options) -> float:
    """Simulated seconds for the batches of one epoch, without the start of the workers."""
    host = (capstone.MACHINES[machine] if isinstance(machine, str) else machine).host
    return _loading(workers, machine, **options)[0] - (host.worker_start_s if workers else 0.0)


def test_workers_share_the_cores_the_loop_leaves_them():
    """On the 2-vCPU T4 host the loop's process keeps one core: one worker makes batches as fast as eight."""
    assert capstone.MACHINES["T4"].host.cores == 2
    one, eight = _steady(1, "T4"), _steady(8, "T4")
    assert eight == pytest.approx(one, rel=0.25), (one, eight)
    assert _steady(8, "H100") < 0.2 * _steady(1, "H100"), "16 cores: eight workers make batches ~8x as fast"


def test_prefetch_factor_bounds_how_far_the_workers_run_ahead():
    """Batch b goes to a worker once batch b - num_workers x prefetch_factor has reached the loop: a loop that
    takes its batches slowly never finds more than that many ready."""
    from torch.utils.data import TensorDataset

    from devicelab.sim_trace import SimProfiler

    def ready_waits(prefetch_factor: int) -> int:
        gpu = SimulatedGPU(capstone.MACHINES["H100"].gpu, initialized=True)
        with sim_cuda.simulated_cuda(gpu, SimProfiler(gpu), capstone.MACHINES["H100"].host), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loader = DataLoader(TensorDataset(torch.zeros(256 * 12, 3, 64, 64)), batch_size=256,
                                num_workers=2, prefetch_factor=prefetch_factor)
            for b, _ in enumerate(loader):
                if b == 0:
                    gpu.host_work(1.0, "a slow first step")  # every worker finishes what it was given
        return sum(r.name == "DataLoader: wait for a worker's batch" and r.end - r.start > 1e-6
                   for r in gpu.timeline)

    # after the slow step, 2 x prefetch_factor batches were ready (the first among them): the loop waits for
    # each batch after those
    assert ready_waits(2) > ready_waits(4) > ready_waits(5)


def test_workers_start_at_a_loader_s_first_epoch_and_every_epoch_unless_persistent():
    start = capstone.MACHINES["H100"].host.worker_start_s
    persistent = _loading(4, epochs=2, persistent_workers=True)
    fresh = _loading(4, epochs=2, persistent_workers=False)
    assert persistent[0] == pytest.approx(fresh[0]), "the first epoch starts the workers either way"
    assert persistent[0] - persistent[1] == pytest.approx(start, rel=0.05)
    assert fresh[1] == pytest.approx(fresh[0], rel=0.01)
    assert _loading(0, epochs=2) == pytest.approx([_loading(0)[0]] * 2), "no workers: nothing to start"


def test_profile_script_traces_a_later_epoch_and_profile_training_a_new_loader():
    """profile_script: the script makes its loader once (a later epoch: persistent workers are up);
    profile_training: a loader made in the call starts its workers, persistent or not."""
    fixed = capstone_stages.fixed_parts()
    net, loop, start = fixed["Net"], fixed["run_epoch"], capstone.MACHINES["H100"].host.worker_start_s
    steps = {"steps": 4}

    def loader(persistent):
        return lambda dataset, device: DataLoader(dataset, batch_size=256, shuffle=True, pin_memory=True,
                                                  num_workers=8, persistent_workers=persistent)

    up = capstone.profile_script(net, loader(True), loop, **steps).seconds
    again = capstone.profile_script(net, loader(False), loop, **steps).seconds
    assert again - up == pytest.approx(start, rel=0.05)

    def training(persistent):
        def train(model, dataset, optimizer, device):
            return loop(model, loader(persistent)(dataset, device), optimizer, device)
        return capstone.profile_training(net, train, dataset=capstone.Photos(n=4 * 256)).seconds

    assert training(True) == pytest.approx(training(False))


def test_describe_lists_every_choice_of_the_model_and_each_is_what_the_simulator_does():
    """Lesson 08 prints MACHINES["H100"].describe(): beside every figure, the model's own choices. Each is
    checked here against what the simulated GPU and loader do."""
    text = capstone.MACHINES["H100"].describe()
    for what, how in sim_machines.MODELLING:
        assert what in text and how in text and how.startswith("ASSUMPTION")
    for words in ("FP32 peak", "2 x the FLOPs of the forward", f"{sim_machines.KERNEL_MIN_S * 1e6:.0f} us",
                  "memory-bound", "n times as fast", "the loop's process keeps one core", "prefetch_factor",
                  "persistent_workers=True"):
        assert words in text, words
    peak, d2d = capstone.MACHINES["H100"].gpu.flops_per_s, capstone.MACHINES["H100"].gpu.d2d_Bps
    gpu, simulated = _simulated()
    with simulated:
        a = torch.ones(2048, 4096, device="cuda", requires_grad=True)
        y = a @ torch.ones(4096, 4096, device="cuda")        # a matrix product at the whole FP32 peak
        z = y * 2                                            # elementwise: memory-bound
        _ = torch.ones(4, device="cuda") + 1                 # tiny: the floor
        z.sum().backward()                                   # one kernel, twice the forward's FLOPs
    kernels = {r.name: r.end - r.start for r in gpu.timeline if r.engine == "compute"}
    flops = 2 * 2048 * 4096 * 4096
    assert kernels["matmul"] == pytest.approx(flops / peak)
    assert kernels["mul"] == pytest.approx(3 * y.nbytes / (2 * d2d))
    assert kernels["add"] == pytest.approx(sim_machines.KERNEL_MIN_S)
    assert kernels["backward kernels"] == pytest.approx(2 * flops / peak)
    one, two, four = (_steady(n, persistent_workers=True) for n in (1, 2, 4))
    assert two < 0.55 * one and four < 0.55 * two, "each worker more makes batches as fast again"


def test_the_pinning_rate_says_it_is_derived_not_recorded():
    """Lesson 06 recorded two medians for a 64 MiB upload (2.83 ms with x.pin_memory() first, 1.28 ms from
    memory already pinned); the 1.55 ms of pinning is their difference, and pin_Bps says so."""
    source = dict(capstone.MACHINES["H100"].host.sources)["pin_Bps"]
    assert source.startswith("derived from two medians") and "2.83 ms" in source and "1.28 ms" in source
    assert capstone.MACHINES["H100"].host.pin_Bps == pytest.approx(64 * 2**20 / 1.55e-3, rel=0.02)


def test_the_lesson_prints_the_machine_s_description_and_tags_its_summary_simulated():
    import nbformat

    cells = {c.get("id"): c.source for c in nbformat.read(
        COURSE_ROOT / "notebooks" / "08-capstone-fix-a-slow-training-script.ipynb", as_version=4).cells}
    assert cells["describe-machine"] == 'print(capstone.MACHINES["H100"].describe())'
    mine = cells["profile-mine"]
    assert mine.index("SIMULATED on the") < mine.index("show_summary(") < mine.index("show_measures(")



def test_the_machine_the_lesson_describes_before_the_predictions_is_the_simulated_one():
    """Section 3 gives the figures a student reasons from (a step's kernels, the host's cores, decoding a
    photo): each is the simulated H100's."""
    import nbformat

    cells = {c.get("id"): c.source for c in nbformat.read(
        COURSE_ROOT / "notebooks" / "08-capstone-fix-a-slow-training-script.ipynb", as_version=4).cells}
    text = " ".join(cells["c7169608"].split())
    host = capstone.MACHINES["H100"].host
    assert f"{host.cores} CPU cores" in text and f"about {host.decode_s_per_image * 1e6:.0f} us" in text
    final = STAGES[-1]
    run = capstone.profile_script(final.net, final.build_loader, final.run_epoch)
    per_step_ms = capstone.summarize(run.trace).kernel_s / run.steps * 1e3
    assert f"about {round(per_step_ms)} ms" in text, per_step_ms
