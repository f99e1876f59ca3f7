"""Helpers for the hub tests: free ports, a Python every Unix account can run, a running hub, users' tokens."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from autograder.hub.install import find_proxy

ROOT = Path(__file__).resolve().parent.parent

OPT_IN = "DEVICELAB_HUB_TESTS"


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


def free_port() -> int:
    """Return a loopback port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def runs_as_nobody(python: str) -> bool:
    """Return whether an unprivileged account can run this interpreter and import the hub's packages."""
    done = subprocess.run(["runuser", "-u", "nobody", "--", python, "-c", "import jupyterhub, nbgrader, devicelab"],
                          capture_output=True, cwd="/", check=False)
    return done.returncode == 0


def blocked_folders(python: str) -> list[Path]:
    """Return the folders on the way to this interpreter (and its real file) that other accounts cannot enter."""
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
def running(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """Run a process in its own session for the block, its output in log; stop it (and its children) after."""
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
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
