"""The hub's stores on sqlite and on a real PostgreSQL (tests/postgres_support.py): a grading lease in the
database outlives a restart of the exchange service (in memory it does not: a restart frees every lease);
every store's migrations make exactly its models' tables; a queue made before alembic is adopted in place."""

import json
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autograder.hub import database
from autograder.hub.exchange.http.lease_book import DatabaseLeaseBook
from autograder.hub.exchange.http.store import FolderStore
from autograder.hub.exchange.http.work import MAX_LEASES, Leases, MemoryLeaseBook, WorkResult
from tests.hub.test_http_exchange_service import call, released, serving, tar_of
from tests.postgres_support import Postgres, postgres_cluster

LEASE_S = 60.0
START = 1_800_000_000.0  # the wall clock: expiry means the same to the service after its restart


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    with postgres_cluster() as cluster:
        yield cluster


@pytest.fixture(params=["sqlite", "postgresql"])
def lease_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / '.leases' / 'leases.sqlite'}"
    cluster: Postgres = request.getfixturevalue("postgres")
    return database.sibling_part(cluster.new_database() + "?options=-csearch_path%3Dexchange", "exchange")


def submitted(url: str) -> str:
    released(url)
    status, body = call(url, "ann-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))
    assert status == 200, body
    return json.loads(body)["timestamp"]


def run_twice(tmp_path: Path, book: Callable[[], object]) -> tuple[dict, int, int, int]:
    """Lease ann's submission, restart the service (a new process's state: new Leases, new connections, the
    same store and database), then ask for work, renew the first lease and post its result; return the first
    lease and the three statuses."""
    now = [START]
    store = FolderStore(tmp_path / "store")
    with serving(store, Leases(LEASE_S, clock=lambda: now[0], book=book())) as url:
        stamp = submitted(url)
        status, body = call(url, "ivy-token", "POST", "work")
        assert status == 200, body
        first = json.loads(body)
    now[0] += LEASE_S / 2  # the service was down for half a lease
    with serving(store, Leases(LEASE_S, clock=lambda: now[0], book=book())) as url:
        asked = call(url, "ivy-token", "POST", "work")[0]
        path = f"ps01/ann/{urllib.parse.quote(stamp)}?lease={first['lease_id']}"
        renewed = call(url, "ivy-token", "POST", "work/" + path)[0]
        posted = call(url, "ivy-token", "PUT", "results/" + path, WorkResult("graded", 9, 10).to_json())[0]
    return first, asked, renewed, posted


def test_a_lease_in_the_database_outlives_a_restart_of_the_exchange_service(tmp_path: Path,
                                                                            lease_url: str) -> None:
    first, asked, renewed, posted = run_twice(tmp_path, lambda: DatabaseLeaseBook(lease_url))
    assert first["student_id"] == "ann" and first["lease_s"] == LEASE_S
    assert asked == 204, "after the restart the submission is still the first worker's: none is handed out"
    assert renewed == 200, "the worker renews the lease it was given before the restart"
    assert posted == 200, "and its result is recorded"
    book = DatabaseLeaseBook(lease_url)
    try:  # a recorded result ends the submission's leases
        assert book.held() == {} and book.issued(("ps01", "ann", first["timestamp"])) == set()
    finally:
        book.close()


def test_a_lease_in_memory_is_freed_by_a_restart(tmp_path: Path) -> None:
    """What the database changes: without it, the restarted service hands the submission to another worker,
    and the first worker's renewal is refused (its result, the same submission's, is still kept)."""
    _, asked, renewed, posted = run_twice(tmp_path, MemoryLeaseBook)
    assert (asked, renewed) == (200, 409)
    assert posted == 403, "a lease the restarted service never issued is not one it keeps a result under"


def test_the_lease_count_that_gives_a_submission_up_survives_a_restart(tmp_path: Path,
                                                                      lease_url: str) -> None:
    """A submission that kills every worker is given up after MAX_LEASES leases, restarts or not."""
    now = [START]
    store = FolderStore(tmp_path / "store")
    with serving(store, Leases(LEASE_S, clock=lambda: now[0], book=DatabaseLeaseBook(lease_url))) as url:
        submitted(url)
    for _ in range(MAX_LEASES):  # each lease runs out, and the service restarts each time
        with serving(store, Leases(LEASE_S, clock=lambda: now[0], book=DatabaseLeaseBook(lease_url))) as url:
            assert json.loads(call(url, "ivy-token", "POST", "work")[1])["student_id"] == "ann"
        now[0] += LEASE_S + 1
    with serving(store, Leases(LEASE_S, clock=lambda: now[0], book=DatabaseLeaseBook(lease_url))) as url:
        assert call(url, "ivy-token", "POST", "work")[0] == 204
        listed = json.loads(call(url, "ivy-token", "GET", "results?assignment=ps01")[1])["results"]
    assert [(r["student_id"], r["status"]) for r in listed] == [("ann", "invalid")]


@pytest.mark.parametrize("part", ["autograde", "passback", "nonces", "people", "exchange"])
def test_every_store_s_migrations_make_exactly_its_models_tables_on_either_database(lease_url: str,
                                                                                     part: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from autograder.hub.stores.migrate import version_table
    from autograder.hub.stores.models import BASES
    from autograder.hub.stores.tables import Tables

    url = (database.sibling_part(lease_url, part) if database.is_postgres(lease_url)
           else lease_url.replace("leases.sqlite", f"{part}.sqlite"))
    tables = Tables(url, part)  # migrated from nothing when opened
    try:
        with tables.read() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": version_table(part)})
            assert compare_metadata(context, BASES[part].metadata) == []
    finally:
        tables.close()
    assert sorted(BASES) == sorted(["autograde", "passback", "nonces", "people", "exchange"])


# The autograde queue as hubs made it before alembic, and before the hidden tests' setting (its hand migration
# added that column on sqlite only); {text} and {real} as that code spelled them for each database.
OLD_QUEUE = """
CREATE TABLE assignments (assignment {text} PRIMARY KEY, enabled INTEGER NOT NULL,
    per_hour INTEGER NOT NULL DEFAULT 0, timeout {real} NOT NULL DEFAULT 120);
CREATE TABLE submissions (student {text} NOT NULL, assignment {text} NOT NULL, timestamp {text} NOT NULL,
    folder TEXT NOT NULL, secret TEXT NOT NULL, state TEXT NOT NULL, place {real} NOT NULL,
    seen_at {real} NOT NULL, started_at {real}, finished_at {real}, tries INTEGER NOT NULL DEFAULT 0,
    graded INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL DEFAULT '', score {real}, max_score {real},
    detail TEXT NOT NULL DEFAULT '', PRIMARY KEY (student, assignment, timestamp));
CREATE INDEX by_state ON submissions (state, place);
INSERT INTO assignments VALUES ('ps01', 1, 3, 30);
INSERT INTO submissions (student, assignment, timestamp, folder, secret, state, place, seen_at)
    VALUES ('ann', 'ps01', 't1', 'ann+ps01+t1', 's', 'queued', 1, 1);
"""


def test_a_queue_made_before_alembic_is_adopted_in_place_with_its_rows(lease_url: str) -> None:
    from sqlalchemy import create_engine

    from autograder.hub.part_settings import HiddenTests
    from autograder.hub.service.autograde_queue import Queue

    postgres = database.is_postgres(lease_url)
    url = (database.sibling_part(lease_url, "autograde") if postgres
           else lease_url.replace("leases.sqlite", "queue.sqlite"))
    if not postgres:
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    with engine.begin() as conn:
        if postgres:
            conn.exec_driver_sql('CREATE SCHEMA IF NOT EXISTS "autograde"')
        spelled = OLD_QUEUE.format(text='TEXT COLLATE "C"' if postgres else "TEXT",
                                   real="DOUBLE PRECISION" if postgres else "REAL")
        for statement in filter(str.strip, spelled.split(";")):
            conn.exec_driver_sql(statement)
    engine.dispose()
    queue = Queue(url)
    try:
        setting = queue.setting("ps01")
        assert (setting.enabled, setting.per_hour, setting.timeout) == (True, 3, 30)
        assert setting.hidden_tests == HiddenTests.PROTECTED  # the column the old store lacked
        kept = [(e.student, e.timestamp, e.folder) for e in queue.entries("ps01")]
        assert kept == [("ann", "t1", "ann+ps01+t1")]
    finally:
        queue.close()
