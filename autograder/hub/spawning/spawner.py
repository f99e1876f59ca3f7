"""The hub's spawner: JupyterHub's LocalProcessSpawner with each server limited (limits.py) and boxed
(server_box.py).

JupyterHub's own LocalProcessSpawner accepts `c.Spawner.mem_limit` and `c.Spawner.cpu_limit` but leaves
them to the server to respect. This one puts each server, before it drops to the user's account, into a
cgroup of its own with those limits and a task cap, and logs every process the OOM killer stopped in it.
Where no cgroup can be made (no permission, no controller) it says so in the hub's log and starts the server
without limits. Each server then runs in a box of its own (private temporary folders, its own process view,
an allow-list of folders); a server that cannot be boxed is not started, unless the hub was set up with
`--server-box none`. With `--nodes namespaces` each server also has a network namespace of its own, linked
only to the hub's (nodes.py): it reaches the hub and nothing else, and no other server reaches it.

Each server's port is held for it from the moment it is chosen until the server stops (`hold_port`).
"""

import asyncio
import pwd
import socket
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Int, List, Unicode

from autograder.grading.sandbox import python_locations, student_package_folders
from autograder.hub.spawning import nodes
from autograder.hub.spawning.limits import ServerLimits, UserCgroup
from autograder.hub.spawning.server_box import BoxPlan, box_prefix


def hold_port(ip: str) -> socket.socket:
    """Return a socket bound to a free port of `ip` with SO_REUSEADDR, not listening: it holds the port.

    JupyterHub picks a server's port by binding port 0 and letting the port go; the server binds it seconds
    later (Python and Jupyter start in a box), and any process of the machine could take it in between: the
    server then failed to start. A held port is handed to no one else (neither for a bind to port 0 nor as a
    connection's local end), and the server, whose tornado sets SO_REUSEADDR too, still binds and listens on
    it."""
    sock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((ip, 0))
    except OSError:
        sock.close()
        raise
    return sock


class LimitedSpawner(LocalProcessSpawner):
    """Start each user's server inside a cgroup that holds its memory and CPU limits."""

    _held: socket.socket | None = None  # holds the server's port while it runs (hold_port)
    _held_port = 0  # the last port held for it, so that its next start holds a new one

    cgroup_prefix = "devicelab-hub"
    tasks_limit = Int(0, config=True, help="Processes and threads each server may run (0: no limit).")
    box = Unicode("bwrap", config=True, help="bwrap: each server in a box of its own; none: not boxed.")
    box_shared = List(Unicode(), config=True,
                      help="Folders shared with other accounts that a server may use (the exchange).")
    box_readable = List(Unicode(), config=True,
                        help="Folders a server may read besides Python and the course's packages.")
    node_subnet = Int(0, config=True, help="X of the hub's nodes' network 10.X.0.0/16: each server in a "
                                           "network namespace of its own (nodes.py); 0: the machine's.")

    def node(self) -> "nodes.Node | None":
        """Return this server's node in the hub's network, when servers have their own."""
        if not self.node_subnet:
            return None
        return nodes.Node(self.node_subnet, nodes.FIRST_SERVER_INDEX + self.user.id)

    def limits(self) -> ServerLimits:
        """Return this server's limits, from the standard Spawner settings."""
        return ServerLimits(int((self.mem_limit or 0) // 2**20), float(self.cpu_limit or 0), self.tasks_limit)

    def box_plan(self) -> BoxPlan:
        """Return what this user's box shows: their home, the shared folders, Python and the course's
        packages."""
        readable = [*map(Path, python_locations()), *student_package_folders(), *map(Path, self.box_readable)]
        return BoxPlan(home=Path(pwd.getpwnam(self.user.name).pw_dir),
                       shared=tuple(map(Path, self.box_shared)), readable=tuple(readable),
                       tmp_mib=self.limits().memory_mib)

    async def start(self):
        """Make the user's cgroup (limits set) and node, then start the server inside them, in its box."""
        node = self.node()
        if node is not None:
            await asyncio.to_thread(nodes.make, node)
            self.ip = node.address  # it listens there; the hub's proxy reaches it there
        else:
            self._hold_port()
        if self.box == "none":
            return await self._start_limited()
        command = self.cmd
        self.cmd = [*box_prefix(self.box_plan()), *command]
        try:
            return await self._start_limited()
        finally:
            self.cmd = command

    async def _start_limited(self):
        """Make the user's cgroup (limits set), then start the server inside it."""
        limits, self.cgroup = self.limits(), None
        self.oom_seen = 0
        if limits.any:
            self.cgroup = UserCgroup.create(f"{self.cgroup_prefix}/{self.user.name}", limits)
            if self.cgroup is None:
                self.log.warning("no cgroup for %s: the server starts without its memory and CPU limits",
                                 self.user.name)
            else:
                self.oom_seen = self.cgroup.oom_kills()
                self.log.info("%s's server: at most %d MiB, %g CPUs and %d tasks (%s)", self.user.name,
                              limits.memory_mib, limits.cpus, limits.tasks,
                              ", ".join(map(str, self.cgroup.folders)))
        return await super().start()

    def make_preexec_fn(self, name):
        """Join the user's cgroup (as root, before anything of the user's runs), then become the user."""
        become_user, cgroup, node = super().make_preexec_fn(name), getattr(self, "cgroup", None), self.node()

        def preexec() -> None:
            if node is not None:
                nodes.enter(node)
            if cgroup is not None:
                cgroup.join()
            become_user()

        return preexec

    def _hold_port(self) -> None:
        """Hold a new port for the server's start (JupyterHub then takes it as chosen), unless the hub's
        configuration chose the port (c.Spawner.port)."""
        if self.port not in (0, self._held_port):
            return
        self._release_port()
        self._held = hold_port(self.ip or "127.0.0.1")
        self.port = self._held_port = self._held.getsockname()[1]

    def _release_port(self) -> None:
        """Let go of the port held for the server (it stopped, or a new one is held for its next start)."""
        if self._held is not None:
            self._held.close()
            self._held = None

    async def poll(self):
        """Poll as LocalProcessSpawner does; log each process the OOM killer stopped in the user's cgroup."""
        status = await super().poll()
        cgroup = getattr(self, "cgroup", None)
        if cgroup is not None:
            kills = cgroup.oom_kills()
            if kills > self.oom_seen:
                self.log.warning("%s's server went over its %d MiB memory limit: the OOM killer stopped %d "
                                 "process(es) in it (its kernel; JupyterLab tells the user it died)",
                                 self.user.name, self.limits().memory_mib, kills - self.oom_seen)
                self.oom_seen = kills
        return status

    async def stop(self, now=False):
        """Stop the server as LocalProcessSpawner does, then remove its node and its cgroup."""
        await super().stop(now=now)
        self._release_port()
        node = self.node()
        if node is not None:
            await asyncio.to_thread(nodes.remove, node)
        cgroup = getattr(self, "cgroup", None)
        if cgroup is not None:
            cgroup.remove()
