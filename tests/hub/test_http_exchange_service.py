"""The exchange service's API and nbgrader's classes that call it, without a hub: who is who comes from a
table of tokens standing in for the hub (the real hub answers in tests/hub/test_hub_http_exchange.py).

A student tries to submit as another (a query, form fields, folder names in the upload), to read another's
submissions and feedback, to release; a service token tries to submit; uploads go past the cap. Then a class
runs through nbgrader's own exchange classes: release, fetch, submit, list, collect, feedback, fetch_feedback.
"""

import asyncio
import contextlib
import io
import json
import os
import socket
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyterhub.services.auth import check_scopes
from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange.abc import ExchangeError
from tornado.netutil import bind_sockets
from traitlets.config import Config

from autograder.hub.exchange.http import client
from autograder.hub.exchange.http import service as service_module
from autograder.hub.exchange.http.api import STAFF_SCOPE
from autograder.hub.exchange.http.archive import upload_cap
from autograder.hub.exchange.http.service import SUBMISSION_LIMITS, make_app
from autograder.hub.exchange.http.staff import stage_feedback
from autograder.hub.exchange.http.store import FEEDBACK, SUBMITTED, FolderStore
from autograder.hub.exchange.http.work import HELD_FEEDBACK, Leases, Offer, WorkResult, keep_leased

ACCESS = "access:services!service=course-exchange"
PREFIX = "/services/course-exchange/"
TOKENS = {
    "ann-token": {"name": "ann", "kind": "user", "scopes": [ACCESS]},
    "bob-token": {"name": "bob", "kind": "user", "scopes": [ACCESS]},
    "ivy-token": {"name": "ivy", "kind": "user", "scopes": [ACCESS, STAFF_SCOPE]},
    "grader-token": {"name": "course", "kind": "service", "scopes": [ACCESS, STAFF_SCOPE]},
    "outsider-token": {"name": "eve", "kind": "user", "scopes": ["access:services!service=other"]},
}


class TokenTable:
    """Stands in for HubAuth: the hub's answer for each token, and its scope check."""

    access_scopes = frozenset({ACCESS})

    async def get_user(self, handler, sync: bool = False) -> dict | None:
        return TOKENS.get(handler.request.headers.get("Authorization", "").removeprefix("token "))

    def check_scopes(self, required, model: dict):
        return check_scopes(required, set(model["scopes"]))


@contextlib.contextmanager
def serving(store: FolderStore, leases: Leases | None = None) -> Iterator[str]:
    """Run the service's app on a loopback port in a thread for the block, in the HTTP server the service runs
    in (its timeouts included); yield its address."""
    sockets = bind_sockets(0, "127.0.0.1")
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        service_module.http_server(make_app(store, TokenTable(), PREFIX, leases)).add_sockets(sockets)
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{sockets[0].getsockname()[1]}{PREFIX}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, FolderStore]]:
    store = FolderStore(tmp_path / "store")
    with serving(store) as url:
        yield url, store


