"""The grading run's scratch folder: which left-overs a new run removes, and which it must leave alone."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from autograder.grading import scratch


def folder(tmp_path: Path, name: str, owner: dict | None) -> Path:
    """Make a scratch-like folder under tmp_path with this owner record (None: no record)."""
    path = tmp_path / f"{scratch.PREFIX}{name}"
    (path / "0-1").mkdir(parents=True)
    (path / "0-1" / "answer.ipynb").write_text("{}")
    if owner is not None:
        (path / scratch.OWNER_FILE).write_text(json.dumps(owner))
    return path


def dead_pid() -> int:
    """Return the pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_new_run_records_this_process_as_its_owner(tmp_path, monkeypatch):
    monkeypatch.setattr(scratch, "short_tmp", lambda: str(tmp_path))
    root = scratch.make_run_root()
    owner = json.loads((root / scratch.OWNER_FILE).read_text())
    assert root.parent == tmp_path and root.name.startswith(scratch.PREFIX)
    assert owner == {"pid": os.getpid(), "started": psutil.Process().create_time()}
    assert not scratch.is_stale(root)


def test_only_the_scratch_of_runs_whose_process_is_gone_is_removed(tmp_path):
    me = psutil.Process()
    dead = folder(tmp_path, "dead", {"pid": dead_pid(), "started": 1.0})
    # pid now another's
    reused = folder(tmp_path, "reused", {"pid": me.pid, "started": me.create_time() - 3600})
    live = folder(tmp_path, "live", {"pid": me.pid, "started": me.create_time()})
    unknown = folder(tmp_path, "unknown", None)
    garbled = folder(tmp_path, "garbled", None)
    (garbled / scratch.OWNER_FILE).write_text("{not json")
    kept = folder(tmp_path, "kept", {"pid": dead_pid(), "started": 1.0})
    scratch.keep(kept)
    other = tmp_path / "other-dead"
    other.mkdir()
    (other / scratch.OWNER_FILE).write_text(json.dumps({"pid": dead_pid(), "started": 1.0}))

    removed = scratch.remove_stale(str(tmp_path))

    assert sorted(removed) == sorted([dead, reused])
    assert not dead.exists() and not reused.exists()
    assert all(p.exists() for p in (live, unknown, garbled, kept, other))


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user")
def test_another_users_scratch_is_never_touched(tmp_path):
    theirs = folder(tmp_path, "theirs", {"pid": dead_pid(), "started": 1.0})
    os.chown(theirs, 65534, 65534)
    assert scratch.is_stale(theirs)
    assert scratch.remove_stale(str(tmp_path)) == [] and theirs.exists()


def test_a_link_named_like_a_scratch_folder_is_not_followed(tmp_path):
    target = folder(tmp_path / "elsewhere", "victim", {"pid": dead_pid(), "started": 1.0})
    link = tmp_path / f"{scratch.PREFIX}link"
    link.symlink_to(target)
    assert scratch.remove_stale(str(tmp_path)) == []
    assert (target / "0-1" / "answer.ipynb").exists()
