"""Benchmark: do the tests hold on a loaded machine? Run them again and again beside busy processes.

    .venv/bin/python benchmarks/under_load.py modules tests/hub/test_hub_autograde.py ... [--times 20] \
        [--hogs 2]
    .venv/bin/python benchmarks/under_load.py ci [--times 2] [--hogs 2]

`modules` runs each module `--times` times, one after the other (`pytest -p no:xdist`, CI=true, the hub tests
on where this runs as root, as in CI), while `--hogs` processes (default: one per core) spin on the CPU
beside it; `ci` clones this repository's HEAD afresh for each run and runs `bash .ci/run` in the clone, the
command CI runs, beside the same hogs. A test that depends on the machine's speed (a chosen time beside the
real clock, a fixed sleep, a deadline a loaded machine misses, a race) fails here long before it fails in CI
once in twenty runs.

Each run is a line of `.under-load.jsonl` (what ran, its exit status, its seconds, the load average), the
output of a failed run is kept in `.under-load/`, and the end prints a table: runs, failures, median and
slowest seconds per module. The exit status is 1 when any run failed.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".under-load.jsonl"
LOGS = ROOT / ".under-load"
SPIN = "while True:\n    pass\n"


@contextmanager
def hogs(count: int):
    """Keep `count` processes busy on the CPU (at the normal priority, as other work on a CI machine is)."""
    spinning = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        yield
    finally:
        for p in spinning:
            p.kill()
        for p in spinning:
            p.wait()


def environment() -> dict[str, str]:
    """Return the environment `make test` gives the tests: the venv first on PATH, CI on, the hub tests on as
    root."""
    env = dict(os.environ, CI="true", PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}")
    if os.geteuid() == 0:
        env["DEVICELAB_HUB_TESTS"] = "1"
    return env


def bare() -> dict[str, str]:
    """Return this environment as a fresh CI machine has it: none of this checkout's environments on PATH,
    none of the course's switches set (.ci/run sets its own)."""
    path = [p for p in os.environ.get("PATH", "").split(":") if p and not p.startswith(str(ROOT))]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "DEVICELAB", "CI"))}
    return {**env, "PATH": ":".join(path)}


def record(what: str, run: int, command: list[str], cwd: Path, env: dict[str, str], hogs_n: int,
           keep: bool = False) -> dict:
    """Run one command to its end; return (and append to OUT) what happened, keeping a failure's output (and
    any run's, with `keep`)."""
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", check=False)
    row = {"what": what, "run": run, "rc": done.returncode, "seconds": round(time.monotonic() - started, 1),
           "hogs": hogs_n, "load": round(os.getloadavg()[0], 2), "at": time.strftime("%Y-%m-%d %H:%M:%S")}
    if done.returncode != 0 or keep:
        LOGS.mkdir(exist_ok=True)
        name = Path(what.split("::")[0]).stem if what.startswith("tests/") else "ci"
        log = LOGS / f"{name}-{time.strftime('%H%M%S')}-{run}.log"
        log.write_text(done.stdout)
        row["log"] = str(log.relative_to(ROOT))
    with OUT.open("a") as out:
        out.write(json.dumps(row) + "\n")
    print(f"{what} #{run}: {'passed' if row['rc'] == 0 else 'FAILED'} in {row['seconds']:.0f} s, load "
          f"{row['load']}" + (f" (output: {row['log']})" if "log" in row else ""), flush=True)
    return row


def summary(rows: list[dict]) -> str:
    """Return a table: per module, runs, failures, median and slowest seconds."""
    lines = [f"{'module':56} {'runs':>4} {'failed':>6} {'median s':>9} {'slowest s':>9}"]
    for what in dict.fromkeys(r["what"] for r in rows):
        mine = [r for r in rows if r["what"] == what]
        times = [r["seconds"] for r in mine]
        lines.append(f"{what:56} {len(mine):4} {sum(r['rc'] != 0 for r in mine):6} "
                     f"{statistics.median(times):9.1f} {max(times):9.1f}")
    return "\n".join(lines)


def run_modules(modules: list[str], times: int, hogs_n: int, pytest_args: list[str]) -> list[dict]:
    """Each module `times` times, one run after another, beside the hogs."""
    rows = []
    with hogs(hogs_n):
        for run in range(1, times + 1):
            for module in modules:
                command = [str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:xdist",
                           "-p", "no:cacheprovider", *pytest_args, module]
                rows.append(record(module, run, command, ROOT, environment(), hogs_n))
    return rows


def run_ci(times: int, hogs_n: int) -> list[dict]:
    """`bash .ci/run` in a fresh clone of HEAD, `times` times, beside the hogs."""
    rows = []
    with hogs(hogs_n):
        for run in range(1, times + 1):
            with tempfile.TemporaryDirectory(prefix="devicelab-ci-") as folder:
                clone = Path(folder) / "clone"
                subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
                rows.append(record("bash .ci/run (fresh clone)", run, ["bash", ".ci/run"], clone, bare(),
                                   hogs_n, keep=True))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    modules = sub.add_parser("modules", help="run test modules again and again beside busy processes")
    modules.add_argument("modules", nargs="+")
    modules.add_argument("--times", type=int, default=20)
    modules.add_argument("-k", dest="keyword", help="pytest's -k, to loop some tests of a module")
    ci = sub.add_parser("ci", help="run `bash .ci/run` in fresh clones beside busy processes")
    ci.add_argument("--times", type=int, default=2)
    for p in (modules, ci):
        p.add_argument("--hogs", type=int, default=os.cpu_count() or 2,
                       help="busy processes beside the runs (default: one per core)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the hogs are stopped too (finally)
    if args.times < 1 or args.hogs < 0:
        parser.error("--times must be at least 1 and --hogs at least 0")
    if args.action == "modules":
        missing = [m for m in args.modules if not (ROOT / m.split("::")[0]).is_file()]
        if missing:
            parser.error(f"no such test module: {', '.join(missing)}")
        rows = run_modules(args.modules, args.times, args.hogs, ["-k", args.keyword] if args.keyword else [])
    else:
        rows = run_ci(args.times, args.hogs)
    print(summary(rows))
    return 1 if any(r["rc"] != 0 for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
