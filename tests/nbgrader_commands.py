"""Run several `nbgrader` commands in one Python with nbgrader's own test helper (`run_nbgrader`).

    python tests/nbgrader_commands.py RESULTS.json '[["generate_assignment", "ps1"], ["autograde", "ps1"]]'

Run in the course folder. Each command is nbgrader's own application, set up, started and reset by
`nbgrader.tests.run_nbgrader`, so a course graded this way pays Python's and nbgrader's start-up once instead
of once per command. Writes [[exit status, nbgrader's log], ...] to RESULTS.json, one per command (a command
that failed gives status 1 and the helper's message in place of the log). Tests call it through
`in_one_python`.
"""

import json
import sys
from pathlib import Path


def in_one_python(folder: Path, *commands: list[str]) -> list[tuple[int, str]]:
    """Run nbgrader commands in a course folder in one Python, as nbgrader's tests do; return each outcome
    (none asked: no Python started)."""
    from autograder.course import with_venv_on_path
    from book.warm_kernels import warm_kernels
    from tests.one_python import outcomes

    if not commands:
        return []
    env = warm_kernels().with_python3(with_venv_on_path())  # nbgrader's kernels forked warm (warm_kernels.py)
    return outcomes(__file__, folder, commands, env)


def run(args: list[str]) -> tuple[int, str]:
    """Run one command; return its exit status and its log."""
    from nbgrader.tests import run_nbgrader

    try:
        return 0, run_nbgrader(args)
    except AssertionError as failed:  # the helper's way of saying the command did not exit 0
        return 1, str(failed)


def main(results: str, commands: str) -> None:
    """Run every command in order; write each one's outcome."""
    with open(results, "w", encoding="utf-8") as handle:
        json.dump([run(args) for args in json.loads(commands)], handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
