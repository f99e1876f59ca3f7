"""What `hub setup` checks before it changes anything: the settings, root, the LMS, the database, and that
every account can run the hub's Python and its server box."""


import ipaddress
import os
import re
import shutil
import socket
from pathlib import Path
from urllib.parse import urlsplit

from autograder.hub import database
from autograder.hub.settings import (
    LOOPBACK,
    HubError,
    HubSettings,
)
from autograder.hub.setup import accounts
from autograder.hub.setup.exchanges import exchange_setup
from autograder.hub.spawning.server_box import box_works
from autograder.options import problems

# The prefix of an LTI hub's accounts: a Unix name's start that leaves room for the person's name.
LTI_PREFIX = re.compile(r"^[a-z][a-z0-9_-]{0,15}$")


# A kernel's IPC socket is <runtime>/kernel-<uuid>-ipc-<n>: 107 bytes at most in all.
MAX_RUNTIME_PATH = 56


def is_loopback(ip: str) -> bool:
    """Return whether the address only this machine can reach."""
    if ip in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(ip)).is_loopback
        except (OSError, ValueError):
            return False


def check_settings(s: HubSettings) -> None:
    """Refuse settings that would be unsafe or cannot work."""
    wrong = problems(s)  # each setting's own choices and check (HubSettings)
    if wrong:
        raise HubError("; ".join(wrong))
    if s.authenticator == "dummy" and not is_loopback(s.ip):
        raise HubError("the dummy authenticator lets anyone with the shared password in; it is refused on "
                       f"{s.ip} (only a loopback address such as 127.0.0.1). Use --authenticator pam or "
                       "native.")
    if s.authenticator == "lti13":
        check_lti(s)
    exchange = exchange_setup(s)
    wrong = exchange.problems(s)
    if wrong:
        raise HubError("; ".join(wrong))
    if s.nodes == "namespaces" and s.server_box != "bwrap":
        raise HubError("--nodes namespaces needs --server-box bwrap (each part's own mount namespace)")
    if s.nodes == "namespaces" and not shutil.which("ip"):
        raise HubError("--nodes namespaces needs iproute2's `ip` (Debian: apt-get install iproute2)")
    if s.nodes == "namespaces" and not shutil.which("nft"):
        raise HubError("--nodes namespaces needs nftables' `nft`, which filters what each node's link lets "
                       "through (Debian: apt-get install nftables)")
    ports = {"public": s.port, "hub": s.hub_port, "proxy API": s.proxy_api_port,
             "formgrader service": s.service_port, **exchange.ports(s)}
    if len(set(ports.values())) != len(ports):
        raise HubError("the hub's ports must differ: "
                       + ", ".join(f"{what} {port}" for what, port in ports.items()))
    if not (Path(s.bin_dir) / "jupyterhub").exists():
        raise HubError(f"no jupyterhub in {s.bin_dir}: install the hub extra (pip install -e '.[hub]')")
    if not s.proxy or not os.access(s.proxy, os.X_OK):
        raise HubError(f"configurable-http-proxy not found{f' at {s.proxy}' if s.proxy else ''}: run `make "
                       "hub-proxy` (npm) or pass --proxy")


def check_root(s: HubSettings) -> None:
    """Refuse a root so long that the grader service's kernels could not make their IPC sockets in it."""
    if len(str(s.paths.grader_runtime)) > MAX_RUNTIME_PATH:
        raise HubError(f"--root {s.root} is too long: the grader service's kernels put their sockets in "
                       f"{s.paths.grader_runtime}, and a socket's path must fit in 107 bytes; choose a root "
                       f"of at most {MAX_RUNTIME_PATH - len('/course/.runtime')} characters")


