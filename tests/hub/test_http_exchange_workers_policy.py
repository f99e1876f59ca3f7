"""With grading workers, the instructor's per-assignment settings still hold (`hub autograde on A --per-hour N
--hidden-tests shown --timeout T`): the autograde service hands the exchange the exact submissions that may be
graded now, each with how (its hidden tests protected or not, its time limit), and the workers grade just
those, that way. Written first, from what a student would try: submitting again and again to learn the hidden
tests through more feedback than the hourly limit gives. Without a hub: the exchange service in a thread."""

import datetime
import json
from pathlib import Path

import pytest

from autograder.grading.gradebook import DueDates
from autograder.hub.exchange.http import service as service_module
from autograder.hub.exchange.http.api import ServiceClient
from autograder.hub.exchange.http.autograde import HttpAutograde
from autograder.hub.exchange.http.store import FolderStore
from autograder.hub.exchange.http.work import Handout, Leases, WorkResult, hand_out, post_result, take_work
from autograder.hub.part_settings import HiddenTests
from autograder.hub.service import autograde
from autograder.hub.service.autograde_queue import HOUR, State
from autograder.hub.service.grading_worker import Worker, grading_setting
from tests.clock import ManualClock
from tests.hub.test_http_exchange_service import call, serving, tar_of

MISSING = WorkResult("missing", None, None, "no notebook", {}, "w1")  # no cells: no gradebook scores


