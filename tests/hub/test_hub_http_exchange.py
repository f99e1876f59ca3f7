"""A class on a real JupyterHub whose exchange is the HTTP service (`hub setup --exchange http`), on loopback.

The instructor releases with `hub release` (nbgrader's release_assignment as the grader, with a token of the
grader's hub user), two students fetch, answer and submit through their own servers (the Assignments tab's
REST handlers, with their hub tokens), `hub status` sees them, formgrader's Collect button takes the
submissions over HTTP with the formgrader service's own token, our grader grades them, `hub feedback` gives
the pages back and each student fetches theirs and reads the score the grader gave. On the way one student
tries what the service refuses: submitting as the other (a query naming them, a folder named for them in the
upload), reading the other's submission, releasing; and there is no exchange folder at all to plant in.
Then autograde on submit takes a resubmission from the service and gives its feedback back unprompted.
Opt in with DEVICELAB_HUB_TESTS=1, as root; under CI=true a skip is a failure.
"""

import csv
import json
import re
import select
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
import pytest

from autograder.hub.exchange.http.service import UPLOADS_PER_CALLER
from autograder.hub.setup import accounts
from autograder.hub.setup.parts import exchange_url
from tests.hub.test_http_exchange_service import stalled_upload, tar_of
from tests.hub_support import (
    Hub,
    answers,
    class_hub,
    free_port,
    hand_in,
    hub_tests_or_skip,
    smallest_assignment,
    start_server,
    submissions_of,
)

COURSE = "device-lab"
SCORE = re.compile(r"\(Score: (?P<score>[\d.]+) / (?P<max>[\d.]+)\)")
ROSTER = "id,name,role\nann,Ann Right,student\nbob,Bob Wrong,student\nivy,Ivy Teacher,instructor\n"

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture
def hub(tmp_path: Path):
    """A hub set up with the HTTP exchange; afterwards stopped, every trace removed."""
    hub_tests_or_skip()
    with class_hub(tmp_path, ROSTER, setup_args=("--exchange", "http",
                                                 f"--exchange-port={free_port()}")) as running_hub:
        yield running_hub


