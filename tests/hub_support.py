"""Helpers for the hub tests: free ports, a Python every Unix account can run, a running hub, users' tokens.
"""

import contextlib
import copy
import csv
import functools
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil
import pytest

from autograder.grading.demo import solved
from autograder.hub.settings import EXCHANGE_SERVICE, GRADING_WORKER, HubSettings
from autograder.hub.setup import accounts
from autograder.hub.setup.checks import IMPORTS_CHECK
from autograder.hub.setup.hub_api import HubAPI
from autograder.hub.setup.install import find_proxy

ROOT = Path(__file__).resolve().parent.parent

OPT_IN = "DEVICELAB_HUB_TESTS"
COURSE = "device-lab"
STUB = re.compile(r"^(\s*)raise NotImplementedError\(.*\)\s*$", re.MULTILINE)


def hub_tests_or_skip() -> None:
    """Skip unless the hub tests were asked for and we are root; under CI=true a skip is a failure."""
    reason = None
    if os.environ.get(OPT_IN) != "1":
        reason = f"the hub tests make Unix accounts and start JupyterHub: set {OPT_IN}=1 (and run as root)"
    elif os.geteuid() != 0:
        reason = "the hub tests need root (useradd, servers run as other users)"
    elif not shutil.which("runuser") or not shutil.which("useradd"):
        reason = "the hub tests need runuser and useradd"
    elif not find_proxy(ROOT):
        reason = "the hub tests need configurable-http-proxy: run `make hub-proxy` (npm)"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {reason}")
        pytest.skip(reason)


_RESERVED: dict[int, socket.socket] = {}  # port -> the socket that holds it for this test process


