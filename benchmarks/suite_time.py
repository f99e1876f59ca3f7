"""Benchmark: where the test suite's time goes, module by module, and the order to start the modules in.

    sudo .venv/bin/python benchmarks/suite_time.py measure        # the whole suite as `make test` runs it
    .venv/bin/python benchmarks/suite_time.py report              # per module: worker, start, end, CPU, wall
    .venv/bin/python benchmarks/suite_time.py order               # simulate two workers; an order to start in

`measure` runs pytest with this file as a plugin (extra arguments go to pytest; CI=true and the hub tests on,
as in CI). Each xdist worker moves itself into a cgroup of its own (cgroup v1's cpuacct, or v2), so the CPU
seconds of a test count everything it started: kernels, graders, hubs, browsers. A line per test goes to
.suite-time.jsonl. Needs root (cgroups); `--durations` only gives wall time, which on a 2-core machine mixes
a test's own work with the other worker's.

`order` replays the run on two simulated workers, as `--dist loadfile` hands out modules (a worker takes the
next module when it has two tests or fewer left), each test needing its measured CPU at the rate it used it
alone, the cores shared when both ask for more than two; it searches for an order of the long modules that
ends soonest and prints it for tests/schedule.py. Measure with `-p no:xdist` (tests alone) for the simulation.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".suite-time.jsonl"
CGROUPS = (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup"))  # v1's cpuacct, then v2's
GROUP = "devicelab-suite-time"
CORES = 2

# --- the pytest plugin (loaded by `measure` in the controller and in every worker) ----------------------


def _hierarchy() -> Path:
    for base in CGROUPS:
        if (base / "cpuacct.usage").exists() or (base / "cgroup.controllers").exists():
            return base
    raise SystemExit("no cgroup CPU accounting here (cgroup v1 cpuacct or v2)")


def _usage(group: Path) -> float:
    """Return the CPU seconds the cgroup's processes have used."""
    if (group / "cpuacct.usage").exists():
        return int((group / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


_state = {"group": None, "started": {}}


def pytest_configure(config) -> None:
    """In a worker (or a run without workers): move into a cgroup of its own, below the run's."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None and not getattr(config.option, "numprocesses", None):
        worker = "main"  # no xdist workers: this process runs the tests
    if worker is None or "SUITE_TIME_GROUP" not in os.environ:
        return
    group = Path(os.environ["SUITE_TIME_GROUP"]) / worker
    group.mkdir(exist_ok=True)
    (group / "cgroup.procs").write_text(str(os.getpid()))
    _state["group"] = group


def pytest_runtest_logstart(nodeid: str, location) -> None:
    if _state["group"] is not None:
        _state["started"][nodeid] = (_usage(_state["group"]), time.time())


def pytest_runtest_logfinish(nodeid: str, location) -> None:
    if _state["group"] is None or nodeid not in _state["started"]:
        return
    cpu, start = _state["started"].pop(nodeid)
    line = {"test": nodeid, "worker": _state["group"].name, "start": start,
            "wall": time.time() - start, "cpu": _usage(_state["group"]) - cpu}
    with open(os.environ["SUITE_TIME_OUT"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


# --- measuring, reporting, ordering ------------------------------------------------------------------------


@dataclass
class Timed:
    """One test as measured: its module, worker, start (s since the run began), wall and CPU seconds."""

    module: str
    worker: str
    start: float
    wall: float
    cpu: float


def measure(pytest_args: list[str]) -> None:
    """Run the suite with the plugin (as `make test` does, unless told otherwise); write OUT."""
    run_group = _hierarchy() / GROUP
    run_group.mkdir(exist_ok=True)
    OUT.unlink(missing_ok=True)
    env = {**os.environ, "CI": "true", "DEVICELAB_HUB_TESTS": "1", "SUITE_TIME_GROUP": str(run_group),
           "SUITE_TIME_OUT": str(OUT), "PYTHONPATH": str(Path(__file__).parent),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    args = pytest_args or ["-n", "auto", "--dist", "loadfile", "--no-loadscope-reorder"]
    subprocess.run(["make", "--no-print-directory", "compile"], cwd=ROOT, check=True)  # as `make test` does
    (run_group / "cgroup.procs").write_text(str(os.getpid()))  # the controller (and what it starts) too
    before, started = _usage(run_group), time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "suite_time", "-q", *args], cwd=ROOT,
                          env=env, check=False)
    wall, cpu = time.monotonic() - started, _usage(run_group) - before
    print(f"\n{wall:.0f} s, {cpu:.0f} s of CPU on {os.cpu_count()} cores ({cpu / wall / os.cpu_count():.0%} "
          f"busy); per test in {OUT.name}")
    for worker in run_group.iterdir():
        if worker.is_dir():
            _remove_group(worker)
    sys.exit(done.returncode)


def _remove_group(group: Path, seconds: float = 10.0) -> None:
    """Remove a worker's cgroup once its processes have ended; name any still alive after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    for pid in (group / "cgroup.procs").read_text().split():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            command = "(gone)"
        print(f"left running after the run: pid {pid} in {group.name}: {command[:200]}")


def load() -> list[Timed]:
    """Return the tests of the last measured run, their start counted from the run's first test."""
    lines = [json.loads(line) for line in OUT.read_text(encoding="utf-8").splitlines()]
    first = min(line["start"] for line in lines)
    return [Timed(line["test"].split("::")[0].rsplit("/", 1)[-1].removesuffix(".py"), line["worker"],
                 line["start"] - first, line["wall"], line["cpu"]) for line in lines]


def by_module(tests: list[Timed]) -> dict[str, list[Timed]]:
    """Return the tests grouped by module, in the order the modules first appear."""
    modules: dict[str, list[Timed]] = defaultdict(list)
    for test in tests:
        modules[test.module].append(test)
    return modules


def report(tests: list[Timed], at_least: float = 5.0) -> None:
    """Print each module over `at_least` seconds: worker, start, end, CPU, wall and wall not spent on CPU."""
    modules = by_module(tests)
    print(f"{'worker':6} {'start':>6} {'end':>6} {'CPU':>6} {'wall':>6} {'waits':>6}  module")
    for name, group in sorted(modules.items(), key=lambda kv: min(t.start for t in kv[1])):
        cpu, wall = sum(t.cpu for t in group), sum(t.wall for t in group)
        start, end = min(t.start for t in group), max(t.start + t.wall for t in group)
        if wall >= at_least:
            waits = wall - cpu
            print(f"{group[0].worker:6} {start:6.0f} {end:6.0f} {cpu:6.1f} {wall:6.1f} {waits:6.1f}  {name}")
    for worker in sorted({t.worker for t in tests}):
        mine = [t for t in tests if t.worker == worker]
        end = max(t.start + t.wall for t in mine)
        print(f"{worker}: {sum(t.cpu for t in mine):.0f} s of CPU, done at {end:.0f} s")


def simulate(order: list[str], modules: dict[str, list[Timed]], step: float = 0.5) -> float:
    """Return when two workers would finish the modules started in `order` (see the module's docstring)."""
    queue, pending = list(order), [[], []]  # per worker: [cpu, wall, fraction left] of each test it holds

    def take(worker: int) -> None:
        if queue:
            pending[worker].extend([t.cpu, t.wall, 1.0] for t in modules[queue.pop(0)])

    now = 0.0
    while queue or pending[0] or pending[1]:
        for worker in (0, 1):
            if len(pending[worker]) <= 2:
                take(worker)
        asked = sum(p[0][0] / p[0][1] for p in pending if p and p[0][1] > 0)
        share = min(1.0, CORES / asked) if asked else 1.0
        for tests in pending:
            budget = step * share  # seconds of the test's own (alone) time this step
            while tests and budget > 0:
                need = tests[0][2] * tests[0][1]
                if need <= budget:
                    budget -= need
                    tests.pop(0)
                else:
                    tests[0][2] -= budget / tests[0][1]
                    budget = 0
        now += step
    return now


def order(tests: list[Timed], long_s: float = 20.0, tries: int = 3000, seed: int = 1) -> list[str]:
    """Return the long modules in the order the simulation finishes soonest with (a local search)."""
    modules = by_module(tests)
    long = [m for m, group in modules.items() if sum(t.wall for t in group) >= long_s]
    rest = [m for m in modules if m not in long]
    rng = random.Random(seed)
    best = sorted(long, key=lambda m: -sum(t.wall for t in modules[m]))
    best_end = simulate(best + rest, modules, step=1.0)
    print(f"longest first: {best_end:.0f} s (simulated)")
    for _ in range(tries):
        candidate = list(best)
        moved = candidate.pop(rng.randrange(len(candidate)))
        candidate.insert(rng.randrange(len(candidate) + 1), moved)
        end = simulate(candidate + rest, modules, step=1.0)
        if end <= best_end:
            best, best_end = candidate, end
    print(f"best found: {best_end:.0f} s (simulated)")
    for name in best:
        group = modules[name]
        print(f'    "{name}",  # CPU {sum(t.cpu for t in group):.0f}, wall {sum(t.wall for t in group):.0f}')
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("measure", "report", "order"))
    args, pytest_args = parser.parse_known_args()
    if args.what == "measure":
        measure(pytest_args)
    elif args.what == "report":
        report(load())
    else:
        order(load())


if __name__ == "__main__":
    main()