def exchange_call(hub: Hub, token: str, method: str, path: str,
                  body: bytes | None = None) -> tuple[int, bytes]:
    """Call the exchange service's API straight, as a student's own code could."""
    url = exchange_url(hub.settings) + f"api/{path}"
    request = urllib.request.Request(url, data=body, method=method,
                                     headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for_exchange(hub: Hub, token: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if exchange_call(hub, token, "GET", "assignments")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the exchange service never answered\n{hub.log.read_text()[-3000:]}")


def first_answers(connections: list, wanted: int, within_s: float = 120) -> list[bytes]:
    """Return the first bytes the service answered on each connection that answered, once `wanted` have (or
    `within_s` passed): the uploads it refused answer at once, those it took wait for their bodies."""
    deadline, answered = time.monotonic() + within_s, {}
    while len(answered) < wanted and time.monotonic() < deadline:
        ready, _, _ = select.select([c for c in connections if c not in answered], [], [], 1.0)
        for connection in ready:
            answered[connection] = connection.recv(64)
    return list(answered.values())


def button(formgrader, path: str) -> dict:
    """Press one of formgrader's buttons (its REST API) and return nbgrader's answer, which must succeed."""
    reply = formgrader.call("POST", f"/formgrader/api/assignment/{path}", timeout=300)
    assert reply.status == 200 and reply.body["success"], reply
    return reply.body


def test_a_class_over_the_http_exchange(hub: Hub) -> None:
    paths, assignment = hub.settings.paths, smallest_assignment()
    ivy, ann, bob = hub.token("ivy"), hub.token("ann"), hub.token("bob")
    wait_for_exchange(hub, ann)
    assert not paths.exchange.exists()  # no exchange folder, so no world-writable inbound to plant in

    said = hub.cli("release", assignment, "--due", "2099-12-31T17:00:00-05:00").stdout
    assert "due 2099-12-31 22:00:00 UTC" in said and f"{COURSE}-exchange" in said, said
    store = paths.exchange_store
    grader = accounts.lookup(hub.settings.grader)
    assert (store.stat().st_uid, store.stat().st_mode & 0o777) == (grader.uid, 0o700)

    # ann tries to be bob: a query naming him, a folder named for him; it is filed as hers.
    notebooks = answers(assignment)
    forged = tar_of({f"{assignment}.ipynb": nbformat.writes(notebooks["wrong"]).encode(),
                     f"{hub.user('bob')}+{assignment}+2026-01-01 00:00:00 UTC/{assignment}.ipynb": b"{}"})
    status, body = exchange_call(hub, ann, "POST", f"submissions/{assignment}?student={hub.user('bob')}",
                                 forged)
    assert status == 200 and json.loads(body)["student_id"] == hub.user("ann"), body
    assert exchange_call(hub, ann, "PUT", f"assignments/{assignment}?force=1", forged)[0] == 403
    assert exchange_call(hub, "not-a-token", "GET", "assignments")[0] == 403

    # ann holds open as many uploads as she can (issue 61: 560 of them filled a service's 1024 files and a
    # classmate's submit failed): past her share each is refused at once, and bob submits meanwhile.
    held = [stalled_upload(exchange_url(hub.settings), ann, f"submissions/{assignment}") for _ in range(40)]
    try:
        wrong = tar_of({f"{assignment}.ipynb": nbformat.writes(notebooks["wrong"]).encode()})
        status, body = exchange_call(hub, bob, "POST", f"submissions/{assignment}", wrong)
        assert status == 200 and json.loads(body)["student_id"] == hub.user("bob"), body
        answered = first_answers(held, 40 - UPLOADS_PER_CALLER)
        assert len(answered) == 40 - UPLOADS_PER_CALLER, answered
        assert all(a.startswith(b"HTTP/1.1 429") for a in answered), answered
    finally:
        for connection in held:
            connection.close()

    servers = {"ann": start_server(hub, "ann", ann), "bob": start_server(hub, "bob", bob)}
    listed = servers["ann"].call("GET", f"/assignments?course_id={COURSE}")
    statuses = [a["status"] for a in listed.body["value"] if a["assignment_id"] == assignment]
    assert statuses == ["released", "submitted"], listed  # not fetched yet; the forged one is ann's
    hand_in(servers["ann"], assignment, notebooks["right"])
    hand_in(servers["bob"], assignment, notebooks["wrong"])
    assert len(submissions_of(servers["ann"], assignment)) == 2 and len(submissions_of(servers["bob"],
                                                                                       assignment)) == 2
    bob_sub = submissions_of(servers["bob"], assignment)[0]  # the newest
    stamp = urllib.parse.quote(bob_sub["timestamp"])
    assert exchange_call(hub, ann, "GET", f"submissions/{assignment}/{hub.user('bob')}/{stamp}")[0] == 403
    done = subprocess.run(["runuser", "-u", hub.user("ann"), "--", "ls", str(store)], capture_output=True,
                          check=False)
    assert done.returncode != 0  # the store is the grader account's alone

    assert "2 of 2 submitted" in hub.cli("status", assignment).stdout
    # formgrader's Collect, over HTTP with the formgrader service's own token: each one's newest, as theirs.
    formgrader = hub.as_user(ivy, f"/services/{COURSE}")
    button(formgrader, f"{assignment}/collect")
    said = hub.cli("collect", assignment).stdout
    assert said.count("No newer submission to collect") == 2, said
    submitted = paths.course / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == [hub.user("ann"), hub.user("bob")]
    stamps = {m: (submitted / hub.user(m) / assignment / "timestamp.txt").read_text() for m in servers}
    assert stamps["bob"] == bob_sub["timestamp"]
    assert not any((submitted / hub.user("ann") / assignment).glob(f"{hub.user('bob')}+*"))

    graded = hub.cli("grade", assignment, "--jobs", "2").stdout
    with (paths.course / "graded" / assignment / "grades.csv").open() as handle:
        grades = {row["student"]: row for row in csv.DictReader(handle)}
    top = float(grades[hub.user("ann")]["max_score"])
    assert top > 0 and float(grades[hub.user("ann")]["score"]) == top, graded
    assert float(grades[hub.user("bob")]["score"]) < top, graded

    said = hub.cli("feedback", assignment).stdout
    assert hub.user("ann") in said and hub.user("bob") in said, said
    for member, server in servers.items():
        newest = submissions_of(server, assignment)[0]
        assert newest["has_exchange_feedback"] and not newest["has_local_feedback"], newest
        fetched = server.call("POST", "/assignments/fetch_feedback",
                              {"course_id": COURSE, "assignment_id": assignment})
        assert fetched.status == 200 and fetched.body["success"], fetched
        page = (Path("/home") / hub.user(member) / COURSE / assignment / "feedback" / stamps[member]
                / f"{assignment}.html").read_text()
        score = SCORE.search(page)
        assert score and float(score["score"]) == float(grades[hub.user(member)]["score"]), member
        assert submissions_of(server, assignment)[0]["has_local_feedback"]

    # Autograde on submit, through the exchange service too: bob answers again, right this time, and his
    # feedback comes back with no instructor action.
    said = hub.cli("autograde", "on", assignment).stdout
    assert "on" in said, said
    hand_in(servers["bob"], assignment, notebooks["right"], fetch=False)
    newest = submissions_of(servers["bob"], assignment)[0]
    deadline = time.monotonic() + 300
    while not newest["has_exchange_feedback"] and time.monotonic() < deadline:
        time.sleep(1)
        newest = submissions_of(servers["bob"], assignment)[0]
    assert newest["has_exchange_feedback"], hub.cli("autograde", "status", assignment).stdout
    fetched = servers["bob"].call("POST", "/assignments/fetch_feedback",
                                  {"course_id": COURSE, "assignment_id": assignment})
    assert fetched.status == 200 and fetched.body["success"], fetched
    page = (Path("/home") / hub.user("bob") / COURSE / assignment / "feedback" / newest["timestamp"]
            / f"{assignment}.html").read_text()
    score = SCORE.search(page)
    assert score and float(score["score"]) == top, page[:2000]
