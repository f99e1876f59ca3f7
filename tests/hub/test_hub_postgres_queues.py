"""The service queues on a real PostgreSQL (tests/postgres_support.py): the autograde queue's and the passback
queue's own tests run again with their tables in a PostgreSQL schema, and the parts no sqlite test can show:
many writers at once, the password never in a URL that is written down, and the schema each part is given."""

import os
import threading
from pathlib import Path

import pytest

from autograder.hub import database
from autograder.hub.exchange.folder.autograde import FolderAutograde
from autograder.hub.lms.passback_queue import PassbackQueue
from autograder.hub.service.autograde import Place
from autograder.hub.service.autograde_queue import Queue, State
from tests.clock import ManualClock
from tests.hub.test_hub_autograde import (  # noqa: F401  (run again here, on PostgreSQL)
    add,
    test_a_batch_is_fair_and_bounded,
    test_a_restart_requeues_what_was_being_graded_and_fails_a_poison_pill,
    test_a_running_batch_takes_late_submissions_only_in_its_assignment_s_turn,
    test_an_hourly_limit_delays_and_never_drops,
    test_newest_submission_wins_and_keeps_its_place,
    test_one_assignment_per_batch_and_only_enabled_ones,
)
from tests.hub.test_hub_passback import (  # noqa: F401  (run again here, on PostgreSQL)
    lms,
    score,
    test_a_score_is_posted_once_to_a_line_item_made_for_the_assignment,
    test_a_student_the_lms_does_not_know_yet_is_failed_with_the_reason,
    test_the_same_score_twice_is_one_post_and_a_changed_score_one_more,
    test_while_the_lms_is_down_scores_wait_and_are_sent_once_it_is_back,
    tool,
)
from tests.postgres_support import Postgres, postgres_cluster


@pytest.fixture(scope="module")
def postgres():
    with postgres_cluster() as cluster:
        yield cluster


@pytest.fixture
def course_database(postgres: Postgres, tmp_path: Path) -> str:
    """A database of its own for the test, its gradebook named in the course's nbgrader_config.py (tmp_path,
    where the passback tests' lti/ folder is): the grader's queues follow the gradebook there."""
    url = database.sibling_part(postgres.new_database() + "?options=-csearch_path%3Dgradebook", "gradebook")
    (tmp_path / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.db_url = {url!r}\n")
    return url


@pytest.fixture(autouse=True)
def _on_postgres(course_database: str) -> None:
    """Every test here keeps its tables in PostgreSQL."""


@pytest.fixture
def queue(course_database: str) -> Queue:
    q = Queue(database.sibling_part(course_database, "autograde"), clock=ManualClock())
    q.configure("ps01", True)
    return q


def test_the_queues_follow_the_course_gradebook_into_postgres(tmp_path: Path, postgres: Postgres,
                                                               course_database: str) -> None:
    place = Place(tmp_path, FolderAutograde.at(Path("/nonexistent"), ""), clock=ManualClock())
    q = place.queue()
    q.configure("ps01", True, per_hour=3, timeout=30.5)
    add(q, "ann", "2026-11-28 12:00:00.000001 UTC", now=1_790_000_000.123456)
    q.close()
    again = place.queue()
    assert again.setting("ps01").per_hour == 3 and again.setting("ps01").timeout == 30.5
    (entry,) = again.entries()
    assert entry.state == State.QUEUED and entry.seen_at == 1_790_000_000.123456  # double precision
    passback = PassbackQueue.of_course(tmp_path, tmp_path / "lti" / "passback.sqlite")
    passback.offer(score())
    assert [r.score for r in passback.rows()] == [score()]
    tables = postgres.sql("SELECT table_schema, table_name FROM information_schema.tables WHERE "
                          "table_schema IN ('autograde', 'passback') ORDER BY 1, 2", url=course_database)
    assert tables == [("autograde", "alembic_version_autograde"), ("autograde", "assignments"),
                      ("autograde", "submissions"), ("passback", "alembic_version_passback"),
                      ("passback", "scores")]
    assert not list(tmp_path.rglob("*.sqlite")), "a queue fell back to a sqlite file"


def test_a_submission_goes_to_one_batch_when_many_take_at_once(course_database: str) -> None:
    url = database.sibling_part(course_database, "autograde")
    clock = ManualClock()
    first = Queue(url, clock)
    first.configure("ps01", True)
    for i in range(60):
        clock.set(i)
        first.add(f"s{i:02}", "ps01", "t1", f"s{i:02}+ps01+t1+x", "secret")
    clock.set(100)
    taken: list[list[str]] = []

    def take() -> None:
        q = Queue(url, clock)  # a worker of its own: its own connections
        while batch := q.next_batch(3):
            taken.append([e.student for e in batch])
        q.close()

    workers = [threading.Thread(target=take) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    students = [s for batch in taken for s in batch]
    assert sorted(students) == [f"s{i:02}" for i in range(60)], "a submission was lost or given out twice"
    assert all(e.tries == 1 for e in first.entries())


def test_the_password_lives_in_a_file_only_its_reader_can_read(tmp_path: Path, postgres: Postgres) -> None:
    url = postgres.url
    database.check_database_url(url)
    with pytest.raises(ValueError, match="must not hold the password"):
        database.check_database_url(postgres.url_with_password)
    passfile = tmp_path / "database.pgpass"
    database.write_passfile(passfile, postgres.password)
    assert passfile.stat().st_mode & 0o777 == 0o600
    part = database.part_url(url, "autograde", passfile)
    assert postgres.password not in part
    q = Queue(part)  # libpq reads the password from the file
    q.configure("ps01", True)
    assert q.enabled() == ["ps01"]
    q.close()
    loose = tmp_path / "loose"
    loose.write_text(postgres.password)
    loose.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        database.read_password(loose)
    loose.chmod(0o600)
    assert database.read_password(loose) == postgres.password


def test_a_password_with_colons_and_backslashes_is_read_back_by_libpq(tmp_path: Path,
                                                                      postgres: Postgres) -> None:
    odd = "a:b\\c:"
    postgres.sql(f"ALTER ROLE {postgres.role} PASSWORD '{odd}'")
    try:
        passfile = tmp_path / "odd.pgpass"
        database.write_passfile(passfile, odd)
        q = Queue(database.part_url(postgres.url, "passback", passfile))
        assert q.enabled() == []
        q.close()
    finally:
        os.environ.pop("PGPASSWORD", None)
        postgres.sql(f"ALTER ROLE {postgres.role} PASSWORD '{postgres.password}'",
                     url=postgres.url_with_password.replace(postgres.password, odd.replace(":", "%3A")
                                                            .replace("\\", "%5C")))


def test_one_grading_run_at_a_time_holds_a_gradebook_in_postgresql(course_database: str) -> None:
    from autograder.grading.errors import GradebookBusy
    from autograder.grading.gradebook import locked

    with locked(course_database):
        with pytest.raises(GradebookBusy, match="another grading run"), locked(course_database):
            pass
        with locked(database.sibling_part(course_database, "autograde")):  # another schema: another lock
            pass
    with locked(course_database):  # released when the run ended
        pass
