"""Run several `python -m autograder grade` commands in one Python, one after the other.

    python tests/grade_commands.py RESULTS.json '[["grade", "ps1", "submitted", "--course", "."], ...]'

Each command goes through the command line's own entry point (`autograder.__main__.main`), as the hub's
autograde service runs one batch after another in one process; a course with several assignments then
pays Python's start and the grader's imports (nbgrader's among them, about a second of CPU) once instead of
once per assignment. Writes [[exit status, what the command wrote to stderr], ...] to RESULTS.json, one per
command. Tests call it through `in_one_python`, as `tests/nbgrader_commands.py` runs plain nbgrader's.
"""

import contextlib
import io
import json
import sys
import traceback
from pathlib import Path


def in_one_python(folder: Path, *commands: list[str], timeout: float = 900) -> list[tuple[int, str]]:
    """Run grader commands in one Python started in `folder`; return each one's exit status and stderr."""
    from autograder.course import with_venv_on_path
    from tests.one_python import outcomes

    return outcomes(__file__, folder, commands, with_venv_on_path(), timeout)


def run(args: list[str]) -> tuple[int, str]:
    """Run one command as `python -m autograder` would; return its exit status and what it wrote to stderr."""
    from autograder.__main__ import main

    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        try:
            code = main(args)
        except SystemExit as exited:  # argparse's way of refusing a command line
            code = exited.code if isinstance(exited.code, int) else 1
        except Exception:  # noqa: BLE001 - a crash: exit 1 with the traceback, as `python -m autograder` would
            traceback.print_exc()
            code = 1
    return code, said.getvalue()


def main(results: str, commands: str) -> None:
    """Run every command in order; write each one's outcome."""
    outcomes = [run(args) for args in json.loads(commands)]
    Path(results).write_text(json.dumps(outcomes), encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the course's packages, from anywhere
    main(*sys.argv[1:])
