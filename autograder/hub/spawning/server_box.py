"""Each person's server in a box of its own: bubblewrap around the single-user server, as the account itself.

What the box gives the server and everything it starts (kernels, terminals, their children):

- a private `/tmp`, `/var/tmp` and `/dev/shm` (tmpfs, counted against the server's memory limit, gone with the
  server), so no file with a predictable name in a shared temporary folder (compiler and kernel caches,
  matplotlib's, Jupyter's runtime files) can be planted for, or read from, anyone else;
- its own PID namespace and `/proc`: no other account's processes, their argv or environment are visible;
- its own IPC namespace (System V and POSIX message queues);
- an allow-list of folders: the system's own, read-only (sandbox.SYSTEM_FOLDERS), Python and the course's
  packages, read-only, the account's own home, and the shared folders the hub names (the exchange), whose
  Unix modes still apply. No other home, no `/run/lock`, no other world-writable folder is there;
- Jupyter's runtime folder inside the private `/tmp`, where its kernels' IPC sockets lie (the student's
  server config puts kernels on IPC transport: no TCP port on loopback for anyone to subscribe to).

It runs with the account's own rights (an unprivileged user namespace, no capabilities). Where systemd runs
the machine, jupyterhub-systemdspawner gives the same with PrivateTmp and friends; this is for machines
without it, and for the hub's tests.
"""

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from autograder.grading.sandbox import SYSTEM_FOLDERS, system_roots

PRIVATE_TEMPORARY = ("/tmp", "/var/tmp", "/dev/shm")
RUNTIME_DIR = "/tmp/jupyter-runtime"  # short: a Unix socket's path must fit in 107 bytes
GPU_DEVICES = ("/dev/nvidia*", "/dev/dri")
RESOLVER = "/run/systemd/resolve"  # where /etc/resolv.conf leads on systemd-resolved machines


class BoxUnavailable(RuntimeError):
    """The box cannot be made on this machine; the message says why."""


@dataclass(frozen=True)
class BoxPlan:
    """What one server's box shows: its home (writable), shared folders, read-only folders, tmpfs size."""

    home: Path
    shared: tuple[Path, ...] = ()  # writable where the folder's own modes allow (the exchange)
    readable: tuple[Path, ...] = ()  # Python, the course's packages, the server's Jupyter config
    tmp_mib: int = 0  # each private tmpfs's size (0: the kernel's default); its pages count as memory anyway


def box_prefix(plan: BoxPlan, size_option: bool = True) -> list[str]:
    """Return the bubblewrap command line that runs a server in the box (the server's argv follows it)."""
    args = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", *system_roots(), "--dev", "/dev", "--proc", "/proc"]
    for folder in PRIVATE_TEMPORARY:
        size = ["--size", str(plan.tmp_mib << 20)] if size_option and plan.tmp_mib else []
        args += ["--perms", "0700", *size, "--tmpfs", folder]
    for device in sorted(d for pattern in GPU_DEVICES for d in glob.glob(pattern)):
        args += ["--dev-bind-try", device, device]
    if Path(RESOLVER).is_dir():
        args += ["--ro-bind", RESOLVER, RESOLVER]
    shown = [p for p in plan.readable if not _under(p, SYSTEM_FOLDERS)]
    for path in sorted(set(shown), key=lambda p: (len(p.parts), str(p))):
        args += ["--ro-bind-try", str(path), str(path)]
    for path in (plan.home, *plan.shared):
        args += ["--bind", str(path), str(path)]
    return [*args, "--setenv", "JUPYTER_RUNTIME_DIR", RUNTIME_DIR, "--chdir", str(plan.home), "--"]


def _under(path: Path, roots: tuple[str, ...]) -> bool:
    return any(path == Path(r) or Path(r) in path.parents for r in roots)


def box_works(home: Path, as_user: str | None = None) -> str | None:
    """Return None when an account (by default this one) can start a box around `home`, else what is wrong."""
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    plan = BoxPlan(home=home)
    runner = ["runuser", "-u", as_user, "--"] if as_user and os.geteuid() == 0 else []
    try:
        done = subprocess.run([*runner, *box_prefix(plan, size_option=False), "/bin/true"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    return None
