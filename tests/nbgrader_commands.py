"""Run several `nbgrader` commands in one Python with nbgrader's own test helper (`run_nbgrader`).

    python tests/nbgrader_commands.py RESULTS.json '[["generate_assignment", "ps1"], ["autograde", "ps1"]]'

Run in the course folder. Each command is nbgrader's own application, set up, started and reset by
`nbgrader.tests.run_nbgrader`, so a course graded this way pays Python's and nbgrader's start-up once instead
of once per command. Writes [[exit status, nbgrader's log], ...] to RESULTS.json, one per command (a command
that failed gives status 1 and the helper's message in place of the log).
"""

import json
import sys

from nbgrader.tests import run_nbgrader


def run(args: list[str]) -> tuple[int, str]:
    """Run one command; return its exit status and its log."""
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
