"""ps06-streams-and-profiling: the solutions and other correct answers earn full marks; realistic mistakes
lose points.

The mistakes came first, written down from how people read a trace for the first time (table below), then the
hidden tests that catch them, then the other correct answers that must still get full marks.
"""

from functools import partial

import pytest
import torch
from nbgrader import utils

from autograder import COURSE_ROOT
from autograder.cells import grade_id
from tests import assignment_support as support
from tests.harness import run_graded_cells

NOTEBOOK = COURSE_ROOT / "source" / "ps06-streams-and-profiling" / "ps06-streams-and-profiling.ipynb"
CELLS_OF = {
    "copy-totals": ("copy-totals-tests-basic", "copy-totals-tests-filtering"),
    "overlap-fraction": ("overlap-fraction-tests-basic", "overlap-fraction-tests-once",
                         "overlap-fraction-tests-devices", "overlap-fraction-tests-edges"),
    "sync-ops": ("sync-ops-tests-basic", "sync-ops-tests-threads"),
    "refill-pinned": ("refill-pinned-tests-order", "refill-pinned-tests-in-place",
                      "refill-pinned-tests-shape"),
    "copy-then-run": ("copy-then-run-tests-wait", "copy-then-run-tests-memory"),
    "fixed-epoch": ("fixed-epoch-tests-results", "fixed-epoch-tests-waits", "fixed-epoch-tests-pinned",
                    "fixed-epoch-tests-busy", "fixed-epoch-tests-overlap"),
}
POINTS_OF = {"copy-totals": 3, "overlap-fraction": 4, "sync-ops": 3, "refill-pinned": 4, "copy-then-run": 4,
             "fixed-epoch": 16}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "copy-totals": 'def copy_totals(trace: dict) -> dict:\n    """Sum the copies."""\n',
    "overlap-fraction": 'def overlap_fraction(trace: dict, direction: str = "h2d") -> float:\n'
                        '    """Overlap."""\n',
    "sync-ops": 'def sync_ops(trace: dict) -> list[str]:\n    """Sync ops."""\n',
    "refill-pinned": 'def refill_pinned(buffer: torch.Tensor, data: torch.Tensor, copy_done) -> '
                     'torch.Tensor:\n'
                     '    """Refill."""\n',
    "copy-then-run": 'def copy_then_run(batch: torch.Tensor, device, side, step):\n'
                     '    """Copy, wait, record, run."""\n',
    "fixed-epoch": 'def fixed_epoch(model, dataset, optimizer, device):\n    """Train one epoch."""\n',
}

results_for = partial(run_graded_cells, NOTEBOOK)


def cell(exercise: str, body: str) -> str:
    """Return a solution cell for `exercise` whose body is `body` (written flush left)."""
    return support.function_cell(HEADS[exercise], body)


# ----------------------------------------------------------------------------------------------------------
# The reference answers, one piece at a time, so that each mistake changes one thing.

def totals_with(keep='event.get("ph") != "X" or event.get("cat") != "gpu_memcpy"',
                keys='(("HtoD", "h2d"), ("DtoH", "d2h"), ("DtoD", "d2d"))',
                match='key in event.get("name", "")',
                nbytes='event.get("args", {}).get("bytes", 0)', seconds='event["dur"] / 1e6',
                start='{direction: {"count": 0, "bytes": 0, "seconds": 0.0} for direction in ("h2d", "d2h", '
                      '"d2d")}',
                result="totals") -> str:
    return cell("copy-totals", f"""
totals = {start}
for event in trace["traceEvents"]:
    if {keep}:
        continue
    for key, direction in {keys}:
        if {match}:
            total = totals.setdefault(direction, {{"count": 0, "bytes": 0, "seconds": 0.0}})
            total["count"] += 1
            total["bytes"] += {nbytes}
            total["seconds"] += {seconds}
return {result}
""")


OVERLAP_CHECK = '''names = {"h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD"}
if direction not in names:
    raise ValueError(direction)'''


def overlap_with(check=OVERLAP_CHECK, events='e.get("ph") == "X"',
                 is_kernel='e.get("cat") == "kernel"',
                 same_device='k.get("args", {}).get("device") == device',
                 empty="return 0.0", merge=True, total='sum(c["dur"] for c in copies)',
                 result="covered / total") -> str:
    if merge:
        add = """reach = start
for piece_start, piece_end in pieces:
    piece_start = max(piece_start, reach)
    if piece_end > piece_start:
        covered += piece_end - piece_start
        reach = piece_end"""
    else:
        add = """for piece_start, piece_end in pieces:
    if piece_end > piece_start:
        covered += piece_end - piece_start"""
    add = "\n".join("    " + line for line in add.split("\n"))
    return cell("overlap-fraction", f"""
{check}
names = {{"h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD"}}
events = [e for e in trace["traceEvents"] if {events}]
copies = [e for e in events if e.get("cat") == "gpu_memcpy" and names.get(direction, "?") in e.get("name", "")]
kernels = [e for e in events if {is_kernel}]
total = {total}
if total <= 0:
    {empty}
covered = 0.0
for c in copies:
    start, end = c["ts"], c["ts"] + c["dur"]
    device = c.get("args", {{}}).get("device")
    pieces = sorted((max(k["ts"], start), min(k["ts"] + k["dur"], end)) for k in kernels if {same_device})
{add}
return {result}
""")  # noqa: E501 (an answer's source, kept as written)


def sync_with(names='{"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}',
              is_op='e.get("cat") == "cpu_op"', same='o["pid"] == call["pid"] and o["tid"] == call["tid"]',
              inside='o["ts"] <= call["ts"] and call["ts"] + call["dur"] <= o["ts"] + o["dur"]',
              pick='names.add(min(around, key=lambda o: o["dur"])["name"])', none="",
              result="sorted(names)") -> str:
    return cell("sync-ops", f"""
syncs = {names}
events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
ops = [e for e in events if {is_op}]
names = set()
for call in events:
    if call.get("cat") != "cuda_runtime" or call.get("name") not in syncs:
        continue
    around = [o for o in ops if {same} and {inside}]
    if around:
        {pick}
    {none or "pass"}
return {result}
""")


