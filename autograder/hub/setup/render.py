"""Write the hub's configuration files from the Jinja2 templates in autograder/hub/setup/templates/."""

import os
from dataclasses import dataclass
from pathlib import Path

import jinja2

from autograder.hub.database import part_url
from autograder.hub.exchange.http.api import STAFF_SCOPE
from autograder.hub.settings import (
    AUTOGRADE,
    GRADER_PACKAGE,
    LTI_AUTHENTICATOR,
    SPAWNER,
    HubSettings,
    grader_env,
)
from autograder.hub.setup.exchanges import exchange_setup
from autograder.hub.setup.parts import autograde_config, exchange_service, exchange_url
from autograder.hub.setup.roster import Member
from autograder.options import to_json

TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Rendered:
    """One generated file: where it goes, its text, and its mode."""

    path: Path
    text: str
    mode: int = 0o644


def _py(value) -> str:
    """Return a Python literal for a value (paths as strings, sets as sorted lists)."""
    if isinstance(value, Path):
        value = str(value)
    return repr(sorted(value) if isinstance(value, set) else value)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             autoescape=False)
    env.filters["py"] = _py
    return env


def bind_url(ip: str, port: int) -> str:
    """Return the public address the proxy listens on."""
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}/"


def hub_db_url(s: HubSettings) -> str:
    """Return JupyterHub's database URL: its schema of the PostgreSQL database, else its sqlite file."""
    if s.database_url:
        return part_url(s.database_url, "jupyterhub", s.paths.database_passfile)
    return f"sqlite:///{s.paths.hub / 'jupyterhub.sqlite'}"


def gradebook_url(s: HubSettings) -> str:
    """Return the course gradebook's URL: its schema of the PostgreSQL database, else nbgrader's file."""
    if s.database_url:
        return part_url(s.database_url, "gradebook", s.paths.grader_passfile)
    return f"sqlite:///{s.paths.course / 'gradebook.db'}"


def render_all(s: HubSettings, members: list[Member]) -> list[Rendered]:
    """Return every generated file for these settings and this roster."""
    env, paths, exchange = _environment(), s.paths, exchange_setup(s)
    parts = exchange.parts(s)
    users = {m.username(s.prefix): m for m in members}
    context = {
        "s": s,
        "paths": paths,
        "bind_url": bind_url(s.ip, s.port),
        "path": os.pathsep.join([str(s.bin_dir), "/usr/local/bin", "/usr/bin", "/bin"]),
        "users": sorted([*users, s.grader]),
        # LTI: admin follows the LMS role at each launch, so a restart must not give it back from the roster
        "admins": [] if s.authenticator == "lti13" else sorted(u for u, m in users.items()
                                                              if m.role == "instructor"),
        "formgraders": sorted([s.grader,
                               *(u for u, m in users.items() if m.role in ("instructor", "grader"))]),
        "students": sorted(u for u, m in users.items() if m.role in ("student", "instructor")),
        "grader_env": grader_env(s),
        "exchange_service": exchange_service(s),
        "exchange_url": exchange_url(s),
        "exchange": exchange,  # its fragments of the configs: templates/exchange/<name>/
        "workers": exchange.workers(s),
        "parts": parts,
        "on_nodes": s.nodes == "namespaces",
        "staff_scope": STAFF_SCOPE,
        "hub_db_url": hub_db_url(s),
        "gradebook_url": gradebook_url(s),
        "AUTOGRADE": AUTOGRADE,
        "autograde_config": autograde_config(s),
        "spawner": SPAWNER,
        "lti_authenticator": LTI_AUTHENTICATOR,
        "grader_package": GRADER_PACKAGE,
    }

    def one(template: str, path: Path, mode: int = 0o644) -> Rendered:
        return Rendered(path, env.get_template(template).render(context), mode)

    return [
        one("jupyterhub_config.py.j2", paths.config, 0o600),
        one("nbgrader_student.py.j2", paths.student_etc / "nbgrader_config.py"),
        one("jupyter_server_student.py.j2", paths.student_etc / "jupyter_server_config.py"),
        one("page_config_student.json.j2", paths.student_etc / "labconfig" / "page_config.json"),
        one("nbgrader_grader.py.j2", paths.grader_etc / "nbgrader_config.py"),
        one("jupyter_server_grader.py.j2", paths.grader_etc / "jupyter_server_config.py"),
        one("page_config_grader.json.j2", paths.grader_etc / "labconfig" / "page_config.json"),
        # the settings of what the hub starts beside JupyterHub (part_settings.py): each reads its own file
        Rendered(autograde_config(s), to_json(exchange.autograde_settings(s))),
        *(Rendered(part.config_file, to_json(part.settings)) for part in parts),
    ]


def make_readable_folders(folder: Path, mode: int = 0o755) -> None:
    """Make `folder` and its missing parents with `mode`, whatever the umask (mkdir masks its mode)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    for p in reversed(missing):
        p.mkdir(exist_ok=True)
        p.chmod(mode)


def write_all(files: list[Rendered]) -> None:
    """Write the files (folders made 0755), replacing each one atomically."""
    for f in files:
        make_readable_folders(f.path.parent)
        tmp = f.path.with_name(f.path.name + ".tmp")
        tmp.write_text(f.text, encoding="utf-8")
        tmp.chmod(f.mode)
        tmp.replace(f.path)
