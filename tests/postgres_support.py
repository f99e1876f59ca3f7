"""A throwaway PostgreSQL cluster on loopback for the tests: Debian's server, run as an unprivileged account.

`initdb` makes a cluster in a temporary folder, `pg_ctl` starts it on a free loopback port (its Unix socket in
that folder, password logins only over TCP), a role and a database are made for the test, and afterwards the
server is stopped and the folder removed. Without a PostgreSQL server the tests skip; under CI=true they fail.
"""

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder.hub.database import DRIVER
from tests.hub_support import free_port, release_port

SERVER_ACCOUNT = "postgres"  # Debian's; root cannot run a PostgreSQL server


@dataclass(frozen=True)
class Postgres:
    """A running cluster, and the role and database made for the test."""

    port: int
    role: str
    password: str
    database: str
    folder: Path  # the cluster, its socket and its log

    @property
    def url(self) -> str:
        """Return the database's URL without the password (as hub.json holds it)."""
        return f"postgresql://{self.role}@127.0.0.1:{self.port}/{self.database}"

    @property
    def url_with_password(self) -> str:
        """Return the database's URL with the password (for the tests' own connections)."""
        return f"{DRIVER}://{self.role}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def new_database(self, with_password: bool = True) -> str:
        """Make an empty database of the role's (one per test); return its URL, with the password or, as
        `hub setup --database-url` takes it, without."""
        name = f"t_{secrets.token_hex(6)}"
        self.sql(f"CREATE DATABASE {name}", autocommit=True)
        if not with_password:
            return f"postgresql://{self.role}@127.0.0.1:{self.port}/{name}"
        return f"{DRIVER}://{self.role}:{self.password}@127.0.0.1:{self.port}/{name}"

    def with_password(self, url: str) -> str:
        """Return a URL without the password (as hub.json holds it) with it, for the tests' queries."""
        return url.replace("postgresql://", f"{DRIVER}://", 1).replace(f"{self.role}@",
                                                                        f"{self.role}:{self.password}@", 1)

    def password_file(self, folder: Path) -> Path:
        """Write the password into a file only its owner can read (as `--database-password-file` wants)."""
        path = folder / "database-password"
        path.touch(mode=0o600)
        path.write_text(self.password + "\n")
        return path

    def sql(self, statement: str, autocommit: bool = False, url: str = "") -> list[tuple]:
        """Run one statement as the test's role (in its database, or `url`'s); return its rows."""
        from sqlalchemy import create_engine, text

        engine = create_engine(url or self.url_with_password,
                               **({"isolation_level": "AUTOCOMMIT"} if autocommit else {}))
        try:
            with engine.begin() as conn:
                result = conn.execute(text(statement))
                return [tuple(r) for r in result] if result.returns_rows else []
        finally:
            engine.dispose()


def server_bin() -> Path | None:
    """Return the folder of PostgreSQL's server programs (initdb, pg_ctl), None when there are none."""
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),  # Debian's, newest first
                      key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    found = versions[-1] if versions else shutil.which("pg_ctl")
    return Path(os.path.realpath(found)).parent if found else None


def postgres_or_skip() -> Path:
    """Return the server's folder; skip when there is no server or no account to run it (CI: fail)."""
    reason = None
    folder = server_bin()
    if folder is None:
        reason = "no PostgreSQL server (apt-get install postgresql)"
    elif os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_ACCOUNT)
        except KeyError:
            reason = f"root cannot run PostgreSQL and there is no {SERVER_ACCOUNT} account to run it as"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {reason}")
        pytest.skip(reason)
    return folder


def _as_server(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a server program as the cluster's owner (root: as the postgres account; else as oneself)."""
    if os.geteuid() == 0:
        argv = ["runuser", "-u", SERVER_ACCOUNT, "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, check=False, cwd="/", **kwargs)


@contextlib.contextmanager
def postgres_cluster() -> Iterator[Postgres]:
    """Start a cluster for the block (a role and a database with a random password); remove it afterwards."""
    bindir = postgres_or_skip()
    folder = Path(tempfile.mkdtemp(prefix="dlpg-"))
    if os.geteuid() == 0:
        account = pwd.getpwnam(SERVER_ACCOUNT)
        os.chown(folder, account.pw_uid, account.pw_gid)
    data, port = folder / "data", free_port()
    role, database, password = "devicelab", "devicelab", secrets.token_urlsafe(18)
    started = False
    try:
        made = _as_server([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth-local=peer",
                           "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8"])
        if made.returncode != 0:
            _fail(f"initdb failed: {made.stderr[-2000:]}")
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off"
        start = _as_server([str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                            str(folder / "server.log"), "-w", "-t", "60", "start"])
        started = True
        if start.returncode != 0:
            server_log = folder / "server.log"
            log = server_log.read_text(errors="replace") if server_log.exists() else ""
            _fail(f"pg_ctl start failed: {start.stderr[-1000:]}\n{log[-2000:]}")
        psql = [str(bindir / "psql"), "-h", str(folder), "-p", str(port), "-U", "postgres", "-d", "postgres",
                "-v", "ON_ERROR_STOP=1", "-q"]
        for statement in (f"CREATE ROLE {role} LOGIN CREATEDB PASSWORD '{password}'",
                          f"CREATE DATABASE {database} OWNER {role}"):
            done = _as_server([*psql, "-c", statement])
            if done.returncode != 0:
                _fail(f"{statement.split(' PASSWORD')[0]} failed: {done.stderr}")
        yield Postgres(port, role, password, database, folder)
    finally:
        if started:
            _as_server([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(folder, ignore_errors=True)
        release_port(port)


def _fail(message: str) -> None:
    """A server that is there but does not start fails the test, everywhere."""
    pytest.fail(f"PostgreSQL: {message}")
