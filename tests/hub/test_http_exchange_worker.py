"""Grading workers and the exchange service's leases, without a hub (the service in a thread, tokens from a
table): a worker that dies holding a lease, two workers racing for one submission, a stale worker posting
after its lease was handed on, a result posted twice: each submission's result is recorded once, none lost.
Then a worker grades a right answer of the smallest assignment with the real grader in its sandbox."""

import concurrent.futures
import io
import json
import os
import shutil
import tarfile
import urllib.parse
from pathlib import Path

import nbformat
import pytest

from autograder.hub.exchange.http import service as service_module
from autograder.hub.exchange.http.api import ServiceClient, ServiceError
from autograder.hub.exchange.http.store import FolderStore
from autograder.hub.exchange.http.work import Leases, WorkResult, give_back_result, post_result, take_work
from autograder.hub.service import grading_worker
from autograder.hub.service.grading_worker import SandboxRefused, Worker, choose_sandbox
from tests.clock import ManualClock
from tests.hub.test_http_exchange_service import call, serving, tar_of


@pytest.fixture
def leased(tmp_path: Path, monkeypatch):
    """The service with a clock of the test's and 60 s leases; ann has submitted ps01. Yield (url, clock)."""
    clock = ManualClock(1000.0)
    monkeypatch.setattr(service_module, "Leases", lambda: Leases(60.0, clock))
    with serving(FolderStore(tmp_path / "store")) as url:
        assert call(url, "ivy-token", "PUT", "assignments/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
        assert call(url, "ann-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
        yield url, clock


def grader(url: str) -> ServiceClient:
    return ServiceClient(url, "grader-token", timeout_s=30)


def result(score: float, worker: str) -> WorkResult:
    return WorkResult("graded", score, 3.0, "", {"ps01": f"<p>{worker}: {score:g}/3</p>"}, worker)


def recorded(url: str) -> list[dict]:
    status, body = call(url, "ivy-token", "GET", "results")
    assert status == 200, body
    return json.loads(body)["results"]


def own_feedback(url: str) -> dict[str, bytes]:
    status, body = call(url, "ann-token", "GET", "feedback/ps01")
    assert status == 200, body
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def test_a_lease_held_is_not_handed_out_again_until_it_expires(leased) -> None:
    url, clock = leased
    first = take_work(grader(url))
    assert first is not None and first.student_id == "ann" and first.lease_s == 60.0
    assert take_work(grader(url)) is None  # the worker holding it may still post
    clock.advance(61)  # ... it died: its lease expires and the submission is handed out again
    again = take_work(grader(url))
    assert again is not None and again.timestamp == first.timestamp and again.lease_id != first.lease_id


def test_two_workers_racing_for_one_submission_get_it_once(leased) -> None:
    url, _ = leased
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        offers = list(pool.map(lambda _: take_work(grader(url)), range(8)))
    assert len([o for o in offers if o is not None]) == 1


def test_a_stale_worker_posting_after_its_lease_was_handed_on_is_recorded_once(leased) -> None:
    url, clock = leased
    stale = take_work(grader(url))
    clock.advance(61)
    fresh = take_work(grader(url))
    assert post_result(grader(url), stale, result(2, "stale")) is True  # the same submission, graded
    assert post_result(grader(url), fresh, result(3, "fresh")) is False  # not recorded a second time
    assert post_result(grader(url), stale, result(2, "stale")) is False  # nor the same post again
    (only,) = recorded(url)
    assert (only["student_id"], only["score"], only["worker"]) == ("ann", 2.0, "stale")
    assert call(url, "ann-token", "GET", "feedback/ps01")[0] == 404  # held until the gradebook has it
    assert give_back_result(grader(url), "ann", "ps01", stale.timestamp) is True
    (page,) = own_feedback(url).values()
    assert page == b"<p>stale: 2/3</p>"
    assert take_work(grader(url)) is None  # a submission with a result is never handed out again


def test_only_staff_give_back_a_recorded_results_pages(leased) -> None:
    """A worker's pages are held until the autograde service has recorded their result; a student cannot
    release them, nor anyone the pages of a submission with no result."""
    url, _ = leased
    offer = take_work(grader(url))
    path = f"results/ps01/ann/{urllib.parse.quote(offer.timestamp)}/feedback"
    assert call(url, "ivy-token", "POST", path)[0] == 404  # no result recorded yet
    assert post_result(grader(url), offer, result(1, "w1")) is True
    assert call(url, "ann-token", "POST", path)[0] == 403
    assert call(url, "ann-token", "GET", "feedback/ps01")[0] == 404
    assert call(url, "ivy-token", "POST", path)[0] == 200
    assert list(own_feedback(url).values()) == [b"<p>w1: 1/3</p>"]


def test_held_pages_never_replace_feedback_given_back_already(leased) -> None:
    """`hub feedback` put nbgrader's full pages there first (autograde turned off and on around `hub grade`):
    the worker's pages, given back later, leave them as they are."""
    url, _ = leased
    offer = take_work(grader(url))
    stamp = urllib.parse.quote(offer.timestamp)
    assert post_result(grader(url), offer, result(1, "w1")) is True
    assert call(url, "ivy-token", "PUT", f"feedback/ps01/ann/{stamp}", tar_of({"ps01.html": b"<p>full</p>"})
                )[0] == 200
    assert give_back_result(grader(url), "ann", "ps01", offer.timestamp) is False
    assert list(own_feedback(url).values()) == [b"<p>full</p>"]


def test_a_result_kept_already_is_never_recorded_over_nor_its_held_pages(tmp_path: Path) -> None:
    """A worker's result came in while the service was giving the same submission up (its leases had run
    out): the second recording is refused before it touches the first one's held pages."""
    import asyncio

    from autograder.hub.exchange.http.service import record

    store, leases = FolderStore(tmp_path / "store"), Leases()
    key = ("ps01", "ann", "2026-12-03 10:00:00.000000 UTC")
    assert leases.begin_recording(key)
    asyncio.run(record(store, leases, key, result(3, "w1")))
    assert leases.begin_recording(key)  # the given-up path begins its own recording
    with pytest.raises(FileExistsError):
        asyncio.run(record(store, leases, key, WorkResult("invalid", None, None, "given up",
                                                          {"ps01": "<p>not graded</p>"}, "exchange service")))
    with tarfile.open(fileobj=io.BytesIO(store.get(("held-feedback", *key)))) as pages:
        assert [pages.extractfile(m).read() for m in pages.getmembers() if m.isfile()] == [b"<p>w1: 3/3</p>"]


def test_a_result_for_a_lease_the_service_never_issued_is_refused(leased) -> None:
    """Issue 61: a worker's token PUT a result with `?lease=none` for a submission the queue was holding back;
    it was recorded, and the gradebook showed full marks for a wrong answer nobody graded."""
    url, _ = leased
    ann = call(url, "ivy-token", "GET", "submissions?assignment=ps01&student=ann")
    assert ann[0] == 200, ann
    stamp = json.loads(ann[1])["submissions"][0]["timestamp"]
    path = f"results/ps01/ann/{urllib.parse.quote(stamp)}"
    forged = result(3, "forger").to_json()
    for lease in ("none", "", "0" * 32):
        status, body = call(url, "grader-token", "PUT", f"{path}?lease={lease}", forged)
        assert status == 403 and b"lease" in body, (lease, status, body)
    assert recorded(url) == []
    offer = take_work(grader(url))  # handed out now: its lease's result is taken
    assert post_result(grader(url), offer, result(1, "honest")) is True
    assert [r["worker"] for r in recorded(url)] == ["honest"]


def test_results_are_recorded_once_when_posted_at_once(leased) -> None:
    url, _ = leased
    offer = take_work(grader(url))
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        posted = list(pool.map(lambda i: post_result(grader(url), offer, result(i % 4, f"w{i}")), range(6)))
    assert posted.count(True) == 1 and len(recorded(url)) == 1


def test_only_staff_lease_and_post_results(leased) -> None:
    url, _ = leased
    offer = take_work(grader(url))
    with pytest.raises(ServiceError) as refused:
        take_work(ServiceClient(url, "ann-token"))
    assert refused.value.status == 403
    with pytest.raises(ServiceError) as refused:
        post_result(ServiceClient(url, "ann-token"), offer, result(3, "ann herself"))
    assert refused.value.status == 403 and recorded(url) == []


def test_a_result_that_is_not_one_is_refused(leased) -> None:
    url, _ = leased
    offer = take_work(grader(url))
    path = f"results/ps01/ann/{urllib.parse.quote(offer.timestamp)}?lease={offer.lease_id}"
    for body in (b"[]", b'{"status": "graded", "score": "3"}', b'{"status": "x", "pages": {"a": 1}}'):
        assert call(url, "grader-token", "PUT", path, body)[0] == 400
    nobody = call(url, "grader-token", "PUT", "results/ps01/bob/2026?lease=x", result(3, "w").to_json())
    assert nobody[0] == 404
    assert recorded(url) == []


def test_a_result_with_a_status_or_a_record_the_grader_never_writes_is_refused(leased) -> None:
    """Issue 61: a worker's token PUT `"status": "passed"`, and the autograde service, reading it back at
    every restart, crashed before handing anything out. What a worker posts is input: refused with a 400."""
    url, _ = leased
    offer = take_work(grader(url))
    path = f"results/ps01/ann/{urllib.parse.quote(offer.timestamp)}?lease={offer.lease_id}"
    for posted in (WorkResult("passed", 3.0, 3.0), WorkResult("graded", 3.0, 3.0, graded="{not json"),
                   WorkResult("graded", 3.0, 3.0, graded='{"student": "ann", "sneaky": 1}'),
                   WorkResult("graded", 3.0, 3.0, graded='{"student": "ann", "assignment": "ps01", '
                                                         '"status": "passed", "detail": ""}')):
        status, body = call(url, "grader-token", "PUT", path, posted.to_json())
        assert status == 400, (posted, status, body)
    assert b"not a result" in body and recorded(url) == []
    assert post_result(grader(url), offer, result(3, "honest")) is True, "the lease still takes a real one"


def test_a_stored_result_that_no_longer_reads_is_listed_invalid(leased, tmp_path) -> None:
    """One posted before results were checked (or a store changed by hand) never stops the service from
    listing the others: the autograde service would record nobody's."""
    from autograder.hub.exchange.http.archive import pack_files
    from autograder.hub.exchange.http.work import RESULT_FILE, RESULT_LIMITS, RESULTS

    url, _ = leased
    offer = take_work(grader(url))
    assert call(url, "bob-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
    assert post_result(grader(url), offer, result(3, "honest")) is True
    bad = WorkResult("passed", 3.0, 3.0).to_json()
    store = FolderStore(tmp_path / "store")
    bob = store.children(("submitted", "ps01", "bob"))[0]
    store.put((RESULTS, "ps01", "bob", bob), io.BytesIO(pack_files({RESULT_FILE: bad})), RESULT_LIMITS, False)
    listed = {r["student_id"]: r for r in recorded(url)}
    assert listed["ann"]["status"] == "graded" and listed["ann"]["score"] == 3.0
    assert listed["bob"]["status"] == "invalid" and listed["bob"]["score"] is None
    assert "could not be read" in listed["bob"]["detail"]


def test_auto_never_means_no_sandbox() -> None:
    with pytest.raises(SandboxRefused):
        choose_sandbox("auto", detect=lambda mode: "none")
    assert choose_sandbox("auto", detect=lambda mode: "bwrap") == "bwrap"
    assert choose_sandbox("none", detect=lambda mode: pytest.fail("none asked: nothing to detect")) == "none"


def test_the_worker_refuses_to_start_without_a_sandbox(tmp_path: Path, monkeypatch, capsys) -> None:
    nothing = lambda asked: choose_sandbox(asked, lambda mode: "none")
    monkeypatch.setattr(grading_worker, "choose_sandbox", nothing)
    (tmp_path / "token").write_text("grader-token")
    umask = os.umask(0o022)  # the worker's main sets its process's umask: give this test process its own back
    try:
        code = grading_worker.main(["--url", "http://127.0.0.1:1/", "--token-file", str(tmp_path / "token"),
                                    "--course", str(tmp_path)])
    finally:
        os.umask(umask)
    assert code == 2 and "--sandbox none" in capsys.readouterr().err


def _worker_course(tmp_path: Path, config: str = "") -> tuple[str, str, Path, bytes]:
    """Return (sandbox, assignment, a worker's course copy, a right answer's notebook), or skip without a
    sandbox; `config` is added to the course's nbgrader_config.py."""
    from autograder.grading.sandbox import detect_isolation
    from tests.hub_support import ROOT, answers, smallest_assignment

    sandbox = detect_isolation("auto").mode
    if sandbox == "none":
        pytest.skip("no sandbox works here")
    assignment = smallest_assignment()
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text() + config)
    shutil.copytree(ROOT / "source" / assignment, course / "source" / assignment)
    return sandbox, assignment, course, nbformat.writes(answers(assignment)["right"]).encode()


def _released_and_submitted(url: str, assignment: str, notebook: bytes) -> str:
    """Release the assignment, submit `notebook` as ann; return her submission's timestamp."""
    from tests.hub_support import ROOT

    release = tar_of({f"{assignment}.ipynb": (ROOT / "release" / assignment / f"{assignment}.ipynb")
                      .read_bytes()})
    assert call(url, "ivy-token", "PUT", f"assignments/{assignment}", release)[0] == 200
    status, body = call(url, "ann-token", "POST", f"submissions/{assignment}",
                        tar_of({f"{assignment}.ipynb": notebook}))
    assert status == 200, body
    return json.loads(body)["timestamp"]


def test_a_worker_grades_a_submission_in_the_sandbox_and_posts_it_back(tmp_path: Path) -> None:
    sandbox, assignment, course, right = _worker_course(tmp_path)
    with serving(FolderStore(tmp_path / "store")) as url:
        _released_and_submitted(url, assignment, right)
        Worker(course, grader(url), sandbox).run(until_idle=True)
        (only,) = recorded(url)
        assert only["status"] == "graded" and only["score"] == only["max_score"] > 0, (only.get("detail"),
                                                                                       only)
        (stamp,) = [r["timestamp"] for r in recorded(url)]
        assert give_back_result(grader(url), "ann", assignment, stamp) is True
        status, body = call(url, "ann-token", "GET", f"feedback/{assignment}")
        with tarfile.open(fileobj=io.BytesIO(body)) as archive:
            (name,) = archive.getnames()
        assert status == 200 and name.endswith(f"/{assignment}.html")


def test_a_submission_the_worker_cannot_grade_is_left_to_its_lease(leased, tmp_path: Path) -> None:
    url, clock = leased
    lacking = tmp_path / "course without ps01"
    lacking.mkdir()
    assert Worker(lacking, grader(url), "none").once() is True  # leased, not graded: nothing posted
    assert recorded(url) == [] and take_work(grader(url)) is None
    clock.advance(61)
    assert take_work(grader(url)) is not None  # handed out again, to a worker that may have the assignment


def test_a_worker_grades_late_work_as_late_as_hub_grade_would(tmp_path: Path) -> None:
    """Issue 61: released with a due date two hours past, a right answer got full marks from a worker (its
    course copy had no due date) and 0 from `hub grade` (the course's late penalty, `zero`). The autograde
    service hands each submission out with the student's due date; the worker grades with it."""
    from autograder.hub.exchange.http.work import Handout, hand_out

    sandbox, assignment, course, right = _worker_course(
        tmp_path, '\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    with serving(FolderStore(tmp_path / "store")) as url:
        stamp = _released_and_submitted(url, assignment, right)
        hand_out(grader(url), [Handout(assignment, "ann", stamp, True, None, due="2026-01-01 00:00:00")])
        Worker(course, grader(url), sandbox).run(until_idle=True)
        (only,) = recorded(url)
    assert only["status"] == "graded" and only["max_score"] > 0, only
    assert only["score"] == 0.0, f"late work got {only['score']} of {only['max_score']}: {only.get('detail')}"
