"""With grading workers, the autograde service grades nothing itself: it reads the results the workers posted
(`GET api/results`) and records each new one as it records its own grades: the course gradebook, its queue,
the LMS passback. Without a hub: the exchange service in a thread, a worker with the real grader in its own
course copy, the service's code on the instructor's course."""

import io
import shutil
import tarfile
from pathlib import Path

import nbformat
import pytest

from autograder.grading import gradebook as gbook
from autograder.hub.exchange.http import service as service_module
from autograder.hub.exchange.http.api import ServiceClient
from autograder.hub.exchange.http.autograde import HttpAutograde
from autograder.hub.exchange.http.store import FolderStore
from autograder.hub.exchange.http.work import Leases, WorkResult, post_result, take_work
from autograder.hub.service import autograde
from autograder.hub.service.autograde_queue import State
from autograder.hub.service.grading_worker import Worker
from tests.hub.test_http_exchange_service import call, serving, tar_of
from tests.hub_support import ROOT, answers, smallest_assignment


def course_copy(where: Path, assignment: str) -> Path:
    (where / "source").mkdir(parents=True)
    shutil.copyfile(ROOT / "nbgrader_config.py", where / "nbgrader_config.py")
    shutil.copytree(ROOT / "source" / assignment, where / "source" / assignment)
    return where


def scores(course: Path, assignment: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(gbook.course_db_url(course), gbook.course_id(course)) as gb:
        return {s.student.id: s.score for s in gb.find_assignment(assignment).submissions}


def test_the_service_records_the_workers_results_in_the_gradebook_once(tmp_path: Path, monkeypatch) -> None:
    from autograder.grading.sandbox import detect_isolation

    sandbox = detect_isolation("auto").mode
    if sandbox == "none":
        pytest.skip("no sandbox works here")
    assignment = smallest_assignment()
    course = course_copy(tmp_path / "course", assignment)
    worker_course = course_copy(tmp_path / "w1", assignment)
    notebooks = answers(assignment)
    with serving(FolderStore(tmp_path / "store")) as url:
        release = tar_of({f"{assignment}.ipynb": (ROOT / "release" / assignment / f"{assignment}.ipynb")
                          .read_bytes()})
        assert call(url, "ivy-token", "PUT", f"assignments/{assignment}", release)[0] == 200
        for student, which in (("ann", "right"), ("bob", "wrong")):
            body = tar_of({f"{assignment}.ipynb": nbformat.writes(notebooks[which]).encode()})
            assert call(url, f"{student}-token", "POST", f"submissions/{assignment}", body)[0] == 200
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "grader-token")  # the service's own token: staff
        place = autograde.Place(course, (ex := HttpAutograde(url, (tmp_path / "store",))), ex)
        queue = place.queue()
        queue.configure(assignment, True, None, None, None)
        autograde.prepare_ahead(place, assignment)  # as the service does when autograding is turned on
        assert autograde.scan(place, queue) == 0  # nothing graded yet: the service grades nothing itself
        assert queue.next_batch(10) == []

        Worker(worker_course, ServiceClient(url, "grader-token", timeout_s=30), sandbox).run(until_idle=True)
        assert call(url, "ann-token", "GET", f"feedback/{assignment}")[0] == 404  # not before the gradebook
        assert autograde.scan(place, queue) == 2 and autograde.scan(place, queue) == 0  # each recorded once
        assert call(url, "ann-token", "GET", f"feedback/{assignment}")[0] == 200
        got = scores(course, assignment)
        done = {e.student: e for e in queue.entries(assignment)}
        assert {e.state for e in done.values()} == {State.DONE}
        assert got["ann"] == done["ann"].max_score > 0 and got["bob"] == done["bob"].score < got["ann"]
        assert "graded by" in done["ann"].detail


