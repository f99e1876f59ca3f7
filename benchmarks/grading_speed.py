"""Benchmark: `python -m autograder grade --jobs N` against plain sequential `nbgrader autograde`.

Both grade the same fully correct submissions of one assignment, each in a fresh scratch copy of the course,
in one run of this script; it prints the wall-clock times, the speed-up and whether the scores agree.

    .venv/bin/python benchmarks/grading_speed.py                  # 8 students, --jobs 2, first assignment
    .venv/bin/python benchmarks/grading_speed.py --students 16 --jobs 4 --assignment ps01-tensors-and-devices

The issue's target: with --jobs 2 on a 2-core machine, at least 1.6x faster than nbgrader, same scores.
"""

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.course import assignments, with_venv_on_path
from autograder.grading.demo import solved


def scratch_course(base: Path, assignment: str) -> Path:
    """Return a fresh course with the repository's nbgrader_config.py and one assignment's source."""
    base.mkdir(parents=True)
    shutil.copyfile(ROOT / "nbgrader_config.py", base / "nbgrader_config.py")
    shutil.copytree(ROOT / "source" / assignment, base / "source" / assignment)
    return base


def _cpu_times() -> tuple[float, float]:
    """Return (busy, total) CPU seconds of the whole machine so far (Linux /proc/stat), or zeros elsewhere."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - fields[3] - fields[4]) / tick, sum(fields) / tick


def machine_busy(seconds: float = 2.0) -> float:
    """Return the share of the machine's CPU that other programs used during a short pause (0 to 1)."""
    busy, total = _cpu_times()
    time.sleep(seconds)
    busy2, total2 = _cpu_times()
    return (busy2 - busy) / (total2 - total) if total2 > total else 0.0


def run(cmd: list[str], cwd: Path) -> float:
    """Run a command quietly; return its wall-clock time (and fail loudly if it fails)."""
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=with_venv_on_path(), capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return seconds


def main() -> None:
    """Build the class, time both graders, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assignment", default=None, help="assignment id (default: the first in source/)")
    parser.add_argument("--students", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sandbox", default="auto", help="passed to `grade --sandbox` (default: auto)")
    parser.add_argument("--repeat", type=int, default=1, help="time both this many times; report medians")
    args = parser.parse_args()
    assignment = args.assignment or (assignments(ROOT) or [None])[0]
    if assignment is None:
        sys.exit("no assignment in source/")
    py = sys.executable
    nbgrader = str(Path(py).parent / "nbgrader")
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
        tmp = Path(tmp)
        plain = scratch_course(tmp / "plain", assignment)
        run([nbgrader, "generate_assignment", assignment, "--force"], plain)
        for path in sorted((plain / "release" / assignment).glob("*.ipynb")):
            right = solved(nbformat.read(path, as_version=4),
                           nbformat.read(plain / "source" / assignment / path.name,
                                          as_version=4))
            for k in range(args.students):
                for folder in (plain / "submitted" / f"s{k:02d}" / assignment, tmp / "class" / f"s{k:02d}"):
                    folder.mkdir(parents=True, exist_ok=True)
                    nbformat.write(right, folder / path.name)
        print(f"{assignment}: {args.students} fully correct submissions; {os.cpu_count()} CPU cores")
        plain_times, our_times = [], []
        for attempt in range(args.repeat):
            shutil.rmtree(plain / "autograded", ignore_errors=True)  # else nbgrader skips graded students
            ours = tmp / f"ours-{attempt}"
            scratch_course(ours, assignment)
            busy = machine_busy()
            plain_times.append(run([nbgrader, "autograde", assignment], plain))
            our_times.append(run([py, "-m", "autograder", "grade", assignment, str(tmp / "class"), "--course",
                                  str(ours), "--jobs", str(args.jobs), "--sandbox", args.sandbox, "--quiet"],
                                 ROOT))
            busy = max(busy, machine_busy())
            print(f"  run {attempt + 1}: nbgrader {plain_times[-1]:.1f} s, ours {our_times[-1]:.1f} s, "
                  f"{plain_times[-1] / our_times[-1]:.2f}x (other programs used {100 * busy:.0f}% of the CPU "
                  "just before or after)")
        t_plain, t_ours = statistics.median(plain_times), statistics.median(our_times)
        print(f"  nbgrader autograde (sequential):        {t_plain:6.1f} s  ({t_plain / args.students:.2f} "
              "s/student)")
        print(f"  python -m autograder grade --jobs {args.jobs}:    {t_ours:6.1f} s  "
              f"({t_ours / args.students:.2f} s/student; feedback, gradebook and report included)")
        print(f"  speed-up: {t_plain / t_ours:.2f}x"
              + (f" (medians of {args.repeat} runs)" if args.repeat > 1 else ""))
        run([nbgrader, "export", "--to", str(tmp / "plain.csv")], plain)
        with (tmp / "plain.csv").open() as handle:
            plain_scores = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(handle)}
        with (tmp / "ours-0" / "graded" / assignment / "grades.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        our_scores = {r["student"]: float(r["score"]) for r in rows}
        same = plain_scores == our_scores
        print(f"  scores: nbgrader {sorted(set(plain_scores.values()))}, ours "
              f"{sorted(set(our_scores.values()))} ({'the same' if same else 'DIFFERENT'}; statuses: "
              f"{sorted({r['status'] for r in rows})})")


if __name__ == "__main__":
    main()
