"""Limits and isolation for student code: the commands built, and what a sandboxed program can and cannot do.
"""

import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from autograder.grading import sandbox
from autograder.grading.sandbox import (
    ADDRESS_SPACE_HEADROOM_MIB,
    MAX_FILE_MIB,
    Isolation,
    IsolationUnavailable,
    ProcessWatch,
    bwrap_prefix,
    detect_isolation,
    limits_prefix,
    process_children,
)
from tests.isolation_probe import WORLD_WRITABLE


def test_bwrap_hides_course_folders_reexposes_python_and_lets_the_kernel_write_only_its_own(tmp_path):
    course, venv, work, other = (tmp_path / n for n in ("course", "course/.venv", "work", "other"))
    for folder in (venv, work, other):
        folder.mkdir(parents=True)
    args = bwrap_prefix([work], work, hidden=(str(course), "/srv"), visible=(str(venv), "/usr"))
    assert args[:1] == ["bwrap"] and "--unshare-all" in args and "--die-with-parent" in args
    assert args[args.index("/tmp") - 1] == "--tmpfs"  # a private /tmp: tmp_path and all below it are gone
    assert str(course) not in args  # ...so hiding it again is not needed
    if Path("/srv").is_dir():
        assert args[args.index("/srv") - 1] == "--tmpfs"
    assert args[args.index(str(venv)) - 1] == "--ro-bind"  # Python comes back, read-only
    assert args.count("/usr") == 2  # a system folder: shown once, read-only (not bound again as `visible`)
    assert args[args.index("/usr") - 1] == "--ro-bind"
    assert "/" not in args and "/run" not in args and "/home" not in args  # an allow-list, not the machine
    assert args.index(str(venv)) < args.index(str(work)) and args[args.index(str(work)) - 1] == "--bind"
    assert args[-3:] == ["--chdir", str(work), "--"]


def test_limits_use_prlimit_when_there_is_one_and_python_otherwise(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert limits_prefix(1000, forget_parent=True)[:4] == ["env", "-u", "JPY_PARENT_PID", "prlimit"]
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    fallback = limits_prefix(1000, forget_parent=False)
    assert fallback[:2] == [sys.executable, str(Path(sandbox.__file__).resolve())] and fallback[-1] == "--"


def test_the_python_limits_wrapper_sets_the_limits_and_forgets_the_parent(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)  # no prlimit: the Python stand-in
    probe = ("import os, resource; print(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20, "
             "resource.getrlimit(resource.RLIMIT_FSIZE)[0] >> 20, os.environ.get('JPY_PARENT_PID'))")
    cmd = [*limits_prefix(6000 - ADDRESS_SPACE_HEADROOM_MIB, forget_parent=True),
           sys.executable, "-c", probe]
    out = subprocess.run(cmd, env={**os.environ, "JPY_PARENT_PID": "1"}, capture_output=True, text=True,
                         check=True,
                         cwd=tempfile.gettempdir())  # as a kernel: started away from the course root
    assert out.stdout.split() == ["6000", str(MAX_FILE_MIB), "None"]


def watched_tree(code: str) -> tuple[subprocess.Popen, ProcessWatch]:
    """Start `code` (which starts one child) in a session of its own; return it and a watch that sees both."""
    root = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    watch = ProcessWatch(root.pid)
    deadline = time.monotonic() + 10
    while len(watch.members(process_children())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return root, watch


def test_kill_takes_down_a_tree_that_ignores_sigterm_and_a_child_that_left_the_group():
    code = ("import signal, subprocess, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); time.sleep(60)'], start_new_session=True)\n"
            "time.sleep(60)")
    root, watch = watched_tree(code)
    assert watch.resident_mib(process_children()) > 1
    tree = [psutil.Process(p) for p in watch.members(process_children())]
    watch.kill(grace=0.2)
    root.wait(timeout=5)
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive


def test_kill_takes_down_a_child_that_left_the_group_when_the_wall_clock_was_set_between_looks(monkeypatch):
    """A process the watch saw is known by its start in ticks since boot, never psutil's create_time (the boot
    time as the wall clock sees it now): a clock set between the look and the kill (an NTP step on a CI
    machine) left a child that had left the group running, a holder that outlived its run (issue 63)."""
    import psutil._pslinux

    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
            "                 start_new_session=True)\n"
            "time.sleep(60)")
    root, watch = watched_tree(code)
    watch.resident_mib(process_children())  # seen
    (child,) = [psutil.Process(p) for p in watch.members(process_children()) if p != root.pid]
    boot = psutil._pslinux.boot_time()
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: boot + 1.0)
    root.kill()  # the child, in a session of its own, is now reached only through what the watch saw
    root.wait(timeout=5)
    watch.kill(grace=0.2)
    try:
        child.wait(timeout=5)
    except psutil.TimeoutExpired:
        child.kill()
        pytest.fail("a process the watch saw outlived the kill after the wall clock was set")


def test_none_is_always_available_and_unknown_names_are_refused():
    assert detect_isolation("none").mode == "none"
    with pytest.raises(IsolationUnavailable):
        detect_isolation("docker")


def _sandboxed(mode: str, tmp_path: Path) -> tuple[Isolation, Path, Path]:
    hidden, work = tmp_path / "hidden", tmp_path / "work"
    hidden.mkdir()
    work.mkdir()
    (hidden / "secret.txt").write_text("grades")
    try:
        return detect_isolation(mode, hidden=[hidden]), hidden, work
    except IsolationUnavailable as exc:
        pytest.skip(str(exc))


