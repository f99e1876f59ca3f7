"""Bring a store's tables to its newest revision, with alembic, inside the caller's transaction.

One alembic environment (migrations/env.py) serves every part; each part has its own folder of revisions
(migrations/PART/), its own linear history and its own version table (alembic_version_PART). Why one
environment and not one per part: the env.py is the same for all (it runs on the connection it is given),
so one copy; why a version table per part: on PostgreSQL each part's table lives in the part's schema, but
two parts may share one sqlite file or one schema (a test, a small hub), and each must know its own revision.
The revisions are .py files in this package, found beside this module wherever it is installed.

A store made by the hand-written DDL before alembic (no version table) is adopted by its first revision:
that revision makes only the tables that are not there, and the later ones change what is there.
"""

from pathlib import Path

from alembic import command
from alembic.config import Config

from autograder.hub.stores.models import BASES

MIGRATIONS = Path(__file__).parent / "migrations"


def version_table(part: str) -> str:
    """Return the name of the table that holds a part's revision."""
    return f"alembic_version_{part}"


def config(part: str, connection=None) -> Config:
    """Return the alembic configuration of one part (on this connection, when given)."""
    if part not in BASES:
        raise ValueError(f"no store {part!r} (have: {', '.join(BASES)})")
    made = Config()
    made.set_main_option("path_separator", "os")  # a folder path may hold spaces
    made.set_main_option("script_location", str(MIGRATIONS))
    made.set_main_option("version_locations", str(MIGRATIONS / part))
    made.attributes.update(part=part, connection=connection, version_table=version_table(part))
    return made


def upgrade(connection, part: str, revision: str = "head") -> None:
    """Migrate a part's tables to `revision`, in the connection's open transaction (it commits or rolls
    back with the caller's work: a failed migration leaves the store as it was, where the database can)."""
    command.upgrade(config(part, connection), revision)


def current(connection, part: str) -> str | None:
    """Return the part's revision in this database (None: not migrated yet)."""
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table": version_table(part)})
    return context.get_current_revision()
