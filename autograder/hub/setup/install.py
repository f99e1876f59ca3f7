"""`hub setup` and `hub add-user`: accounts, folders with their permissions, the course, the configuration."""

import ipaddress
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from autograder.csv_cells import write_rows
from autograder.hub import database
from autograder.hub.exchange import Exchange, secure_tree
from autograder.hub.settings import (
    COURSE_GRADEBOOK,
    EXCHANGES,
    LOOPBACK,
    NODES,
    WORKER_SANDBOXES,
    HubError,
    HubSettings,
)
from autograder.hub.setup import accounts
from autograder.hub.setup.accounts import GraderAccount
from autograder.hub.setup.hub_api import HubAPI
from autograder.hub.setup.parts import hub_parts
from autograder.hub.setup.render import gradebook_url, render_all, write_all
from autograder.hub.setup.roster import ROLES, Member, check_member, hub_groups, read_roster, write_roster
from autograder.hub.spawning import nodes
from autograder.hub.spawning.server_box import box_works

# The prefix of an LTI hub's accounts: a Unix name's start that leaves room for the person's name.
LTI_PREFIX = re.compile(r"^[a-z][a-z0-9_-]{0,15}$")
# A kernel's IPC socket is <runtime>/kernel-<uuid>-ipc-<n>: 107 bytes at most in all.
MAX_RUNTIME_PATH = 56
COURSE_FILES = ("source", "release")  # and nbgrader_config.py, with what write_course_config adds


@dataclass(frozen=True)
class SetupReport:
    """What `hub setup` made."""

    settings: HubSettings
    members: list[Member]
    created: list[str]  # accounts made now


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
    if s.authenticator == "dummy" and not is_loopback(s.ip):
        raise HubError("the dummy authenticator lets anyone with the shared password in; it is refused on "
                       f"{s.ip} (only a loopback address such as 127.0.0.1). Use --authenticator pam or "
                       "native.")
    if s.authenticator == "lti13":
        check_lti(s)
    if s.exchange not in EXCHANGES:
        raise HubError(f"unknown exchange {s.exchange!r}: choose {' or '.join(EXCHANGES)}")
    if s.grading_workers < 0:
        raise HubError(f"--grading-workers {s.grading_workers}: give 0 (none) or more")
    if s.grading_workers and s.exchange != "http":
        raise HubError(f"--grading-workers {s.grading_workers} needs --exchange http: workers take "
                       "submissions from the HTTP exchange service's API (the files exchange has none)")
    if s.nodes not in NODES:
        raise HubError(f"unknown --nodes {s.nodes!r}: choose {' or '.join(NODES)}")
    if s.nodes == "namespaces" and (s.exchange != "http" or s.server_box != "bwrap"):
        raise HubError("--nodes namespaces needs --exchange http (the parts share no folder: they talk over "
                       "the hub's proxy) and --server-box bwrap (each part's own mount namespace)")
    if s.nodes == "namespaces" and not shutil.which("ip"):
        raise HubError("--nodes namespaces needs iproute2's `ip` (Debian: apt-get install iproute2)")
    if s.nodes == "namespaces" and not shutil.which("nft"):
        raise HubError("--nodes namespaces needs nftables' `nft`, which filters what each node's link lets "
                       "through (Debian: apt-get install nftables)")
    if not 10 <= s.lease_s <= 24 * 3600:
        raise HubError(f"--lease-s {s.lease_s:g}: give from 10 s (a submission's grading must fit in it) "
                       "to a day")
    if s.worker_sandbox not in WORKER_SANDBOXES:
        raise HubError(f"unknown worker sandbox {s.worker_sandbox!r}: choose {', '.join(WORKER_SANDBOXES)}")
    ports = [s.port, s.hub_port, s.proxy_api_port, s.service_port,
             *([s.exchange_port] if s.exchange == "http" else [])]
    if len(set(ports)) != len(ports):
        raise HubError(f"the hub's ports must differ: public {s.port}, hub {s.hub_port}, proxy API "
                       f"{s.proxy_api_port}, formgrader service {s.service_port}"
                       + (f", exchange service {s.exchange_port}" if s.exchange == "http" else ""))
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