def refill_with(check="if data.shape != buffer.shape:\n    raise ValueError('shape')",
                wait="copy_done.synchronize()",
                write="buffer.copy_(data)", result="return buffer", order=("check", "wait", "write")) -> str:
    pieces = {"check": check, "wait": wait, "write": write}
    return cell("refill-pinned", "\n".join(pieces[p] for p in order if pieces[p]) + "\n" + result)


# ----------------------------------------------------------------------------------------------------------
# The notebook itself


def streams_with(current="current = torch.cuda.current_stream()",
                 copy="copy = batch.to(device, non_blocking=True)",
                 inside="", wait="current.wait_stream(side)", record="copy.record_stream(current)",
                 run="return step(copy)") -> str:
    """Return a copy_then_run cell: the copy (and `inside`) on side, then the wait, the record and the run."""
    body = "\n".join(line for line in (current, "with torch.cuda.stream(side):", f"    {copy}",
                                          f"    {inside}" if inside else "", wait, record, run) if line)
    return cell("copy-then-run", body + "\n")


def epoch_with(loader="DataLoader(dataset, batch_size=256, shuffle=True, pin_memory=True, num_workers=8, "
                      "persistent_workers=True)",
               copy="[t.to(device, non_blocking=True) for t in batch]", side="side = torch.cuda.Stream()",
               within="with torch.cuda.stream(side):", wait="torch.cuda.current_stream().wait_stream(side)",
               keep="losses.append(loss.detach())", steps="len(loader)", result="torch.stack(losses)") -> str:
    """Return a fixed_epoch cell: the reference (pinned workers, side-stream prefetch), one piece changed."""
    return cell("fixed-epoch", epoch_body(loader, copy, side, within, wait, keep, steps, result))


def epoch_body(loader, copy="[t.to(device, non_blocking=True) for t in batch]",
               side="side = torch.cuda.Stream()", within="with torch.cuda.stream(side):",
               wait="torch.cuda.current_stream().wait_stream(side)",
               keep="losses.append(loss.detach())", steps="len(loader)", result="torch.stack(losses)") -> str:
    """Return the body of epoch_with's cell."""
    return f"""
loader = {loader}
{side}
batches = iter(loader)

def upload(batch):
    {within}
        return {copy}

losses, following = [], upload(next(batches))
for step in range({steps}):
    {wait}
    x, y = following
    x.record_stream(torch.cuda.current_stream())
    y.record_stream(torch.cuda.current_stream())
    if step + 1 < {steps}:
        following = upload(next(batches))
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    {keep}
return {result}
"""


PLAIN_EPOCH = """
loader = {loader}
losses = []
for step, (x, y) in enumerate(loader):
    x, y = x.to(device{nb}), y.to(device{nb})
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    {keep}
return {result}
"""


def plain_epoch(loader="DataLoader(dataset, batch_size=256, shuffle=True, pin_memory=True, num_workers=8, "
                       "persistent_workers=True)", nb=", non_blocking=True",
                keep="losses.append(loss.detach())", result="torch.stack(losses)") -> str:
    """Return a fixed_epoch cell that keeps every batch on the current stream."""
    return cell("fixed-epoch", PLAIN_EPOCH.format(loader=loader, nb=nb, keep=keep, result=result))


def test_imports_and_check_calls():
    code = support.code_cells(NOTEBOOK)
    imports = support.imports_cell(code).source
    assert "from devicelab.exercises.ps06 import" in imports and "check, " in imports
    checks = [c.source.split(")")[0] for c in code if c.source.startswith("check(")]
    assert checks == ['check("copy_totals"', 'check("overlap_fraction"', 'check("sync_ops"',
                      'check("refill_pinned"', 'check("copy_then_run"', 'check("fixed_epoch"']


class TestContract(support.AssignmentContract):
    NOTEBOOK, CELLS_OF, POINTS_OF, HEADS = NOTEBOOK, CELLS_OF, POINTS_OF, HEADS


def _namespace(sources: list[str]) -> dict:
    namespace: dict = {}
    exec("import torch\nimport json\nimport torch.nn.functional as F\n"
         "from torch.utils.data import DataLoader\n", namespace)
    for source in sources:
        exec(source, namespace)
    return namespace


def test_feedback_checks_say_correct_for_the_solution_and_not_attempted_for_stubs():
    from devicelab.exercises import ps06
    from devicelab.feedback import Outcome, evaluate

    sources = [c.source for c in support.code_cells(NOTEBOOK)
               if utils.is_solution(c) or grade_id(c) == "imports"]
    namespace = _namespace(sources)
    for exercise in ps06._exercises.exercises.values():
        feedback = evaluate(exercise, namespace)
        assert feedback.outcome is Outcome.CORRECT, str(feedback)
    stubs = _namespace(list(support.student_stubs(NOTEBOOK).values()))
    for exercise in ps06._exercises.exercises.values():
        assert evaluate(exercise, stubs).outcome is Outcome.NOT_ATTEMPTED


@pytest.mark.parametrize(("name", "source", "words"), [
    ("copy_totals", lambda: totals_with(seconds='event["dur"]'), "microseconds"),
    ("copy_totals", lambda: totals_with(start="{}"), "three keys"),
    ("overlap_fraction", lambda: overlap_with(merge=False), "counts once"),
    ("overlap_fraction", lambda: overlap_with(same_device="True"), "another GPU"),
    ("sync_ops", lambda: sync_with(pick='names.add(max(around, key=lambda o: o["dur"])["name"])'),
     "innermost"),
    ("sync_ops", lambda: sync_with(same="True"), "same pid and tid"),
    ("refill_pinned", lambda: refill_with(wait="torch.cuda.synchronize()"), "event only"),
    ("refill_pinned", lambda: refill_with(order=("check", "write", "wait")), "wait first"),
    ("refill_pinned", lambda: refill_with(write="buffer = data.clone()"), "in place"),
    ("copy_then_run", lambda: streams_with(wait=""), "wait_stream(side)"),
    ("copy_then_run", lambda: streams_with(record=""), "record_stream"),
    ("copy_then_run", lambda: streams_with(current="current = torch.cuda.default_stream()"),
     "current_stream()"),
    ("fixed_epoch", lambda: plain_epoch(), "copy overlap: 0%"),
    ("fixed_epoch", lambda: epoch_with(wait="pass"), "before its copy had landed"),
])
def test_feedback_checks_catch_the_common_mistakes(name, source, words):
    from devicelab.exercises import ps06
    from devicelab.feedback import Outcome, evaluate

    feedback = evaluate(ps06._exercises.exercises[name], _namespace([source()]))
    assert feedback.outcome is Outcome.INCORRECT and words in feedback.message, str(feedback)


