"""On a real hub, from inside students' own servers: no student can read, reach or run as anyone else.

Each test plays an attack of issue 49 as a hostile enrolled student would, from code in their own kernel (what
a terminal in their JupyterLab runs too), against a classmate who works as usual. Root and
DEVICELAB_HUB_TESTS=1 (real Unix accounts, a hub on loopback set up with docs/hub.md's commands)."""

import ast
import json
import pwd
import re
import time
from pathlib import Path

import psutil
import pytest

from tests.hub_support import (
    class_hub,
    hub_tests_or_skip,
    memory_cgroup,
    run_in_kernel,
    server_pid,
    start_server,
)
from tests.isolation_probe import LISTENING, WORLD_WRITABLE, listening

ROSTER = "id,name,role\nann,Ann Snoop,student\nbob,Bob Calm,student\nivy,Ivy Teacher,instructor\n"
TASKS = 256
MEMORY_MIB = 900

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    hub_tests_or_skip()
    setup = ("--mem-limit", str(MEMORY_MIB), "--cpu-limit", "1", "--tasks-limit", str(TASKS))
    with class_hub(tmp_path_factory.mktemp("isolation"), ROSTER, setup) as running:
        running.tokens = {m: running.token(m) for m in ("ann", "bob")}
        for member, token in running.tokens.items():
            start_server(running, member, token)
        yield running


def run(hub, member: str, code: str, timeout: float = 120) -> str:
    """Run code in a new kernel of the member's server; return what it printed (the cell must succeed)."""
    done = run_in_kernel(hub, member, hub.tokens[member], code, timeout)
    assert done.reply == "ok", done
    return done.output


def pids_cgroup(pid: int) -> Path:
    """Return the cgroup folder that caps a process's tasks (v1 pids controller, or v2's unified tree)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if "pids" in names.split(","):
            return Path("/sys/fs/cgroup/pids") / path.lstrip("/")
    return memory_cgroup(pid)




def test_a_students_server_shows_only_their_own_files_processes_and_folders(hub):
    """The survey from inside a server: what it can see, reach and hold."""
    ann, bob = (hub.user(m) for m in ("ann", "bob"))
    root = Path(hub.settings.root)
    private = [str(root / "course"), str(root / "hub"), f"/home/{bob}", "/run/lock",
               str(Path(hub.settings.course_source) / "source")]  # the solutions in the course's repository
    survey = run(hub, "ann", (
        "import os, pwd, json\n" + WORLD_WRITABLE +
        "uids = sorted({os.stat(f'/proc/{p}').st_uid for p in os.listdir('/proc') if p.isdigit()})\n"
        "print(sorted(pwd.getpwuid(u).pw_name for u in uids))\n"
        f"print(sorted(p for p in {private!r} if os.path.exists(p)))\n"
        "from ipykernel import get_connection_info\n"
        "print(json.loads(get_connection_info())['transport'])\n"))
    lines = survey.strip().splitlines()
    writable, owners, reachable, transport = lines[-4:]
    # the one folder shared with others by design: the file-system exchange's inbound (write, not list)
    assert all(p.startswith(str(root / "exchange")) for p in ast.literal_eval(writable)), writable
    assert ast.literal_eval(owners) == [ann], owners  # no other account's process is there to see
    assert ast.literal_eval(reachable) == [], reachable  # course, hub, other homes, shared locks, solutions
    assert transport == "ipc"  # no TCP port for the kernel

    assert (pids_cgroup(server_pid(ann)) / "pids.max").read_text().strip() == str(TASKS)


def test_no_student_can_subscribe_to_another_students_kernel(hub):
    """Issue 49.2: a student found another's kernel ports in /proc/net/tcp and read its IOPub."""
    bob = hub.user("bob")
    run(hub, "bob", "import threading, time\n"
                    "def talk():\n"
                    "    for _ in range(120):\n"
                    "        print('BOB-SECRET', flush=True)\n"
                    "        time.sleep(0.25)\n"
                    "threading.Thread(target=talk, daemon=True).start()\n")
    # every listening port, all at once (bob's uid is not shown in her box: his are among the others)
    snooped = run(hub, "ann", LISTENING + (
        "import os, zmq\n"
        "ports = sorted({p for p, uid in listening() if uid != os.getuid()})\n"
        "sub = zmq.Context().socket(zmq.SUB)\n"
        "sub.setsockopt(zmq.SUBSCRIBE, b'')\n"
        "for port in ports:\n"
        "    sub.connect(f'tcp://127.0.0.1:{port}')\n"
        "heard = [b''.join(sub.recv_multipart()) for _ in range(50) if sub.poll(100)]\n"
        "print(len(ports), any(b'BOB-SECRET' in m for m in heard))\n"), timeout=180)
    count, heard = snooped.strip().splitlines()[-1].split()
    assert int(count) > 0 and heard == "False", snooped
    # Seen from the machine: bob's kernels talk over IPC files in his box's private /tmp; on TCP he listens
    # only with his server (HTTP, behind the hub's auth) and each kernel's subprocess-output pipe (ipykernel's
    # PULL socket: it sends nothing, and drops what lacks its random key).
    ports = [port for port, uid in listening() if uid == pwd.getpwnam(bob).pw_uid]
    owners = listeners(ports)
    assert sum("jupyterhub-singleuser" in o for o in owners) == 1, owners
    assert all("jupyterhub-singleuser" in o or "-f /tmp/jupyter-runtime/kernel-" in o for o in owners), owners