def _run(isolation: Isolation, work: Path, code: str) -> subprocess.CompletedProcess:
    cmd = [*isolation.prefix([work], work), sys.executable, "-c", code]
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("mode", ["bwrap", "unshare"])
def test_sandboxed_code_has_no_network(tmp_path, mode):
    isolation, _, work = _sandboxed(mode, tmp_path)
    code = ("import socket\ntry:\n    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
            "except OSError as e:\n    print('blocked', e.errno)")
    assert _run(isolation, work, code).stdout.startswith("blocked")


@pytest.mark.parametrize("mode", ["bwrap", "unshare"])
def test_sandboxed_code_has_a_loopback_of_its_own(tmp_path, mode):
    """A DDP job of two gloo ranks (ps08) talks over 127.0.0.1: both sandboxes give it a loopback that is up,
    in a network namespace of its own (nothing outside it is reachable, as above)."""
    isolation, _, work = _sandboxed(mode, tmp_path)
    code = ("import socket\nserver = socket.create_server(('127.0.0.1', 0))\n"
            "socket.create_connection(server.getsockname(), timeout=5)\nprint('connected')")
    out = _run(isolation, work, code)
    assert out.stdout.strip() == "connected", out.stderr


def test_bubblewrap_shows_nothing_of_hidden_folders_and_allows_writing_only_its_own(tmp_path):
    isolation, hidden, work = _sandboxed("bwrap", tmp_path)
    code = (f"import os\nprint(os.path.exists({str(hidden / 'secret.txt')!r}))\n"
            "open('mine.txt', 'w').write('ok')\n"
            "try:\n    open('/usr/pwned', 'w')\nexcept OSError as e:\n    print('read-only', e.errno)")
    out = _run(isolation, work, code)
    assert out.stdout.split("\n")[:2] == ["False", "read-only 30"], out.stderr
    assert (work / "mine.txt").read_text() == "ok" and (hidden / "secret.txt").exists()


def test_bubblewrap_shows_no_folder_another_account_can_write(tmp_path):
    """Issue 49: hidden tests passed out through a FIFO in /run/lock, and an on-time submission loaded an
    answer written later into a world-writable folder the sandbox showed. Nothing others can write is shown.
    """
    isolation, _, work = _sandboxed("bwrap", tmp_path)
    planted = []
    for parent in ("/run/lock", "/srv", "/var/mail", "/opt"):  # a shared lock folder, an exchange's inbox...
        if Path(parent).is_dir():
            folder = Path(tempfile.mkdtemp(prefix="dl-planted-", dir=parent))
            folder.chmod(0o1777)
            os.mkfifo(folder / "channel")
            (folder / "answer.py").write_text("ANSWER = 42\n")
            planted.append(folder)
    code = "import os, sys\nprint(sorted(p for p in sys.argv[1:] if os.path.exists(p)))\n" + WORLD_WRITABLE
    try:
        cmd = [*isolation.prefix([work], work), sys.executable, "-c", code, *map(str, planted)]
        out = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=120, check=False)
    finally:
        for folder in planted:
            shutil.rmtree(folder, ignore_errors=True)
    assert planted, "no shared folder to plant in"
    shown, writable = out.stdout.splitlines()[:2]
    assert shown == "[]", out.stderr  # neither the FIFO's folder nor the planted answer
    assert set(ast.literal_eval(writable)) <= {"/tmp", "/var/tmp"}, out.stderr  # at most its own, private


def test_bubblewrap_code_cannot_kill_the_process_that_started_it(tmp_path):
    isolation, _, work = _sandboxed("bwrap", tmp_path)
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('still here', os.getpid())"
    out = _run(isolation, work, code)
    assert out.returncode == 0 and out.stdout.startswith("still here")


def test_process_children_finds_a_child_whatever_its_name_and_agrees_with_psutil(tmp_path):
    # A process's name sits in /proc/PID/stat between parentheses and may hold anything, ") 1 2 (" too.
    odd = tmp_path / "x) 1 2 (y"
    odd.symlink_to(shutil.which("sleep"))
    child = subprocess.Popen([str(odd), "30"])
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).name() != odd.name[:15] and time.monotonic() < deadline:
            time.sleep(0.02)
        children = process_children()
        assert child.pid in children[os.getpid()]
        assert sorted(children[os.getpid()]) == sorted(p.pid for p in psutil.Process().children())
    finally:
        child.kill()
        child.wait()


def test_removing_a_cap_ends_what_still_runs_in_it_and_nothing_else():
    cap = sandbox.TaskCap.create(f"devicelab-test-{os.getpid()}")
    if cap is None:
        pytest.skip("this machine gives no cgroup with a pids controller")
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    inside = subprocess.Popen(sleeper)
    outside = subprocess.Popen(sleeper)
    try:
        cap.join(inside.pid)  # a kernel still tearing down when its worker's cap goes
        cap.remove()
        assert inside.wait(timeout=5) == -9 and not cap.path.exists()
        assert outside.poll() is None
    finally:
        for process in (inside, outside):
            process.kill()
            process.wait()


def test_auto_refuses_to_grade_unsandboxed_when_no_sandbox_works(monkeypatch):
    """Untrusted code runs unsandboxed only when asked for (`--sandbox none`), never by a fallback."""
    monkeypatch.setattr(sandbox, "_probe", lambda isolation: f"{isolation.mode} is broken here")
    with pytest.raises(IsolationUnavailable, match="--sandbox none"):
        detect_isolation("auto")
    assert detect_isolation("none").mode == "none"