def test_hints_come_in_levels_and_no_solutions_ship():
    from devicelab.exercises import ps06

    assert all(len(e.hints) >= 3 for e in ps06._exercises.exercises.values())
    assert all(e.solution is None for e in ps06._exercises.exercises.values())


# ----------------------------------------------------------------------------------------------------------
# Other correct answers get full marks

CORRECT = {
    "copy-totals": {
        "defaultdict-then-fill": """
from collections import defaultdict
seen = defaultdict(lambda: {"count": 0, "bytes": 0, "seconds": 0.0})
for e in trace["traceEvents"]:
    name = e.get("name", "")
    if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy":
        direction = "h2d" if "HtoD" in name else "d2h" if "DtoH" in name else "d2d" if "DtoD" in name else None
        if direction:
            seen[direction]["count"] += 1
            seen[direction]["bytes"] += int((e.get("args") or {}).get("bytes", 0))
            seen[direction]["seconds"] += e["dur"] * 1e-6
return {d: dict(seen[d]) for d in ("h2d", "d2h", "d2d")}
""",  # noqa: E501 (an answer's source, kept as written)
        "sum-microseconds-then-convert": """
result = {}
copies = [e for e in trace["traceEvents"] if e.get("cat") == "gpu_memcpy" and e.get("ph") == "X"]
for direction, key in {"h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD"}.items():
    mine = [e for e in copies if key in e["name"]]
    result[direction] = {"count": len(mine), "bytes": sum(e.get("args", {}).get("bytes", 0) for e in mine),
                         "seconds": sum(e["dur"] for e in mine) / 1_000_000}
return result
""",
        "dur-present-instead-of-ph": """
out = {key: {"count": 0, "bytes": 0, "seconds": 0.0} for key in ("h2d", "d2h", "d2d")}
for e in trace["traceEvents"]:
    if e.get("cat") != "gpu_memcpy" or "dur" not in e:  # complete events are the ones with a duration
        continue
    name = e.get("name", "")
    if "HtoD" in name:
        key = "h2d"
    elif "DtoH" in name:
        key = "d2h"
    elif "DtoD" in name:
        key = "d2d"
    else:
        continue
    out[key]["count"] += 1
    out[key]["bytes"] += (e.get("args") or {}).get("bytes", 0)
    out[key]["seconds"] += e["dur"] / 1e6
return out
""",
        "regex-on-the-name": """
import re
out = {d: {"count": 0, "bytes": 0, "seconds": 0.0} for d in ["h2d", "d2h", "d2d"]}
for e in trace.get("traceEvents", []):
    m = re.search(r"Memcpy (HtoD|DtoH|DtoD)", e.get("name", ""))
    if m and e.get("cat") == "gpu_memcpy" and e.get("ph") == "X":
        d = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d"}[m.group(1)]
        out[d]["count"] += 1
        out[d]["bytes"] += e.get("args", {}).get("bytes", 0)
        out[d]["seconds"] += float(e["dur"]) / 1e6
return out
""",
    },
    "overlap-fraction": {
        "sweep-line": """
codes = {"h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD"}
if direction not in codes:
    raise ValueError(f"unknown direction {direction!r}")
complete = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
copies = [e for e in complete if e.get("cat") == "gpu_memcpy" and codes[direction] in e["name"]]
total = sum(e["dur"] for e in copies)
if not copies or total == 0:
    return 0.0
covered = 0.0
for c in copies:
    dev = c["args"].get("device")
    points = []
    for k in complete:
        if k.get("cat") == "kernel" and k["args"].get("device") == dev:
            points += [(k["ts"], 1), (k["ts"] + k["dur"], -1)]
    points.sort(key=lambda p: (p[0], p[1]))
    running, last = 0, None
    for t, change in points:
        if running > 0 and last is not None:
            lo, hi = max(last, c["ts"]), min(t, c["ts"] + c["dur"])
            covered += max(0.0, hi - lo)
        running += change
        last = t
return covered / total
""",
        "merge-kernels-first": """
if direction not in ("h2d", "d2h", "d2d"):
    raise ValueError("direction must be h2d, d2h or d2d")
tag = {"h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD"}[direction]
events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
by_device = {}
for k in events:
    if k.get("cat") == "kernel":
        by_device.setdefault(k["args"]["device"], []).append([k["ts"], k["ts"] + k["dur"]])
merged = {}
for dev, spans in by_device.items():
    spans.sort()
    out = [spans[0]]
    for s, e in spans[1:]:
        if s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    merged[dev] = out
total = covered = 0.0
for c in events:
    if c.get("cat") == "gpu_memcpy" and tag in c["name"]:
        total += c["dur"]
        for s, e in merged.get(c["args"]["device"], []):
            covered += max(0.0, min(e, c["ts"] + c["dur"]) - max(s, c["ts"]))
return covered / total if total else 0.0
""",
    },
    "sync-ops": {
        "latest-start-wins": """
waits = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
found = []
for s in xs:
    if s.get("cat") == "cuda_runtime" and s["name"] in waits:
        best = None
        for o in xs:
            if (o.get("cat") == "cpu_op" and (o["pid"], o["tid"]) == (s["pid"], s["tid"])
                    and o["ts"] <= s["ts"] and s["ts"] + s["dur"] <= o["ts"] + o["dur"]):
                if best is None or (o["ts"], -o["dur"]) > (best["ts"], -best["dur"]):
                    best = o
        if best is not None and best["name"] not in found:
            found.append(best["name"])
return sorted(found)
""",
        "group-by-thread": """
from collections import defaultdict
ops = defaultdict(list)
calls = []
for e in trace["traceEvents"]:
    if e.get("ph") != "X":
        continue
    if e.get("cat") == "cpu_op":
        ops[(e["pid"], e["tid"])].append(e)
    elif e.get("cat") == "cuda_runtime" and e["name"].endswith("Synchronize") and e["name"] in (
            "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"):
        calls.append(e)
names = set()
for call in calls:
    end = call["ts"] + call["dur"]
    inner = [o for o in ops[(call["pid"], call["tid"])] if o["ts"] <= call["ts"] and end <= o["ts"] + o["dur"]]
    inner.sort(key=lambda o: o["dur"])
    if inner:
        names.add(inner[0]["name"])
return sorted(names)
""",  # noqa: E501 (an answer's source, kept as written)
        "earliest-end-then-latest-start": """
names = set()
xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
for call in xs:
    if call.get("cat") == "cuda_runtime" and call.get("name") in (
            "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"):
        end = call["ts"] + call["dur"]
        around = [o for o in xs if o.get("cat") == "cpu_op" and (o["pid"], o["tid"]) == (call["pid"], call["tid"])
                  and o["ts"] <= call["ts"] and end <= o["ts"] + o["dur"]]
        if around:  # the innermost ends first; among those ending together, it starts last
            names.add(min(around, key=lambda o: (o["ts"] + o["dur"], -o["ts"]))["name"])
return sorted(names)
""",  # noqa: E501 (an answer's source, kept as written)
        "deepest-by-nesting-count-and-dur-filter": """
waits = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}
complete = [e for e in trace["traceEvents"] if "dur" in e and e.get("ph") == "X"]
found = set()
for s in complete:
    if s.get("cat") != "cuda_runtime" or s.get("name") not in waits:
        continue
    s_end = s["ts"] + s["dur"]
    around = [o for o in complete if o.get("cat") == "cpu_op" and o["pid"] == s["pid"] and o["tid"] == s["tid"]
              and o["ts"] <= s["ts"] and s_end <= o["ts"] + o["dur"]]

    def depth(o):
        return sum(1 for p in around if p is not o and p["ts"] <= o["ts"] and o["ts"] + o["dur"] <= p["ts"] + p["dur"])

    if around:
        found.add(max(around, key=lambda o: (depth(o), -o["dur"]))["name"])
return sorted(found)
""",  # noqa: E501 (an answer's source, kept as written)
    },
    "refill-pinned": {
        "size-compare-and-slice-assign": """
if data.size() != buffer.size():
    raise ValueError("data and buffer differ in shape")
copy_done.synchronize()
buffer[...] = data
return buffer
""",
        "wait-then-check-and-return-copy": """
copy_done.synchronize()
if tuple(data.shape) != tuple(buffer.shape):
    raise ValueError(f"expected {tuple(buffer.shape)}, got {tuple(data.shape)}")
return buffer.copy_(data)
""",
        "poll-the-event": """
import time
if data.shape != buffer.shape:
    raise ValueError("shape mismatch")
while not copy_done.query():
    time.sleep(0)
buffer.copy_(data, non_blocking=True)
return buffer
""",
        "query-then-synchronize": """
if buffer.shape != data.shape:
    raise ValueError("shape mismatch")
if not copy_done.query():
    copy_done.synchronize()
with torch.no_grad():
    buffer.copy_(data)
return buffer
""",
    },
}