def find_proxy(course_source: Path) -> str:
    """Return configurable-http-proxy: the project-local one from `make hub-setup`, else the one on PATH."""
    local = course_source / ".hub" / "node_modules" / ".bin" / "configurable-http-proxy"
    if local.exists():
        return str(local)
    return shutil.which("configurable-http-proxy") or ""


def _chown_tree(path: Path, account: accounts.Account) -> None:
    for folder, dirs, files in os.walk(path):
        os.chown(folder, account.uid, account.gid)
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), account.uid, account.gid)


def install_course(s: HubSettings, grader: accounts.Account) -> None:
    """Copy the course (source/, release/, nbgrader_config.py) into the grader's course directory (0700)."""
    course, origin = s.paths.course, Path(s.course_source)
    course.mkdir(parents=True, exist_ok=True)
    copy_course(origin, course)
    write_course_config(s)
    for k in range(1, s.grading_workers + 1):  # each worker's own copy: its gradebook and graded/ are its own
        copy_course(origin, s.paths.worker_course(k))
        if (origin / "nbgrader_config.py").is_file():
            shutil.copy2(origin / "nbgrader_config.py", s.paths.worker_course(k) / "nbgrader_config.py")
    if s.nodes == "namespaces":  # the exchange's node is shown this folder only: it is there before it starts
        s.paths.exchange_store.mkdir(mode=0o700, exist_ok=True)
    _chown_tree(course, grader)
    course.chmod(0o700)


def copy_course(origin: Path, course: Path) -> None:
    """Copy the course's source/ and release/ from the course repository into a course folder."""
    course.mkdir(parents=True, exist_ok=True)
    for name in COURSE_FILES:
        if (origin / name).is_dir():
            shutil.copytree(origin / name, course / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))


def write_course_config(s: HubSettings) -> None:
    """Write the course directory's nbgrader_config.py: the course repository's, then the settings with which
    nbgrader refuses to run a submission for staff (staff_execution.py). nbgrader reads this file when a
    grader types a command in the course directory, from any shell, without the grader's configuration."""
    from autograder.hub.spawning.staff_execution import course_config_source

    origin = Path(s.course_source) / "nbgrader_config.py"
    course = origin.read_text(encoding="utf-8").rstrip("\n") + "\n\n" if origin.is_file() else ""
    if s.database_url:  # the gradebook in PostgreSQL: every nbgrader command in the course finds it there
        course += ("# Added by `hub setup --database-url`: the gradebook (the grader's queues beside it)\n"
                   f"c.CourseDirectory.db_url = {gradebook_url(s)!r}\n\n")
    # a new file put in place: whatever the folder's owner left at that name (a link) is replaced, not written
    handle, tmp = tempfile.mkstemp(dir=s.paths.course, prefix=".nbgrader_config.", suffix=".py")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(course + course_config_source(str(s.paths.root), s.course_source))
    os.chmod(tmp, 0o644)
    os.replace(tmp, s.paths.course / "nbgrader_config.py")


def keep_database_password(s: HubSettings, password_file: Path | None) -> None:
    """Put the PostgreSQL password (from a file only its owner reads, or the environment) into the hub's
    root-only password file; keep the one there when none is given."""
    given = password_file is not None or os.environ.get(database.PASSWORD_ENV)
    if not given and s.paths.database_passfile.is_file():
        return
    try:
        password = database.read_password(password_file)
    except (OSError, ValueError) as exc:
        raise HubError(str(exc)) from None
    s.paths.hub.mkdir(parents=True, exist_ok=True)
    s.paths.hub.chmod(0o700)
    database.write_passfile(s.paths.database_passfile, password)


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


def share_database_password(s: HubSettings, grader: accounts.Account) -> None:
    """Give the grader its own copy of the PostgreSQL password, in the course (0600, as the gradebook)."""
    if s.database_url:
        text = s.paths.database_passfile.read_text(encoding="utf-8")
        database.write_passfile(s.paths.grader_passfile, "", (grader.uid, grader.gid), text=text)