def free_port() -> int:
    """Return a loopback port nobody listens on, held for this test process until `release_port`.

    The hub's parts bind their ports a minute after setup names them, and a port found free and closed could
    be taken in between by any process of the machine (another test's server or kernel). Held bound with
    SO_REUSEADDR, not listening, it is taken by no one else (the kernel hands out no held port for a bind to
    port 0 or a connection's local end), and a server that sets SO_REUSEADDR too still binds and listens on
    it: tornado (JupyterHub, Jupyter servers, the exchange), node (the proxy) and PostgreSQL all do."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    _RESERVED[port] = sock
    return port


def release_port(port: int) -> None:
    """Let go of a port `free_port` held (its server stopped)."""
    held = _RESERVED.pop(port, None)
    if held is not None:
        held.close()


@contextlib.contextmanager
def network_of_its_own() -> Iterator[None]:
    """Run the block in a network namespace of its own, its loopback up: the machine of a hub whose nodes add
    addresses and links (--nodes namespaces), as a container would be. Without it those changes are the whole
    machine's, and a browser that another test drives at that moment aborts its page loads
    (net::ERR_NETWORK_CHANGED: Chromium drops its connections whenever the machine's addresses change).

    The namespace is the calling thread's (unshare), so what the test starts from it (the hub, its parts,
    `ip`) is in it too; afterwards the thread goes back to the namespace it came from."""
    import ctypes

    from autograder.hub.spawning.nodes import CLONE_NEWNET

    libc = ctypes.CDLL(None, use_errno=True)
    before = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
        try:
            subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True, timeout=30)
            yield
        finally:
            if libc.setns(before, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the machine's network namespace")
    finally:
        os.close(before)


@functools.cache
def runs_as_nobody(python: str) -> bool:
    """Return whether an unprivileged account can run this interpreter and import the hub's packages (asked
    once per test process: 1.7 s of CPU, and the answer is the same for every hub a module starts)."""
    done = subprocess.run(["runuser", "-u", "nobody", "--", python, "-c",
                           IMPORTS_CHECK.replace(", autograder", "")],  # autograder: the course's folder
                          capture_output=True, cwd="/", check=False)
    return done.returncode == 0


def blocked_folders(python: str) -> list[Path]:
    """Return the folders on the way to this interpreter (and its real file) that other accounts cannot enter.
    """
    blocked = []
    for target in (Path(python), Path(os.path.realpath(python))):
        for folder in reversed(target.parents):
            if not folder.stat().st_mode & 0o001 and folder not in blocked:
                blocked.append(folder)
    return blocked


@contextlib.contextmanager
def python_for_group(group: str) -> Iterator[list[Path]]:
    """Let the group's accounts run this interpreter for the block (an ACL entry on each folder in the way).

    A class's servers need a Python every account can run; a developer's may live under /root (pyenv). The
    entries give the group search (x) permission only, and are removed afterwards.
    """
    blocked = [] if runs_as_nobody(sys.executable) else blocked_folders(sys.executable)
    if blocked and shutil.which("setfacl") is None:
        pytest.fail(f"{sys.executable} is in {blocked[0]}, which other accounts cannot enter, and setfacl is "
                    "missing to let the test accounts in (apt-get install acl)")
    done = []
    try:
        for folder in blocked:
            subprocess.run(["setfacl", "-m", f"g:{group}:x", str(folder)], check=True)
            done.append(folder)
        yield blocked
    finally:
        for folder in done:
            subprocess.run(["setfacl", "-x", f"g:{group}", str(folder)], check=False)


def wait_for(url: str, seconds: float, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    """Wait until the URL answers with success (the proxy's 404 means its route is not there yet), or fail."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            break
        try:
            urllib.request.urlopen(url, timeout=3)
            return
        except OSError:
            time.sleep(0.5)
    tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
    pytest.fail(f"{url} did not answer within {seconds} s\n{tail}")


@contextlib.contextmanager
def running(argv: list[str], cwd: Path, env: dict[str, str], log: Path,
            background_job: bool = False) -> Iterator[subprocess.Popen]:
    """Run a process in its own session for the block, its output in log; stop it (and its children) after.
    `background_job`: start it as a script's `command &` is, with SIGINT and SIGQUIT ignored."""
    if background_job:
        argv = ["/bin/sh", "-c", 'trap "" INT QUIT; exec "$@"', "sh", *argv]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(10)


@dataclass
class Hub:
    """A running hub of the test's class."""

    settings: HubSettings
    prefix: str
    log: Path
    passwords: dict[str, str]
    pid: int = 0  # `hub start`'s process, which became JupyterHub
    restarter: Callable[[], int] | None = field(default=None, repr=False)  # stops, starts; returns the pid

    @property
    def public(self) -> str:
        return public_url(self.settings)

    def user(self, member: str) -> str:
        return f"{self.prefix}{member}"

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        """Run `python -m autograder hub ...` for this hub, as the instructor (root) would."""
        done = subprocess.run([sys.executable, "-m", "autograder", "hub", args[0], "--root",
                               self.settings.root, *args[1:]],
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
        assert done.returncode == 0, f"hub {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done

    def restart(self) -> None:
        """Stop the hub as a service manager does (SIGTERM to its processes) and start it again."""
        assert self.restarter is not None
        self.pid = self.restarter()

    def token(self, member: str) -> str:
        """Return a new hub token of the member's (as the user would make on the hub's Token page)."""
        reply = HubAPI.for_settings(self.settings).call(
            "POST", f"/users/{self.user(member)}/tokens", {"note": "hub test", "expires_in": 3600})
        assert reply.status == 201, reply
        return reply.body["token"]

    def as_user(self, token: str, prefix: str) -> HubAPI:
        """Return a REST client for a path behind the proxy (/hub/api, /user/NAME, /services/NAME)."""
        return HubAPI(self.public + prefix, token)


def public_url(settings: HubSettings) -> str:
    """Return where this machine reaches the hub's proxy (the address it listens on; loopback for all)."""
    host = settings.ip if settings.ip not in ("", "0.0.0.0") else "127.0.0.1"
    return f"http://{host}:{settings.port}"


def running_proxy(pid_file: Path) -> psutil.Process | None:
    """Return the proxy the hub started, as its pid file names it; None when there is none."""
    try:
        proxy = psutil.Process(int(pid_file.read_text().strip()))
        return proxy if "configurable-http-proxy" in " ".join(proxy.cmdline()) else None
    except (OSError, ValueError, psutil.Error):
        return None


def stop_proxy(proxy: psutil.Process | None) -> None:
    """Stop the proxy the hub started (a hub killed before its cleanup leaves it running) and wait until it
    is gone: JupyterHub's own cleanup only signals it, and a hub started again binds the same ports."""
    if proxy is None:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        proxy.terminate()
        try:
            proxy.wait(60)
        except psutil.TimeoutExpired:
            proxy.kill()
            proxy.wait(30)


@contextlib.contextmanager
def class_hub(tmp_path: Path, roster_text: str, setup_args: tuple[str, ...] = (),
              later: tuple[str, ...] = ()) -> Iterator["Hub"]:
    """Make the roster's accounts (a unique prefix), set the hub up (with `setup_args` added) and start it on
    free loopback ports. `later`: ids whose accounts the test makes (removed afterwards too).

    Afterwards stop it and remove every trace (accounts, homes, group, ACL entries, the hub's folder), even
    when the block failed.
    """
    prefix = f"t{secrets.token_hex(3)}-"
    group = f"{prefix}hub"
    root = Path(tempfile.mkdtemp(prefix="dlhub-"))
    root.chmod(0o755)
    roster = root / "roster.csv"
    roster.write_text(roster_text)
    listed = [line.split(",")[0] for line in roster_text.splitlines()[1:] if line]
    members = [*listed, "dan", "grader", *later]
    ports = {name: free_port() for name in ("port", "hub-port", "proxy-api-port", "service-port")}
    log = tmp_path / "jupyterhub.log"
    subprocess.run(["groupadd", group], check=True)
    try:
        with python_for_group(group):
            setup = subprocess.run(
                [sys.executable, "-m", "autograder", "hub", "setup", "--roster", str(roster), "--root",
                 str(root / "hub-root"), "--prefix", prefix, "--extra-group", group,
                 *(f"--{k}={v}" for k, v in ports.items()), *setup_args],
                cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
            assert setup.returncode == 0, setup.stdout + setup.stderr
            settings = HubSettings.load(root / "hub-root")
            passwords = {m: secrets.token_urlsafe(12) for m in members if m not in ("dan", "grader", *later)}
            for member, password in passwords.items():
                accounts.set_password(prefix + member, password)
            start = [sys.executable, "-m", "autograder", "hub", "start", "--root", settings.root]
            with contextlib.ExitStack() as started:
                procs: list[subprocess.Popen] = []

                def start_hub() -> int:
                    """Stop the running hub, if any; start it; return its pid."""
                    if procs:
                        proxy = running_proxy(Path(settings.root) / "hub" / "proxy.pid")  # before its cleanup
                        os.killpg(procs[-1].pid, 15)
                        procs[-1].wait(60)
                        stop_proxy(proxy)
                    # as an instructor's script would start it in the background (CI runs this way too)
                    procs.append(started.enter_context(running(start, ROOT, dict(os.environ), log,
                                                               background_job=True)))
                    wait_for(f"{public_url(settings)}/hub/api", 120, procs[-1], log)
                    return procs[-1].pid

                yield Hub(settings, prefix, log, passwords, start_hub(), start_hub)
    finally:
        stop_proxy(running_proxy(root / "hub-root" / "hub" / "proxy.pid"))
        for port in ports.values():
            release_port(port)
        members += [p.pw_name[len(prefix):] for p in pwd.getpwall() if p.pw_name.startswith(prefix)]
        uids = {a.uid for a in map(accounts.lookup, (prefix + m for m in members)) if a is not None}
        # a grading run killed on purpose leaves its own
        for scratch in Path(tempfile.gettempdir()).glob("dlg-*"):
            with contextlib.suppress(OSError):
                if scratch.stat().st_uid in uids:
                    shutil.rmtree(scratch, ignore_errors=True)
        for member in members:
            accounts.remove_account(prefix + member)
        subprocess.run(["groupdel", group], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def smallest_assignment() -> str:
    """Return the assignment in release/ with the smallest notebook."""
    return min((p for p in (ROOT / "release").glob("*/*.ipynb")), key=lambda p: p.stat().st_size).parent.name


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def answers(assignment: str) -> dict[str, nbformat.NotebookNode]:
    """Return the three students' notebooks: right, wrong (every answer returns None), hostile (a cell that
    never ends). The hostile cell waits rather than spins: graded to the time limit up to three times in a hub
    test, a spinning cell took a core from the rest of the suite for 90 s; spinning cells at the time limit
    are graded in tests/grading/test_grading_end_to_end.py."""
    release = nbformat.read(ROOT / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    source = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    right = solved(release, source)
    wrong = copy.deepcopy(release)
    for cell in wrong.cells:
        if _nbgrader(cell).get("solution") and cell.cell_type == "code":
            cell.source = STUB.sub(r"\1return None", cell.source)
    hostile = copy.deepcopy(right)
    last = [c for c in hostile.cells if _nbgrader(c).get("solution") and c.cell_type == "code"][-1]
    last.source += "\n\nimport time\n\nwhile True:  # never ends\n    time.sleep(1)\n"
    return {"right": right, "wrong": wrong, "hostile": hostile}


def start_server(hub: Hub, member: str, token: str) -> HubAPI:
    """Start the member's server through the hub with their token; return its REST client."""
    api = hub.as_user(token, "/hub/api")
    reply = api.call("POST", f"/users/{hub.user(member)}/server")
    assert reply.status in (201, 202), reply
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        server = (api.call("GET", f"/users/{hub.user(member)}").body["servers"] or {}).get("", {})
        if server.get("ready"):
            return hub.as_user(token, f"/user/{hub.user(member)}")
        time.sleep(1)
    pytest.fail(f"{member}'s server did not start:\n{hub.log.read_text()[-3000:]}")


@dataclass(frozen=True)
class KernelRun:
    """What running code in a kernel through its server's websocket gave."""

    output: str  # stream output
    reply: str | None  # the execute_reply's status; None when the kernel died first
    states: tuple[str, ...]  # the kernel's execution states seen (busy, idle, restarting, dead)


def run_in_kernel(hub: Hub, member: str, token: str, code: str, timeout: float = 120) -> KernelRun:
    """Start a kernel in the member's running server and run `code` in it, as JupyterLab does."""
    import asyncio
    import uuid

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    server = hub.as_user(token, f"/user/{hub.user(member)}")
    reply = server.call("POST", "/api/kernels", {"name": "python3"})
    assert reply.status == 201, reply
    url = (hub.public.replace("http://", "ws://")
           + f"/user/{hub.user(member)}/api/kernels/{reply.body['id']}/channels")

    async def run() -> KernelRun:
        ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
        msg_id, output, states, reply, idle = uuid.uuid4().hex, [], [], None, False
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": member, "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                raw = await asyncio.wait_for(ws.read_message(), max(0.1, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                break
            if raw is None:  # the server closed the channel
                break
            msg = json.loads(raw)
            kind, ours = msg["header"]["msg_type"], msg["parent_header"].get("msg_id") == msg_id
            if kind == "stream":
                output.append(msg["content"]["text"])
            elif kind == "status":
                states.append(msg["content"]["execution_state"])
                if states[-1] in ("restarting", "dead"):
                    break
                idle = idle or (ours and states[-1] == "idle")
            elif kind == "execute_reply" and ours:
                reply = msg["content"]["status"]
            # The reply comes on the shell channel, the output on IOPub: the cell is done when both the reply
            # and IOPub's idle for it have come (either may arrive first).
            if reply is not None and idle:
                break
        ws.close()
        return KernelRun("".join(output), reply, tuple(states))

    return asyncio.run(run())


def hand_in(server: HubAPI, assignment: str, notebook: nbformat.NotebookNode, fetch: bool = True,
            name: str | None = None) -> None:
    """Fetch the assignment (first time), save the notebook as the student's answer and submit it.

    With `name`, the student saves the answer in their copy of that name: the fetched notebook is renamed to
    it first (File > Rename) if it is still there.
    """
    folder = f"{COURSE}/{assignment}"
    if fetch:
        fetched = server.call("POST", "/assignments/fetch",
                              {"course_id": COURSE, "assignment_id": assignment})
        assert fetched.status == 200 and fetched.body["success"], fetched
    if name and server.call("GET", f"/api/contents/{folder}/{assignment}.ipynb?content=0").status == 200:
        moved = server.call("PATCH", f"/api/contents/{folder}/{assignment}.ipynb",
                            {"path": f"{folder}/{name}"})
        assert moved.status == 200, moved
    path = f"{folder}/{urllib.parse.quote(name or assignment + '.ipynb')}"
    saved = server.call("PUT", f"/api/contents/{path}", {"type": "notebook", "format": "json",
                                                          "content": json.loads(nbformat.writes(notebook))})
    assert saved.status == 200, saved  # the file was there: fetched, or renamed just above
    if name:
        listed = server.call("GET", f"/api/contents/{folder}")
        names = sorted(item["name"] for item in listed.body["content"])
        assert name in names and f"{assignment}.ipynb" not in names, names
    submitted = server.call("POST", "/assignments/submit", {"course_id": COURSE, "assignment_id": assignment})
    assert submitted.status == 200 and submitted.body["success"], submitted


def submissions_of(server: HubAPI, assignment: str) -> list[dict]:
    """Return the student's submissions of the assignment as their Assignments tab lists them, newest first.
    """
    listed = server.call("GET", f"/assignments?course_id={COURSE}")
    assert listed.status == 200, listed
    subs = [s for a in listed.body["value"] if a["assignment_id"] == assignment and a["status"] == "submitted"
            for s in a.get("submissions", [])]
    return sorted(subs, key=lambda s: s["timestamp"], reverse=True)


def server_pid(account: str) -> int:
    """Return the pid of the account's jupyterhub-singleuser process."""
    found = subprocess.run(["pgrep", "-u", account, "-f", "jupyterhub-singleuser"], capture_output=True,
                           text=True, check=False).stdout.split()
    assert found, f"no server of {account} runs"
    return int(found[0])


def memory_cgroup(pid: int) -> Path:
    """Return the memory cgroup folder a process is in (v1 memory controller, or v2's unified tree)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if "memory" in names.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/")
    (line,) = [x for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if x.startswith("0::")]
    return Path("/sys/fs/cgroup") / line[3:].lstrip("/")


def wait_until(get, good, seconds: float, what: "str | Callable[[], str]", hub: Hub):
    """Return get() once good(it) holds; fail, saying `what` (a callable: asked only then) with the hub's log,
    after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = get()
        if good(got):
            return got
        time.sleep(0.5)
    pytest.fail(f"{what() if callable(what) else what}\n{hub.log.read_text()[-4000:]}")


def exported(hub: Hub, assignment: str) -> dict[str, float]:
    """Return each student's score of an assignment in the course gradebook, as `hub export` writes it."""
    path = Path(hub.settings.root) / "export.csv"
    hub.cli("export", "--to", str(path))
    with path.open() as handle:
        return {r["student_id"]: float(r["score"]) for r in csv.DictReader(handle)
                if r["assignment"] == assignment}


def graded_by_workers(hub: Hub, servers: dict[str, HubAPI], assignment: str) -> dict[str, float]:
    """Release the assignment with autograde on, have ann hand in a right answer and bob a wrong one, wait
    for both feedbacks; check the workers graded both (not the service); return the gradebook's scores."""
    hub.cli("release", assignment)
    assert "on" in hub.cli("autograde", "on", assignment).stdout
    notebooks = answers(assignment)
    hand_in(servers["ann"], assignment, notebooks["right"])
    hand_in(servers["bob"], assignment, notebooks["wrong"])
    def status() -> str:
        return hub.cli("autograde", "status", assignment).stdout

    for member, server in servers.items():
        wait_until(lambda s=server: submissions_of(s, assignment)[0]["has_exchange_feedback"], bool, 300,
                   lambda m=member: f"no feedback for {m}: {status()}", hub)
    said = status()
    assert said.count("graded by") == 2, said  # recorded from the workers, not graded by the service
    scores = wait_until(lambda: exported(hub, assignment), lambda e: len(e) == 2, 60,
                        "the gradebook lacks the workers' scores", hub)
    assert scores[hub.user("ann")] > 0 and scores[hub.user("bob")] < scores[hub.user("ann")], scores
    return scores


def hub_parts(hub: Hub) -> dict[str, psutil.Process]:
    """Return the Python process of the exchange ("exchange") and of each worker ("worker-K"): the part's
    own, not a process it forked (a worker's grading processes carry its command line)."""
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["cmdline"]):
        line = proc.info["cmdline"] or []
        # an installed command runs as `python /venv/bin/COMMAND ARGS...` (its #! line)
        if len(line) < 2 or not line[0].endswith(("python", "python3")):
            continue
        command = Path(line[1]).name
        # each part names only its config file, which `hub setup` wrote in this hub's etc/grader/
        config = Path(line[line.index("--config") + 1]) if "--config" in line[:-1] else None
        if config is None or config.parent != hub.settings.paths.grader_etc:
            continue
        if command == EXCHANGE_SERVICE and config.name == "exchange-service.json":
            found.setdefault("exchange", []).append(proc)
        elif command == GRADING_WORKER and config.name.startswith("worker-"):
            found.setdefault(config.stem, []).append(proc)
    return {name: proc for name, procs in found.items() for proc in procs if not _forked(proc)}


def _forked(proc: psutil.Process) -> bool:
    """Return whether a process is a fork of a process with its own command line (its parent's)."""
    try:
        return proc.parent().cmdline() == proc.info["cmdline"]
    except (psutil.Error, AttributeError):
        return False


def settings_of(command: list[str]) -> dict:
    """Return what a part the hub starts reads from its config file (`COMMAND ... --config FILE`, written by
    `hub setup`: autograder/hub/part_settings.py)."""
    import json

    return json.loads(Path(command[command.index("--config") + 1]).read_text(encoding="utf-8"))