CORRECT["copy-then-run"] = {
    "event-recorded-on-side": """
current = torch.cuda.current_stream()
with torch.cuda.stream(side):
    copy = batch.to(device, non_blocking=True)
    ready = torch.cuda.Event()
    ready.record()
current.wait_event(ready)
copy.record_stream(current)
return step(copy)
""",
    "side-record-event-and-copy_": """
out = torch.empty_like(batch, device=device)
with torch.cuda.stream(side):
    out.copy_(batch, non_blocking=True)
    done = side.record_event()
done.wait(torch.cuda.current_stream())
out.record_stream(torch.cuda.current_stream())
return step(out)
""",
    "record-after-step": """
with torch.cuda.stream(side):
    gpu_batch = batch.to(device=device, non_blocking=True)
torch.cuda.current_stream().wait_stream(side)
result = step(gpu_batch)
gpu_batch.record_stream(torch.cuda.current_stream())
return result
""",
}


CORRECT["fixed-epoch"] = {
    "event-instead-of-wait-stream": """
loader = DataLoader(dataset, batch_size=256, shuffle=True, pin_memory=True, num_workers=6,
                    persistent_workers=True)
side = torch.cuda.Stream()
losses = []
it = iter(loader)

def prefetch():
    batch = next(it, None)
    if batch is None:
        return None
    with torch.cuda.stream(side):
        moved = [t.cuda(non_blocking=True) for t in batch]
        ready = side.record_event()
    return moved, ready

nxt = prefetch()
while nxt is not None:
    (x, y), ready = nxt
    torch.cuda.current_stream().wait_event(ready)
    x.record_stream(torch.cuda.current_stream())
    y.record_stream(torch.cuda.current_stream())
    nxt = prefetch()
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.detach())
return losses
""",
    "losses-read-once-at-the-end": (
        "loader = DataLoader(dataset, batch_size=256, shuffle=True, pin_memory=True, num_workers=8, "
        "persistent_workers=True, prefetch_factor=4)\n"
        "side = torch.cuda.Stream()\n"
        "losses = torch.zeros(len(loader), device=device)\n"
        "batches = iter(loader)\n"
        "with torch.cuda.stream(side):\n"
        "    nxt = [t.to(device, non_blocking=True) for t in next(batches)]\n"
        "for step in range(len(loader)):\n"
        "    torch.cuda.current_stream().wait_stream(side)\n"
        "    x, y = nxt\n"
        "    if step + 1 < len(loader):\n"
        "        with torch.cuda.stream(side):\n"
        "            nxt = [t.to(device, non_blocking=True) for t in next(batches)]\n"
        "    loss = F.cross_entropy(model(x), y)\n"
        "    optimizer.zero_grad()\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    losses[step] = loss.detach()\n"
        "return losses.cpu()\n"),
    "shuffled-by-a-sampler": epoch_body(
        "DataLoader(dataset, batch_size=256, sampler=torch.utils.data.RandomSampler(dataset), "
        "pin_memory=True, num_workers=8, persistent_workers=True)"),
    "shuffled-by-hand": epoch_body(
        "DataLoader(torch.utils.data.Subset(dataset, torch.randperm(len(dataset)).tolist()), batch_size=256, "
        "pin_memory=True, num_workers=8, persistent_workers=True)"),
    # a loader made in the call starts its workers either way: for one epoch, persistent or not costs the same
    "workers-not-persistent": epoch_body(
        "DataLoader(dataset, batch_size=256, shuffle=True, pin_memory=True, num_workers=8)"),
}


