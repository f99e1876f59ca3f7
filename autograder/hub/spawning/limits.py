"""Memory, CPU and task limits for each student's server, held by the kernel's cgroups.

Each user's server gets a cgroup of its own under the hub's, with a memory limit (swap included where the
kernel accounts it), a CPU quota and a cap on processes and threads (pids.max: past it, fork and
pthread_create fail in that server only, so one student cannot take every process id of the machine); the
server joins it before it drops to the user's account, so
everything it starts (kernels, terminals, their children) is inside. Past the memory limit the kernel's OOM
killer stops the largest process of that cgroup only: the student's kernel, which JupyterLab reports as
died and restarts. No other student's server is touched. Both cgroup layouts are handled: v2 (one
unified tree: memory.max, cpu.max, pids.max) and v1 (the memory, cpu and pids controllers:
memory.limit_in_bytes, cpu.cfs_quota_us, pids.max). Where systemd manages the machine,
jupyterhub-systemdspawner does the same job with
systemd's own units (as The Littlest JupyterHub does); this module is for machines without it.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


@dataclass(frozen=True)
class ServerLimits:
    """What one student's server may use (0: no limit)."""

    memory_mib: int = 0
    cpus: float = 0.0
    tasks: int = 0  # processes and threads

    @property
    def any(self) -> bool:
        """Return True when there is a limit to enforce."""
        return self.memory_mib > 0 or self.cpus > 0 or self.tasks > 0


def _own_path(controller: str) -> str:
    """Return this process's cgroup path for a v1 controller ("" for v2's unified tree)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller == "" and names == "") or controller in names.split(","):
            return path.lstrip("/")
    return ""


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass(frozen=True)
class UserCgroup:
    """The cgroup folders (one on v2; memory and cpu on v1) that hold one user's server."""

    folders: tuple[Path, ...]
    unified: bool

    @classmethod
    def create(cls, name: str, limits: ServerLimits, fs: Path = CGROUP_FS) -> "UserCgroup | None":
        """Make the user's cgroup under this process's own and set its limits; None where not permitted."""
        try:
            if (fs / "cgroup.controllers").exists():
                return cls._create_v2(name, limits, fs)
            return cls._create_v1(name, limits, fs)
        except OSError:
            return None

    @classmethod
    def _create_v2(cls, name: str, limits: ServerLimits, fs: Path) -> "UserCgroup":
        parent = fs / _own_path("")
        wanted = [c for c, on in (("memory", limits.memory_mib), ("cpu", limits.cpus), ("pids", limits.tasks))
                  if on]
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        folder = parent / name
        folder.mkdir(parents=True, exist_ok=True)
        if limits.memory_mib:
            _write(folder / "memory.max", str(limits.memory_mib << 20))
            if (folder / "memory.swap.max").exists():
                _write(folder / "memory.swap.max", "0")
        if limits.cpus:
            _write(folder / "cpu.max", f"{int(limits.cpus * PERIOD_US)} {PERIOD_US}")
        if limits.tasks:
            _write(folder / "pids.max", str(limits.tasks))
        return cls((folder,), True)

    @classmethod
    def _create_v1(cls, name: str, limits: ServerLimits, fs: Path) -> "UserCgroup":
        folders = []
        if limits.memory_mib:
            folder = fs / "memory" / _own_path("memory") / name
            folder.mkdir(parents=True, exist_ok=True)
            _write(folder / "memory.limit_in_bytes", str(limits.memory_mib << 20))
            if (folder / "memory.memsw.limit_in_bytes").exists():  # swap counted too, where accounted
                _write(folder / "memory.memsw.limit_in_bytes", str(limits.memory_mib << 20))
            folders.append(folder)
        if limits.cpus:
            folder = fs / "cpu" / _own_path("cpu") / name
            folder.mkdir(parents=True, exist_ok=True)
            _write(folder / "cpu.cfs_period_us", str(PERIOD_US))
            _write(folder / "cpu.cfs_quota_us", str(int(limits.cpus * PERIOD_US)))
            folders.append(folder)
        if limits.tasks:
            folder = fs / "pids" / _own_path("pids") / name
            folder.mkdir(parents=True, exist_ok=True)
            _write(folder / "pids.max", str(limits.tasks))
            folders.append(folder)
        return cls(tuple(folders), False)

    def join(self, pid: int = 0) -> None:
        """Move a process (by default this one) into every folder; its future children follow."""
        for folder in self.folders:
            _write(folder / "cgroup.procs", str(pid or os.getpid()))

    def members(self) -> set[int]:
        """Return the processes inside."""
        found: set[int] = set()
        for folder in self.folders:
            found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
        return found

    def refused_tasks(self) -> int:
        """Return how many forks and new threads the task cap has refused."""
        return self._counted("max", ("pids.events",))

    def oom_kills(self) -> int:
        """Return how many processes the OOM killer has stopped in this cgroup."""
        return self._counted("oom_kill", ("memory.events", "memory.oom_control"))

    def _counted(self, key: str, files: tuple[str, ...]) -> int:
        """Return the `key N` count of the first of these event files that has it (0 when none does)."""
        for folder in self.folders:
            for name in files:
                path = folder / name
                if path.exists():
                    found = re.search(rf"^{key} (\d+)$", path.read_text(), flags=re.MULTILINE)
                    if found:
                        return int(found.group(1))
        return 0

    def remove(self) -> None:
        """Remove the folders once nothing runs in them (a folder still in use stays)."""
        for folder in self.folders:
            try:
                folder.rmdir()
            except OSError:
                pass
