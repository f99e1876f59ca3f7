"""Benchmark: `python -m autograder grade --jobs N` against plain sequential `nbgrader autograde`.

Both grade the same fully correct submissions of one assignment, each in a fresh scratch copy of the course,
in one run of this script; it prints the wall-clock times, the speed-up and whether the scores agree.

    .venv/bin/python benchmarks/grading_speed.py                  # 8 and 32 students, --jobs 2
    .venv/bin/python benchmarks/grading_speed.py --students 16 --jobs 4 --assignment ps01-tensors-and-devices

Ours runs three times per class: cold start (every kernel a new Python) and warm start (kernels forked from
each worker's zygote, the default), each on a course whose template was made beforehand, as plain nbgrader's
`generate_assignment` ran before its timed `autograde` (our template is nbgrader's generate_assignment too,
made once per assignment and kept); then warm start on a fresh course, the template made within the timed run.
Issue 28's target: warm, --jobs 2 on a 2-core machine, at least 5x nbgrader.
"""

import argparse
import csv
import os
import shutil
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


def build_class(tmp: Path, assignment: str, students: int, nbgrader: str) -> tuple[Path, Path]:
    """Return (a plain nbgrader course with `students` correct submissions, the same class as a folder)."""
    plain = scratch_course(tmp / "plain", assignment)
    run([nbgrader, "generate_assignment", assignment, "--force"], plain)
    for path in sorted((plain / "release" / assignment).glob("*.ipynb")):
        right = solved(nbformat.read(path, as_version=4),
                       nbformat.read(plain / "source" / assignment / path.name, as_version=4))
        for k in range(students):
            for folder in (plain / "submitted" / f"s{k:02d}" / assignment, tmp / "class" / f"s{k:02d}"):
                folder.mkdir(parents=True, exist_ok=True)
                nbformat.write(right, folder / path.name)
    return plain, tmp / "class"


def our_scores(course: Path, assignment: str) -> dict[str, float]:
    """Return student -> score from a run's grades.csv."""
    with (course / "graded" / assignment / "grades.csv").open() as handle:
        return {r["student"]: float(r["score"]) for r in csv.DictReader(handle)}


def main() -> None:
    """Build each class, time plain nbgrader and both of our starts, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assignment", default=None, help="assignment id (default: the first in source/)")
    parser.add_argument("--students", type=int, nargs="+", default=[8, 32],
                        help="class sizes (default: 8 32)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sandbox", default="auto", help="passed to `grade --sandbox` (default: auto)")
    args = parser.parse_args()
    assignment = args.assignment or (assignments(ROOT) or [None])[0]
    if assignment is None:
        sys.exit("no assignment in source/")
    py = sys.executable
    nbgrader = str(Path(py).parent / "nbgrader")
    print(f"{assignment}; {os.cpu_count()} CPU cores; --jobs {args.jobs}; other programs used "
          f"{100 * machine_busy():.0f}% of the CPU just before")
    for students in args.students:
        with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
            tmp = Path(tmp)
            plain, folder = build_class(tmp, assignment, students, nbgrader)
            times = {"nbgrader autograde (sequential)": run([nbgrader, "autograde", assignment], plain)}
            scores = {}
            (tmp / "nobody").mkdir()
            for start in ("cold", "warm", "first"):
                ours = scratch_course(tmp / start, assignment)
                cmd = [py, "-m", "autograder", "grade", assignment, str(folder), "--course", str(ours),
                       "--jobs", str(args.jobs), "--sandbox", args.sandbox, "--quiet",
                       *(["--cold-start"] if start == "cold" else [])]
                if start != "first":  # the template made beforehand, as nbgrader's release was (untimed)
                    run([*cmd[:5], str(tmp / "nobody"), *cmd[6:]], ROOT)
                label = (f"grade --jobs {args.jobs}, {start} start" if start != "first"
                         else f"grade --jobs {args.jobs}, warm, template made in the run")
                times[label] = run(cmd, ROOT)
                scores[start] = our_scores(ours, assignment)
            run([nbgrader, "export", "--to", str(tmp / "plain.csv")], plain)
            with (tmp / "plain.csv").open() as handle:
                scores["nbgrader"] = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(handle)}
            base = times["nbgrader autograde (sequential)"]
            print(f"{students} fully correct submissions:")
            for what, seconds in times.items():
                print(f"  {what:46} {seconds:6.1f} s  ({seconds / students:.2f} s/student)  "
                      f"{base / seconds:.2f}x")
            same = scores["nbgrader"] == scores["cold"] == scores["warm"] == scores["first"]
            print(f"  scores: {'the same' if same else 'DIFFERENT'} "
                  f"({sorted({v for s in scores.values() for v in s.values()})})")
    print(f"busy after: {100 * machine_busy():.0f}% of the CPU used by other programs")


if __name__ == "__main__":
    main()
