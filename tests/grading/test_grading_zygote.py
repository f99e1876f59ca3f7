"""Warm start (zygote.py): kernels forked from a zygote that has imported torch are as isolated as cold ones.

Each test starts a real zygote and launches real kernels through the launcher, the way jupyter_client does,
inside a real bubblewrap sandbox; the kernel here is a probe script that reports what it can see and do.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from autograder.grading.sandbox import IsolationUnavailable, detect_isolation
from autograder.grading.warm_start import Standby, Zygote, course_modules_imported, libraries_imported
from autograder.grading.zygote import WarmStartError

PROBE = r'''
import json, os, resource, socket, sys
facts = {"threads": len(os.listdir("/proc/self/task")), "pid": os.getpid(), "ppid": os.getppid(),
         "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
         "preloaded": "torch" in sys.modules, "env": dict(os.environ), "cwd": os.getcwd(),
         "argv": sys.argv, "as_mib": resource.getrlimit(resource.RLIMIT_AS)[0] >> 20}
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
facts["caps"] = {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
facts["no_new_privs"] = status["NoNewPrivs"].strip()
facts["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
facts["hidden_seen"] = os.path.exists(sys.argv[1])
facts["shm"] = os.listdir("/dev/shm")
open("/dev/shm/left-by-" + sys.argv[2], "w").write("x")
open("/tmp/left-by-" + sys.argv[2], "w").write("x")
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=2)
    facts["network"] = True
except OSError:
    facts["network"] = False
try:
    open("/usr/planted", "w")
    facts["wrote_outside"] = True
except OSError:
    facts["wrote_outside"] = False
import numpy, torch
facts["draws"] = [int(numpy.random.randint(0, 2**31)), int(torch.randint(0, 2**31, (1,)))]
print(json.dumps(facts), flush=True)
action = sys.argv[4]
if action == "sleep":
    import time
    time.sleep(600)
if action == "killed":
    os.kill(os.getpid(), 9)
if action == "kill-parent":
    os.kill(os.getppid(), 9)
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    attached = libc.ptrace(16, os.getppid(), None, None)  # PTRACE_ATTACH
    print("still here", attached, ctypes.get_errno(), flush=True)
    action = "0"
sys.exit(int(action))
'''


@pytest.fixture
def place(tmp_path):
    """Folders like a scratch course's: the probe (read-only), the kernel's own, and one it must not see."""
    for name in ("rt", "work", "tmp", "hidden"):
        (tmp_path / name).mkdir()
    (tmp_path / "rt" / "probe.py").write_text(PROBE)
    (tmp_path / "hidden" / "secret.txt").write_text("hidden tests")
    try:
        isolation = detect_isolation("bwrap", hidden=[tmp_path / "hidden"])
    except IsolationUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
    return tmp_path, isolation


def start_zygote(folder: Path) -> Zygote:
    """Start a zygote that preloads torch and numpy (what the probe imports) in `folder`."""
    env = {"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONNOUSERSITE": "1", "HOME": str(folder)}
    return Zygote.start(str(folder / "zygote"), env, libraries=("torch", "numpy"))


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    """One zygote for the module's kernels, as a grading worker's serves one student after another."""
    started = start_zygote(tmp_path_factory.mktemp("zygote"))
    yield started
    started.stop()


@pytest.fixture
def outside_port():
    """A port open outside the sandbox (a kernel must not reach it)."""
    listener = socket.create_server(("127.0.0.1", 0))
    yield listener.getsockname()[1]
    listener.close()


def launcher(zygote: Zygote, place, name: str, action: str, port: int, env_extra=None
             ) -> tuple[list[str], dict[str, str]]:
    """Return the command and environment jupyter_client would start one kernel with."""
    root, isolation = place
    spec = root / f"{name}.json"
    holder = isolation.prefix([root / "work"], root / "work", root / "tmp", (root / "rt",))
    program = [str(root / "rt" / "probe.py"), str(root / "hidden" / "secret.txt"), name, str(port), action]
    cold = [*holder, sys.executable, *program]
    zygote.write_spec(str(spec), program, holder, 6000, 64, cold)
    env = {"PATH": os.environ["PATH"], "HOME": str(root / "work"), "TMPDIR": "/tmp", "KERNEL_NAME": name,
           "JPY_PARENT_PID": str(os.getpid()), **(env_extra or {})}
    return [a.replace("{connection_file}", "conn.json") for a in zygote.launcher_argv(str(spec))], env


def launch(zygote: Zygote, place, name: str, action: str, port: int, env_extra=None, wait=True):
    """Start one kernel the way jupyter_client would; return the finished process (or the running one)."""
    argv, env = launcher(zygote, place, name, action, port, env_extra)
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    if not wait:
        return process
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def facts_of(process) -> dict:
    out = process.stdout if isinstance(process.stdout, str) else process.stdout.readline()
    return json.loads(out.splitlines()[0])


def test_a_warm_kernel_is_preloaded_yet_sandboxed_unprivileged_and_alone(zygote, place, outside_port):
    done = launch(zygote, place, "a", "0", outside_port)
    assert done.returncode == 0, done.stderr
    facts = facts_of(done)
    assert facts["preloaded"]  # the point: torch is already imported
    assert facts["threads"] == 1 and facts["fds"] == [0, 1, 2, 3]  # 3: the listing's own descriptor
    assert facts["processes"] == [1, 2] and facts["pid"] == 2 and facts["ppid"] == 1  # its own PID namespace
    assert not facts["hidden_seen"] and not facts["network"] and not facts["wrote_outside"]
    assert facts["cwd"] == str(place[0] / "work")
    assert set(facts["caps"].values()) == {"0000000000000000"} and facts["no_new_privs"] == "1"
    assert facts["as_mib"] == 6000
    assert facts["argv"][0].endswith("probe.py") and facts["argv"][-3:] == ["0", "-f", "conn.json"]


def test_a_zygote_for_an_assignment_without_torch_does_not_import_it(tmp_path, place, outside_port):
    env = {"PATH": os.environ["PATH"], "OPENBLAS_NUM_THREADS": "1", "HOME": str(tmp_path)}
    lean = Zygote.start(str(tmp_path / "lean"), env, libraries=())
    try:
        done = launch(lean, place, "a", "0", outside_port)
    finally:
        lean.stop()
    assert done.returncode == 0, done.stderr
    assert not facts_of(done)["preloaded"]  # still a sandboxed kernel; torch is imported only if a cell asks


def test_standing_zygotes_stop_together_at_once_and_leave_no_socket(tmp_path):
    env = {"PATH": os.environ["PATH"], "OPENBLAS_NUM_THREADS": "1", "HOME": str(tmp_path)}
    standby = Standby(str(tmp_path / "standby"), env, libraries=())
    zygotes = standby.ready(2)
    processes = [z.process for z in zygotes]
    standby.stop()
    assert [p.returncode for p in processes] == [0, 0]  # ended on their own, not killed
    assert [z.socket_path for z in zygotes if os.path.exists(z.socket_path)] == []
    assert standby.zygotes == {}


def test_zygotes_started_together_import_once_and_each_serves_its_own_kernels(tmp_path, place, outside_port):
    """A Standby's zygotes started together are forked from one process that imported for them all: each its
    own process (its own tree, watched as one slot's) and socket, each serving warm, sandboxed kernels; one
    that dies is replaced alone, the other serving on."""
    env = {"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONNOUSERSITE": "1", "HOME": str(tmp_path)}
    standby = Standby(str(tmp_path / "standby"), env, libraries=("torch", "numpy"))
    try:
        first, second = standby.ready(2)
        template = first.process
        assert second.process is template and len({first.pid, second.pid, template.pid}) == 3
        assert [psutil.Process(z.pid).ppid() for z in (first, second)] == [template.pid] * 2
        assert first.socket_path != second.socket_path
        for name, zygote in (("a", first), ("b", second)):
            done = launch(zygote, place, name, "0", outside_port)
            assert done.returncode == 0, done.stderr
            facts = facts_of(done)
            assert facts["preloaded"] and facts["processes"] == [1, 2] and not facts["hidden_seen"]
        os.kill(second.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while second.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not second.alive() and first.alive()
        again = standby.ready(2)
        assert again[0] is first and again[1] is not second and again[1].process is not template
        assert launch(again[1], place, "c", "0", outside_port).returncode == 0
        assert launch(first, place, "d", "0", outside_port).returncode == 0
    finally:
        standby.stop()
    assert template.returncode is not None and not psutil.pid_exists(first.pid)
    left = [z.socket_path for z in (first, again[1]) if os.path.exists(z.socket_path)]
    assert left == []  # they ended, not killed: each removed its socket


def test_the_libraries_to_preload_are_those_the_notebooks_import(tmp_path):
    def notebook(name: str, *sources: str, kind: str = "code") -> str:
        path = tmp_path / name
        cells = [{"cell_type": kind, "metadata": {}, "source": list(s.splitlines(True))} for s in sources]
        path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        return str(path)

    torch_nn = notebook("a.ipynb", "x = 1", "import torch.nn as nn\nimport os")
    numpy_from = notebook("b.ipynb", "def f():\n    from numpy.linalg import norm\n    return norm")
    magic_only = notebook("c.ipynb", "%timeit import torch", "from . import numpy")  # neither counts
    markdown = notebook("d.ipynb", "import torch", kind="markdown")
    assert libraries_imported([torch_nn]) == ("torch",)
    assert libraries_imported([numpy_from, torch_nn]) == ("torch", "numpy")
    assert libraries_imported([magic_only, markdown]) == ()
    # autograd or an optimizer: what torch imports at their first use (torch._dynamo) too; never without torch
    training = notebook("e.ipynb", "import torch\nopt = torch.optim.SGD(params, lr=0.1)")
    backward = notebook("f.ipynb", "import torch", "loss.backward()")
    assert libraries_imported([training]) == libraries_imported([backward]) == ("torch", "torch._dynamo")
    assert libraries_imported([notebook("g.ipynb", "import numpy\nloss.backward()")]) == ("numpy",)


def test_the_course_modules_to_import_first_are_those_the_notebooks_import_and_theirs(tmp_path):
    path = tmp_path / "ps.ipynb"
    sources = ["from devicelab.exercises.ps06 import capstone_run\nimport torch",
               "import devicelab.fakes, os", "%time import devicelab.ui", "from . import devicelab"]
    cells = [{"cell_type": "code", "metadata": {}, "source": s} for s in sources]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    found = course_modules_imported([str(path)])
    # named by the notebook, and what those import, at their top or inside a function (capstone_run imports
    # lesson08 when it runs); only modules (not capstone_run), only the course's (not torch or os)
    assert {"devicelab.exercises.ps06", "devicelab.fakes", "devicelab.exercises.lesson08"} <= set(found)
    assert all(name.split(".")[0] == "devicelab" for name in found)
    assert "devicelab.exercises.ps06.capstone_run" not in found and found == tuple(sorted(found))


def test_a_warm_kernel_has_its_own_environment_and_nothing_of_the_zygotes(zygote, place, outside_port):
    facts = facts_of(launch(zygote, place, "a", "0", outside_port, {"ONLY_MINE": "1"}))
    assert facts["env"]["ONLY_MINE"] == "1" and facts["env"]["KERNEL_NAME"] == "a"
    assert "OMP_NUM_THREADS" not in facts["env"]  # the zygote's own variable is not the kernel's
    assert "JPY_PARENT_PID" not in facts["env"]  # as a cold kernel: it cannot see its parent


def test_one_students_kernel_leaves_nothing_for_the_next_and_seeds_differ(zygote, place, outside_port):
    first = facts_of(launch(zygote, place, "a", "0", outside_port))
    second = facts_of(launch(zygote, place, "b", "0", outside_port))
    assert second["shm"] == [] and first["shm"] == []  # /dev/shm is the sandbox's own each time
    assert first["draws"][0] != second["draws"][0] and first["draws"][1] != second["draws"][1]


def test_the_zygote_never_holds_a_students_request(zygote, place, outside_port):
    marker = "student-secret-" + os.urandom(8).hex()
    assert launch(zygote, place, "a", "0", outside_port, {"SECRET": marker}).returncode == 0
    memory = _memory_of(zygote.pid)
    assert zygote.socket_path.encode() in memory  # the scan works: it finds what the zygote does hold
    assert marker.encode() not in memory


def _memory_of(pid: int) -> bytes:
    """Return the contents of a process's writable private memory."""
    chunks = []
    with open(f"/proc/{pid}/maps", encoding="ascii") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("rw"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                chunks.append(mem.read(end - start))
            except (OSError, ValueError, OverflowError):
                continue
    return b"".join(chunks)


def test_a_warm_kernel_cannot_kill_or_trace_its_parent(zygote, place, outside_port):
    done = launch(zygote, place, "a", "kill-parent", outside_port)
    assert done.returncode == 0 and done.stdout.splitlines()[1] == "still here -1 1", done.stderr  # EPERM


@pytest.mark.parametrize(("action", "code"), [("7", 7), ("killed", 128 + signal.SIGKILL)])
def test_the_launcher_exits_as_the_kernel_did(zygote, place, outside_port, action, code):
    assert launch(zygote, place, "a", action, outside_port).returncode == code


def test_killing_the_launcher_kills_the_kernel(zygote, place, outside_port):
    process = launch(zygote, place, "a", "sleep", outside_port, wait=False)
    assert facts_of(process)["preloaded"]
    assert psutil.Process(zygote.pid).children(recursive=True)  # the kernel and its parent
    os.killpg(process.pid, signal.SIGKILL)  # as jupyter_client stops a kernel
    process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while psutil.Process(zygote.pid).children(recursive=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.Process(zygote.pid).children(recursive=True)


def test_when_the_grader_dies_its_launcher_and_kernel_go_too_and_nothing_starts_cold(zygote, place,
                                                                                   outside_port):
    argv, env = launcher(zygote, place, "a", "sleep", outside_port)
    worker = ("import os, subprocess, sys, time\n"  # a stand-in for the grader's worker, killed below
              "env = {**os.environ, 'JPY_PARENT_PID': str(os.getpid())}\n"
              "p = subprocess.Popen(sys.argv[1:], env=env, stdout=subprocess.PIPE)\n"
              "print(p.pid, p.stdout.readline().decode()[:20], flush=True)\n"
              "time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", worker, *argv], stdout=subprocess.PIPE, text=True,
                              env=env)
    launcher_pid = int(parent.stdout.readline().split()[0])  # its kernel has started
    assert psutil.Process(zygote.pid).children(recursive=True)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while (psutil.pid_exists(launcher_pid) or psutil.Process(zygote.pid).children(recursive=True)) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.Process(zygote.pid).children(recursive=True)
    left = [p for p in psutil.process_iter(["cmdline"])
            if str(place[0]) in " ".join(p.info["cmdline"] or []) and p.pid != zygote.pid]
    assert not left, [(p.pid, p.ppid(), p.info["cmdline"]) for p in left]  # no launcher, no cold kernel


def unread(connection: socket.socket) -> int:
    """Return how many bytes wait in a socket's receive queue."""
    import array
    import fcntl
    import termios

    count = array.array("i", [0])
    fcntl.ioctl(connection.fileno(), termios.FIONREAD, count)
    return count[0]


def test_a_reset_after_the_kernel_started_ends_it_and_never_starts_another():
    """The kernel's side closes with a signal the launcher forwarded still unread (the grader stopping a
    kernel that was dying anyway): the launcher's next read is reset. That is the kernel's end, not a failed
    warm start: a cold kernel started then would answer in the dead one's place, with none of its state."""
    from autograder.grading import zygote as zygote_module

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # _follow forwards these signals to the kernel: they are put back afterwards
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    def kernel_side() -> None:
        theirs.send(json.dumps({"pid": 42}).encode())  # the kernel has started
        while unread(ours):  # until the launcher has read that
            time.sleep(0.01)
        ours.send(json.dumps({"signal": 15}).encode())  # forwarded; the kernel's side never reads it
        theirs.close()

    try:
        closing = threading.Thread(target=kernel_side)
        closing.start()
        assert zygote_module._follow(ours) == 1  # (in the main thread: it sets signal handlers)
        closing.join(10)
    finally:
        ours.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("code", [0, 3])
def test_a_kernel_that_ends_before_its_start_is_read_keeps_its_exit_code_and_starts_nothing(code):
    """The race behind the allowance once made for a cold start: the kernel starts and ends at once while the
    launcher forwards a signal. The kernel's side has sent its pid and its end, then closes with the signal
    unread; a SEQPACKET socket reports that reset *before* the messages still queued for the launcher. The
    launcher reads on: the kernel started (no cold kernel in its place) and its own exit code comes back."""
    from autograder.grading import zygote as zygote_module

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        ours.send(json.dumps({"signal": 15}).encode())  # forwarded before the launcher read anything
        theirs.send(json.dumps({"pid": 2}).encode())
        theirs.send(json.dumps({"exit": code << 8}).encode())  # a wait status: exited with `code`
        theirs.close()
        assert zygote_module._follow(ours) == code
    finally:
        ours.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_a_reset_before_the_kernel_started_is_a_failed_warm_start():
    from autograder.grading import zygote as zygote_module

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        ours.send(b'{"program": []}')  # the request, never read: the zygote turned it away
        theirs.close()
        with pytest.raises(WarmStartError, match="closed the connection"):  # launch() starts it cold
            zygote_module._follow(ours)
    finally:
        ours.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_a_zygote_that_would_fork_with_threads_refuses_to_start(tmp_path):
    env = {"PATH": os.environ["PATH"], "OPENBLAS_NUM_THREADS": "2", "PYTHONNOUSERSITE": "1"}
    with pytest.raises(WarmStartError, match=re.compile("single-threaded")):
        Zygote.start(str(tmp_path / "zygote"), env)


def test_the_zygote_answers_only_its_own_user(zygote):
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another user")
    code = ("import os, socket, sys; os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
            "try:\n    s.connect(sys.argv[1]); s.send(b'{}'); print(repr(s.recv(100)))\n"
            "except OSError as e:\n    print('refused', e.errno)")
    out = subprocess.run([sys.executable, "-c", code, zygote.socket_path], capture_output=True, text=True,
                         timeout=30, check=False)
    assert out.stdout.startswith("refused") or out.stdout.strip() == "b''", out.stderr


def test_where_warm_start_fails_the_kernel_starts_cold(tmp_path, place, outside_port):
    zygote = start_zygote(tmp_path)
    zygote.stop()  # no zygote to answer: the launcher becomes the cold command
    done = launch(zygote, place, "a", "0", outside_port)
    assert done.returncode == 0 and "warm start failed" in done.stderr
    facts = facts_of(done)
    assert not facts["preloaded"] and not facts["hidden_seen"] and not facts["network"]


def test_standing_zygotes_serve_one_run_after_another_and_still_watch_each_student(tmp_path, monkeypatch):
    from jupyter_core.utils import ensure_event_loop

    from autograder.grading import scratch
    from autograder.grading.session import GradeOptions, grade_class
    from autograder.grading.warm_start import Standby
    from autograder.grading.worker import KEEP_ENV, zygote_environment
    from tests.grading.test_grading_end_to_end import CLASS, MEMORY_MIB, make_course, with_cell, write_class

    try:
        detect_isolation("bwrap")
    except IsolationUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
    ensure_event_loop()  # as an earlier test in this process may have made one: the workers must not use it
    course = make_course(tmp_path)
    # grows 250 MiB/s: the watch sees it pass the cap long before the address-space limit stops it
    hog = with_cell("import time\nblocks = []\nwhile True:\n    blocks.append(b'x' * (50 * 2**20))\n"
                    "    time.sleep(0.2)")
    write_class(course / "incoming", {"correct": CLASS["correct"], "memory-grow": ({"tiny.ipynb": hog},)},
                course)
    folder = scratch.make_run_root()
    standby = Standby(str(folder), zygote_environment(folder, KEEP_ENV))
    monkeypatch.setenv("DEVICELAB_KEEP_SCRATCH", "1")
    options = GradeOptions(jobs=2, timeout=20, memory_mib=MEMORY_MIB, sandbox="bwrap", force=True,
                           progress=False, standby=standby)
    try:
        for _ in range(2):
            said = []
            summary = grade_class(course, "tiny", course / "incoming", options, echo=said.append)
            results = {r.student: r for r in summary.results}
            assert (results["correct"].status, results["correct"].final_score) == ("graded", 3), (
                results["correct"].detail, said)
            assert results["memory-grow"].status == "memory"  # its kernel, under a standing zygote: watched
            assert f"{MEMORY_MIB} MiB memory cap" in results["memory-grow"].detail
            kept = Path(next(line for line in said if line.startswith("scratch kept in")).split()[-1])
            assert not list(kept.glob("zygote-*"))  # no worker had to start a zygote of its own
            logs = "".join(p.read_text() for p in kept.glob("worker-*.log"))
            # Each kernel starts warm from a standing zygote, and none cold after it: once, on a loaded CI
            # machine, the memory hog's kernel ended with a forwarded signal unread, the launcher's read was
            # reset and it started a cold kernel in the dead one's place (test_a_reset_after_the_kernel_...)
            assert "warm start" not in logs, logs
        assert standby.started <= 4 and all(z.alive() for z in standby.ready(2))
    finally:
        standby.stop()
        shutil.rmtree(folder, ignore_errors=True)
