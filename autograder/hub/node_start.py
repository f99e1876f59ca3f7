"""`hub start` for a hub set up with `--nodes namespaces`: JupyterHub on the hub's node, each other part on
its own.

The hub's node is this machine's namespaces, with the hub's address on loopback (spawning/nodes.py). The
exchange service and each grading worker (setup/parts.py) run in a network namespace of their own, linked only
to the hub's, as the grader account, in a box (spawning/server_box.py) that shows each its own folder and no
other part's; they reach the exchange and the hub's API through the hub's proxy only. Students' servers get
theirs from the spawner. This process supervises: it starts JupyterHub and the parts, starts again a part
that exits (as JupyterHub does for a managed service), and when JupyterHub exits or it is told to stop
(SIGTERM, SIGINT), it stops the parts and removes every node.

Why not JupyterHub's managed services, which restart a service that exits: each start of a part first makes
its node again as root (`nodes.make`: the namespace and its link go with the old process), then enters it as
root (`ip netns exec`) and only then drops to the grader account (setpriv) inside its box. A managed service's
command is started by a Spawner already switched to its `user`, so it can do none of that; run with no `user`
it would run as root and JupyterHub would restart it without making its node again. On one machine
(`--nodes one`), where no node is needed, the parts are managed services (setup/parts.py, the hub's config).
"""

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from autograder.hub.hub_process import HubCommand
from autograder.hub.settings import HubSettings, grader_env
from autograder.hub.setup import accounts
from autograder.hub.setup.exchanges import exchange_setup
from autograder.hub.setup.parts import Part, readable_folders
from autograder.hub.spawning import nodes
from autograder.hub.spawning.server_box import BoxPlan, box_prefix

RESTART_S = 1.0  # how long a part that exited waits before it starts again
POLL_S = 0.2
STOP_S = 10.0  # how long JupyterHub and each part get to stop after SIGTERM


def part_command(s: HubSettings, part: Part) -> list[str]:
    """Return the command line that runs a part on its node: its namespace, the grader account, its box."""
    box = BoxPlan(home=part.folder, readable=readable_folders(s))
    return [*nodes.run_prefix(part.node(s)), "setpriv", f"--reuid={s.grader}", f"--regid={s.grader}",
            "--init-groups", "--", *box_prefix(box, size_option=False), *part.argv]


def part_environment(s: HubSettings, part: Part) -> dict[str, str]:
    """Return a part's environment: the grader's, and what JupyterHub gives a service it manages."""
    env = {**grader_env(s), "HOME": str(part.folder), "LANG": "C.UTF-8",
           "JUPYTERHUB_SERVICE_NAME": part.service,
           "JUPYTERHUB_API_TOKEN": part.token_file(s).read_text().strip(),
           "JUPYTERHUB_API_URL": f"http://{s.hub_address}:{s.hub_port}/hub/api",
           "JUPYTERHUB_BASE_URL": "/", "JUPYTERHUB_SERVICE_PREFIX": f"/services/{part.service}/"}
    if part.port:
        env["JUPYTERHUB_SERVICE_URL"] = part.url(s)
    return env


@dataclass
class Running:
    """A part and its process (None while it waits to start again)."""

    part: Part
    proc: subprocess.Popen | None = None
    exited_at: float = 0.0
    starts: int = 0


def start_part(s: HubSettings, running: Running) -> None:
    """Start a part on its node (made again: its old namespace goes with its old process)."""
    nodes.make(running.part.node(s))
    running.proc = subprocess.Popen(part_command(s, running.part), cwd="/",
                                    env=part_environment(s, running.part))
    running.starts += 1
    print(f"[node-start] {running.part.service} started on {running.part.node(s).address} "
          f"(pid {running.proc.pid}, start {running.starts})", file=sys.stderr, flush=True)


def stop(proc: subprocess.Popen | None) -> None:
    """Stop a process: SIGTERM, then SIGKILL after STOP_S."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(STOP_S)


def supervise(s: HubSettings, command: HubCommand) -> int:
    """Run JupyterHub and the parts until JupyterHub exits or this process is told to stop; return
    JupyterHub's exit code."""
    accounts.require_root("hub start")
    told = []

    def on_signal(signum, _frame) -> None:
        told.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    nodes.hub_down(s.node_subnet)  # what a killed run left
    nodes.hub_up(s.node_subnet, (s.port, s.hub_port))  # the proxy's and the API's: all a part may reach
    parts = [Running(p) for p in exchange_setup(s).parts(s)]
    hub = None
    try:
        hub = subprocess.Popen(command.argv, cwd=command.cwd, env=command.env)
        for running in parts:
            start_part(s, running)
        while not told and hub.poll() is None:
            now = time.monotonic()
            for running in parts:
                if running.proc is not None and running.proc.poll() is not None:
                    print(f"[node-start] {running.part.service} exited ({running.proc.returncode}); it "
                          f"starts again in {RESTART_S:g} s", file=sys.stderr, flush=True)
                    running.proc, running.exited_at = None, now
                if running.proc is None and now - running.exited_at >= RESTART_S:
                    start_part(s, running)
            time.sleep(POLL_S)
    finally:
        stop(hub)
        for running in parts:
            stop(running.proc)
        nodes.hub_down(s.node_subnet)
    return hub.returncode if hub is not None and hub.returncode is not None else 0


def main(s: HubSettings, command: HubCommand) -> None:
    """Supervise, then exit with JupyterHub's code."""
    os.chdir(command.cwd)
    sys.exit(supervise(s, command))
