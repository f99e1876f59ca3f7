"""The box each server runs in (autograder/hub/spawning/server_box.py): its command line, and that it starts
here.

What the box holds against a hostile classmate is tested on a real hub in tests/hub/test_hub_isolation.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.grading.sandbox import python_locations
from autograder.hub.spawning import server_box
from autograder.hub.spawning.server_box import RUNTIME_DIR, BoxPlan, box_prefix, box_works


def pairs(args: list[str], option: str) -> list[str]:
    """Return the values that follow each use of an option taking one path (or the destination of two)."""
    return [args[i + 1] for i, a in enumerate(args) if a == option]


def test_the_box_shows_an_allow_list_with_private_temporary_folders(tmp_path, monkeypatch):
    gpus = ["/dev/nvidia0", "/dev/nvidiactl"]
    monkeypatch.setattr(server_box.glob, "glob", lambda pattern: gpus if "nvidia" in pattern else [])
    home, exchange, venv = tmp_path / "home", tmp_path / "exchange", tmp_path / "venv"
    args = box_prefix(BoxPlan(home, (exchange,), (venv, Path("/usr/lib/python3")), tmp_mib=512))
    assert args[0] == "bwrap" and args[-1] == "--"
    assert {"--unshare-pid", "--unshare-ipc", "--die-with-parent"} <= set(args)
    assert "--unshare-net" not in args  # the proxy reaches the server on loopback
    assert pairs(args, "--tmpfs") == ["/tmp", "/var/tmp", "/dev/shm"]
    assert args.count("--size") == 3 and args[args.index("--size") + 1] == str(512 << 20)
    assert "/" not in pairs(args, "--ro-bind") and "/home" not in args and "/run/lock" not in args
    assert str(venv) in pairs(args, "--ro-bind-try")
    assert "/usr/lib/python3" not in args  # inside /usr, which is shown read-only already
    assert pairs(args, "--bind") == [str(home), str(exchange)]  # writable as their own modes allow
    assert pairs(args, "--dev-bind-try") == ["/dev/nvidia0", "/dev/nvidiactl"]  # a GPU hub's devices
    assert args[args.index("JUPYTER_RUNTIME_DIR") + 1] == RUNTIME_DIR and RUNTIME_DIR.startswith("/tmp/")
    assert args[args.index("--chdir") + 1] == str(home)


@pytest.mark.skipif(not server_box.shutil.which("bwrap"), reason="bubblewrap is not installed")
def test_a_box_starts_here_and_its_tmp_and_processes_are_its_own(tmp_path):
    assert box_works(tmp_path) is None
    outside = Path("/tmp") / f"dl-outside-{os.getpid()}"
    outside.write_text("x")
    probe = ("import os, sys; print(os.path.exists(sys.argv[1]), "
             "len([p for p in os.listdir('/proc') if p.isdigit()]))")
    plan = BoxPlan(tmp_path, readable=tuple(map(Path, python_locations())))
    try:
        out = subprocess.run([*box_prefix(plan), sys.executable, "-c", probe, str(outside)],
                             capture_output=True, text=True, timeout=60, check=True)
    finally:
        outside.unlink()
    assert out.stdout.split() == ["False", "2"], out  # not the machine's /tmp; bwrap's init and python only
