"""Where the hub keeps its tables: sqlite files on one machine, or one PostgreSQL database for a cluster.

hub.json's `database_url` names the PostgreSQL database and its role (postgresql://ROLE@HOST:PORT/DATABASE),
never the password. Each part of the hub (JupyterHub, the course gradebook, the autograde queue, the passback
queue, the exchange service's leases) has a schema of its own in that database, chosen by its URL's
search_path, and reads the password from a libpq password file its account alone can read, named in the URL
(`passfile=`): a configuration file that names the database never holds the secret. An empty `database_url`
keeps each part in its own sqlite file. The tables of the hub's own parts are in stores/: models,
migrations, and the transaction of one writer at a time.
"""

import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

PARTS = ("jupyterhub", "gradebook", "autograde", "passback", "exchange")
PASSWORD_ENV = "DEVICELAB_DATABASE_PASSWORD"
# psycopg2, named: SQLAlchemy 2.1 takes a bare postgresql:// for psycopg 3, 1.4 and 2.0 for psycopg2
DRIVER = "postgresql+psycopg2"


def check_database_url(url: str) -> None:
    """Raise ValueError unless the URL names a PostgreSQL database and role, and no password."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgresql+psycopg2"):
        raise ValueError(f"--database-url must be a postgresql:// URL (or empty: sqlite files), not {url!r}")
    if parts.password is not None:
        raise ValueError("--database-url must not hold the password (hub.json and the generated "
                         "configuration would show it): give it with --database-password-file or "
                         f"{PASSWORD_ENV}")
    if not parts.username or not parts.hostname or not parts.path.strip("/"):
        raise ValueError(f"--database-url needs a role, a host and a database: postgresql://ROLE@HOST:PORT/"
                         f"DATABASE, not {url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"--database-url takes no query ({parts.query!r}): the hub adds each part's own")


def part_url(database_url: str, part: str, passfile: Path) -> str:
    """Return the SQLAlchemy URL of one part of the hub (its schema, the password file of its reader)."""
    if part not in PARTS:
        raise ValueError(f"no part {part!r} of the hub's database (have: {', '.join(PARTS)})")
    parts = urlsplit(database_url)
    query = urlencode({"passfile": str(passfile), "options": f"-csearch_path={part}"}, safe="/=")
    return f"{DRIVER}://{parts.netloc}{parts.path}?{query}"


def sibling_part(url: str, part: str) -> str:
    """Return the URL of another part of the same PostgreSQL database (same role, same password file)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["options"] = f"-csearch_path={part}"
    return parts._replace(query=urlencode(query, safe="/=")).geturl()


def is_postgres(url: str) -> bool:
    """Return whether a SQLAlchemy URL names a PostgreSQL database."""
    return url.startswith(("postgresql:", "postgresql+"))


def schema_of(url: str) -> str:
    """Return the schema a part's PostgreSQL URL puts its tables in (its search_path)."""
    options = dict(parse_qsl(urlsplit(url).query)).get("options", "")
    found = re.fullmatch(r"-csearch_path=([a-z_][a-z0-9_]*)", options)
    if not found:
        raise ValueError(f"a part's PostgreSQL URL names its schema (options=-csearch_path=NAME): {url}")
    return found[1]


def create_schema(conn, schema: str) -> None:
    """Make a schema unless it is there (two processes at once: one waits for the other's to commit)."""
    from sqlalchemy import text

    conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": schema})
    conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')


def create_schemas(url: str) -> list[str]:
    """Make every part's schema in the database of a part's URL; return them (`hub setup`, as root)."""
    from sqlalchemy import create_engine

    made = create_engine(url)
    try:
        with made.begin() as conn:
            for part in PARTS:
                create_schema(conn, part)
    finally:
        made.dispose()
    return list(PARTS)


def course_part_url(course: Path, part: str, sqlite_file: Path) -> str:
    """Return where one of the grader's parts keeps its tables: the course gradebook's PostgreSQL database,
    in the part's own schema, when the gradebook is there (the course's nbgrader_config.py says); else its
    sqlite file."""
    from autograder.course import course_directory

    gradebook = course_directory(course).db_url
    return sibling_part(gradebook, part) if is_postgres(gradebook) else f"sqlite:///{sqlite_file}"


def passfile_text(password: str) -> str:
    """Return a libpq password file's line that gives this password to any host, database and role."""
    if not password or "\n" in password:
        raise ValueError("the database password must be one non-empty line")
    return "*:*:*:*:" + password.replace("\\", "\\\\").replace(":", "\\:") + "\n"


def write_passfile(path: Path, password: str, owner: tuple[int, int] | None = None, text: str = "") -> None:
    """Write a password file (or a copy of one's `text`) that only its owner can read (libpq ignores one
    that others could read)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text or passfile_text(password))
    if owner is not None:
        os.chown(tmp, *owner)
    tmp.replace(path)


def read_password(path: Path | None) -> str:
    """Return the database password: from a file only its owner may read, or DEVICELAB_DATABASE_PASSWORD."""
    if path is None:
        password = os.environ.get(PASSWORD_ENV, "")
        if not password:
            raise ValueError(f"--database-url needs its password: --database-password-file FILE (readable by "
                             f"its owner only) or {PASSWORD_ENV}")
        return password
    if path.stat().st_mode & 0o077:
        raise ValueError(f"{path} can be read by others than its owner: chmod 600 it (it holds the database "
                         "password)")
    return path.read_text(encoding="utf-8").strip("\n")
