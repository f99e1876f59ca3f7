"""The class of tests/hub/test_hub_end_to_end.py, and autograde on submit (tests/hub/test_hub_autograde.py),
again on a hub whose databases are in PostgreSQL.

A throwaway PostgreSQL cluster runs on loopback (tests/postgres_support.py); `hub setup --database-url` puts
JupyterHub's database, the course gradebook and the grader's queues into schemas of one database of it, and
the password into files only root and the grader can read. The same class runs end to end (release, fetch,
submit, collect, grade, feedback, export, extensions, a second setup, a late student), and afterwards the
rows are in PostgreSQL and no sqlite file was made. Opt in as for every hub test (DEVICELAB_HUB_TESTS=1, as
root); under CI=true a missing PostgreSQL fails instead of skipping.
"""

import json
import stat
from pathlib import Path

import pytest

from tests.hub.test_hub_autograde import (
    test_submissions_are_graded_and_fed_back_without_an_instructor as autograde_on_submit,
)
from tests.hub.test_hub_end_to_end import ROSTER, refused
from tests.hub.test_hub_end_to_end import test_a_class_on_the_hub as a_class_on_the_hub
from tests.hub_support import Hub, class_hub, hub_tests_or_skip
from tests.postgres_support import Postgres, postgres_cluster

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def postgres() -> Postgres:
    """One cluster for both classes (each hub gets a database of its own), as the other PostgreSQL modules."""
    hub_tests_or_skip()
    with postgres_cluster() as cluster:
        yield cluster


@pytest.fixture
def hub(tmp_path: Path, postgres: Postgres):
    """The end-to-end test's hub, set up with its databases in PostgreSQL."""
    url = postgres.new_database(with_password=False)
    secret = postgres.password_file(tmp_path)
    with class_hub(tmp_path, ROSTER, ("--database-url", url, "--database-password-file", str(secret))) as h:
        yield h


def rows(postgres: Postgres, hub: Hub, query: str) -> list[tuple]:
    """Run a query in the hub's database."""
    return postgres.sql(query, url=postgres.with_password(hub.settings.database_url))


def test_a_class_on_a_hub_with_its_databases_in_postgresql(hub: Hub, postgres: Postgres) -> None:
    a_class_on_the_hub(hub)
    s, course = hub.settings, Path(hub.settings.paths.course)

    # Everything the class did is in PostgreSQL, each part in its schema, and nothing in a sqlite file.
    users = {r[0] for r in rows(postgres, hub, "SELECT name FROM jupyterhub.users")}
    assert {hub.user(m) for m in ("ann", "bob", "cat", "ivy", "dan")} <= users, users
    students = {r[0] for r in rows(postgres, hub, "SELECT id FROM gradebook.student")}
    assert {hub.user(m) for m in ("ann", "bob", "cat", "dan")} <= students, students
    graded = rows(postgres, hub, "SELECT count(*) FROM gradebook.submitted_assignment")
    assert graded == [(3,)], graded
    # (the grader's cache of an assignment's definition is a scratch gradebook of its own, not the course's)
    made = sorted(str(p) for root in (s.paths.hub, course) for p in root.rglob("*")
                  if p.suffix in (".sqlite", ".db") and ".template-cache" not in p.parts)
    assert made == [], f"sqlite files made beside PostgreSQL: {made}"

    # The password is in no file but root's and the grader's password files, which students cannot read.
    for name in (s.paths.settings, s.paths.config, s.paths.grader_etc / "nbgrader_config.py",
                 course / "nbgrader_config.py"):
        assert postgres.password not in name.read_text(), name
    assert json.loads(s.paths.settings.read_text())["database_url"] == s.database_url
    for passfile in (s.paths.database_passfile, s.paths.grader_passfile):
        assert stat.S_IMODE(passfile.stat().st_mode) == 0o600 and postgres.password in passfile.read_text()
        refused(hub, "cat", ["cat", str(passfile)])
    assert s.paths.grader_passfile.stat().st_uid != 0  # the grader's own copy


def test_autograde_on_submit_with_its_queue_in_postgresql(hub: Hub, postgres: Postgres) -> None:
    autograde_on_submit(hub)
    states = dict(rows(postgres, hub, "SELECT state, count(*) FROM autograde.submissions GROUP BY state"))
    assert states.get("done", 0) >= 3, states
    assert rows(postgres, hub, "SELECT assignment, enabled FROM autograde.assignments")[0][1] == 1
    assert not (Path(hub.settings.paths.course) / "autograde" / "queue.sqlite").exists()
