"""Unix accounts: one per hub user, made and removed with useradd/userdel; commands run as them with runuser.
"""

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from autograder.hub.settings import HubError, HubSettings, grader_env

LOGIN_DEFS = Path("/etc/login.defs")


@dataclass(frozen=True)
class Account:
    """A Unix account as the hub uses it."""

    name: str
    uid: int
    gid: int
    home: Path


def lookup(name: str) -> Account | None:
    """Return the account, or None when there is none of that name."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def uid_range(login_defs: Path = LOGIN_DEFS) -> tuple[int, int]:
    """Return the uids useradd gives new accounts (UID_MIN, UID_MAX of login.defs; 1000, 60000 by default)."""
    found = {"UID_MIN": 1000, "UID_MAX": 60000}
    try:
        lines = login_defs.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] in found and words[1].isdigit():
            found[words[0]] = int(words[1])
    return found["UID_MIN"], found["UID_MAX"]


def not_the_hubs(account: Account, prefix: str, uids: tuple[int, int]) -> str:
    """Return why the account cannot be one the hub made (a system account, outside its prefix); "" if it can.
    """
    if not uids[0] <= account.uid <= uids[1]:
        return f"a system account (uid {account.uid}, outside {uids[0]}-{uids[1]})"
    if not prefix or not account.name.startswith(prefix):
        return f"outside the hub's prefix {prefix!r}"
    return ""


def require_root(what: str) -> None:
    """Raise HubError unless this process is root (accounts, spawning servers as other users)."""
    if os.geteuid() != 0:
        raise HubError(f"{what} needs root (it makes Unix accounts and runs servers as them); run it with "
                       "sudo")


def ensure_account(name: str, comment: str = "", group: str = "") -> Account:
    """Make the account with a private home (0700) if it does not exist, in `group` too if given; return it.
    """
    account = lookup(name)
    if account is None:
        if shutil.which("useradd") is None:
            raise HubError("useradd is missing (Debian/Ubuntu: apt-get install passwd)")
        command = ["useradd", "--create-home", "--shell", "/bin/bash", "--user-group"]
        comment = " ".join("".join(c if c.isprintable() and c != ":" else " " for c in comment).split())
        if comment:
            command += ["--comment", comment]
        done = subprocess.run([*command, name], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise HubError(f"useradd {name} failed: {done.stderr.strip()}")
        account = lookup(name)
        assert account is not None
    if group:
        done = subprocess.run(["usermod", "--append", "--groups", group, name], capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            raise HubError(f"cannot add {name} to the group {group}: {done.stderr.strip()}")
    account.home.mkdir(parents=True, exist_ok=True)
    os.chown(account.home, account.uid, account.gid)
    account.home.chmod(0o700)
    return account


def remove_account(name: str) -> None:
    """Remove the account, its home and its processes (nothing happens when there is none)."""
    account = lookup(name)
    if account is None:
        return
    for pid in _pids_of(account.uid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["userdel", "--remove", "--force", name], capture_output=True, check=False)


def _pids_of(uid: int) -> list[int]:
    """Return the processes running as this user id."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
    return pids


def set_password(name: str, password: str) -> None:
    """Set the account's Unix password (what PAM checks at the hub's login page)."""
    done = subprocess.run(["chpasswd"], input=f"{name}:{password}\n", capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise HubError(f"chpasswd for {name} failed: {done.stderr.strip()}")


def as_account(name: str, command: list[str], env: dict[str, str]) -> list[str]:
    """Return the command line that runs `command` as the account (runuser, a login-less switch), with exactly
    the environment given besides its HOME, USER, LOGNAME and LANG."""
    account = lookup(name)
    if account is None:
        raise HubError(f"no Unix account {name}")
    base = {"HOME": str(account.home), "USER": name, "LOGNAME": name, "LANG": "C.UTF-8"}
    return ["runuser", "-u", name, "--", "env", "-i", *(f"{k}={v}" for k, v in {**base, **env}.items()),
            *command]


def run_as(name: str, command: list[str], *, cwd: Path, env: dict[str, str], timeout: float | None = None,
           check: bool = True) -> subprocess.CompletedProcess:
    """Run a command as the account (runuser, a login-less switch), with exactly the environment given."""
    full = as_account(name, command, env)
    done = subprocess.run(full, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-12:]
        raise HubError(f"{' '.join(command[:3])} ... as {name} failed (exit {done.returncode}):\n"
                       + "\n".join(tail))
    return done


@dataclass(frozen=True)
class GraderAccount:
    """The course's grader account as root's commands run programs as it: in the course folder, with the
    grader's environment and the hub's Python."""

    name: str
    python: str
    course: Path
    env: dict[str, str]

    @classmethod
    def of(cls, s: HubSettings) -> "GraderAccount":
        """Return the grader account of a hub."""
        return cls(s.grader, s.python, s.paths.course, grader_env(s))

    def run(self, command: list[str], timeout: float | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        """Run a command as the grader account in the course folder (HubError when it fails, with check)."""
        return run_as(self.name, command, cwd=self.course, env=self.env, timeout=timeout, check=check)

    def command(self, name: str, *args: str, timeout: float | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
        """Run one of the hub's installed commands (settings.COMMANDS) as the grader account in the course
        folder, from the hub's environment."""
        return self.run([str(Path(self.python).parent / name), *args], timeout, check)
