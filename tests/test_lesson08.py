"""Lesson 08, the capstone: the solutions pass, the stubs are not attempted, and each realistic wrong fix is caught."""

import pytest
import torch

from devicelab import capstone
from devicelab.exercises import lesson08
from devicelab.feedback import Outcome, evaluate
from devicelab.sim_trace import SimProfiler
from devicelab.simgpu import SimulatedGPU

EXERCISES = lesson08._exercises.exercises
IMPORTS = """
import statistics
import time
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
device = torch.device("cpu")
"""


def outcome(name: str, source: str):
    namespace: dict = {}
    exec(IMPORTS + source, namespace)
    return evaluate(EXERCISES[name], namespace)


def test_solutions_pass_and_stubs_are_not_attempted():
    namespace: dict = {}
    exec(IMPORTS, namespace)
    for exercise in EXERCISES.values():
        exec(exercise.solution, namespace)
    for exercise in EXERCISES.values():
        feedback = evaluate(exercise, namespace)
        assert feedback.outcome is Outcome.CORRECT, feedback

    stubs: dict = {}
    exec(IMPORTS + """
def forward(self, x):
    raise NotImplementedError("your code here")

def train(model, loader, optimizer, device):
    raise NotImplementedError("your code here")

def fast_epoch(model, dataset, optimizer, device, batch_size=32):
    raise NotImplementedError("your code here")

def time_it(fn, sync, clock, warmup=1, repeats=5):
    raise NotImplementedError("your code here")
""", stubs)
    assert all(evaluate(e, stubs).outcome is Outcome.NOT_ATTEMPTED for e in EXERCISES.values())


CORRECT_VARIANTS = {
    "forward": [
        """
def forward(self, x):
    if self.training:
        x = x + self.noise * torch.randn(x.shape, device=x.device)
    return self.body(x).squeeze(-1)
""",
        """
def forward(self, x):
    if self.training:
        noise = torch.randn(x.shape, device=self.body[0].weight.device, dtype=x.dtype)
        x = x + self.noise * noise
    return self.body(x).squeeze(-1)
""",
    ],
    "train": [
        """
def train(model, loader, optimizer, device):
    total = []
    for step, (x, y) in enumerate(loader):
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total.append(loss.detach())
    losses = torch.stack(total)
    print("losses:", losses.tolist())      # after the loop: one sync
    return losses
""",
    ],
    "fast_epoch": [
        """
def make_loader(dataset, device, batch_size):
    on_gpu = torch.device(device).type == "cuda"
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, pin_memory=on_gpu)

def train(model, loader, optimizer, device):
    losses = []
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)

def fast_epoch(model, dataset, optimizer, device, batch_size=32):
    return train(model, make_loader(dataset, device, batch_size), optimizer, device)
""",
    ],
    "time_it": [
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
    ],
}


@pytest.mark.parametrize("name,source", [(n, s) for n, sources in CORRECT_VARIANTS.items() for s in sources])
def test_other_correct_fixes_pass(name, source):
    feedback = outcome(name, source)
    assert feedback.outcome is Outcome.CORRECT, feedback


# The fixes students really try first, each with the words the check's message must contain.
_LOOP = """
    losses = []
    for x, y in loader:
        x, y = x.to(device{nb}), y.to(device{nb})
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        {keep}
    return {ret}
"""


def _train(keep="losses.append(loss.detach())", ret="torch.stack(losses)", nb=""):
    return "def train(model, loader, optimizer, device):" + _LOOP.format(keep=keep, ret=ret, nb=nb)


def _fast(pin, nb=", non_blocking=True", keep="losses.append(loss.detach())"):
    return ("def fast_epoch(model, dataset, optimizer, device, batch_size=32):\n"
            f"    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, pin_memory={pin})"
            + _LOOP.format(keep=keep, ret="torch.stack(losses)", nb=nb))


