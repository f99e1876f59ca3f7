"""Command line: `python -m autograder build | tidy | validate`."""

import argparse
import sys
from pathlib import Path

from autograder import COURSE_ROOT


def _tidy(args) -> int:
    from autograder.notebooks import course_notebooks
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


def main(argv: list[str] | None = None) -> int:
    """Run the autograder command line."""
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Device Lab instructor tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    tidy = commands.add_parser("tidy", help="strip outputs and normalise notebooks (all course notebooks by default)")
    tidy.add_argument("paths", nargs="*", help="notebooks to tidy")
    tidy.add_argument("--check", action="store_true", help="only report untidy notebooks; exit 1 if any")
    tidy.set_defaults(func=_tidy)
    build = commands.add_parser("build", help="regenerate release/ from source/ with nbgrader")
    build.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    build.set_defaults(func=_build)
    validate = commands.add_parser("validate", help="check that solutions pass and student stubs fail")
    validate.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    validate.set_defaults(func=_validate)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
