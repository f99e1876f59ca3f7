"""The scratch folder of one grading run: made with a record of its owner, and left-overs of killed runs
removed.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

from autograder.grading.sandbox import start_ticks

PREFIX = "dlg-"
OWNER_FILE = "owner.json"  # the grading process that made the folder: {"pid": ..., "started": start_ticks}
KEPT_FILE = "kept"  # DEVICELAB_KEEP_SCRATCH asked to keep it: never removed as stale


def short_tmp() -> str | None:
    """Return a temporary folder with a short path (kernel sockets need paths under 108 characters)."""
    return "/tmp" if os.access("/tmp", os.W_OK) else None


def make_run_root() -> Path:
    """Make a new scratch folder for this process's grading run, recording this process as its owner."""
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=short_tmp()))
    (root / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "started": start_ticks(os.getpid())}))
    return root


def keep(root: Path) -> None:
    """Mark a scratch folder as kept on purpose, so no later run removes it."""
    (root / KEPT_FILE).touch()


def is_stale(root: Path) -> bool:
    """Return whether a scratch folder belongs to a grading run whose process is gone (killed before it tidied
    up).
    """
    if (root / KEPT_FILE).exists():
        return False
    try:
        owner = json.loads((root / OWNER_FILE).read_text())
        pid, started = int(owner["pid"]), owner["started"]
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not made by this grader, or being made right now: leave it alone
    try:
        now = start_ticks(pid)
    except (FileNotFoundError, ProcessLookupError):
        return True
    except (OSError, ValueError, IndexError):
        return False
    # the pid now names another process (a record of another kind, an older grader's time on the wall clock,
    # cannot say so: left alone while its pid runs)
    return isinstance(started, int) and now != started


def remove_stale(tmp: str | None = None) -> list[Path]:
    """Remove this user's scratch folders left by killed grading runs; return those removed."""
    removed = []
    for root in sorted(Path(tmp or short_tmp() or tempfile.gettempdir()).glob(PREFIX + "*")):
        try:
            if not root.is_dir() or root.is_symlink() or root.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if is_stale(root):
            shutil.rmtree(root, ignore_errors=True)
            removed.append(root)
    return removed
