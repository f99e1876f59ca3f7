"""Run a list of command lines through a script in one Python started in a course folder (the tests' helpers
`nbgrader_commands.py` and `grade_commands.py` are such scripts)."""

import json
import subprocess
import sys
from pathlib import Path


def outcomes(script: str, folder: Path, commands: tuple[list[str], ...], env: dict[str, str],
             timeout: float = 900) -> list[tuple[int, str]]:
    """Run `script RESULTS.json COMMANDS` in `folder`; return what it wrote for each command (none asked: no
    Python started)."""
    if not commands:
        return []
    results = folder.parent / f"{folder.name}-{Path(script).stem}.json"
    done = subprocess.run([sys.executable, script, str(results), json.dumps(commands)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return [tuple(result) for result in json.loads(results.read_text())]
