"""Benchmark: the grader of two source trees on the same class, alternately, to compare a change under load.

Each round times (wall clock, and the CPU of the command and every process it waited for)
`python -m autograder grade --jobs N` (warm start, the template made beforehand, untimed) of
the same fully correct submissions, run from tree A and then from tree B (each its own scratch course);
alternating the two keeps a shared machine's changing load from favouring one. Prints each tree's times and
median, and B's median against A's.

    git archive HEAD | tar -x -C /tmp/before
    .venv/bin/python benchmarks/grading_ab.py /tmp/before . --students 8 --rounds 3
"""

import argparse
import resource
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from grading_speed import build_class, machine_busy, our_scores, run, scratch_course


def main() -> None:
    """Time both trees' grading of one class, alternately, and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help="tree A (e.g. a `git archive` of the commit before the change)")
    parser.add_argument("b", type=Path, help="tree B (e.g. the working tree)")
    parser.add_argument("--assignment", default="ps01-tensors-and-devices")
    parser.add_argument("--students", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    py, nbgrader = sys.executable, str(Path(sys.executable).parent / "nbgrader")
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    times: dict[str, list[float]] = {"A": [], "B": []}
    cpu: dict[str, list[float]] = {"A": [], "B": []}
    print(f"{args.assignment}, {args.students} students, --jobs {args.jobs}; other programs used "
          f"{100 * machine_busy():.0f}% of the CPU just before")
    with tempfile.TemporaryDirectory(prefix="grading-ab-") as tmp:
        tmp = Path(tmp)
        _, folder = build_class(tmp, args.assignment, args.students, nbgrader)
        (tmp / "nobody").mkdir()
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                course = scratch_course(tmp / f"{name}{round_}", args.assignment)
                cmd = [py, "-m", "autograder", "grade", args.assignment, str(folder), "--course", str(course),
                       "--jobs", str(args.jobs), "--quiet"]
                run([*cmd[:5], str(tmp / "nobody"), *cmd[6:]], tree)  # the template, untimed
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                times[name].append(run(cmd, tree))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                scores = sorted(set(our_scores(course, args.assignment).values()))
                print(f"  round {round_ + 1}, {name}: {times[name][-1]:.1f} s, CPU {cpu[name][-1]:.1f} s "
                      f"(scores {scores})", flush=True)
    for what, values in (("wall", times), ("CPU", cpu)):
        medians = {name: statistics.median(v) for name, v in values.items()}
        for name, tree in trees.items():
            each = ", ".join(f"{t:.1f}" for t in values[name])
            print(f"{what}, {name} ({tree}): median {medians[name]:.1f} s of {each}")
        print(f"{what}, B against A: {100 * (medians['B'] / medians['A'] - 1):+.1f}%")
    print(f"busy after: {100 * machine_busy():.0f}% of the CPU used by other programs")


if __name__ == "__main__":
    main()
