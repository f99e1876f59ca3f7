"""ps04-async-timing: the solutions and other correct answers earn full marks; realistic mistakes lose points.
"""

import re
from functools import partial

import pytest

from autograder import COURSE_ROOT
from devicelab.exercises import ps04
from devicelab.feedback import Outcome, evaluate
from tests import assignment_support as support
from tests.harness import run_graded_cells

NOTEBOOK = COURSE_ROOT / "source" / "ps04-async-timing" / "ps04-async-timing.ipynb"
CELLS_OF = {
    "measure": ("measure-tests-basic", "measure-tests-sync", "measure-tests-warmup", "measure-tests-median"),
    "bandwidth-gbps": ("bandwidth-gbps-tests-basic", "bandwidth-gbps-tests-errors"),
    "step-times-ms": ("step-times-ms-tests-values", "step-times-ms-tests-one-wait"),
    "fixed-tagger": ("fixed-tagger-tests-same", "fixed-tagger-tests-moves", "fixed-tagger-tests-forward"),
}
POINTS_OF = {"measure": 16, "bandwidth-gbps": 2, "step-times-ms": 4, "fixed-tagger": 10}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "measure": "def measure(fn, *, sync, clock=time.perf_counter, warmup: int = 1, repeats: int = 5)"
               ' -> float:\n    """Measure."""\n',
    "bandwidth-gbps": 'def bandwidth_gbps(nbytes: int, seconds: float) -> float:\n    """Rate."""\n',
    "step-times-ms": 'def step_times_ms(step, n: int, new_event) -> list[float]:\n'
                     '    """Time the steps."""\n',
    "fixed-tagger": 'def fixed_tagger() -> nn.Module:\n    """Return a fixed Tagger."""\n',
}


results_for = partial(run_graded_cells, NOTEBOOK)  # results_for({grade_id: source}) grades with that answer


def measure_source(body: str) -> str:
    """Return a measure cell whose body is `body` (written flush left)."""
    return support.function_cell(HEADS["measure"], body)


def bandwidth_source(body: str) -> str:
    """Return a bandwidth_gbps cell whose body is `body` (written flush left)."""
    return support.function_cell(HEADS["bandwidth-gbps"], body)


WARMUP = """
for _ in range(warmup):
    fn()
"""
TIMED = """
times = []
for _ in range(repeats):
    sync()
    start = clock()
    fn()
    sync()
    times.append(clock() - start)
"""
MEDIAN = """
import statistics
return statistics.median(times)
"""


def measure_with(warmup: str = WARMUP, timed: str = TIMED, median: str = MEDIAN) -> str:
    """Return a measure cell built from a warm-up part, a timing loop and a summary, one of them flawed."""
    return measure_source("\n".join(part.strip("\n") for part in (warmup, timed, median)))


CHECKS = """
if seconds <= 0:
    raise ValueError(f"seconds must be positive, got {seconds}")
if nbytes < 0:
    raise ValueError(f"nbytes must be >= 0, got {nbytes}")
"""


def bandwidth_with(checks: str = CHECKS, rate: str = "nbytes / seconds / 1e9") -> str:
    """Return a bandwidth_gbps cell from a validation part and the returned expression."""
    return bandwidth_source(checks.strip("\n") + f"\nreturn {rate}")


# ----------------------------------------------------------------------------------------------------------
# The notebook itself


class TestContract(support.AssignmentContract):
    NOTEBOOK, CELLS_OF, POINTS_OF, HEADS = NOTEBOOK, CELLS_OF, POINTS_OF, HEADS
    VISIBLE_CHECKS = ("assert ", "raise AssertionError")


def test_imports_points_and_check_calls():
    code = support.code_cells(NOTEBOOK)
    graded = support.graded_cells(code)
    for line in ("import time", "import torch", "from torch import nn",
                 ("from devicelab.exercises.ps04 import HostCopySpy, Tagger, check, copy_weights, hint, "
                 "left_behind")):
        assert line in support.imports_cell(code).source.splitlines()
    assert support.points_by_cell(graded) == {
        "measure-tests-basic": 4, "measure-tests-sync": 4, "measure-tests-warmup": 4,
        "measure-tests-median": 4, "bandwidth-gbps-tests-basic": 1, "bandwidth-gbps-tests-errors": 1,
        "step-times-ms-tests-values": 2, "step-times-ms-tests-one-wait": 2, "fixed-tagger-tests-same": 2,
        "fixed-tagger-tests-moves": 4, "fixed-tagger-tests-forward": 4}
    checks = [c.source for c in code if c.source.startswith("check(")]
    assert checks == [('check("measure")  # instant feedback; hint("measure") gives a nudge, '
                       'call it again for more'),
                      'check("bandwidth_gbps")  # instant feedback; hint("bandwidth_gbps") gives a nudge',
                      'check("step_times_ms")  # instant feedback; hint("step_times_ms") gives a nudge',
                      'check("fixed_tagger")  # instant feedback; hint("fixed_tagger") says where to look']


