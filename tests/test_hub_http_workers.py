"""Grading workers on a real JupyterHub (`hub setup --exchange http --grading-workers 2`), on loopback.

The hub runs two workers as services of the grader account, each in its own course copy. One is killed (found
by its command line) and the hub starts it again. Autograde is turned on, two students submit through their
own servers, the workers grade the submissions and give the feedback back, and the autograde service records
their scores in the course gradebook, where `hub export` reads them. Opt in with DEVICELAB_HUB_TESTS=1, as
root; under CI=true a skip is a failure.
"""

import csv
import time
from pathlib import Path

import psutil
import pytest

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
from tests.test_hub_http_exchange import wait_for_exchange

COURSE = "device-lab"
ROSTER = "id,name,role\nann,Ann Right,student\nbob,Bob Wrong,student\nivy,Ivy Teacher,instructor\n"

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture
def hub(tmp_path: Path):
    """A hub with the HTTP exchange and two grading workers; afterwards stopped, every trace removed."""
    hub_tests_or_skip()
    with class_hub(tmp_path, ROSTER, setup_args=("--exchange", "http", f"--exchange-port={free_port()}",
                                                 "--grading-workers", "2")) as running_hub:
        yield running_hub


def workers(hub: Hub) -> dict[int, psutil.Process]:
    """Return the hub's worker processes, by the number of the course copy each grades in."""
    found = {}
    for proc in psutil.process_iter(["cmdline"]):
        line = proc.info["cmdline"] or []
        if "autograder.hub.service.grading_worker" in line and "--course" in line:
            course = Path(line[line.index("--course") + 1])
            if course.parent == hub.settings.paths.course / "workers":
                found[int(course.name.rsplit("-", 1)[1])] = proc
    return found


def wait_until(get, good, seconds: float, what: str, hub: Hub):
    """Return get() once good(it) holds; fail, with the hub's log, after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = get()
        if good(got):
            return got
        time.sleep(0.5)
    pytest.fail(f"{what}\n{hub.log.read_text()[-4000:]}")


def exported(hub: Hub, assignment: str) -> dict[str, float]:
    path = Path(hub.settings.root) / "export.csv"
    hub.cli("export", "--to", str(path))
    with path.open() as handle:
        return {r["student_id"]: float(r["score"]) for r in csv.DictReader(handle)
                if r["assignment"] == assignment}


def test_workers_grade_on_submit_the_gradebook_has_their_scores_and_a_killed_one_comes_back(hub: Hub) -> None:
    assignment, paths = smallest_assignment(), hub.settings.paths
    ann, bob = hub.token("ann"), hub.token("bob")
    wait_for_exchange(hub, ann)
    first = wait_until(lambda: workers(hub), lambda w: sorted(w) == [1, 2], 120,
                       "the hub did not start two workers", hub)
    assert all((paths.worker_course(k) / "source" / assignment).is_dir() for k in first)
    assert {p.username() for p in first.values()} == {hub.settings.grader}

    first[1].kill()  # the hub starts it again
    again = wait_until(lambda: workers(hub), lambda w: sorted(w) == [1, 2] and w[1].pid != first[1].pid,
                       120, "the killed worker was not started again", hub)
    assert again[2].pid == first[2].pid

    hub.cli("release", assignment)
    assert "on" in hub.cli("autograde", "on", assignment).stdout
    notebooks = answers(assignment)
    servers = {"ann": start_server(hub, "ann", ann), "bob": start_server(hub, "bob", bob)}
    hand_in(servers["ann"], assignment, notebooks["right"])
    hand_in(servers["bob"], assignment, notebooks["wrong"])
    for member, server in servers.items():
        wait_until(lambda s=server: submissions_of(s, assignment)[0]["has_exchange_feedback"], bool, 300,
                   f"no feedback for {member}: {hub.cli('autograde', 'status', assignment).stdout}", hub)

    status = hub.cli("autograde", "status", assignment).stdout
    assert status.count("graded by") == 2, status  # recorded from the workers, not graded by the service
    scores = wait_until(lambda: exported(hub, assignment), lambda e: len(e) == 2, 60,
                        "the gradebook lacks the workers' scores", hub)
    assert scores[hub.user("ann")] > 0 and scores[hub.user("bob")] < scores[hub.user("ann")], scores
    assert not (paths.course / "autograde" / "graded" / assignment / "grades.csv").exists()