@pytest.mark.parametrize(("exercise", "source"), support.correct_cases(CORRECT, HEADS))
def test_other_correct_answers_get_full_marks(exercise, source):
    support.assert_all_pass(results_for({exercise: source}))


# ----------------------------------------------------------------------------------------------------------
# Realistic mistakes lose points, and only in that exercise's cells.
#
# | exercise | mistake | what the student believed |
# | --- | --- | --- |
# | copy_totals | dur summed as seconds | the trace is in seconds (it is in microseconds) |
# | copy_totals | dur / 1e3 | microseconds to seconds is 1e3 |
# | copy_totals | keys only for directions seen | a dict with what was found is enough |
# | copy_totals | args["bytes"] read directly | every copy carries its size |
# | copy_totals | any event named ...HtoD... | the name alone says it is a copy |
# | copy_totals | no "ph" check | every event has a duration |
# | copy_totals | "h2d" looked for in the name | the trace uses the course's words |
# | copy_totals | only "Pinned" copies | all copies are pinned |
# | copy_totals | span from first start to last end | the copies' time is the wall-clock stretch |
# | copy_totals | dur // 1e6 | integer division is harmless |
# | copy_totals | direction from the "(X -> Y)" part of the name | a Device -> Device copy is a DtoD copy |
# | overlap_fraction | every device's kernels | a kernel anywhere hides a copy |
# | overlap_fraction | pieces added without merging | two kernels over one stretch hide it twice |
# | overlap_fraction | whole copy if any kernel touches (closed) | overlap is yes/no per copy, ends included |
# | overlap_fraction | kernels must start inside the copy | a kernel that started earlier does not count |
# | overlap_fraction | union of copies as the denominator | simultaneous copies count once |
# | overlap_fraction | a percentage | 50 means half |
# | overlap_fraction | fraction of kernel time | overlap is symmetric |
# | overlap_fraction | copies count as covering | any GPU activity hides a copy |
# | overlap_fraction | no ValueError / 0.0 for a wrong direction | a bad argument is an empty answer |
# | overlap_fraction | ZeroDivisionError without copies | there are always copies |
# | overlap_fraction | instant events as kernels | every kernel event has a duration |
# | sync_ops | outermost operator | the top-level op is the answer |
# | sync_ops | every containing operator | list them all |
# | sync_ops | operators of any thread | one host thread |
# | sync_ops | operators of any process | pid does not matter |
# | sync_ops | only cudaStreamSynchronize | one kind of wait |
# | sync_ops | strict containment | an op cannot start and end with its call |
# | sync_ops | annotations count as operators | any host span is an op |
# | sync_ops | duplicates / unsorted | a list of what was found |
# | sync_ops | the sync call's own name | the question is which call |
# | sync_ops | overlap instead of containment | a call that touches an operator is in it |
# | sync_ops | operator must start strictly before | a call cannot start with its operator |
# | sync_ops | last operator started before the call | operators do not end before a later call |
# | sync_ops | last containing operator in the file | the trace lists children after parents |
# | sync_ops | cudaStreamWaitEvent counted | wait_stream makes the host wait |
# | refill_pinned | torch.cuda.synchronize() | any sync will do |
# | refill_pinned | stream synchronize | the stream is the copy |
# | refill_pinned | copy_done.wait() | wait() makes the host wait |
# | refill_pinned | write, then wait | the order does not matter on the host |
# | refill_pinned | query() once, no wait | query waits |
# | refill_pinned | no wait at all | the copy has surely finished |
# | refill_pinned | a new tensor (clone / data.to) | returning the values is enough |
# | refill_pinned | buffer.data = data | same object is enough |
# | refill_pinned | buffer.set_(data) | same object is enough |
# | refill_pinned | no shape check | copy_ checks shapes |
# | refill_pinned | numel check and view_as | same size is same shape |
# | refill_pinned | len() check | the first dimension is the shape |
# | refill_pinned | shape check after writing | the error is what matters |
# | refill_pinned | dtype must match | different dtypes are an error |
# | refill_pinned | returns None | in place means nothing to return |
# | fixed_epoch | .item() kept for a printout | one number per step costs nothing |
# | fixed_epoch | f"{loss:.4f}" every 10 steps | formatting is not a read |
# | fixed_epoch | each loss read with .item() after the loop | after the loop is free |
# | fixed_epoch | pinned batches, blocking copies | pinning alone is the fix |
# | fixed_epoch | non_blocking copies from unpinned batches | non_blocking alone is the fix |
# | fixed_epoch | a torch.cuda.synchronize() per step | a sync keeps the streams right |
# | fixed_epoch | side.synchronize() instead of wait_stream | a stream sync is a GPU-side wait |
# | fixed_epoch | no workers | pinning and streams are enough |
# | fixed_epoch | workers started every epoch | workers are free to start |
# | fixed_epoch | copies and kernels on one stream | non_blocking copies overlap by themselves |
# | fixed_epoch | a side stream nobody waits for | streams are ordered |
# | fixed_epoch | range(50) steps | every epoch has 50 batches |
# | fixed_epoch | batches of 512 | a bigger batch is a faster epoch |

