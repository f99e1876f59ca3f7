"""`python -m book build [--out DIR] [--jobs N]`: build the course's website (what `make book` runs)."""

import argparse
import sys
from pathlib import Path

from book.site import build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build_command = commands.add_parser("build", help="stage the pages and build the HTML site")
    build_command.add_argument("--out", type=Path, help="where to build (default: build/book/)")
    build_command.add_argument("--jobs", default="1", help="Sphinx's parallel jobs (a number, or auto)")
    build_command.add_argument("--verbose", action="store_true", help="show Sphinx's progress")
    args = parser.parse_args(argv)
    try:
        build(out=args.out, jobs=args.jobs, quiet=not args.verbose)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
