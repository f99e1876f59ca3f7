"""Benchmark: where one student's grading time goes, phase by phase (issue 28: profile before cutting).

Grades N fully correct submissions of one assignment with `grade_class` (--jobs 1 by default, so phases do
not overlap) and prints, per phase, the mean seconds per student and its share. Phases are timed by wrapping
the grader's own functions; the workers are forked from this process and append their timings to a file.

    .venv/bin/python benchmarks/student_phases.py                       # 3 students of ps01, --jobs 1, 2 runs
    .venv/bin/python benchmarks/student_phases.py --students 4 --assignment ps02-moving-tensors
    .venv/bin/python benchmarks/student_phases.py --start cold        # kernels started anew (before 28)

By default it profiles both starts in one run: cold (every kernel a new Python that imports torch) and warm
(kernels forked from each worker's zygote, zygote.py).
"""

import argparse
import functools
import inspect
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nbclient import NotebookClient

from autograder.grading import gradebook, session, worker
from autograder.grading.demo import solved
from autograder.grading.execution import GraderExecute
from benchmarks.grading_speed import scratch_course

# (owner, attribute, phase name): the run's steps (once per run) and one student's (once per attempt)
RUN_PHASES = [
    (session, "prepare", "run: template and course gradebook (generated when changed), backup"),
    (session, "isolate", "run: pick the sandbox"),
    (session, "write_reports", "run: grades.csv and summary.html"),
]
STUDENT_PHASES = [
    (worker.Worker, "start_zygote", "worker: start the zygote (once per worker, warm start only)"),
    (worker.Worker, "prepare", "student: build the scratch course"),
    (worker.Worker, "write_kernelspec", "student: write the kernel spec"),
    (GraderExecute, "start_new_kernel", "student: start the kernel process"),
    (NotebookClient, "start_new_kernel_client", "student: wait until the kernel answers"),
    (GraderExecute, "preprocess", "student: start the kernel and run the notebook"),
    (worker.Worker, "write_feedback", "student: feedback pages"),
    (worker.Worker, "collect", "student: read scores back from the scratch gradebook"),
    (worker.Worker, "attempt", "student: the whole attempt in the worker"),
    (gradebook, "record", "student: record in the course gradebook (main process)"),
    (gradebook, "install", "student: install autograded/ into the course (main process)"),
]


def timed(log: Path, phase: str, func):
    """Return `func` wrapped to append (phase, seconds) to `log` (async functions stay async)."""
    def write(seconds: float) -> None:
        with log.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"phase": phase, "seconds": seconds, "pid": os.getpid()}) + "\n")

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return await func(*args, **kwargs)
            finally:
                write(time.perf_counter() - started)
    else:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                write(time.perf_counter() - started)
    return wrapper


def install_timers(log: Path) -> None:
    """Wrap every phase's function (before the workers fork, so they inherit the wrappers)."""
    from nbgrader.apps import NbGraderAPI

    for owner, name, phase in [*RUN_PHASES, *STUDENT_PHASES,
                               (NbGraderAPI, "autograde", "student: nbgrader autograde (all of it)")]:
        setattr(owner, name, timed(log, phase, getattr(owner, name)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="ps01-tensors-and-devices")
    parser.add_argument("--students", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--runs", type=int, default=2,
                        help="grade the class this many times (force); report the last (warm, as on the hub)")
    parser.add_argument("--start", choices=["warm", "cold", "both"], default="both")
    args = parser.parse_args()
    import nbformat

    base = Path(tempfile.mkdtemp(prefix="phases-"))
    course = scratch_course(base / "course", args.assignment)
    release = gradebook.generate(course, args.assignment, base / "generated") / "release" / args.assignment
    subs = base / "submissions"
    for i in range(args.students):
        for path in sorted(release.glob("*.ipynb")):
            source = nbformat.read(course / "source" / args.assignment / path.name, as_version=4)
            folder = subs / f"student{i:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(solved(nbformat.read(path, as_version=4), source), folder / path.name)
    log = base / "phases.jsonl"
    install_timers(log)
    for start in (["cold", "warm"] if args.start == "both" else [args.start]):
        options = session.GradeOptions(jobs=args.jobs, progress=False, force=True, warm=start == "warm")
        for _ in range(args.runs):
            log.unlink(missing_ok=True)
            started = time.perf_counter()
            summary = session.grade_class(course, args.assignment, subs, options, echo=lambda line: None)
            wall = time.perf_counter() - started
        totals: dict[str, list[float]] = defaultdict(list)
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            totals[entry["phase"]].append(entry["seconds"])
        scores = sorted({r.final_score for r in summary.results})
        print(f"{args.assignment}, {start} start: {args.students} students, --jobs {args.jobs}, run "
              f"{args.runs} of {args.runs}: {wall:.1f} s wall ({wall / args.students:.2f} s per student), "
              f"scores {scores}")
        print(f"{'phase':62} {'calls':>5} {'mean s':>8} {'total s':>8}")
        for phase, values in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
            print(f"{phase:62} {len(values):5d} {sum(values) / len(values):8.2f} {sum(values):8.2f}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