WRONG_FIXES = {
    "forward": [
        ("copied after the fact", """
def forward(self, x):
    if self.training:
        x = x + self.noise * torch.randn(x.shape).to(x.device)
    return self.body(x).squeeze(-1)
""", "made a tensor on the CPU"),
        ("hard-coded cuda", """
def forward(self, x):
    if self.training:
        x = x + self.noise * torch.randn(x.shape).cuda()
    return self.body(x).squeeze(-1)
""", ""),
        ("the notebook's global device", """
def forward(self, x):
    if self.training:
        x = x + self.noise * torch.randn(x.shape, device=device)
    return self.body(x).squeeze(-1)
""", "global"),
        ("noise dropped", """
def forward(self, x):
    return self.body(x).squeeze(-1)
""", "training mode"),
        ("the buggy original", """
def forward(self, x):
    if self.training:
        x = x + self.noise * torch.randn(x.shape)
    return self.body(x).squeeze(-1)
""", "meta device"),
    ],
    "train": [
        ("the buggy original", _train(keep="losses.append(loss.item())", ret="losses"), "['item']"),
        ("float() instead of .item()", _train(keep="losses.append(float(loss))", ret="losses"), "__float__"),
        ("a progress print of the tensor", _train(keep="losses.append(loss.detach()); print(f'{loss:.4f}')"),
         "__format__"),
        ("copied to the CPU each step", _train(keep="losses.append(loss.detach().cpu())"), "cpu"),
        ("the graph kept", _train(keep="losses.append(loss)"), "detach"),
        ("a list returned", _train(ret="losses"), "torch.stack"),
        ("only the last loss", _train(keep="last = loss.detach()", ret="last"), "shape"),
        ("zero_grad forgotten", """
def train(model, loader, optimizer, device):
    losses = []
    for x, y in loader:
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)
""", "differ"),
    ],
    "fast_epoch": [
        ("pinned from torch.cuda.is_available()", _fast("torch.cuda.is_available()"), "not from"),
        ("pinned by comparing strings", _fast('device == "cuda"'), "pin"),
        ("always pinned", _fast("True"), "nothing to pin"),
        ("never pinned", _fast("False"), "pin_memory=True"),
        ("blocking copies", _fast('torch.device(device).type == "cuda"', nb=""), "non_blocking=True"),
        ("non_blocking=True with an .item() print kept",
         _fast('torch.device(device).type == "cuda"', keep="losses.append(loss.detach()); print(loss.item())"), "item"),
    ],
    "time_it": [
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
    ],
}


@pytest.mark.parametrize("name,why,source,words",
                         [(n, why, s, w) for n, cases in WRONG_FIXES.items() for why, s, w in cases],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 45 and "\n" not in v else "")
def test_each_realistic_wrong_fix_is_not_correct(name, why, source, words):
    feedback = outcome(name, source)
    assert feedback.outcome is Outcome.INCORRECT, f"{why}: {feedback}"
    assert words in feedback.message, f"{why}: {feedback.message}"


def test_the_buggy_script_runs_on_the_cpu_and_fails_on_meta_as_on_a_gpu(capsys):
    capstone.main("cpu")
    assert "one epoch:" in capsys.readouterr().out
    model = capstone.SlowNet().to("meta")
    with pytest.raises(RuntimeError, match="device"):
        model(torch.randn(4, 32, device="meta"))


def _epoch(**fixes):
    gpu = SimulatedGPU(initialized=True)
    with SimProfiler(gpu) as prof:
        start = gpu.clock()
        capstone.simulate_epoch(gpu, prof, **fixes)
        gpu.synchronize()
    syncs = [e for e in prof.trace()["traceEvents"] if e.get("name") == "cudaStreamSynchronize"]
    return gpu.clock() - start, len(syncs)


def test_the_simulated_fixes_remove_every_stream_sync_and_make_the_epoch_faster():
    before, before_syncs = _epoch()
    half, _ = _epoch(item_each_step=False)
    after, after_syncs = _epoch(item_each_step=False, pinned=True, non_blocking=True)
    copied, _ = _epoch(item_each_step=False, pinned=True, non_blocking=True, noise_copied=True)
    assert before_syncs == 8 * 3 and after_syncs == 0
    assert before > half > after and copied > after