def make_folders(s: HubSettings) -> None:
    """Make the root (0755) and the hub's folder (0700)."""
    paths = s.paths
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.root.chmod(0o755)
    paths.hub.mkdir(exist_ok=True)
    paths.hub.chmod(0o700)
    if not paths.cli_token.exists():
        paths.cli_token.write_text(secrets.token_hex(32) + "\n")
    paths.cli_token.chmod(0o600)
    for part in hub_parts(s) if s.nodes == "namespaces" else []:  # the hub knows a part on a node by token
        token = part.token_file(s)
        if not token.exists():
            token.write_text(secrets.token_hex(32) + "\n")
        token.chmod(0o600)


def on_nodes(s: HubSettings) -> HubSettings:
    """Return the settings of a hub whose parts have nodes of their own: its network 10.X.0.0/16 (kept from
    the last setup, else a free one) and its proxy on the hub's address (unless --ip gave all of them)."""
    s = replace(s, node_subnet=s.node_subnet or nodes.claim_subnet(Path(s.root)))
    return replace(s, ip=s.hub_address) if s.ip in LOOPBACK else s


NO_HUB_AUTH = "--Authenticator.plugin_class=nbgrader.auth.NoAuthPlugin"


def secure_exchange(grader: str, exchange: Exchange) -> list[str]:
    """Make (or repair) the exchange's tree: root's, with nbgrader's modes; return a line per repair."""
    account = accounts.lookup(grader)
    if account is None:
        raise HubError(f"no grader account {grader}: run `hub setup` again")
    return secure_tree(exchange, account.uid, account.gid)


def course_gradebook(grader: GraderAccount, course_id: str, *args: str,
                     check: bool = True) -> subprocess.CompletedProcess:
    """Write students or a due date into the course gradebook as the grader account (course_gradebook.py)."""
    return grader.command(COURSE_GRADEBOOK, *args, "--course", str(grader.course),
                         "--course-id", course_id, check=check)


def write_students_csv(handle, students: list[Member], prefix: str) -> None:
    """Write students as a CSV that `nbgrader db student import` and course_gradebook.read_students read."""
    write_rows(handle, [["id", "first_name", "last_name", "email"],
                        *([m.username(prefix), *m.first_last, ""] for m in students)])


def register_students(s: HubSettings, members: list[Member]) -> None:
    """Put the students into the course gradebook (ids are their hub user names)."""
    students = [m for m in members if m.role == "student"]
    if not students:
        return
    grader = accounts.lookup(s.grader)
    assert grader is not None
    with tempfile.NamedTemporaryFile("w", suffix=".csv", dir=s.paths.course, delete=False,
                                     newline="") as handle:
        write_students_csv(handle, students, s.prefix)
    path = Path(handle.name)
    os.chown(path, grader.uid, grader.gid)
    try:
        course_gradebook(GraderAccount.of(s), s.course_id, "students", path.name)
    finally:
        path.unlink(missing_ok=True)


def configure(s: HubSettings, members: list[Member]) -> None:
    """Write hub.json, the roster and every generated configuration file."""
    s.save()
    write_roster(s.paths.roster, members)
    s.paths.roster.chmod(0o600)
    write_all(render_all(s, members))
    for folder in (s.paths.root / "etc", s.paths.student_etc, s.paths.grader_etc):
        folder.chmod(0o755)


