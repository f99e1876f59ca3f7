"""Command line: `python -m autograder build | tidy | validate | grade | demo`."""

import argparse
import sys
from pathlib import Path

from autograder import COURSE_ROOT
from autograder.grading.defaults import DEFAULT_MEMORY_MIB, DEFAULT_SANDBOX, DEFAULT_TIMEOUT, SANDBOX_CHOICES


def _tidy(args) -> int:
    from autograder.course import course_notebooks
    from autograder.tidy import is_tidy, tidy_file

    paths = [Path(p) for p in args.paths] or course_notebooks()
    if args.check:
        untidy = [p for p in paths if not is_tidy(p)]
        for path in untidy:
            print(f"untidy: {path} (run `make tidy`)")
        return 1 if untidy else 0
    changed = [p for p in paths if tidy_file(p)]
    for path in changed:
        print(f"tidied {path}")
    print(f"{len(paths)} notebooks checked, {len(changed)} tidied")
    return 0


def _build(args) -> int:
    from autograder.build import BuildError, build_release

    try:
        written = build_release(COURSE_ROOT, assignments=args.assignments or None)
    except BuildError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    print(f"release/ rebuilt: {len(written)} notebooks")
    return 0


def _validate(args) -> int:
    from autograder.validate import print_report, validate_course

    report = validate_course(COURSE_ROOT, assignments=args.assignments or None)
    print_report(report)
    return 0 if report.ok else 1


NEXT_STEP = ("Next, the students' feedback: each student's pages are in <assignment>/feedback/<student>/, "
             "to hand to them (by email, your LMS, or on the class hub: hub feedback <assignment>).")


def _print_index(out: Path) -> None:
    """Write the class's overview page over every assignment graded in `out`, and say where it is."""
    from autograder.grading.report import write_class_index

    index = write_class_index(out, NEXT_STEP)
    if index is not None:
        print(f"\nthe class: {index} (every assignment's scores, pass rates and the students to look at)")
        print(NEXT_STEP.replace("<assignment>/", f"{out}/<assignment>/"))


def _print_run(run, show_hidden_tests: bool) -> None:
    from collections import Counter

    counts = Counter(r.status for r in run.results)
    print(f"{len(run.results)} students: " + ", ".join(f"{n} {s}" for s, n in counts.most_common())
          + f" ({run.seconds:.1f} s; {run.graded} graded now, {run.reused} unchanged)")
    print(f"grades:   {run.out / 'grades.csv'}")
    print(f"summary:  {run.out / 'summary.html'}")
    print(f"feedback: {run.out / 'feedback'}/<student>/ ("
          + ("hidden tests printed in full: hand these out only after the due date" if show_hidden_tests
             else "hidden tests kept hidden: safe to hand out before the due date; --show-hidden-tests "
                  "prints them")
          + ")")


def _grade(args) -> int:
    import gc
    import signal

    gc.disable()  # no collections while importing; frozen after, so the forked workers' collections skip them
    from autograder.grading.session import GradeOptions, GradingError, grade_class

    gc.freeze()
    gc.enable()

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    options = GradeOptions(jobs=args.jobs, timeout=args.timeout, memory_mib=args.memory, sandbox=args.sandbox,
                           force=args.force, progress=not args.quiet,
                           hidden=tuple(Path(p) for p in args.hide), warm=not args.cold_start,
                           show_hidden_tests=args.show_hidden_tests,
                           check_solution=not args.no_solution_check)
    try:
        run = grade_class(Path(args.course), args.assignment, Path(args.submissions), options,
                          out=Path(args.out) if args.out else None)
    except GradingError as exc:
        print(f"grade: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: the students finished so far are saved; run the same command again to grade "
              "the rest", file=sys.stderr)
        return 130
    _print_run(run, args.show_hidden_tests)
    if not args.out:  # graded/<assignment>/ beside the others: graded/index.html over all of them
        _print_index(run.out.parent)
    return 0


def _demo(args) -> int:
    import signal
    from dataclasses import replace

    from autograder.grading.demo import DEMO_OPTIONS, run_demo
    from autograder.grading.session import GradingError

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    out = Path(args.out) if args.out else COURSE_ROOT / "graded" / "demo"
    try:
        options = replace(DEMO_OPTIONS, jobs=args.jobs, sandbox=args.sandbox, progress=not args.quiet)
        runs = run_demo(COURSE_ROOT, out, args.assignments or None, options)
    except GradingError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    for run in runs:
        print()
        _print_run(run, False)
        print(run.out.joinpath("grades.csv").read_text(encoding="utf-8"))
    _print_index(out)
    return 0