@pytest.fixture
def exchange(tmp_path: Path, monkeypatch):
    """The exchange, told what to hand out (`--hand-out-when-told`), ps01 released; yield (url, staff)."""
    monkeypatch.setattr(service_module, "Leases", lambda: Leases(handed_out=set()))
    with serving(FolderStore(tmp_path / "store")) as url:
        assert call(url, "ivy-token", "PUT", "assignments/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
        yield url, ServiceClient(url, "grader-token", timeout_s=30)


def submit(url: str, student: str) -> None:
    assert call(url, f"{student}-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200


START = 1_800_000_000.0  # the service's clock at the start of each test (2027-01-15): it moves only when told


def service(tmp_path: Path, url: str, monkeypatch, step: float = 0.0, **setting):
    """Return the autograde service's place and queue (workers grade, on a clock of the test's that moves on
    by `step` at every read), ps01 turned on with `setting`."""
    course = tmp_path / "course"
    course.mkdir(exist_ok=True)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "grader-token")
    place = autograde.Place(course, (ex := HttpAutograde(url, (tmp_path / "store",))), ex,
                            clock=ManualClock(START, step))
    queue = place.queue()
    queue.configure("ps01", True, setting.get("per_hour"), setting.get("timeout"),
                    setting.get("hidden_tests"))
    return place, queue


def test_the_exchange_hands_out_exactly_the_submissions_named_each_with_how(exchange) -> None:
    url, staff = exchange
    submit(url, "ann")
    submit(url, "bob")
    stamps = {s.student_id: s.timestamp for s in staff.submissions("ps01")}
    hand_out(staff, [Handout("ps01", "bob", stamps["bob"], protect_hidden_tests=False, timeout=42.0)])
    offer = take_work(staff)
    assert (offer.student_id, offer.protect_hidden_tests, offer.timeout) == ("bob", False, 42.0)
    assert take_work(staff) is None  # ann's was not named
    wrong = [b'{"submissions": [{"assignment_id": "ps01"}]}', b'{"submissions": "all"}',
             (b'{"submissions": [{"assignment_id": "ps01", "student_id": "ann", "timestamp": "t", '
              b'"protect_hidden_tests": "no"}]}')]
    for body in wrong:
        assert call(url, "ivy-token", "PUT", "work", body)[0] == 400, body
    assert call(url, "ann-token", "PUT", "work", b'{"submissions": []}')[0] == 403


@pytest.mark.parametrize("step", [0.0, 5.0], ids=["still", "slow-machine"])
def test_the_hourly_limit_holds_with_workers(tmp_path: Path, exchange, monkeypatch, step) -> None:
    """The hour counts from when the first result was recorded, read back from the queue, never from a time
    the test chose beside it (on a slow machine, `step`, recording it takes time too)."""
    url, staff = exchange
    place, queue = service(tmp_path, url, monkeypatch, step, per_hour=1)
    clock = place.clock
    submit(url, "ann")
    assert autograde.scan(place, queue) == 0  # ann's first is handed out
    first = take_work(staff)
    assert first is not None and take_work(staff) is None
    assert post_result(staff, first, MISSING)
    clock.advance(1)
    assert autograde.scan(place, queue) == 1  # its result is recorded
    (done,) = queue.entries("ps01", State.DONE)
    submit(url, "ann")  # again at once, to see more feedback
    clock.advance(1)
    assert autograde.scan(place, queue) == 0
    assert take_work(staff) is None  # within the hour: not handed out
    assert [e.state for e in queue.entries("ps01")] == [State.DONE, State.QUEUED]
    clock.set(done.finished_at + HOUR - 60)
    assert autograde.scan(place, queue) == 0 and take_work(staff) is None  # a minute before the hour is up
    clock.set(done.finished_at + HOUR)
    assert autograde.scan(place, queue) == 0  # an hour after the first was recorded
    second = take_work(staff)
    assert second is not None and second.timestamp > first.timestamp


def test_a_student_is_handed_out_once_at_a_time(tmp_path: Path, exchange, monkeypatch) -> None:
    url, staff = exchange
    place, queue = service(tmp_path, url, monkeypatch)
    submit(url, "ann")
    autograde.scan(place, queue)
    first = take_work(staff)
    submit(url, "ann")  # while the first is being graded
    place.clock.advance(1)
    autograde.scan(place, queue)
    assert take_work(staff) is None
    assert post_result(staff, first, MISSING)
    place.clock.advance(1)
    autograde.scan(place, queue)
    assert take_work(staff).timestamp > first.timestamp


def test_hidden_tests_shown_and_the_time_limit_reach_the_worker(tmp_path: Path, exchange,
                                                                monkeypatch) -> None:
    url, staff = exchange
    place, queue = service(tmp_path, url, monkeypatch, hidden_tests="shown", timeout=33.0)
    submit(url, "ann")
    autograde.scan(place, queue)
    offer = take_work(staff)
    assert (offer.protect_hidden_tests, offer.timeout) == (False, 33.0)
    worker = Worker(tmp_path / "w1", staff, "none")
    setting = grading_setting(worker, offer)
    assert (setting.hidden_tests, setting.timeout) == (HiddenTests.SHOWN, 33.0)


@pytest.mark.parametrize(("due", "protected"), [(None, True), (1, True), (0, True), (-1, False)])
def test_protected_until_the_students_own_due_date(tmp_path: Path, exchange, monkeypatch, due,
                                                   protected) -> None:
    url, staff = exchange
    place, queue = service(tmp_path, url, monkeypatch)  # protected: the default
    now = autograde.naive_utc(place.clock())
    dates = DueDates(None if due is None else now + datetime.timedelta(days=due), {})
    monkeypatch.setattr(autograde, "due_dates", lambda course, assignment: dates)
    submit(url, "ann")
    autograde.scan(place, queue)
    offer = take_work(staff)
    assert offer.protect_hidden_tests is protected
    setting = grading_setting(Worker(tmp_path / "w1", staff, "none"), offer)
    assert setting.hidden_tests == (HiddenTests.PROTECTED if protected else HiddenTests.SHOWN)
    # the worker is told the due date itself too: it grades lateness by it (issue 61)
    assert offer.due == (None if dates.due is None else dates.due.isoformat(" "))


def test_a_handout_with_a_due_date_that_is_not_one_is_refused() -> None:
    from autograder.hub.exchange.http.work import Handout

    raw = {"assignment_id": "ps01", "student_id": "ann", "timestamp": "2026-12-02 01:00:00.000000 UTC"}
    assert Handout.from_json({**raw, "due": "2026-12-01 12:00:00"}).due == "2026-12-01 12:00:00"
    assert Handout.from_json({**raw, "due": "2026-12-01T12:00:00+00:00"}).due == "2026-12-01 12:00:00"
    assert Handout.from_json({**raw, "due": "2026-12-01T13:00:00+01:00"}).due == "2026-12-01 12:00:00"
    assert Handout.from_json(raw).due is None
    for bad in ("tomorrow", 12, "2026-13-01"):
        with pytest.raises(ValueError, match="due is a date"):
            Handout.from_json({**raw, "due": bad})


def test_an_offer_that_says_nothing_keeps_the_workers_own_setting(tmp_path: Path, exchange) -> None:
    url, staff = exchange
    submit(url, "ann")
    assert call(url, "ivy-token", "PUT", "work", json.dumps({"assignments": ["ps01"]}).encode())[0] == 200
    offer = take_work(staff)
    assert offer.protect_hidden_tests is None and offer.timeout is None
    worker = Worker(tmp_path / "w1", staff, "none", hidden_tests=HiddenTests.SHOWN, timeout=7.0)
    setting = grading_setting(worker, offer)
    assert (setting.hidden_tests, setting.timeout) == (HiddenTests.SHOWN, 7.0)


def test_a_students_extension_moves_their_own_due_date_only(tmp_path: Path) -> None:
    from nbgrader.api import Gradebook

    from autograder.grading import gradebook as gbook

    course = tmp_path / "course"
    course.mkdir()
    due = datetime.datetime(2026, 12, 1, 12, 0)
    with Gradebook(gbook.course_db_url(course), gbook.course_id(course)) as gb:
        gb.add_assignment("ps01", duedate=due)
        for student in ("ann", "bob"):
            gb.add_student(student)
            gb.add_submission("ps01", student)
    gbook.set_extension(gbook.course_db_url(course), gbook.course_id(course), "ps01", "bob", 3600.0)
    dates = autograde.due_dates(course, "ps01")
    later = due + datetime.timedelta(hours=1)
    assert (dates.of("ann"), dates.of("bob"), dates.of("cat")) == (due, later, due)