MISTAKES = {
    ("copy-totals", "microseconds-as-seconds"): totals_with(seconds='event["dur"]'),
    ("copy-totals", "milliseconds"): totals_with(seconds='event["dur"] / 1e3'),
    ("copy-totals", "keys-only-when-seen"): totals_with(start="{}"),
    ("copy-totals", "bytes-without-get"): totals_with(nbytes='event["args"]["bytes"]'),
    ("copy-totals", "any-event-by-name"): totals_with(keep='event.get("ph") != "X"'),
    ("copy-totals", "no-ph-check"): totals_with(keep='event.get("cat") != "gpu_memcpy"',
                                                seconds='event.get("dur", 0) / 1e6'),
    ("copy-totals",
     "course-words-in-name"): totals_with(keys='(("h2d", "h2d"), ("d2h", "d2h"), ("d2d", "d2d"))',
                                          match='key in event.get("name", "").lower()'),
    ("copy-totals", "only-pinned-names"): totals_with(
        keys='(("Memcpy HtoD (Pinned -> Device)", "h2d"), ("Memcpy DtoH (Device -> Pinned)", "d2h"), '
             '("Memcpy DtoD (Device -> Device)", "d2d"))', match='key == event.get("name")'),
    ("copy-totals",
     "directions-swapped"): totals_with(keys='(("HtoD", "d2h"), ("DtoH", "h2d"), ("DtoD", "d2d"))'),
    ("copy-totals", "integer-division"): totals_with(seconds='event["dur"] // 1e6'),
    ("copy-totals", "any-memcpy-by-name"): totals_with(
        keep='event.get("ph") != "X" or "Memcpy" not in event.get("name", "")'),
    ("copy-totals", "host-copy-calls-too"): totals_with(
        keep='event.get("ph") != "X" or event.get("cat") not in '
             '("gpu_memcpy", "cuda_runtime", "cuda_driver")'),
    ("copy-totals", "span-not-sum"): cell("copy-totals", """
out = {}
for d, key in (("h2d", "HtoD"), ("d2h", "DtoH"), ("d2d", "DtoD")):
    mine = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy" and key in e["name"]]
    span = (max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)) / 1e6 if mine else 0.0
    out[d] = {"count": len(mine), "bytes": sum(e.get("args", {}).get("bytes", 0) for e in mine), "seconds": span}
return out
"""),  # noqa: E501 (an answer's source, kept as written)
    ("overlap-fraction", "any-device"): overlap_with(same_device="True"),
    ("overlap-fraction", "double-counts"): overlap_with(merge=False),
    ("overlap-fraction", "whole-copy-if-touched-closed"): cell("overlap-fraction", """
if direction not in ("h2d", "d2h", "d2d"):
    raise ValueError(direction)
key = {"h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD"}[direction]
xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
copies = [e for e in xs if e.get("cat") == "gpu_memcpy" and key in e["name"]]
total = sum(c["dur"] for c in copies)
if not total:
    return 0.0
hit = 0.0
for c in copies:
    if any(k.get("cat") == "kernel" and k["args"]["device"] == c["args"]["device"]
           and k["ts"] <= c["ts"] + c["dur"] and c["ts"] <= k["ts"] + k["dur"] for k in xs):
        hit += c["dur"]
return hit / total
"""),
    ("overlap-fraction", "kernel-must-start-inside"): overlap_with(
        same_device='k.get("args", {}).get("device") == device and start <= k["ts"] < end'),
    ("overlap-fraction", "union-of-copies"): overlap_with(
        total='sum(e - s for s, e in __import__("functools").reduce(lambda acc, iv: acc[:-1] + [(acc[-1][0], '
              'max(acc[-1][1], iv[1]))] if acc and iv[0] <= acc[-1][1] else acc + [iv], sorted((c["ts"], '
              'c["ts"] + c["dur"]) for c in copies), []))'),
    ("overlap-fraction", "percentage"): overlap_with(result="100 * covered / total"),
    ("overlap-fraction", "fraction-of-kernel-time"): overlap_with(
        result='covered / sum(k["dur"] for k in kernels) if kernels else 0.0'),
    ("overlap-fraction",
     "copies-cover-too"): overlap_with(is_kernel='e.get("cat") in ("kernel", "gpu_memcpy")'),
    ("overlap-fraction", "no-value-error"): overlap_with(check="pass"),
    ("overlap-fraction", "zero-division"): overlap_with(empty="pass"),
    ("overlap-fraction", "instant-events-are-kernels"): overlap_with(
        events='True', is_kernel='e.get("cat") == "kernel" and "dur" in e'.replace(' and "dur" in e', '')
    ).replace('min(k["ts"] + k["dur"], end)', 'min(k["ts"] + k.get("dur", end), end)').replace(
        'copies = [e for e in events if', 'copies = [e for e in events if "dur" in e and'),
    ("sync-ops", "outermost"): sync_with(pick='names.add(max(around, key=lambda o: o["dur"])["name"])'),
    ("sync-ops", "every-containing-op"): sync_with(pick="names.update(o['name'] for o in around)"),
    ("sync-ops", "any-thread"): sync_with(same='o["pid"] == call["pid"]'),
    ("sync-ops", "any-process"): sync_with(same='o["tid"] == call["tid"]'),
    ("sync-ops", "only-stream-sync"): sync_with(names='{"cudaStreamSynchronize"}'),
    ("sync-ops", "strict-containment"): sync_with(
        inside='o["ts"] < call["ts"] and call["ts"] + call["dur"] < o["ts"] + o["dur"]'),
    ("sync-ops", "annotations-are-ops"): sync_with(is_op='e.get("cat") in ("cpu_op", "user_annotation")'),
    ("sync-ops", "unsorted-with-duplicates"): sync_with(
        pick='found.append(min(around, key=lambda o: o["dur"])["name"])', result="found").replace(
        "names = set()", "names = set()\n    found = []"),
    ("sync-ops",
     "outside-calls-as-themselves"): sync_with(none='if not around:\n        names.add(call["name"])'),
    ("sync-ops", "returns-the-call-names"): sync_with(pick='names.add(call["name"])'),
    ("refill-pinned", "device-wide-synchronize"): refill_with(wait="torch.cuda.synchronize()"),
    ("refill-pinned", "stream-synchronize"): refill_with(wait="torch.cuda.current_stream().synchronize()"),
    ("refill-pinned", "event-wait"): refill_with(wait="copy_done.wait()"),
    ("refill-pinned", "write-then-wait"): refill_with(order=("check", "write", "wait")),
    ("refill-pinned", "query-once"): refill_with(wait="copy_done.query()"),
    ("refill-pinned", "no-wait"): refill_with(wait=""),
    ("refill-pinned",
     "event-and-device-sync"): refill_with(wait="copy_done.synchronize()\ntorch.cuda.synchronize()"),
    ("refill-pinned", "returns-a-clone"): refill_with(write="", result="return data.clone()"),
    ("refill-pinned", "returns-data-in-buffer-dtype"): refill_with(write="",
                                                                   result="return data.to(buffer.dtype)"),
    ("refill-pinned", "swaps-data"): refill_with(write="buffer.data = data.to(buffer.dtype)"),
    ("refill-pinned", "set-storage"): refill_with(write="buffer.set_(data.to(buffer.dtype))"),
    ("refill-pinned", "no-shape-check"): refill_with(check=""),
    ("refill-pinned", "numel-check-and-view"): refill_with(
        check="if data.numel() != buffer.numel():\n    raise ValueError('size')",
        write="buffer.copy_(data.view_as(buffer))"),
    ("refill-pinned",
     "len-check"): refill_with(check="if len(data) != len(buffer):\n    raise ValueError('len')"),
    ("refill-pinned", "shape-check-after-writing"): refill_with(order=("wait", "write", "check")),
    ("refill-pinned", "dtype-must-match"): refill_with(
        check="if data.shape != buffer.shape or data.dtype != buffer.dtype:\n"
              "    raise ValueError('shape or dtype')"),
    ("refill-pinned", "returns-none"): refill_with(result="return None"),
    ("copy-totals", "otherwise-d2d"): totals_with(
        keys='(("HtoD", "h2d"), ("DtoH", "d2h"), ("", "d2d"))',
        match='key in event.get("name", "") and not (key == "" and ("HtoD" in event["name"] or '
              '"DtoH" in event["name"]))'),
    ("copy-totals", "direction-from-arrow"): cell("copy-totals", """
out = {d: {"count": 0, "bytes": 0, "seconds": 0.0} for d in ("h2d", "d2h", "d2d")}
for e in trace["traceEvents"]:
    if e.get("ph") != "X" or e.get("cat") != "gpu_memcpy" or "(" not in e.get("name", ""):
        continue
    source, target = e["name"].split("(")[1].rstrip(")").split(" -> ")
    d = "d2d" if source == target == "Device" else "h2d" if target == "Device" else "d2h"
    out[d]["count"] += 1
    out[d]["bytes"] += e.get("args", {}).get("bytes", 0)
    out[d]["seconds"] += e["dur"] / 1e6
return out
"""),
    ("sync-ops", "overlap-is-enough"): sync_with(
        inside='o["ts"] < call["ts"] + call["dur"] and call["ts"] < o["ts"] + o["dur"]'),
    ("sync-ops", "strict-start-only"): sync_with(
        inside='o["ts"] < call["ts"] and call["ts"] + call["dur"] <= o["ts"] + o["dur"]'),
    ("sync-ops", "last-op-started-before"): sync_with(
        inside='o["ts"] <= call["ts"]', pick='names.add(max(around, key=lambda o: o["ts"])["name"])'),
    ("sync-ops", "last-listed-containing-op"): sync_with(pick='names.add(around[-1]["name"])'),
    ("sync-ops", "stream-wait-event-is-a-sync"): sync_with(
        names='{"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", '
              '"cudaStreamWaitEvent"}'),
    ("sync-ops", "latest-start-is-innermost"): sync_with(
        pick='names.add(max(around, key=lambda o: o["ts"])["name"])'),
    ("sync-ops", "starts-inside-is-enough"): sync_with(inside='o["ts"] <= call["ts"] < o["ts"] + o["dur"]'),
    ("copy-then-run", "no-wait"): streams_with(wait=""),
    ("copy-then-run", "wait-on-the-wrong-stream"): streams_with(wait="side.wait_stream(current)"),
    ("copy-then-run", "wait-inside-the-side-block"): streams_with(
        inside="torch.cuda.current_stream().wait_stream(side)", wait=""),
    ("copy-then-run", "wait-before-the-copy"): streams_with(
        current="current = torch.cuda.current_stream()\ncurrent.wait_stream(side)", wait=""),
    ("copy-then-run", "wait-after-use"): streams_with(
        wait="", run="out = step(copy)\ncurrent.wait_stream(side)\nreturn out"),
    ("copy-then-run", "default-stream"): streams_with(current="current = torch.cuda.default_stream()"),
    ("copy-then-run", "host-sync-instead"): streams_with(wait="torch.cuda.synchronize()"),
    ("copy-then-run", "side-synchronize-instead"): streams_with(wait="side.synchronize()"),
    ("copy-then-run", "blocking-copy"): streams_with(copy="copy = batch.to(device)"),
    ("copy-then-run", "copy-on-the-current-stream"): cell("copy-then-run", """
copy = batch.to(device, non_blocking=True)
return step(copy)
"""),
    ("copy-then-run", "step-on-side"): streams_with(inside="result = step(copy)", wait="", record="",
                                                    run="return result"),
    ("copy-then-run", "no-record-stream"): streams_with(record=""),
    ("copy-then-run", "record-side"): streams_with(record="copy.record_stream(side)"),
    ("fixed-epoch", "item-for-a-printout"): epoch_with(
        keep="losses.append(loss.detach()); print(loss.item())"),
    ("fixed-epoch", "formatted-every-10-steps"): epoch_with(
        keep="losses.append(loss.detach())\n    if step % 10 == 0:\n        print(f'{loss:.4f}')"),
    ("fixed-epoch", "items-after-the-loop"): epoch_with(result="[loss.item() for loss in losses]"),
    ("fixed-epoch", "pinned-blocking-copies"): plain_epoch(nb=""),
    ("fixed-epoch", "unpinned-non-blocking"): epoch_with(
        loader="DataLoader(dataset, batch_size=256, shuffle=True, num_workers=8, persistent_workers=True)"),
    ("fixed-epoch", "device-sync-per-step"): epoch_with(wait="torch.cuda.synchronize()"),
    ("fixed-epoch", "side-synchronize"): epoch_with(wait="side.synchronize()"),
    ("fixed-epoch", "no-workers"): epoch_with(
        loader="DataLoader(dataset, batch_size=256, shuffle=True, pin_memory=True)"),
    ("fixed-epoch", "one-stream"): plain_epoch(),
    ("fixed-epoch", "nobody-waits"): epoch_with(wait="pass"),
    ("fixed-epoch", "fifty-steps"): epoch_with(steps="50"),
    ("fixed-epoch", "batches-of-512"): epoch_with(
        loader="DataLoader(dataset, batch_size=512, shuffle=True, pin_memory=True, num_workers=8, "
               "persistent_workers=True)"),
    ("fixed-epoch", "shuffle-dropped"): epoch_with(
        loader="DataLoader(dataset, batch_size=256, pin_memory=True, num_workers=8, "
               "persistent_workers=True)"),
}


