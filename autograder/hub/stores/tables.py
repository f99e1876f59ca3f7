"""One part's tables over SQLAlchemy, in a sqlite file or a PostgreSQL schema: migrated when opened, one
writer at a time."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from autograder.hub.database import create_schema, is_postgres, schema_of
from autograder.hub.stores import migrate
from autograder.hub.stores.models import BASES


def engine(url: str):
    """Return a SQLAlchemy engine (sqlite: its folder made, transactions begun by `write`/`read` only)."""
    from sqlalchemy import create_engine, event

    if not is_postgres(url):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        made = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(made, "connect")
        def _driver_does_not_begin(dbapi_connection, _record) -> None:
            dbapi_connection.isolation_level = None  # SQLAlchemy's BEGIN below, not the driver's own

        @event.listens_for(made, "begin")
        def _begin(conn) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")

        return made
    return create_engine(url, pool_pre_ping=True)


class Tables:
    """A part's tables (stores/models.py), brought to their newest revision when opened.

    The migration runs as a write, so two processes opening one store at once migrate it once: on sqlite the
    second waits for the first's BEGIN IMMEDIATE, on PostgreSQL for its advisory lock on the part's schema,
    taken in the same transaction as the schema is made and the tables migrated.
    """

    def __init__(self, url: str, part: str) -> None:
        self.url, self.part = url, part
        self.tables = tuple(t.name for t in BASES[part].metadata.sorted_tables)
        self.postgres = is_postgres(url)
        self.engine = engine(url)
        with self.write(lock=False) as conn:
            if self.postgres:
                create_schema(conn, schema_of(url))
            migrate.upgrade(conn, part)

    def close(self) -> None:
        """Close the connections."""
        self.engine.dispose()

    @contextmanager
    def write(self, lock: bool = True) -> Iterator:
        """Run the block as one transaction that no other writer overlaps (sqlite: BEGIN IMMEDIATE;
        PostgreSQL: the tables locked against other writers, readers go on)."""
        with self.engine.connect().execution_options(write=True) as conn, conn.begin():
            if self.postgres and lock:
                conn.exec_driver_sql(f"LOCK TABLE {', '.join(self.tables)} IN SHARE ROW EXCLUSIVE MODE")
            yield conn

    @contextmanager
    def read(self) -> Iterator:
        """Run the block's queries in one read transaction."""
        with self.engine.connect() as conn, conn.begin():
            yield conn
