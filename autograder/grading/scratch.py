"""The scratch folder of one grading run: made with a record of its owner, and left-overs of killed runs
removed.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

import psutil

PREFIX = "dlg-"
OWNER_FILE = "owner.json"  # the grading process that made the folder: {"pid": ..., "started": ...}
KEPT_FILE = "kept"  # DEVICELAB_KEEP_SCRATCH asked to keep it: never removed as stale


def short_tmp() -> str | None:
    """Return a temporary folder with a short path (kernel sockets need paths under 108 characters)."""
    return "/tmp" if os.access("/tmp", os.W_OK) else None


def make_run_root() -> Path:
    """Make a new scratch folder for this process's grading run, recording this process as its owner."""
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=short_tmp()))
    me = psutil.Process()
    (root / OWNER_FILE).write_text(json.dumps({"pid": me.pid, "started": me.create_time()}))
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
        pid, started = int(owner["pid"]), float(owner["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not made by this grader, or being made right now: leave it alone
    try:
        return abs(psutil.Process(pid).create_time() - started) > 1e-3  # the pid now names another process
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


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