# ----------------------------------------------------------------------------------------------------------
# Instant feedback: correct for the solution, not attempted for the stub


def _namespace(sources: dict[str, str]) -> dict:
    namespace: dict = {"__name__": "__main__"}
    exec("import time\nimport torch\nfrom torch import nn\n", namespace)
    for source in sources.values():
        exec(compile(source, "<solution>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("name", ["measure", "bandwidth_gbps", "step_times_ms", "fixed_tagger"])
def test_feedback_says_correct_for_the_solution(name, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    solutions = support.solution_sources(support.code_cells(NOTEBOOK))
    feedback = evaluate(ps04._exercises.exercises[name], _namespace(solutions))
    assert feedback.outcome is Outcome.CORRECT, feedback.message


@pytest.mark.parametrize("name", ["measure", "bandwidth_gbps", "step_times_ms", "fixed_tagger"])
def test_feedback_says_not_attempted_for_the_stub(name):
    feedback = evaluate(ps04._exercises.exercises[name], _namespace(support.student_stubs(NOTEBOOK)))
    assert feedback.outcome is Outcome.NOT_ATTEMPTED, feedback.message


def test_feedback_says_not_attempted_before_the_cell_runs():
    assert evaluate(ps04._exercises.exercises["measure"], {}).outcome is Outcome.NOT_ATTEMPTED


def test_hints_come_in_levels(capsys, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(ps04._exercises, "hints_given", {})
    for name in ("measure", "bandwidth_gbps"):
        ps04.hint(name)
        ps04.hint(name)
    out = capsys.readouterr().out
    assert "Hint 1 of 3 for measure" in out and "Hint 2 of 3 for measure" in out
    assert "Hint 2 of 2 for bandwidth_gbps" in out
    assert "sync()" in out and "1e9" in out


# ----------------------------------------------------------------------------------------------------------
# Other correct answers get full marks

CORRECT_MEASURE = {
    "reference-shape": measure_with(),
    "sync-once-then-contiguous-stamps": measure_source("""
import statistics
for _ in range(warmup):
    fn()
sync()
stamps = [clock()]
for _ in range(repeats):
    fn()
    sync()
    stamps.append(clock())
return statistics.median([b - a for a, b in zip(stamps, stamps[1:])])
"""),
    "sync-after-warmup-then-sync-after-each-call": measure_with(timed="""
sync()
times = []
for _ in range(repeats):
    start = clock()
    fn()
    sync()
    times.append(clock() - start)
"""),
    "numpy-median": measure_with(median="import numpy as np\nreturn np.median(times)"),
    "torch-quantile-half": measure_with(
        median="return torch.tensor(times, dtype=torch.float64).quantile(0.5).item()"),
    "sorted-middle-pair": measure_with(median="""
ordered = sorted(times)
half = len(ordered) // 2
return float(ordered[half]) if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
"""),
    "timed-warmup-discarded": measure_source("""
import statistics
times = []
for i in range(warmup + repeats):
    sync()
    start = clock()
    fn()
    sync()
    times.append(clock() - start)
return statistics.median(times[warmup:])
"""),
    "while-loops-and-extra-syncs": measure_source("""
import statistics
sync()
done = 0
while done < warmup:
    fn()
    done += 1
sync()
samples = []
while len(samples) < repeats:
    sync()
    t0 = clock()
    fn()
    sync()
    t1 = clock()
    sync()
    samples.append(t1 - t0)
return float(statistics.median(samples))
"""),
}

CORRECT_BANDWIDTH = {
    "reference-shape": bandwidth_with(),
    "divide-by-power-of-ten-first": bandwidth_with(rate="(nbytes / 10**9) / seconds"),
    "one-combined-check": bandwidth_source("""
if not seconds > 0 or nbytes < 0:
    raise ValueError("need seconds > 0 and nbytes >= 0")
return float(nbytes) / (seconds * 1e9)
"""),
    "checks-nbytes-first": bandwidth_with(checks="""
if nbytes < 0:
    raise ValueError("negative size")
if seconds <= 0:
    raise ValueError("no time")
""", rate="nbytes / 1e9 / seconds"),
}


@pytest.mark.parametrize("source", CORRECT_MEASURE.values(), ids=CORRECT_MEASURE.keys())
def test_other_correct_measure_gets_full_marks(source):
    support.assert_all_pass(results_for({"measure": source}))


@pytest.mark.parametrize("source", CORRECT_BANDWIDTH.values(), ids=CORRECT_BANDWIDTH.keys())
def test_other_correct_bandwidth_gets_full_marks(source):
    support.assert_all_pass(results_for({"bandwidth-gbps": source}))


# ----------------------------------------------------------------------------------------------------------
# Realistic mistakes lose points, and only in that exercise's cells

MEASURE_MISTAKES = {
    "no-sync-at-all": measure_with(timed=TIMED.replace("    sync()\n", "")),
    "no-sync-after-fn": measure_with(timed="""
times = []
for _ in range(repeats):
    sync()
    start = clock()
    fn()
    times.append(clock() - start)
"""),
    "no-sync-before-start": measure_with(timed="""
times = []
for _ in range(repeats):
    start = clock()
    fn()
    sync()
    times.append(clock() - start)
"""),
    "sync-only-before-the-warmup": measure_with(warmup="sync()\n" + WARMUP, timed="""
times = []
for _ in range(repeats):
    start = clock()
    fn()
    sync()
    times.append(clock() - start)
"""),
    "clock-started-before-sync": measure_with(timed="""
times = []
for _ in range(repeats):
    start = clock()
    sync()
    fn()
    sync()
    times.append(clock() - start)
"""),
    "clock-stopped-before-sync": measure_with(timed="""
times = []
for _ in range(repeats):
    sync()
    start = clock()
    fn()
    end = clock()
    sync()
    times.append(end - start)
"""),
    "skips-warmup": measure_with(warmup=""),
    "times-the-warmup-calls": measure_with(warmup="", timed=TIMED.replace("range(repeats)",
                                                                         "range(warmup + repeats)")),
    "warmup-hard-coded-to-one": measure_with(warmup=WARMUP.replace("range(warmup)", "range(1)")),
    "warmup-off-by-one": measure_with(warmup=WARMUP.replace("range(warmup)", "range(warmup + 1)")),
    "repeats-hard-coded-to-five": measure_with(timed=TIMED.replace("range(repeats)", "range(5)")),
    "torch-median-is-the-lower-middle": measure_with(
        median="return torch.tensor(times, dtype=torch.float64).median().item()"),
    "sorted-upper-middle": measure_with(median="return sorted(times)[len(times) // 2]"),
    "statistics-median-low": measure_with(median="import statistics\nreturn statistics.median_low(times)"),
    "statistics-median-high": measure_with(median="import statistics\nreturn statistics.median_high(times)"),
    "even-median-pair-off-by-one": measure_with(median="""
ordered = sorted(times)
half = len(ordered) // 2
return float(ordered[half]) if len(ordered) % 2 else (ordered[half] + ordered[min(half + 1, len(ordered) - 1)]) / 2
"""),  # noqa: E501 (an answer's source, kept as written)
    "trimmed-mean": measure_with(median="""
ordered = sorted(times)
inner = ordered[1:-1] if len(ordered) > 2 else ordered
return sum(inner) / len(inner)
"""),
    "timed-warmup-drops-the-slowest": measure_source("""
import statistics
times = []
for i in range(warmup + repeats):
    sync()
    start = clock()
    fn()
    sync()
    times.append(clock() - start)
return statistics.median(sorted(times)[:repeats])
"""),
    "mean-instead-of-median": measure_with(median="return sum(times) / len(times)"),
    "min-instead-of-median": measure_with(median="return min(times)"),
    "returns-the-total": measure_with(median="return sum(times)"),
    "middle-of-the-unsorted-list": measure_with(median="return times[len(times) // 2]"),
    "one-sync-around-the-whole-loop": measure_with(timed="""
sync()
start = clock()
for _ in range(repeats):
    fn()
sync()
total = clock() - start
""", median="return total / repeats"),
    "uses-time-perf-counter": measure_with(timed=TIMED.replace("clock()", "time.perf_counter()")),
    "uses-time-time": measure_with(timed=TIMED.replace("clock()", "time.time()")),
    "returns-milliseconds": measure_with(median="import statistics\nreturn statistics.median(times) * 1000"),
    "returns-the-list-of-times": measure_with(median="return sorted(times)"),
    "returns-a-tensor": measure_with(median="return torch.tensor(times).median()"),
}

BANDWIDTH_MISTAKES = {
    "gibibytes-instead-of-gigabytes": bandwidth_with(rate="nbytes / seconds / 2**30"),
    "megabytes-per-second": bandwidth_with(rate="nbytes / seconds / 1e6"),
    "gigabits-per-second": bandwidth_with(rate="nbytes * 8 / seconds / 1e9"),
    "multiplies-by-seconds": bandwidth_with(rate="nbytes * seconds / 1e9"),
    "truncates-to-whole-gigabytes": bandwidth_with(rate="nbytes // 10**9 / seconds"),
    "rounds-the-result": bandwidth_with(rate="round(nbytes / seconds / 1e9, 1)"),
    "no-validation": bandwidth_with(checks=""),
    "zero-seconds-not-rejected": bandwidth_with(checks=CHECKS.replace("seconds <= 0", "seconds < 0")),
    "rejects-zero-bytes": bandwidth_with(checks=CHECKS.replace("nbytes < 0", "nbytes <= 0")),
    "negative-bytes-not-rejected": bandwidth_with(checks="""
if seconds <= 0:
    raise ValueError("seconds must be positive")
"""),
    "asserts-instead-of-raising": bandwidth_with(checks="""
assert seconds > 0, "seconds must be positive"
assert nbytes >= 0, "nbytes must be >= 0"
"""),
    "returns-zero-for-zero-seconds": bandwidth_with(checks="""
if seconds == 0:
    return 0.0
if seconds < 0 or nbytes < 0:
    raise ValueError("negative input")
"""),
    "raises-type-error": bandwidth_with(checks=CHECKS.replace("ValueError", "TypeError")),
}


@pytest.mark.parametrize("source", MEASURE_MISTAKES.values(), ids=MEASURE_MISTAKES.keys())
def test_measure_mistake_loses_points(source):
    support.assert_mistake_loses_points(NOTEBOOK, "measure", source, CELLS_OF, TOTAL)


@pytest.mark.parametrize("source", BANDWIDTH_MISTAKES.values(), ids=BANDWIDTH_MISTAKES.keys())
def test_bandwidth_mistake_loses_points(source):
    support.assert_mistake_loses_points(NOTEBOOK, "bandwidth-gbps", source, CELLS_OF, TOTAL)


@pytest.mark.parametrize("mistake", ["no-sync-after-fn", "mean-instead-of-median", "skips-warmup",
                                     "uses-time-perf-counter", "no-sync-before-start"])
def test_feedback_catches_measure_mistakes(mistake):
    namespace = _namespace({"measure": MEASURE_MISTAKES[mistake]})
    assert evaluate(ps04._exercises.exercises["measure"], namespace).outcome is Outcome.INCORRECT


def test_failures_say_what_to_fix():
    results = results_for({"measure": MEASURE_MISTAKES["no-sync-after-fn"],
                           "bandwidth-gbps": BANDWIDTH_MISTAKES["gibibytes-instead-of-gigabytes"]})
    assert re.search(r"sync\(\)", results["measure-tests-basic"].error)
    assert "not 2**30" in results["bandwidth-gbps-tests-basic"].error
    results = results_for({"measure": MEASURE_MISTAKES["mean-instead-of-median"]})
    assert "median" in results["measure-tests-median"].error
    feedback = evaluate(ps04._exercises.exercises["measure"], _namespace({"measure": MEASURE_MISTAKES[
        "no-sync-after-fn"]}))
    assert "enqueue" in feedback.message


# ----------------------------------------------------------------------------------------------------------
# step_times_ms: time every step with CUDA events instead of a synchronize() per step.
#
# | mistake | what the student believed | caught by |
# | --- | --- | --- |
# | `end.synchronize()` per step | each pair must end before the next | one-wait, values (launch gaps) |
# | `torch.cuda.synchronize()` inside the loop | events need a full sync per step | one-wait |
# | `elapsed_time` read in the loop after a per-step sync | read each time as soon as it exists | one-wait |
# | no wait at all | `record()` makes the host wait | one-wait (elapsed_time raises, as CUDA's does) |
# | waits on the first event only | one event stands for all | one-wait (the last has not completed) |
# | `end.wait()` instead of `synchronize()` | `wait()` makes the host wait | one-wait (only a stream waits) |
# | one pair of events made once and re-recorded | an event keeps each time it was recorded | values |
# | one start event before the loop | each end against the first start | values |
# | divides by 1000 | elapsed_time is in seconds | values |
# | `time.perf_counter()` around each step, no sync | the host clock sees device work | values |
# | `end.elapsed_time(start)` | the order of the events does not matter | values |
# | the mean instead of the list | one number is enough | values |
# | one extra warm-up call | every benchmark warms up | values (step called more than n times) |


def steps_with(make="start, end = new_event(), new_event()", before="start.record()", after="end.record()",
               keep="starts.append(start)\nends.append(end)", inside="", wait="ends[-1].synchronize()",
               result="return [start.elapsed_time(end) for start, end in zip(starts, ends)]",
               start="starts, ends = [], []") -> str:
    """Return a step_times_ms cell built from the reference with some pieces replaced."""
    loop = "\n".join(f"    {line}" for piece in (make, before, "step()", after, keep, inside)
                     for line in piece.split("\n") if line)
    return support.function_cell(HEADS["step-times-ms"], "\n".join(
        p for p in (start, f"for _ in range(n):\n{loop}", wait, result) if p))


CORRECT_STEP_TIMES = {
    "shared-events-between-steps": support.function_cell(HEADS["step-times-ms"], """
marks = [new_event()]
marks[0].record()
for _ in range(n):
    step()
    mark = new_event()
    mark.record()
    marks.append(mark)
marks[-1].synchronize()
return [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]
"""),
    "device-sync-after-the-loop": steps_with(wait="torch.cuda.synchronize()"),
    "torch-cuda-event-and-stream-sync": steps_with(
        make="start = torch.cuda.Event(enable_timing=True)\nend = torch.cuda.Event(enable_timing=True)",
        before="start.record(torch.cuda.current_stream())", wait="torch.cuda.current_stream().synchronize()"),
    "events-made-first-and-each-synced-after": support.function_cell(HEADS["step-times-ms"], """
pairs = [(new_event(), new_event()) for _ in range(n)]
for start, end in pairs:
    start.record()
    step()
    end.record()
for _, end in pairs:
    end.synchronize()
return [float(start.elapsed_time(end)) for start, end in pairs]
"""),
}


@pytest.mark.parametrize("source", CORRECT_STEP_TIMES.values(), ids=CORRECT_STEP_TIMES.keys())
def test_other_correct_step_times_get_full_marks(source):
    support.assert_all_pass(results_for({"step-times-ms": source}))


STEP_TIMES_MISTAKES = {
    "event-sync-every-step": steps_with(inside="end.synchronize()"),
    "device-sync-every-step": steps_with(inside="torch.cuda.synchronize()"),
    "reads-each-time-in-the-loop": steps_with(
        start="times = []", keep="", inside="end.synchronize()\ntimes.append(start.elapsed_time(end))",
        wait="", result="return times"),
    "no-wait": steps_with(wait=""),
    "waits-on-the-first-event": steps_with(wait="starts[0].synchronize()"),
    "event-wait-instead-of-synchronize": steps_with(wait="ends[-1].wait()"),
    "one-pair-re-recorded": steps_with(start="starts, ends = [], []\nstart, end = new_event(), new_event()",
                                       make=""),
    "one-start-for-all": steps_with(start="starts, ends = [], []\nfirst = new_event()\nfirst.record()",
                                    make="end = new_event()", before="", keep="ends.append(end)",
                                    result="return [first.elapsed_time(end) for end in ends]"),
    "seconds": steps_with(
        result="return [start.elapsed_time(end) / 1000 for start, end in zip(starts, ends)]"),
    "host-clock-without-sync": support.function_cell(HEADS["step-times-ms"], """
import time
times = []
for _ in range(n):
    start = time.perf_counter()
    step()
    times.append((time.perf_counter() - start) * 1e3)
return times
"""),
    "events-in-the-wrong-order": steps_with(
        result="return [end.elapsed_time(start) for start, end in zip(starts, ends)]"),
    "returns-the-mean": steps_with(
        result="return sum(s.elapsed_time(e) for s, e in zip(starts, ends)) / n"),
    "extra-warm-up-call": steps_with(start="starts, ends = [], []\nstep()"),
}


@pytest.mark.parametrize("source", STEP_TIMES_MISTAKES.values(), ids=STEP_TIMES_MISTAKES.keys())
def test_step_times_mistake_loses_points(source):
    support.assert_mistake_loses_points(NOTEBOOK, "step-times-ms", source, CELLS_OF, TOTAL)


@pytest.mark.parametrize(("mistake", "cell", "words"), [
    ("event-sync-every-step", "step-times-ms-tests-one-wait", "wait once"),
    ("no-wait", "step-times-ms-tests-one-wait", "synchronize on the end event"),
    ("one-pair-re-recorded", "step-times-ms-tests-values", "one start and one end event per call"),
    ("seconds", "step-times-ms-tests-values", "milliseconds"),
])
def test_step_times_failures_say_what_to_fix(mistake, cell, words):
    results = results_for({"step-times-ms": STEP_TIMES_MISTAKES[mistake]})
    assert not results[cell].passed and words in results[cell].error, support.report(results)


# ----------------------------------------------------------------------------------------------------------
# fixed_tagger, the culprit hunt. The mistakes came first, from how people fix a model that will not move:
#
# | mistake | what the student believed |
# | --- | --- |
# | only the first error fixed (the positions) | the first error is the only one |
# | heads left in a plain list | model.to() moves every nn.Module it can reach |
# | bias kept as a plain attribute | model.to() moves every tensor attribute |
# | bias copied with .to(x.device) in forward | moving it where it is used is the same as moving it once |
# | positions made on the CPU, then .to(x.device) | a tensor can be made anywhere and moved |
# | constants made nn.Parameter | a parameter is how a tensor moves with the model |
# | device hard-coded as "cuda" | the model only ever runs on a GPU |
# | constants kept in a plain list, or a global | model.to() reaches every tensor the model uses |
# | the maths changed (temperature dropped) | only the devices are checked |


def tagger_with(heads="nn.ModuleList(nn.Linear(features, tags) for _ in range(groups))",
                temperature='self.register_buffer("temperature", torch.tensor(0.5))',
                bias='self.register_buffer("bias", torch.zeros(tags))',
                positions="torch.arange(x.shape[1], device=x.device) / x.shape[1]",
                result="scores / self.temperature + self.bias") -> str:
    """Return a fixed_tagger cell: the reference fix, one piece changed."""
    return support.function_cell(HEADS["fixed-tagger"], f"""
class FixedTagger(nn.Module):
    def __init__(self, features=16, groups=2, tags=3):
        super().__init__()
        self.body = nn.Linear(features, features)
        self.heads = {heads}
        {temperature}
        {bias}

    def forward(self, x):
        positions = {positions}
        hidden = torch.relu(self.body(x)) + positions[None, :, None]
        scores = torch.stack([head(hidden) for head in self.heads]).mean(dim=0)
        return {result}

return FixedTagger()
""")


CORRECT_TAGGER = {
    "temperature-left-a-0-dim-attribute": tagger_with(temperature="self.temperature = torch.tensor(0.5)"),
    "positions-on-the-weights-device": tagger_with(
        positions="torch.arange(x.shape[1], device=self.body.weight.device) / x.shape[1]"),
    "constants-as-python-numbers": tagger_with(temperature="self.temperature = 0.5",
                                               bias='self.register_buffer("bias", torch.zeros(tags))'),
    "buffers-under-other-names": support.function_cell(HEADS["fixed-tagger"], """
class FixedTagger(nn.Module):
    def __init__(self, features=16, groups=2, tags=3):
        super().__init__()
        self.body = nn.Linear(features, features)
        self.heads = nn.ModuleList(nn.Linear(features, tags) for _ in range(groups))
        self.register_buffer("inverse_temperature", torch.tensor(2.0))
        self.register_buffer("offset", torch.zeros(tags))

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device) / x.shape[1]
        hidden = torch.relu(self.body(x)) + positions[None, :, None]
        scores = torch.stack([head(hidden) for head in self.heads]).mean(dim=0)
        return scores * self.inverse_temperature + self.offset

return FixedTagger()
"""),
    "subclass-of-tagger": support.function_cell(HEADS["fixed-tagger"], """
class FixedTagger(Tagger):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList(self.heads)
        bias = self.bias
        del self.bias
        self.register_buffer("bias", bias)

    def forward(self, x):
        positions = torch.linspace(0, 1, x.shape[1] + 1, device=x.device)[:-1]
        hidden = torch.relu(self.body(x)) + positions[None, :, None]
        scores = torch.stack([head(hidden) for head in self.heads]).mean(dim=0)
        return scores / self.temperature + self.bias

return FixedTagger()
"""),
}
TAGGER_MISTAKES = {
    "only-the-positions": tagger_with(heads="[nn.Linear(features, tags) for _ in range(groups)]",
                                      bias="self.bias = torch.zeros(tags)"),
    "heads-in-a-plain-list": tagger_with(heads="[nn.Linear(features, tags) for _ in range(groups)]"),
    "bias-a-plain-attribute": tagger_with(bias="self.bias = torch.zeros(tags)"),
    "bias-copied-in-forward": tagger_with(bias="self.bias = torch.zeros(tags)",
                                          result="scores / self.temperature + self.bias.to(x.device)"),
    "positions-moved-in-forward": tagger_with(
        positions="(torch.arange(x.shape[1]) / x.shape[1]).to(x.device)"),
    "constants-as-parameters": tagger_with(temperature="self.temperature = nn.Parameter(torch.tensor(0.5))",
                                           bias="self.bias = nn.Parameter(torch.zeros(tags))"),
    "device-hard-coded": tagger_with(positions='torch.arange(x.shape[1], device="cuda") / x.shape[1]'),
    "temperature-dropped": tagger_with(result="scores + self.bias"),
    "constants-in-a-plain-list": tagger_with(
        temperature="self.constants = [torch.tensor(0.5), torch.zeros(tags)]", bias="",
        result="scores / self.constants[0] + self.constants[1].to(x.device)"),
    "bias-a-global": tagger_with(bias="", result="scores / self.temperature + BIAS.to(x.device)").replace(
        "    class FixedTagger", "    BIAS = torch.zeros(3)\n\n    class FixedTagger"),
}


@pytest.mark.parametrize("source", CORRECT_TAGGER.values(), ids=CORRECT_TAGGER.keys())
def test_other_correct_taggers_get_full_marks(source):
    support.assert_all_pass(results_for({"fixed-tagger": source}))


@pytest.mark.parametrize("source", TAGGER_MISTAKES.values(), ids=TAGGER_MISTAKES.keys())
def test_tagger_mistake_loses_points(source):
    support.assert_mistake_loses_points(NOTEBOOK, "fixed-tagger", source, CELLS_OF, TOTAL)


@pytest.mark.parametrize(("mistake", "cell", "words"), [
    ("heads-in-a-plain-list", "fixed-tagger-tests-moves", "both heads have 6"),
    ("bias-a-plain-attribute", "fixed-tagger-tests-moves", "model.to('meta') left on the CPU"),
    ("constants-in-a-plain-list", "fixed-tagger-tests-moves", "model.to('meta') left on the CPU"),
    ("bias-copied-in-forward", "fixed-tagger-tests-forward", "copies 1 tensors from the host"),
    ("constants-as-parameters", "fixed-tagger-tests-moves", "parameters"),
])
def test_tagger_failures_say_what_to_fix(mistake, cell, words):
    results = results_for({"fixed-tagger": TAGGER_MISTAKES[mistake]})
    assert not results[cell].passed and words in results[cell].error, support.report(results)


def test_the_culprit_hunt_checks_catch_each_culprit():
    for mistake, words in (("positions-moved-in-forward", "copy (and a wait) per call"),
                           ("bias-copied-in-forward", "left on the CPU ((3,) torch.float32)")):
        namespace = _namespace({"tagger": TAGGER_MISTAKES[mistake]})
        namespace["Tagger"] = ps04.Tagger
        feedback = evaluate(ps04._exercises.exercises["fixed_tagger"], namespace)
        assert feedback.outcome is Outcome.INCORRECT, mistake
        assert words in feedback.message, (mistake, feedback.message)
    plain_list = _namespace({"tagger": TAGGER_MISTAKES["heads-in-a-plain-list"]})
    assert evaluate(ps04._exercises.exercises["fixed_tagger"], plain_list).outcome is Outcome.INCORRECT