def test_the_grader_services_kernels_talk_over_ipc_in_the_course_folder(hub):
    """Issue 49.2: an instructor's Validate ran in a grader-service kernel that a student subscribed to."""
    ivy = hub.as_user(hub.token("ivy"), f"/services/{hub.settings.course_id}")
    started = ivy.call("POST", "/api/kernels", {"name": "python3"})
    assert started.status == 201, started
    try:
        kernels = processes_of(hub.settings.grader, "ipykernel_launcher")
        runtime = f"-f {hub.settings.paths.course}/.runtime/kernel-"
        assert kernels and all(runtime in k for k in kernels), kernels  # its sockets in the course folder
        connection = Path(kernels[0].split(" -f ", 1)[1].split()[0])
        assert json.loads(connection.read_text())["transport"] == "ipc"
    finally:
        ivy.call("DELETE", f"/api/kernels/{started.body['id']}")


def test_files_planted_in_shared_temporary_folders_reach_no_one(hub):
    """Issue 49.5 and 49.7: /tmp/torchinductor_<victim> planted before the victim's torch.compile; files in
    /dev/shm outliving their server and counted against no one."""
    bob = hub.user("bob")
    planted = run(hub, "ann", (
        "import os\n"
        f"os.makedirs('/tmp/torchinductor_{bob}/xy', exist_ok=True)\n"
        f"open('/tmp/torchinductor_{bob}/xy/evil.py', 'w').write('raise SystemExit')\n"
        "open('/var/tmp/ann-note', 'w').write('hi')\n"
        "open('/dev/shm/ann-blob', 'wb').write(b'x' * (200 << 20))\n"
        "print('planted')\n"))
    assert "planted" in planted
    seen = run(hub, "bob", (
        "import os, tempfile\n"
        f"print([p for p in ('/tmp/torchinductor_{bob}', '/var/tmp/ann-note', '/dev/shm/ann-blob') "
        "if os.path.exists(p)], os.listdir('/tmp'), tempfile.gettempdir())\n"))
    assert seen.strip().startswith("[] ") and "torchinductor" not in seen, seen

    # Ann's /dev/shm is hers: counted in her server's memory, and gone when her server stops.
    usage = memory_cgroup(server_pid(hub.user("ann"))) / "memory.usage_in_bytes"
    if usage.exists():
        assert int(usage.read_text()) >= 200 << 20
    api = hub.as_user(hub.tokens["ann"], "/hub/api")
    assert api.call("DELETE", f"/users/{hub.user('ann')}/server").status in (202, 204)
    _wait_stopped(api, hub.user("ann"))
    start_server(hub, "ann", hub.tokens["ann"])
    after = run(hub, "ann", "import os\nprint(os.path.exists('/dev/shm/ann-blob'), os.listdir('/tmp'))\n")
    assert after.strip().startswith("False"), after


def test_processes_and_their_arguments_are_invisible_to_other_students(hub):
    """Issue 49.3: a grading kernel's child process passed the hidden test's source out in its argv, which
    every account read in the machine's /proc. A student sees only their own server's processes."""
    run(hub, "bob", "import subprocess, sys\n"
                    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', "
                    "'HIDDEN-TEST-LINE'])\n")
    found = run(hub, "ann", (
        "import os\n"
        "hits = []\n"
        "for pid in (p for p in os.listdir('/proc') if p.isdigit()):\n"
        "    try:\n"
        "        hits += [pid] if b'HIDDEN-TEST-LINE' in open(f'/proc/{pid}/cmdline', 'rb').read() else []\n"
        "    except OSError:\n"
        "        pass\n"
        "print(hits, max(int(p) for p in os.listdir('/proc') if p.isdigit()) < 1000)\n"))
    assert found.strip().splitlines()[-1] == "[] True", found  # and pid numbers of its own namespace


def test_a_thread_storm_stops_at_the_task_cap_and_no_one_else_notices(hub):
    """Issue 49.6: a kernel started 3000 threads (pid_max 32768); one student could starve the machine."""
    storm = run(hub, "ann", (
        "import threading\n"
        "stop, started, error = threading.Event(), [], None\n"
        "try:\n"
        "    for _ in range(3000):\n"
        "        t = threading.Thread(target=stop.wait, daemon=True)\n"
        "        t.start()\n"
        "        started.append(t)\n"
        "except RuntimeError as exc:\n"
        "    error = str(exc)\n"
        "stop.set()\n"
        "for t in started:\n"
        "    t.join()\n"
        "print(len(started), error)\n"), timeout=180)
    count, error = re.match(r"(\d+) (.*)", storm.strip().splitlines()[-1]).groups()
    assert int(count) < TASKS and "thread" in error, storm
    assert run(hub, "bob", "print(6 * 7)").strip() == "42"
    assert run(hub, "ann", "print('still here')").strip() == "still here"


def listeners(ports: list[int]) -> list[str]:
    """Return the command lines of the processes listening on these TCP ports (for failure messages)."""
    return [" ".join(psutil.Process(c.pid).cmdline())[:300] for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port in ports and c.pid]


def processes_of(account: str, word: str, seconds: float = 30) -> list[str]:
    """Return the command lines of the account's processes that contain a word, once there is one."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["username", "cmdline"])
                 if p.info["username"] == account and word in " ".join(p.info["cmdline"] or [])]
        if found:
            return found
        time.sleep(0.2)
    return []


def _wait_stopped(api, user: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not (api.call("GET", f"/users/{user}").body["servers"] or {}):
            return
        time.sleep(0.5)
    pytest.fail(f"{user}'s server did not stop")