@pytest.mark.parametrize(("exercise", "source"), [pytest.param(gid, src, id=f"{gid}-{name}")
                                                   for (gid, name), src in MISTAKES.items()])
def test_mistake_loses_points(exercise, source):
    support.assert_mistake_loses_points(NOTEBOOK, exercise, source, CELLS_OF, TOTAL)


@pytest.mark.parametrize(("mistake", "cell_id", "words"), [
    (("copy-totals", "microseconds-as-seconds"), "copy-totals-tests-basic", "divide by 1e6"),
    (("copy-totals", "keys-only-when-seen"), "copy-totals-tests-basic", "three keys"),
    (("overlap-fraction", "double-counts"), "overlap-fraction-tests-once", "counts once"),
    (("overlap-fraction", "any-device"), "overlap-fraction-tests-devices", "args['device']"),
    (("overlap-fraction", "percentage"), "overlap-fraction-tests-basic", "not a percentage"),
    (("sync-ops", "any-thread"), "sync-ops-tests-threads", "same pid and tid"),
    (("refill-pinned", "event-wait"), "refill-pinned-tests-order", "stream wait"),
    (("refill-pinned", "write-then-wait"), "refill-pinned-tests-order", "wait for copy_done first"),
    (("refill-pinned", "device-wide-synchronize"), "refill-pinned-tests-order", "that event only"),
    (("refill-pinned", "shape-check-after-writing"), "refill-pinned-tests-shape", "check the shape first"),
    (("refill-pinned", "swaps-data"), "refill-pinned-tests-in-place", "other memory"),
    (("fixed-epoch", "item-for-a-printout"), "fixed-epoch-tests-waits", "host waits per step: 1.02"),
    (("fixed-epoch", "unpinned-non-blocking"), "fixed-epoch-tests-pinned", "uploads from pageable memory"),
    (("fixed-epoch", "one-stream"), "fixed-epoch-tests-overlap", "copy overlap: 0%"),
    (("fixed-epoch", "nobody-waits"), "fixed-epoch-tests-overlap", "before its copy had landed"),
    (("fixed-epoch", "fifty-steps"), "fixed-epoch-tests-results", "StopIteration"),
    (("fixed-epoch", "shuffle-dropped"), "fixed-epoch-tests-results", "shuffle=True"),
])
def test_failures_say_what_to_fix(mistake, cell_id, words):
    results = results_for({mistake[0]: MISTAKES[mistake]})
    assert not results[cell_id].passed and words in results[cell_id].error, support.report(results)


