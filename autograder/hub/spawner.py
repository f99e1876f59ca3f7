"""The hub's spawner: JupyterHub's LocalProcessSpawner with `mem_limit` and `cpu_limit` enforced (limits.py).

JupyterHub's own LocalProcessSpawner accepts `c.Spawner.mem_limit` and `c.Spawner.cpu_limit` but leaves
them to the server to respect. This one puts each server, before it drops to the user's account, into a
cgroup of its own with those limits, and logs every process the OOM killer stopped in it. Where no cgroup
can be made (no permission, no controller) it says so in the hub's log and starts the server without limits.
"""

from jupyterhub.spawner import LocalProcessSpawner

from autograder.hub.limits import ServerLimits, UserCgroup


class LimitedSpawner(LocalProcessSpawner):
    """Start each user's server inside a cgroup that holds its memory and CPU limits."""

    cgroup_prefix = "devicelab-hub"

    def limits(self) -> ServerLimits:
        """Return this server's limits, from the standard Spawner settings."""
        return ServerLimits(int((self.mem_limit or 0) // 2**20), float(self.cpu_limit or 0))

    async def start(self):
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
                self.log.info("%s's server: at most %d MiB and %g CPUs (%s)", self.user.name,
                              limits.memory_mib, limits.cpus, ", ".join(map(str, self.cgroup.folders)))
        return await super().start()

    def make_preexec_fn(self, name):
        """Join the user's cgroup (as root, before anything of the user's runs), then become the user."""
        become_user, cgroup = super().make_preexec_fn(name), getattr(self, "cgroup", None)

        def preexec() -> None:
            if cgroup is not None:
                cgroup.join()
            become_user()

        return preexec

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
        """Stop the server as LocalProcessSpawner does, then remove its cgroup."""
        await super().stop(now=now)
        cgroup = getattr(self, "cgroup", None)
        if cgroup is not None:
            cgroup.remove()
