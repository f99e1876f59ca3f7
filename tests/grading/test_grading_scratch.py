"""The grading run's scratch folder: which left-overs a new run removes, and which it must leave alone."""

import json
import os
import subprocess
import sys
from pathlib import Path

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
    assert owner == {"pid": os.getpid(), "started": scratch.start_ticks(os.getpid())}
    assert not scratch.is_stale(root)


def test_a_live_runs_scratch_stays_when_the_wall_clock_is_set_between_two_looks(tmp_path, monkeypatch):
    """A run's start is recorded in ticks since boot: a clock set forward (an NTP step on a CI machine) moves
    psutil's create_time, which adds the boot time as the wall clock sees it, but not this."""
    import psutil._pslinux

    monkeypatch.setattr(scratch, "short_tmp", lambda: str(tmp_path))
    root = scratch.make_run_root()
    before, boot = psutil.Process().create_time(), psutil._pslinux.boot_time()
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: boot + 1.0)
    assert psutil.Process().create_time() == before + 1.0  # what a record of create_time would be held to
    assert not scratch.is_stale(root) and scratch.remove_stale(str(tmp_path)) == []
    assert root.exists()


def test_only_the_scratch_of_runs_whose_process_is_gone_is_removed(tmp_path):
    mine = scratch.start_ticks(os.getpid())
    dead = folder(tmp_path, "dead", {"pid": dead_pid(), "started": 1})
    dead_old = folder(tmp_path, "dead-old", {"pid": dead_pid(), "started": 1.0})  # an older grader's record
    # pid now another's
    reused = folder(tmp_path, "reused", {"pid": os.getpid(), "started": mine - 360_000})
    live = folder(tmp_path, "live", {"pid": os.getpid(), "started": mine})
    live_old = folder(tmp_path, "live-old", {"pid": os.getpid(), "started": 1.0})  # cannot tell: left alone
    unknown = folder(tmp_path, "unknown", None)
    garbled = folder(tmp_path, "garbled", None)
    (garbled / scratch.OWNER_FILE).write_text("{not json")
    kept = folder(tmp_path, "kept", {"pid": dead_pid(), "started": 1.0})
    scratch.keep(kept)
    other = tmp_path / "other-dead"
    other.mkdir()
    (other / scratch.OWNER_FILE).write_text(json.dumps({"pid": dead_pid(), "started": 1.0}))

    removed = scratch.remove_stale(str(tmp_path))

    assert sorted(removed) == sorted([dead, dead_old, reused])
    assert not dead.exists() and not reused.exists()
    assert all(p.exists() for p in (live, live_old, unknown, garbled, kept, other))


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
