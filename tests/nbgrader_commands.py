"""Run several `nbgrader` commands in one Python, the way nbgrader's own tests do (`run_nbgrader`).

    python tests/nbgrader_commands.py RESULTS.json '[["generate_assignment", "ps1"], ["autograde", "ps1"]]'

Run in the course folder. Each command is nbgrader's own application, set up, started and reset as
`nbgrader.tests.run_nbgrader` does, so a course graded this way pays Python's and nbgrader's start-up once
instead of once per command. Writes [[exit status, nbgrader's log], ...] to RESULTS.json, one per command.
"""

import json
import logging
import sys
from io import StringIO

from jupyter_core.application import NoStart
from nbgrader.apps import NbGraderApp


def run(args: list[str]) -> tuple[int, str]:
    """Run one command as nbgrader's test helper does; return its exit status and its log."""
    app = NbGraderApp.instance()
    log = StringIO()
    try:
        app.initialize(args)
        app.init_logging(logging.StreamHandler, [log], color=False, subapps=True)
        app.start()
    except NoStart:
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    else:
        code = 0
    finally:
        app.reset()
    return code, log.getvalue()


def main(results: str, commands: str) -> None:
    """Run every command in order; write each one's outcome."""
    with open(results, "w", encoding="utf-8") as handle:
        json.dump([run(args) for args in json.loads(commands)], handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