def _hub(args) -> int:
    from autograder.hub.cli import run

    return run(args)


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    """Run the autograder command line."""
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Device Lab instructor tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    tidy = commands.add_parser("tidy",
                               help="strip outputs and normalise notebooks (all course notebooks by default)")
    tidy.add_argument("paths", nargs="*", help="notebooks to tidy")
    tidy.add_argument("--check", action="store_true", help="only report untidy notebooks; exit 1 if any")
    tidy.set_defaults(func=_tidy)
    build = commands.add_parser("build", help="regenerate release/ from source/ with nbgrader")
    build.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    build.set_defaults(func=_build)
    validate = commands.add_parser("validate", help="check that solutions pass and student stubs fail")
    validate.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    validate.set_defaults(func=_validate)
    grade = commands.add_parser(
        "grade", help="grade a class: parallel, sandboxed nbgrader autograding with feedback and a report",
        description="Grade every student folder in SUBMISSIONS (SUBMISSIONS/<student>/<notebook>.ipynb, "
                    "nbgrader's submitted/ layout, or a .zip of either). Writes grades.csv, feedback and "
                    "summary.html to --out and records the grades in the course gradebook. Running it again "
                    "only grades what changed; an interrupted run finishes the rest. Exit code 0 whenever "
                    "every student got a row.")
    grade.add_argument("assignment", help="assignment id (a folder in source/)")
    grade.add_argument("submissions", help="folder with one subfolder per student, or a .zip of one")
    grade.add_argument("--jobs", type=_positive(int), default=None,
                       help="workers in parallel (default: CPU cores)")
    grade.add_argument("--timeout", type=_positive(float), default=DEFAULT_TIMEOUT,
                       help=f"wall-clock seconds per notebook (default: {DEFAULT_TIMEOUT})")
    grade.add_argument("--memory", type=_positive(int), default=DEFAULT_MEMORY_MIB,
                       help=f"memory cap per submission in MiB (default: {DEFAULT_MEMORY_MIB})")
    grade.add_argument("--out", help="output folder (default: graded/<ASSIGNMENT>/)")
    grade.add_argument("--sandbox", choices=SANDBOX_CHOICES, default=DEFAULT_SANDBOX,
                       help="isolation for student code (default: the best that works here)")
    grade.add_argument("--force", action="store_true", help="regrade every student, even unchanged ones")
    grade.add_argument("--cold-start", action="store_true",
                       help="start every kernel anew instead of forking it from a worker's warm zygote "
                            "(slower; for comparison)")
    grade.add_argument("--show-hidden-tests", action="store_true",
                       help="feedback pages as nbgrader makes them, the hidden tests printed in full: for "
                            "handing out after the due date (default: each hidden test shows its score and "
                            "your message, never its code)")
    grade.add_argument("--no-solution-check", action="store_true",
                       help="grade even when source/ holds no working solution (by default the run first "
                            "grades the assignment's own solution in its sandbox and refuses unless it earns "
                            "full marks: a broken grading environment would grade everyone wrong)")
    grade.add_argument("--course", default=str(COURSE_ROOT), help="course root (default: this repository)")
    grade.add_argument("--quiet", action="store_true", help="no progress bar")
    grade.add_argument("--hide", action="append", default=[], metavar="FOLDER",
                       help="one more folder the sandbox hides from student code (repeatable), e.g. a "
                            "hub's exchange")
    grade.set_defaults(func=_grade)
    demo = commands.add_parser("demo", help="build a small realistic class from the assignments and grade it")
    demo.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    demo.add_argument("--out", help="output folder (default: graded/demo/)")
    demo.add_argument("--jobs", type=_positive(int), default=None,
                      help="workers in parallel (default: CPU cores)")
    demo.add_argument("--sandbox", choices=SANDBOX_CHOICES, default=DEFAULT_SANDBOX)
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=_demo)
    from autograder.hub.cli import add_arguments as add_hub_arguments

    hub = commands.add_parser("hub",
                              help="run a class on a JupyterHub: setup, start, release, collect, grade, ...")
    add_hub_arguments(hub, COURSE_ROOT)
    hub.set_defaults(func=_hub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
