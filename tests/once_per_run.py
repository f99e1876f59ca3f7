"""Expensive grading runs that several tests read: made once per test run, even across xdist workers."""

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (a file made for the purpose) for the block."""
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def once_per_run(tmp_path_factory, name: str, make: Callable[[Path], dict]) -> tuple[Path, dict]:
    """Return (folder, record): `make(folder)` runs once per test run and returns a JSON-able record of it."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, record = shared / name, shared / f"{name}.json"
    with locked(shared / f"{name}.lock"):
        if not record.exists():
            folder.mkdir(exist_ok=True)
            record.write_text(json.dumps(make(folder)))
    return folder, json.loads(record.read_text())
