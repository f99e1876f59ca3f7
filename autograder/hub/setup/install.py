"""`hub setup`: accounts, folders with their permissions, the course, the configuration (its checks:
checks.py; the gradebook's students: students.py; one person later: members.py)."""

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from autograder.hub import database
from autograder.hub.exchange.folder.tree import Exchange, secure_tree
from autograder.hub.settings import (
    LOOPBACK,
    HubError,
    HubSettings,
)
from autograder.hub.setup import accounts
from autograder.hub.setup.checks import (
    check_database,
    check_python,
    check_root,
    check_server_box,
    check_settings,
)
from autograder.hub.setup.exchanges import exchange_setup
from autograder.hub.setup.render import gradebook_url, render_all, write_all
from autograder.hub.setup.roster import Member, read_roster, write_roster
from autograder.hub.setup.students import register_students
from autograder.hub.spawning import nodes

COURSE_FILES = ("source", "release")  # and nbgrader_config.py, with what write_course_config adds


@dataclass(frozen=True)
class SetupReport:
    """What `hub setup` made."""

    settings: HubSettings
    members: list[Member]
    created: list[str]  # accounts made now


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
    for worker in exchange_setup(s).workers(s):  # each one's own copy: its gradebook and graded/ are its own
        copy_course(origin, worker.folder)
        if (origin / "nbgrader_config.py").is_file():
            shutil.copy2(origin / "nbgrader_config.py", worker.folder / "nbgrader_config.py")
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
        out.write(course + course_config_source(str(s.paths.root)))
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
    # the hub knows a part on a node by its token
    for part in exchange_setup(s).parts(s) if s.nodes == "namespaces" else []:
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


def configure(s: HubSettings, members: list[Member]) -> None:
    """Write hub.json, the roster and every generated configuration file."""
    s.save()
    write_roster(s.paths.roster, members)
    s.paths.roster.chmod(0o600)
    write_all(render_all(s, members))
    for folder in (s.paths.root / "etc", s.paths.student_etc, s.paths.grader_etc):
        folder.chmod(0o755)


def setup(s: HubSettings, roster: Path, prepare_exchange: Callable[[HubSettings], object]) -> SetupReport:
    """Make the hub: accounts, folders, course, gradebook, configuration (the LMS's part: lms.admission);
    `prepare_exchange` makes the exchange's own place once the grader account exists (the `prepare` of the
    backend's StaffExchange, which setup/exchanges.py names)."""
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
    prepare_exchange(s)
    install_course(s, grader)
    share_database_password(s, grader)
    configure(s, members)
    register_students(s, members)
    return SetupReport(s, members, created)