def test_fakes_do_not_leak_out_of_the_notebook():
    synchronize, current = torch.cuda.synchronize, torch.cuda.current_stream
    results_for({"refill-pinned": MISTAKES[("refill-pinned", "stream-synchronize")]})
    assert torch.cuda.synchronize is synchronize and torch.cuda.current_stream is current


def test_the_simulated_example_trace_reads_as_the_lesson_says():
    """The functions of the solution, on the trace the simulated GPU exports (pageable batches, .item() per
    step).
    """
    from devicelab.sim_trace import example_trace

    namespace = _namespace([c.source for c in support.code_cells(NOTEBOOK) if utils.is_solution(c)])
    trace = example_trace()
    totals = namespace["copy_totals"](trace)
    assert totals["h2d"]["count"] == 3 and totals["h2d"]["bytes"] == 3 * 8 * 2**20
    assert totals["d2h"]["count"] == 4 and totals["d2d"]["count"] == 0
    assert namespace["overlap_fraction"](trace) == 0.0  # blocking pageable copies never run beside a kernel
    assert namespace["sync_ops"](trace) == ["aten::_local_scalar_dense", "aten::copy_"]
    memcpy_calls = [e for e in trace["traceEvents"] if e.get("name") == "cudaMemcpyAsync"]
    syncs = [e for e in trace["traceEvents"] if e.get("name") == "cudaStreamSynchronize"]
    assert max(e["dur"] for e in memcpy_calls) > 1000 and min(e["dur"] for e in syncs) == 0, (
        "a pageable copy's wait sits inside cudaMemcpyAsync, and its stream sync returns at once")
