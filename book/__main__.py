"""`python -m book build [--out DIR] [--jobs N] [--executed DIR]`: build the course's website (make book)."""

import argparse
import os
import sys
from pathlib import Path

from book.pages import PageError
from book.site import build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build_command = commands.add_parser("build", help="stage the pages and build the HTML site")
    build_command.add_argument("--out", type=Path, help="where to build (default: build/book/)")
    build_command.add_argument("--jobs", default="1", help="Sphinx's parallel jobs (a number, or auto)")
    build_command.add_argument("--executed", type=Path,
                               help="the lessons' executed copies, made there when missing (default: "
                                    "build/executed/, which the lesson tests share)")
    build_command.add_argument("--verbose", action="store_true", help="show Sphinx's progress")
    args = parser.parse_args(argv)
    # the lessons run in this Python's kernel: Jupyter's python3 kernel is the first `python` on PATH
    bin_folder = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_folder:
        os.environ["PATH"] = os.pathsep.join(filter(None, [bin_folder, os.environ.get("PATH")]))
    try:
        build(out=args.out, jobs=args.jobs, quiet=not args.verbose, executed=args.executed)
    except (RuntimeError, PageError) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