def tar_of(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def call(url: str, token: str, method: str, path: str, body: bytes | None = None,
         headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url + "api/" + path, data=body, method=method,
                                     headers={"Authorization": f"token {token}", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def released(url: str) -> None:
    status, _ = call(url, "ivy-token", "PUT", "assignments/ps01", tar_of({"ps01.ipynb": b"{}"}))
    assert status == 200


def test_a_submission_is_filed_under_the_tokens_user_whatever_the_request_says(service) -> None:
    url, store = service
    released(url)
    forged = tar_of({"ps01.ipynb": b"ann's", "bob+ps01+2026-01-01 00:00:00 UTC/ps01.ipynb": b"x",
                     "timestamp.txt": b"2020-01-01 00:00:00 UTC"})
    status, body = call(url, "ann-token", "POST", "submissions/ps01?student=bob&student_id=bob", forged,
                        {"X-Forwarded-User": "bob"})
    assert status == 200, body
    done = json.loads(body)
    assert done["student_id"] == "ann" and done["timestamp"] > "2026"
    assert store.children((SUBMITTED, "ps01")) == ["ann"]
    files = store.files((SUBMITTED, "ps01", "ann", done["timestamp"]))
    assert "bob+ps01+2026-01-01 00:00:00 UTC/ps01.ipynb" in files  # just a file of ann's submission


def test_a_student_sees_only_their_own_submissions_and_feedback(service) -> None:
    url, _ = service
    released(url)
    for token in ("ann-token", "bob-token"):
        assert call(url, token, "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
    listed = json.loads(call(url, "ann-token", "GET", "submissions?student=bob&assignment=ps01")[1])
    assert {s["student_id"] for s in listed["submissions"]} == {"ann"}
    (bob,) = [s for s in json.loads(call(url, "ivy-token", "GET", "submissions")[1])["submissions"]
              if s["student_id"] == "bob"]
    stamp = urllib.parse.quote(bob["timestamp"])
    assert call(url, "ann-token", "GET", f"submissions/ps01/bob/{stamp}")[0] == 403
    assert call(url, "ivy-token", "PUT", f"feedback/ps01/bob/{stamp}",
                tar_of({"ps01.html": b"<p>bob</p>"}))[0] == 200
    assert call(url, "ann-token", "GET", "feedback/ps01")[0] == 404  # ann has none; bob's is not hers
    status, body = call(url, "bob-token", "GET", "feedback/ps01")
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        assert archive.getnames() == [f"{bob['timestamp']}/ps01.html"]


def test_what_a_student_or_a_service_may_not_do(service) -> None:
    url, _ = service
    assert call(url, "ann-token", "PUT", "assignments/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 403
    released(url)
    assert call(url, "grader-token", "POST", "submissions/ps01", tar_of({"a": b""}))[0] == 403
    assert call(url, "outsider-token", "GET", "assignments")[0] == 403
    assert call(url, "no-such-token", "GET", "assignments")[0] == 403
    assert call(url, "ann-token", "POST", "submissions/ps02", tar_of({"a": b""}))[0] == 404
    assert call(url, "ann-token", "PUT", "feedback/ps01/ann/x", tar_of({"a.html": b""}))[0] == 403
    assert call(url, "ann-token", "GET", "submissions/..%2f..%2fstore")[0] in (400, 404, 405)
    assert call(url, "ivy-token", "GET", "submissions/ps01/..%2f..%2f/x")[0] == 400


def test_hostile_uploads_are_refused_and_leave_nothing(service) -> None:
    url, store = service
    released(url)
    link = io.BytesIO()
    with tarfile.open(fileobj=link, mode="w") as archive:
        info = tarfile.TarInfo("ps01.ipynb")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
        archive.addfile(info)
    status, body = call(url, "ann-token", "POST", "submissions/ps01", link.getvalue())
    assert status == 400 and "symbolic link" in json.loads(body)["error"]
    too_big = upload_cap(SUBMISSION_LIMITS) + 1
    try:  # refused on its length alone: the answer may come before the body has gone
        status, _ = call(url, "ann-token", "POST", "submissions/ps01", b"\0" * too_big)
    except urllib.error.URLError as exc:
        assert isinstance(exc.reason, ConnectionError), exc
    else:
        assert status == 413
    assert store.children((SUBMITTED, "ps01")) == []


def test_an_upload_without_a_length_is_cut_off_at_the_cap(service) -> None:
    url, store = service
    released(url)

    def chunks() -> Iterator[bytes]:
        for _ in range(upload_cap(SUBMISSION_LIMITS) // (1 << 20) + 2):
            yield b"\0" * (1 << 20)

    request = urllib.request.Request(url + "api/submissions/ps01", data=chunks(), method="POST",
                                     headers={"Authorization": "token ann-token",
                                              "Transfer-Encoding": "chunked"})
    with pytest.raises((urllib.error.HTTPError, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(request, timeout=60)
    assert store.children((SUBMITTED, "ps01")) == []
    assert call(url, "ann-token", "GET", "assignments")[0] == 200  # and the service goes on


def stalled_upload(url: str, token: str, path: str) -> socket.socket:
    """Start an upload that declares 1 MiB, sends 512 bytes and then nothing (a slow-loris upload)."""
    where = urllib.parse.urlsplit(url)
    connection = socket.create_connection((where.hostname, where.port), timeout=30)
    connection.sendall((f"POST {where.path}api/{path} HTTP/1.1\r\nHost: {where.netloc}\r\n"
                        f"Authorization: token {token}\r\nContent-Length: {1 << 20}\r\n\r\n").encode()
                       + b"\0" * 512)
    return connection


def answer_of(connection: socket.socket) -> bytes:
    """Return what the service says on a connection before it closes it (b"" when it just closes it)."""
    said = b""
    with contextlib.suppress(OSError):
        while chunk := connection.recv(65536):
            said += chunk
    return said


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_slow_uploads_neither_starve_a_classmate_nor_keep_their_files(tmp_path, monkeypatch) -> None:
    """A student opens many uploads that never finish (issue 61: 560 of them filled a service's 1024 files,
    and a classmate's submit got HTTP 500). Past her share each is refused at once; those within it are cut
    off when the body timeout passes, and their temporary files closed; a classmate submits meanwhile."""
    monkeypatch.setattr(service_module, "BODY_TIMEOUT_S", 2.0)
    store = FolderStore(tmp_path / "store")
    with serving(store) as url:
        released(url)
        before = open_files()
        stalled = [stalled_upload(url, "ann-token", "submissions/ps01") for _ in range(40)]
        assert call(url, "bob-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200
        answers = [answer_of(c) for c in stalled]  # each ends: refused, or cut off at the body timeout
        refused = [a for a in answers if a.startswith(b"HTTP/1.1 429")]
        assert len(refused) == 40 - service_module.UPLOADS_PER_CALLER, [a[:40] for a in answers]
        assert all(not a or a.startswith((b"HTTP/1.1 429", b"HTTP/1.1 400")) for a in answers)
        for connection in stalled:
            connection.close()
        assert store.children((SUBMITTED, "ps01")) == ["bob"]
        deadline = time.monotonic() + 30
        while open_files() > before + 2 and time.monotonic() < deadline:  # the service's side closes
            time.sleep(0.05)
        assert open_files() <= before + 2, f"{open_files() - before} files still open after the uploads ended"
        assert call(url, "ann-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[0] == 200


def test_the_service_never_holds_more_uploads_than_it_can(tmp_path, monkeypatch) -> None:
    """Past the service's total of open uploads (colluding students, each within her share), the next is told
    to come back later (503), before any file is opened for it."""
    monkeypatch.setattr(service_module, "MAX_OPEN_UPLOADS", 3)
    store = FolderStore(tmp_path / "store")
    with serving(store) as url:
        released(url)
        held = [stalled_upload(url, token, "submissions/ps01") for token in ("ann-token", "bob-token")
                for _ in range(service_module.UPLOADS_PER_CALLER)][:3]
        late = stalled_upload(url, "bob-token", "submissions/ps01")
        assert answer_of(late).startswith(b"HTTP/1.1 503")
        for connection in (*held, late):
            connection.close()


def test_a_student_keeps_at_most_so_many_submissions(service, monkeypatch) -> None:
    url, store = service
    released(url)
    monkeypatch.setattr(service_module, "MAX_SUBMISSIONS", 2)
    codes = [call(url, "ann-token", "POST", "submissions/ps01", tar_of({"a": b""}))[0] for _ in range(3)]
    assert codes == [200, 200, 429] and len(store.children((SUBMITTED, "ps01", "ann"))) == 2
    assert call(url, "bob-token", "POST", "submissions/ps01", tar_of({"a": b""}))[0] == 200


def test_uploads_that_finish_together_cannot_pass_the_cap_together(service, monkeypatch) -> None:
    """Issue 61: 150 uploads sent at once kept 66 to 125 submissions with a cap of 50: each passed the check
    before any was kept. Here unpacking is slowed so that every upload is past the check before the first is
    kept, as on a loaded service."""
    url, store = service
    released(url)
    monkeypatch.setattr(service_module, "MAX_SUBMISSIONS", 2)
    real_put = FolderStore.put
    all_in = threading.Barrier(service_module.UPLOADS_PER_CALLER, timeout=5)

    def slow_put(self, *args, **kwargs):
        with contextlib.suppress(threading.BrokenBarrierError):
            all_in.wait()  # those let through all unpack at once (with the cap held, only 2 get here)
        return real_put(self, *args, **kwargs)

    monkeypatch.setattr(FolderStore, "put", slow_put)
    codes: list[int] = []
    senders = [threading.Thread(target=lambda: codes.append(
        call(url, "ann-token", "POST", "submissions/ps01", tar_of({"a": b""}))[0]))
        for _ in range(service_module.UPLOADS_PER_CALLER)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(30)
    assert sorted(codes) == [200, 200] + [429] * (service_module.UPLOADS_PER_CALLER - 2), codes
    assert len(store.children((SUBMITTED, "ps01", "ann"))) == 2


def test_a_worker_keeps_its_lease_for_as_long_as_it_grades(tmp_path: Path) -> None:
    """Issue 61: a lease covered one grading attempt, the grader makes up to three, so a second worker was
    handed the same submission and one post was refused. A worker that renews its lease keeps it past the
    first expiry; only the lease held now can be renewed, and only by staff."""
    now = [0.0]
    store = FolderStore(tmp_path / "store")
    with serving(store, Leases(lease_s=60, clock=lambda: now[0])) as url:
        released(url)
        status, body = call(url, "ann-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))
        stamp = json.loads(body)["timestamp"]
        lease = json.loads(call(url, "ivy-token", "POST", "work")[1])
        renew = f"work/ps01/ann/{urllib.parse.quote(stamp)}?lease="
        now[0] = 50.0
        status, body = call(url, "ivy-token", "POST", renew + lease["lease_id"])
        assert status == 200 and json.loads(body)["lease_s"] == 60, body
        now[0] = 100.0  # past the first expiry, inside the renewed one
        assert call(url, "ivy-token", "POST", "work")[0] == 204, "a renewed lease is not handed out again"
        assert call(url, "ann-token", "POST", renew + lease["lease_id"])[0] == 403
        assert call(url, "ivy-token", "POST", renew + "made-up")[0] == 409
        now[0] = 200.0  # expired: another worker takes it, and the first can no longer renew
        second = json.loads(call(url, "ivy-token", "POST", "work")[1])
        assert second["lease_id"] != lease["lease_id"]
        assert call(url, "ivy-token", "POST", renew + lease["lease_id"])[0] == 409


def test_a_submission_no_worker_finishes_ends_invalid_once(tmp_path: Path) -> None:
    """Issue 61: a submission that crashed every worker that leased it was handed out again at each expiry of
    its lease, for ever, and never marked. After MAX_LEASES leases end with no result, the service records it
    `invalid` itself, once, and hands out the next; a worker that still posts for it is refused."""
    from autograder.hub.exchange.http.work import MAX_LEASES

    now = [0.0]
    store = FolderStore(tmp_path / "store")
    with serving(store, Leases(lease_s=60, clock=lambda: now[0])) as url:
        released(url)
        hostile = "<img src=x onerror=alert(1)>.ipynb"  # her notebook's name reaches the service's own page
        filed = call(url, "ann-token", "POST", "submissions/ps01", tar_of({hostile: b"{}"}))[1]
        stamp = json.loads(filed)["timestamp"]
        now[0] = 1.0
        call(url, "bob-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))
        leases = []
        for _ in range(MAX_LEASES):  # each worker that takes ann's dies on it: its lease runs out
            offer = json.loads(call(url, "ivy-token", "POST", "work")[1])
            assert offer["student_id"] == "ann", offer
            leases.append(offer["lease_id"])
            now[0] += 61
        offer = json.loads(call(url, "ivy-token", "POST", "work")[1])
        assert offer["student_id"] == "bob", "the next submission is handed out, not ann's again"
        assert call(url, "ivy-token", "POST", "work")[0] == 204
        listed = json.loads(call(url, "ivy-token", "GET", "results?assignment=ps01")[1])["results"]
        (ann,) = [r for r in listed if r["student_id"] == "ann"]
        assert (ann["status"], ann["score"]) == ("invalid", None), ann
        assert f"{MAX_LEASES} leases" in ann["detail"] and ann["timestamp"] == stamp
        late = WorkResult("graded", 10, 10).to_json()
        assert call(url, "ann-token", "GET", "feedback/ps01")[0] == 404  # held until the gradebook has it
        given = call(url, "ivy-token", "POST", f"results/ps01/ann/{urllib.parse.quote(stamp)}/feedback")
        assert given == (200, b'{"given_back": true}'), given
        with tarfile.open(fileobj=io.BytesIO(call(url, "ann-token", "GET", "feedback/ps01")[1])) as pages:
            page = b"".join(pages.extractfile(m).read() for m in pages.getmembers() if m.isfile()).decode()
        assert "no grading worker finished it" in page and "<img" not in page and "&lt;img" in page, page
        path = f"results/ps01/ann/{urllib.parse.quote(stamp)}?lease={leases[-1]}"
        assert call(url, "ivy-token", "PUT", path, late)[0] == 409, "kept once: a late post is refused"


@pytest.fixture
def graded(service) -> tuple[str, FolderStore, tuple[str, str, str], str]:
    """ann's ps01, leased and graded by a worker: its pages held. Return (url, store, key, give-back path)."""
    url, store = service
    released(url)
    filed = call(url, "ann-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[1]
    stamp = json.loads(filed)["timestamp"]
    lease = json.loads(call(url, "ivy-token", "POST", "work")[1])["lease_id"]
    result = WorkResult("graded", 3, 3, "", {"ps01": "<p>w1: 3/3</p>"}, "w1").to_json()
    path = f"results/ps01/ann/{urllib.parse.quote(stamp)}"
    assert call(url, "ivy-token", "PUT", f"{path}?lease={lease}", result)[0] == 200
    key = ("ps01", "ann", stamp)
    assert list(store.files((HELD_FEEDBACK, *key))) == ["ps01.html"]
    return url, store, key, f"{path}/feedback"


def own_pages(url: str) -> list[bytes]:
    with tarfile.open(fileobj=io.BytesIO(call(url, "ann-token", "GET", "feedback/ps01")[1])) as pages:
        return [pages.extractfile(m).read() for m in pages.getmembers() if m.isfile()]


def test_held_pages_are_removed_once_given_back(graded) -> None:
    """Held pages given back are never read again: kept, the store would only grow. A second give-back
    still answers that nothing was given, and the student keeps the pages."""
    url, store, key, give_back = graded
    assert call(url, "ivy-token", "POST", give_back) == (200, b'{"given_back": true}')
    assert store.children((HELD_FEEDBACK, *key[:2])) == [] and own_pages(url) == [b"<p>w1: 3/3</p>"]
    assert call(url, "ivy-token", "POST", give_back) == (200, b'{"given_back": false}')
    assert own_pages(url) == [b"<p>w1: 3/3</p>"]


def test_held_pages_are_removed_when_feedback_was_given_back_first(graded) -> None:
    """`hub feedback`'s full pages came first: the held ones can never be given back, so they go."""
    url, store, key, give_back = graded
    full = tar_of({"ps01.html": b"<p>full</p>"})
    assert call(url, "ivy-token", "PUT", f"feedback/ps01/ann/{urllib.parse.quote(key[2])}", full)[0] == 200
    assert call(url, "ivy-token", "POST", give_back) == (200, b'{"given_back": false}')
    assert store.children((HELD_FEEDBACK, *key[:2])) == [] and own_pages(url) == [b"<p>full</p>"]


def test_a_failure_to_remove_held_pages_leaves_the_give_back_as_it_was(graded, monkeypatch, caplog) -> None:
    url, store, key, give_back = graded

    def broken(self, key) -> None:
        raise PermissionError("the disk refuses")

    monkeypatch.setattr(FolderStore, "remove", broken)
    assert call(url, "ivy-token", "POST", give_back) == (200, b'{"given_back": true}')
    assert own_pages(url) == [b"<p>w1: 3/3</p>"] and store.children((HELD_FEEDBACK, *key[:2])) == [key[2]]
    assert "the disk refuses" in caplog.text


def test_a_give_back_that_fails_keeps_the_held_pages_for_the_next_one(graded, monkeypatch) -> None:
    """Copying the pages to the student failed: they stay held, and the next scan's give-back gives them."""
    url, store, key, give_back = graded
    put = FolderStore.put

    def failing_for_feedback(self, into, *args, **kwargs):
        if into[0] == FEEDBACK:
            raise OSError("the disk is full")
        return put(self, into, *args, **kwargs)

    monkeypatch.setattr(FolderStore, "put", failing_for_feedback)
    assert call(url, "ivy-token", "POST", give_back)[0] == 500
    assert store.children((HELD_FEEDBACK, *key[:2])) == [key[2]]
    monkeypatch.setattr(FolderStore, "put", put)
    assert call(url, "ivy-token", "POST", give_back) == (200, b'{"given_back": true}')
    assert own_pages(url) == [b"<p>w1: 3/3</p>"] and store.children((HELD_FEEDBACK, *key[:2])) == []


class RenewalsSeen:
    """Stands in for the service: notes each renewal, refuses them from the `refuse_after`-th on (409)."""

    def __init__(self, enough: int, refuse_after: int | None = None) -> None:
        self.calls: list[tuple[str, str, dict]] = []
        self.enough, self.refuse_after = threading.Event(), refuse_after
        self.wanted = enough

    def call(self, method: str, path: str, body: bytes | None = None, **query: str) -> bytes:
        from autograder.hub.exchange.http.api import ServiceError

        self.calls.append((method, path, query))
        if len(self.calls) >= self.wanted:
            self.enough.set()
        if self.refuse_after is not None and len(self.calls) >= self.refuse_after:
            raise ServiceError(409, "the lease has ended")
        return b'{"lease_s": 0.03}'


def test_keep_leased_renews_until_the_grading_ends_and_stops_when_refused() -> None:
    offer = Offer("L1", "ann", "ps01", "2026-12-02 10:00:00.000000 UTC", lease_s=0.03)
    seen = RenewalsSeen(enough=3)
    with keep_leased(seen, offer) as kept:
        assert seen.enough.wait(30), f"renewed {len(seen.calls)} times while grading"
    assert not kept.thread.is_alive(), "it renews after the grading ended"
    assert seen.calls[0] == ("POST", "work/ps01/ann/2026-12-02 10:00:00.000000 UTC", {"lease": "L1"})
    assert not kept.lost.is_set()
    refused = RenewalsSeen(enough=1, refuse_after=1)
    with keep_leased(refused, offer) as kept:
        assert refused.enough.wait(30)
        assert kept.lost.wait(30), "a refused renewal says the lease is lost"
    assert len(refused.calls) == 1, "no renewal after the service said the lease has ended"


def test_the_graders_pages_are_staged_with_their_submissions_time(tmp_path: Path) -> None:
    course = tmp_path / "course"
    for student in ("ann", "bob"):
        (course / "graded" / "ps01" / "feedback" / student).mkdir(parents=True)
        (course / "graded" / "ps01" / "feedback" / student / "ps01.html").write_text(f"<p>{student}</p>")
    (course / "submitted" / "ann" / "ps01").mkdir(parents=True)
    (course / "submitted" / "ann" / "ps01" / "timestamp.txt").write_text("2026-11-28 12:00:00.000001 UTC\n")
    assert stage_feedback(course, "ps01") == ["ann"]  # bob's was never collected: nothing to give it to
    staged = course / "feedback" / "ann" / "ps01"
    assert sorted(p.name for p in staged.iterdir()) == ["ps01.html", "timestamp.txt"]
    assert (staged / "timestamp.txt").read_text() == "2026-11-28 12:00:00.000001 UTC"


def run(cls, token: str, url: str, work: Path, course: Path, assignment: str = "ps01", **traits):
    """Run one of nbgrader's exchange actions as nbgrader's apps and the Assignments tab do."""
    config = Config()
    config.HttpExchange.url, config.HttpExchange.course, config.HttpExchange.token = url, "course", token
    config.HttpExchange.path_includes_course = True
    config.Exchange.assignment_dir = str(work)
    config.CourseDirectory.root, config.CourseDirectory.course_id = str(course), "course"
    config.CourseDirectory.assignment_id = assignment
    for name, value in traits.items():
        setattr(config[cls.__name__], name, value)
    return cls(coursedir=CourseDirectory(config=config), authenticator=Authenticator(config=config),
               config=config).start()


def test_a_class_through_nbgraders_exchange_classes(service, tmp_path: Path) -> None:
    url, _ = service
    course, ann, bob = tmp_path / "course", tmp_path / "ann", tmp_path / "bob"
    (course / "release" / "ps01").mkdir(parents=True)
    (course / "release" / "ps01" / "ps01.ipynb").write_text("{}")
    ann.mkdir()
    bob.mkdir()
    with pytest.raises(ExchangeError):
        run(client.HttpReleaseAssignment, "ann-token", url, ann, course)
    run(client.HttpReleaseAssignment, "ivy-token", url, tmp_path, course)
    (listed,) = run(client.HttpList, "ann-token", url, ann, course, assignment="")
    assert (listed["status"], listed["notebooks"][0]["notebook_id"]) == ("released", "ps01")

    run(client.HttpFetchAssignment, "ann-token", url, ann, course)
    with pytest.raises(ExchangeError, match="already have a copy"):
        run(client.HttpFetchAssignment, "ann-token", url, ann, course)
    assert run(client.HttpList, "ann-token", url, ann, course, assignment="")[0]["status"] == "fetched"
    (ann / "course" / "ps01" / "ps01.ipynb").write_text('{"ann": 1}')
    (ann / "course" / "ps01" / ".ipynb_checkpoints").mkdir()
    (ann / "course" / "ps01" / ".ipynb_checkpoints" / "x").write_text("left out")
    run(client.HttpSubmit, "ann-token", url, ann, course)
    run(client.HttpFetchAssignment, "bob-token", url, bob, course)
    run(client.HttpSubmit, "bob-token", url, bob, course)

    (mine,) = run(client.HttpList, "ann-token", url, ann, course, cached=True)
    assert mine["student_id"] == "ann" and len(mine["submissions"]) == 1
    stamp = mine["submissions"][0]["timestamp"]
    assert not mine["submissions"][0]["has_exchange_feedback"]

    run(client.HttpCollect, "grader-token", url, tmp_path, course, update=True)
    got = course / "submitted" / "ann" / "ps01"
    assert (got / "ps01.ipynb").read_text() == '{"ann": 1}' and not (got / ".ipynb_checkpoints").exists()
    assert (got / "timestamp.txt").read_text() == stamp
    assert (course / "submitted" / "bob" / "ps01" / "ps01.ipynb").read_text() == "{}"

    page = course / "feedback" / "ann" / "ps01"
    page.mkdir(parents=True)
    (page / "ps01.html").write_text("<p>ann: 3/3</p>")
    (page / "timestamp.txt").write_text(stamp)
    run(client.HttpReleaseFeedback, "grader-token", url, tmp_path, course)
    (mine,) = run(client.HttpList, "ann-token", url, ann, course, cached=True)
    state = mine["submissions"][0]
    assert state["has_exchange_feedback"] and not state["has_local_feedback"]
    run(client.HttpFetchFeedback, "ann-token", url, ann, course)
    assert (ann / "course" / "ps01" / "feedback" / stamp / "ps01.html").read_text() == "<p>ann: 3/3</p>"
    (mine,) = run(client.HttpList, "ann-token", url, ann, course, cached=True)
    assert mine["submissions"][0]["has_local_feedback"] and not mine["submissions"][0]["feedback_updated"]
    run(client.HttpFetchFeedback, "bob-token", url, bob, course)
    assert not (bob / "course" / "ps01" / "feedback").exists()


def test_collect_before_the_due_date_takes_the_last_submission_before_it(service, tmp_path: Path) -> None:
    from nbgrader.api import Gradebook
    from nbgrader.utils import parse_utc

    url, _ = service
    course = tmp_path / "course"
    course.mkdir()
    released(url)
    stamps = [json.loads(call(url, "ann-token", "POST", "submissions/ps01",
                              tar_of({"ps01.ipynb": str(n).encode()}))[1])["timestamp"] for n in range(2)]
    first, second = map(parse_utc, stamps)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "course") as gb:
        gb.update_or_create_assignment("ps01", duedate=first + (second - first) / 2)
    run(client.HttpCollect, "grader-token", url, tmp_path, course, before_duedate=True)
    got = course / "submitted" / "ann" / "ps01"
    assert ((got / "timestamp.txt").read_text(), (got / "ps01.ipynb").read_text()) == (stamps[0], "0")
    run(client.HttpCollect, "grader-token", url, tmp_path, course, update=True)
    assert ((got / "timestamp.txt").read_text(), (got / "ps01.ipynb").read_text()) == (stamps[1], "1")


def test_a_timestamp_folder_in_a_submission_never_stops_collecting_or_grading(service, tmp_path) -> None:
    """Issue 61: ann's upload held `timestamp.txt/why`, a folder where the grader writes the service's time.
    Staging for the autograde batch raised IsADirectoryError (her classmates in the batch ended `failed`), and
    `hub collect` stopped at her (nobody after her in name order was collected). Whatever a student names
    `timestamp.txt` is theirs to lose: the service's time replaces it."""
    from autograder.hub.exchange.http.api import ServiceClient
    from autograder.hub.exchange.http.staff import take_submission

    url, _ = service
    course = tmp_path / "course"
    course.mkdir()
    released(url)
    planted = tar_of({"ps01.ipynb": b'{"ann": 1}', "timestamp.txt/why": b"a folder",
                      "timestamp.txt/x/y": b"z"})
    status, body = call(url, "ann-token", "POST", "submissions/ps01", planted)
    assert status == 200, body
    ann = json.loads(body)["timestamp"]
    bob = json.loads(call(url, "bob-token", "POST", "submissions/ps01", tar_of({"ps01.ipynb": b"{}"}))[1])
    run(client.HttpCollect, "grader-token", url, tmp_path, course, update=True)
    for who, stamp in (("ann", ann), ("bob", bob["timestamp"])):
        kept = course / "submitted" / who / "ps01" / "timestamp.txt"
        assert kept.is_file() and kept.read_text() == stamp, who
    assert (course / "submitted" / "ann" / "ps01" / "ps01.ipynb").read_text() == '{"ann": 1}'
    taken = tmp_path / "taken"
    take_submission(ServiceClient(url, "grader-token"), "ann", "ps01", ann, taken)
    assert (taken / "timestamp.txt").is_file() and (taken / "timestamp.txt").read_text() == ann
    assert (taken / "ps01.ipynb").read_text() == '{"ann": 1}'
