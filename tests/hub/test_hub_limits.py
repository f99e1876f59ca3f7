"""Students' servers in cgroups of their own: memory and CPU limits that hold
(autograder/hub/spawning/limits.py).

The layouts are checked on a fake cgroup file system (v1 and v2); the limit itself on this machine's kernel:
a process in a 64 MiB cgroup that allocates 256 MiB is killed by the OOM killer, and one outside runs on.
"""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from autograder.hub.spawning.limits import ServerLimits, UserCgroup, _own_path


def fake_v1(tmp_path: Path) -> Path:
    for controller in ("memory", "cpu"):
        folder = tmp_path / controller / _own_path(controller)
        folder.mkdir(parents=True)
    return tmp_path


def test_v1_sets_memory_with_swap_and_the_cpu_quota(tmp_path):
    fs = fake_v1(tmp_path)
    memory = fs / "memory" / _own_path("memory") / "devicelab-hub" / "ann"
    memory.mkdir(parents=True)
    (memory / "memory.memsw.limit_in_bytes").write_text("")
    group = UserCgroup.create("devicelab-hub/ann", ServerLimits(512, 1.5), fs)
    assert group is not None and not group.unified
    assert (memory / "memory.limit_in_bytes").read_text() == str(512 << 20)
    assert (memory / "memory.memsw.limit_in_bytes").read_text() == str(512 << 20)
    cpu = fs / "cpu" / _own_path("cpu") / "devicelab-hub" / "ann"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "150000"
    assert (cpu / "cpu.cfs_period_us").read_text() == "100000"
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert group.oom_kills() == 3


def test_v2_sets_memory_max_no_swap_and_cpu_max(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    parent = tmp_path / _own_path("")
    parent.mkdir(parents=True, exist_ok=True)
    folder = parent / "devicelab-hub" / "bob"
    folder.mkdir(parents=True)
    (folder / "memory.swap.max").write_text("max")
    group = UserCgroup.create("devicelab-hub/bob", ServerLimits(1024, 2), tmp_path)
    assert group is not None and group.unified
    assert (parent / "cgroup.subtree_control").read_text() == "+memory +cpu"
    assert (folder / "memory.max").read_text() == str(1024 << 20)
    assert (folder / "memory.swap.max").read_text() == "0"
    assert (folder / "cpu.max").read_text() == "200000 100000"
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    assert group.oom_kills() == 1


def test_where_no_cgroup_can_be_made_it_says_none(tmp_path):
    fs = tmp_path / "ro"
    fs.mkdir()
    fs.chmod(0o500)
    try:
        if os.geteuid() == 0:
            fs = tmp_path / "missing-file"  # root writes anywhere: a file where a folder must be
            fs.write_text("")
        assert UserCgroup.create("devicelab-hub/ann", ServerLimits(512, 1), fs) is None
    finally:
        (tmp_path / "ro").chmod(0o700)


def test_no_limits_is_no_limits():
    assert not ServerLimits().any and ServerLimits(1, 0).any and ServerLimits(0, 0.5).any


def real_cgroup(limits: ServerLimits) -> UserCgroup:
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    group = UserCgroup.create(f"devicelab-test/{uuid.uuid4().hex[:8]}", limits)
    if group is None:
        pytest.skip("this machine lets no cgroup be made here")
    return group


def remove(group: UserCgroup) -> None:
    group.remove()


def test_a_process_past_its_memory_limit_is_killed_and_one_outside_runs_on():
    group = real_cgroup(ServerLimits(64, 0))
    try:
        hog = ("import os, sys; sys.stdin.readline(); "
               "blocks = [bytearray(16 << 20) for _ in range(16)]; print('allocated 256 MiB')")
        proc = subprocess.Popen([sys.executable, "-c", hog], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        group.join(proc.pid)
        assert proc.pid in group.members()
        out, _ = proc.communicate("go\n", timeout=60)
        assert proc.returncode == -9 and "allocated" not in out, (proc.returncode, out)
        assert group.oom_kills() >= 1
        outside = subprocess.run([sys.executable, "-c", "print(len(bytearray(256 << 20)))"],
                                 capture_output=True, text=True, timeout=60, check=True)
        assert outside.stdout.strip() == str(256 << 20)
    finally:
        remove(group)


def test_a_cpu_quota_holds_a_busy_process_to_its_share():
    """A fifth of a CPU: a busy loop of 2 s gets about 0.4 s on the CPU (the bound is loose: the quota
    holds or it does not; no speed is measured)."""
    group = real_cgroup(ServerLimits(0, 0.2))
    try:
        spin = ("import os, sys, time; sys.stdin.readline(); end = time.monotonic() + 2.0\n"
                "while time.monotonic() < end: pass\n"
                "t = os.times(); print(t.user + t.system)")
        proc = subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        group.join(proc.pid)
        out, _ = proc.communicate("go\n", timeout=60)
        assert float(out) < 1.0, f"{out} s of CPU in 2 s of a 0.2-CPU quota"
    finally:
        remove(group)


def test_the_task_cap_is_set_on_both_layouts_and_its_refusals_are_counted(tmp_path):
    """Issue 49: a student's kernel started 3000 threads with no cap; each server now has pids.max."""
    v2 = tmp_path / "v2"
    (v2 / _own_path("")).mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory pids\n")
    group = UserCgroup.create("devicelab-hub/cat", ServerLimits(0, 0, 256), v2)
    folder = v2 / _own_path("") / "devicelab-hub" / "cat"
    assert group is not None and (folder / "pids.max").read_text() == "256"
    assert (v2 / _own_path("") / "cgroup.subtree_control").read_text() == "+pids"
    (folder / "pids.events").write_text("max 17\n")
    assert group.refused_tasks() == 17

    v1 = tmp_path / "v1"
    (v1 / "pids" / _own_path("pids")).mkdir(parents=True)
    group = UserCgroup.create("devicelab-hub/cat", ServerLimits(0, 0, 300), v1)
    assert group is not None
    assert (v1 / "pids" / _own_path("pids") / "devicelab-hub" / "cat" / "pids.max").read_text() == "300"
    assert ServerLimits(tasks=1).any and not ServerLimits().any