def check_lti(s: HubSettings) -> None:
    """Refuse an LTI 1.3 setup without the platform's values or with URLs that are not http(s)."""
    lti = s.lti
    if lti is None:
        raise HubError("--authenticator lti13 needs --lti-issuer, --lti-client-id, --lti-deployment-id, "
                       "--lti-keyset-url and --lti-authorize-url (docs/lms.md)")
    missing = [name for name in ("issuer", "client_id", "deployment_id", "keyset_url", "authorize_url")
               if not getattr(lti, name)]
    if missing:
        raise HubError("--authenticator lti13 needs " + ", ".join(f"--lti-{m.replace('_', '-')}"
                                                                 for m in missing))
    if not lti.context_id:
        raise HubError("--authenticator lti13 needs --lti-context-id, the LMS course's context id (Moodle: "
                       "the course's id; Canvas: its lti_context_id, from /api/v1/courses/ID?include[]="
                       "lti_context_id): a launch from any other course is refused, and logged with its id")
    if not LTI_PREFIX.match(s.prefix):
        raise HubError(f"--authenticator lti13 needs --prefix (e.g. dl-; {s.prefix!r} is not one): lowercase "
                       "letters, digits, - or _, starting with a letter, at most 16 characters. Accounts of "
                       "LMS people are made under it only, so that no launch is ever given a system or staff "
                       "account")
    for name in ("keyset_url", "authorize_url", "token_url"):
        url = getattr(lti, name)
        if url and not url.startswith("https://") and not (url.startswith("http://")
                                                           and is_loopback(_host(url))):
            raise HubError(f"--lti-{name.replace('_', '-')} must be an https:// URL (http:// only on "
                           f"loopback): {url}")


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


# The hub's packages imported; the kernel's (devicelab imports torch: 2 s more) found and readable.
IMPORTS_CHECK = ("import importlib.util, jupyterhub, nbgrader, autograder\n"
                 "for name in ('devicelab', 'torch'):\n"
                 "    open(importlib.util.find_spec(name).origin, 'rb').close()")


def check_python(s: HubSettings) -> None:
    """Raise HubError unless the grader account can run the Python environment and import the hub's packages.
    """
    done = accounts.run_as(s.grader, [s.python, "-c", IMPORTS_CHECK], cwd=Path("/"),
                           env={}, check=False)
    if done.returncode != 0:
        raise HubError(f"other accounts cannot use {s.python} "
                       f"({(done.stderr or done.stdout).strip()[-300:]}). Every user's server runs it: make "
                       "the environment from a Python all accounts can run, e.g. python3 -m venv "
                       "/opt/devicelab && /opt/devicelab/bin/pip install -e . -e './grader[hub]', then pass "
                       "--python /opt/devicelab/bin/python")


def check_server_box(box: str, account: accounts.Account) -> None:
    """Raise HubError unless an account of the hub can start its server in a box (bubblewrap, as itself)."""
    if box == "none":
        return
    problem = box_works(account.home, account.name)
    if problem is not None:
        raise HubError(f"servers cannot be boxed here ({problem}): install bubblewrap and allow "
                       "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), or pass "
                       "--server-box none to run servers unisolated (SECURITY.md says what that gives up)")


def check_database(s: HubSettings) -> None:
    """Refuse a PostgreSQL URL that holds a password or that the hub cannot reach; make each part's schema."""
    if not s.database_url:
        return
    try:
        database.check_database_url(s.database_url)
    except ValueError as exc:
        raise HubError(str(exc)) from None
    if not s.paths.database_passfile.is_file():
        raise HubError("--database-url needs its password: --database-password-file FILE (readable by its "
                       f"owner only) or {database.PASSWORD_ENV}")
    from sqlalchemy.exc import SQLAlchemyError

    try:
        database.create_schemas(database.part_url(s.database_url, "jupyterhub", s.paths.database_passfile))
    except ImportError as exc:
        raise HubError(f"{exc}: install the hub extra (psycopg2-binary)") from None
    except SQLAlchemyError as exc:  # cannot connect, refused, no such database or role
        raise HubError(f"cannot use the database {s.database_url}: {str(exc).strip()[-300:]}") from None