def test_an_older_result_arriving_after_a_newer_one_is_superseded(tmp_path: Path, monkeypatch) -> None:
    course = tmp_path / "course"
    course.mkdir()
    shutil.copyfile(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    with serving(FolderStore(tmp_path / "store")) as url:
        assert call(url, "ivy-token", "PUT", "assignments/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
        for _ in range(2):
            assert call(url, "ann-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
        staff = ServiceClient(url, "grader-token", timeout_s=30)
        older, newer = take_work(staff), take_work(staff)
        assert older.timestamp < newer.timestamp
        def missing(which: str) -> WorkResult:  # no cells: no gradebook scores
            return WorkResult("missing", None, None, "no notebook", {"ps01": f"<p>{which}</p>"}, "w1")

        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "grader-token")
        place = autograde.Place(course, (ex := HttpAutograde(url, (tmp_path / "store",))), ex)
        queue = place.queue()
        queue.configure("ps01", True, None, None, None)
        assert post_result(staff, newer, missing("newer"))
        assert autograde.scan(place, queue) == 1  # the newer one's worker was faster
        assert post_result(staff, older, missing("older"))
        assert autograde.scan(place, queue) == 0
        states = {e.timestamp: e.state for e in queue.entries("ps01")}
        assert states == {newer.timestamp: State.DONE, older.timestamp: State.SUPERSEDED}
        # ann sees the feedback of the result the gradebook has, never the superseded one's
        status, body = call(url, "ann-token", "GET", "feedback/ps01")
        assert status == 200, body
        with tarfile.open(fileobj=io.BytesIO(body)) as archive:
            pages = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
        assert pages == {f"{newer.timestamp}/ps01.html": b"<p>newer</p>"}


def test_workers_get_only_what_the_service_hands_out_and_nothing_before_it_says(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    course = tmp_path / "course"
    course.mkdir()
    monkeypatch.setattr(service_module, "Leases", lambda: Leases(handed_out=set()))  # --hand-out-when-told
    with serving(FolderStore(tmp_path / "store")) as url:
        for assignment in ("ps01", "ps02"):
            release = tar_of({f"{assignment}.ipynb": b"{}"})
            assert call(url, "ivy-token", "PUT", f"assignments/{assignment}", release)[0] == 200
            assert call(url, "ann-token", "POST", f"submissions/{assignment}", release)[0] == 200
        staff = ServiceClient(url, "grader-token", timeout_s=30)
        assert take_work(staff) is None  # autograde is on for nothing yet: not even ps01's is graded
        assert call(url, "ann-token", "PUT", "work", b'{"assignments": ["ps01"]}')[0] == 403
        assert call(url, "ivy-token", "PUT", "work", b'{"assignments": "ps01"}')[0] == 400
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "grader-token")
        place = autograde.Place(course, (ex := HttpAutograde(url, (tmp_path / "store",))), ex)
        queue = place.queue()
        queue.configure("ps02", True, None, None, None)
        assert autograde.scan(place, queue) == 0  # no result yet; the workers may now take ps02
        offer = take_work(staff)
        assert offer is not None and offer.assignment_id == "ps02" and take_work(staff) is None


def test_pages_not_given_back_leave_the_result_pending_until_the_next_scan_gives_them(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    """The exchange service did not answer the give-back: the grade is in the gradebook, but the entry is not
    done, so the next scan records it again (no change) and gives the pages back; nothing is lost."""
    from autograder.hub.exchange.http import autograde as http_autograde
    from autograder.hub.exchange.http.api import ServiceError

    course = tmp_path / "course"
    course.mkdir()
    shutil.copyfile(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    with serving(FolderStore(tmp_path / "store")) as url:
        assert call(url, "ivy-token", "PUT", "assignments/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
        assert call(url, "ann-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
        staff = ServiceClient(url, "grader-token", timeout_s=30)
        offer = take_work(staff)
        assert post_result(staff, offer, WorkResult("missing", None, None, "no notebook",
                                                    {"ps01": "<p>yours</p>"}, "w1"))
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "grader-token")
        place = autograde.Place(course, (ex := HttpAutograde(url, (tmp_path / "store",))), ex)
        queue = place.queue()
        queue.configure("ps01", True, None, None, None)
        real = http_autograde.give_back_result

        def unreachable(*args):
            raise ServiceError(503, "the exchange is busy")

        monkeypatch.setattr(http_autograde, "give_back_result", unreachable)
        assert autograde.scan(place, queue) == 0
        assert [e.state for e in queue.entries("ps01")] != [State.DONE]
        assert call(url, "ann-token", "GET", "feedback/ps01")[0] == 404
        monkeypatch.setattr(http_autograde, "give_back_result", real)
        assert autograde.scan(place, queue) == 1 and autograde.scan(place, queue) == 0
        assert [e.state for e in queue.entries("ps01")] == [State.DONE]
        status, body = call(url, "ann-token", "GET", "feedback/ps01")
        assert status == 200 and b"<p>yours</p>" in body, (status, body)
