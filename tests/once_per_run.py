"""Expensive grading runs that several tests read: made once per test run, even across xdist workers."""

import json
import os
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock


def once_per_run(tmp_path_factory, name: str, make: Callable[[Path], dict]) -> tuple[Path, dict]:
    """Return (folder, record): `make(folder)` runs once per test run and returns a JSON-able record of it."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, record = shared / name, shared / f"{name}.json"
    with FileLock(shared / f"{name}.lock"):
        if not record.exists():
            folder.mkdir(exist_ok=True)
            record.write_text(json.dumps(make(folder)))
    return folder, json.loads(record.read_text())
