"""The autograde service with the HTTP exchange, without a hub: it lists new submissions through the API,
copies each into its batch within the caps (stamped with the service's time, never the student's), and gives
the feedback pages back through the API, where only their student can fetch them."""

import io
import json
import tarfile
from pathlib import Path

from autograder.hub.exchange.http.autograde import HttpAutograde
from autograder.hub.exchange.http.store import FolderStore
from autograder.hub.service import autograde
from tests.hub.test_http_exchange_service import call, released, serving, tar_of


def test_autograde_takes_submissions_from_the_service_and_gives_feedback_back(tmp_path: Path,
                                                                               monkeypatch) -> None:
    with serving(FolderStore(tmp_path / "store")) as url:
        released(url)
        forged = tar_of({"ps01.ipynb": b"{}", "timestamp.txt": b"2020-01-01 00:00:00 UTC",
                         ".ipynb_checkpoints/ps01-checkpoint.ipynb": b"{}"})
        status, body = call(url, "ann-token", "POST", "submissions/ps01", forged)
        assert status == 200, body
        stamp = json.loads(body)["timestamp"]
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "grader-token")  # the service's own token: staff
        course = tmp_path / "course"
        course.mkdir()
        place = autograde.Place(course, HttpAutograde(url, (tmp_path / "store",)))
        queue = place.queue()
        queue.configure("ps01", True, None, None, None)
        assert autograde.scan(place, queue) == 1 and autograde.scan(place, queue) == 0
        (entry,) = queue.next_batch(10)
        assert (entry.student, entry.timestamp) == ("ann", stamp)
        staged = autograde.stage(place, [entry])
        got = staged.work / "ann" / "ps01"
        assert sorted(p.name for p in got.iterdir()) == ["ps01.ipynb", "timestamp.txt"]
        assert (got / "timestamp.txt").read_text() == stamp and staged.refused == {} and staged.missing == []

        autograde.release_feedback(place, entry, {"ps01": "<p>ann: 3/3</p>"})
        assert (course / "feedback" / "ann" / "ps01" / "ps01.html").read_text() == "<p>ann: 3/3</p>"
        status, body = call(url, "ann-token", "GET", "feedback/ps01")
        with tarfile.open(fileobj=io.BytesIO(body)) as archive:
            assert archive.getnames() == [f"{stamp}/ps01.html"]
        assert call(url, "bob-token", "GET", "feedback/ps01")[0] == 404


def test_a_submission_gone_from_the_service_is_missing_not_refused(tmp_path: Path, monkeypatch) -> None:
    with serving(FolderStore(tmp_path / "store")) as url:
        released(url)
        assert call(url, "ann-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "grader-token")
        place = autograde.Place(tmp_path / "course", HttpAutograde(url, (tmp_path / "store",)))
        (tmp_path / "course").mkdir()
        queue = place.queue()
        queue.configure("ps01", True, None, None, None)
        autograde.scan(place, queue)
        (entry,) = queue.next_batch(10)
        for stored in (tmp_path / "store" / "submitted" / "ps01" / "ann").iterdir():
            stored.rename(tmp_path / "store" / ".gone")
        staged = autograde.stage(place, [entry])
        assert staged.missing == [entry] and not (staged.work / "ann").exists()