def setup(s: HubSettings, roster: Path) -> SetupReport:
    """Make the hub: accounts, folders, course, gradebook, configuration (the LMS's part: lms.admission)."""
    accounts.require_root("hub setup")
    # Every folder and file setup makes has the mode it names, never the caller's umask (a root shell's
    # 077 would hide the students' own configuration from them), and what nbgrader and pip make is 0755 too.
    os.umask(0o022)
    s = replace(s, root=str(Path(s.root).resolve()), course_source=str(Path(s.course_source).resolve()))
    if s.authenticator == "dummy" and not s.dummy_password:
        s = replace(s, dummy_password=secrets.token_urlsafe(12))
    if s.nodes == "namespaces":
        s = on_nodes(s)
    check_settings(s)
    check_root(s)
    check_database(s)
    members = read_roster(roster, s.prefix)
    make_folders(s)
    created = []
    for member in members:
        user = member.username(s.prefix)
        if accounts.lookup(user) is None:
            created.append(user)
        accounts.ensure_account(user, member.name, s.extra_group)
    if accounts.lookup(s.grader) is None:
        created.append(s.grader)
    grader = accounts.ensure_account(s.grader, f"{s.course_id} grader", s.extra_group)
    check_python(s)
    check_server_box(s.server_box, grader)
    if s.exchange == "files":  # the HTTP exchange's service makes its own store, in the course
        secure_exchange(s.grader, Exchange(s.paths.exchange, s.course_id))
    install_course(s, grader)
    share_database_password(s, grader)
    configure(s, members)
    register_students(s, members)
    return SetupReport(s, members, created)


def enroll(s: HubSettings, member: Member) -> list[str]:
    """Add one person who is not on the roster yet: account, roster, configuration, gradebook; return what
    was done."""
    check_member(member, s.prefix)
    members = read_roster(s.paths.roster, s.prefix)
    if any(m.id == member.id for m in members):
        raise HubError(f"{member.id} is already on the roster ({s.paths.roster})")
    user = member.username(s.prefix)
    done = [f"account {user} " + ("exists" if accounts.lookup(user) else "created")]
    accounts.ensure_account(user, member.name, s.extra_group)
    members.append(member)
    configure(s, members)
    done.append("configuration rewritten")
    register_students(s, [member])
    return done


def set_role(s: HubSettings, member: Member) -> list[str]:
    """Give a person on the roster the role they have now: roster, configuration, gradebook; return what was
    done."""
    members = read_roster(s.paths.roster, s.prefix)
    old = {m.id: m.role for m in members}.get(member.id)
    configure(s, [replace(m, role=member.role) if m.id == member.id else m for m in members])
    register_students(s, [member])
    return [f"role {old} -> {member.role}"]


def add_user(s: HubSettings, member: Member) -> list[str]:
    """Add one person: account, roster, configuration, gradebook, and the running hub; return what was done.
    """
    accounts.require_root("hub add-user")
    return [*enroll(s, member), publish(s, member)]


def publish(s: HubSettings, member: Member) -> str:
    """Give the running hub the person's user and the course's groups of their role now; say what was done.

    Admin is not the command line's to give or take (the hub's API lets only admins change it): an LTI launch
    gives it, and on other hubs the configuration's admin_users at the hub's next start.
    """
    user = member.username(s.prefix)
    api = HubAPI.for_settings(s)
    if not api.up():
        return "the hub is not running: it picks the new user up when started"
    found = api.call("GET", f"/users/{user}")
    if found.status == 404 and api.call("POST", f"/users/{user}").status >= 300:
        raise HubError(f"the hub refused to add the user {user}")
    groups = set(found.body["groups"]) if found.status == 200 else set()
    wanted = hub_groups(member.role, s.course_id)
    course = {g for role in ROLES for g in hub_groups(role, s.course_id)}
    changes = [*(("POST", g) for g in wanted if g not in groups),
               *(("DELETE", g) for g in sorted(course & groups) if g not in wanted)]
    for method, group in changes:
        reply = api.call(method, f"/groups/{group}/users", {"users": [user]})
        if reply.status >= 300:
            raise HubError(f"the hub refused to change {user}'s group {group} (HTTP {reply.status})")
    said = "added to the running hub" if found.status == 404 else f"in the running hub's {member.role} groups"
    admin = found.status == 200 and found.body["admin"]
    if member.role == "instructor" and not admin:
        said += "; admin from " + ("their next launch" if s.lti else "the hub's next start")
    elif admin and member.role != "instructor":
        said += "; admin until their next launch (only an admin can take it away now)"
    return said
