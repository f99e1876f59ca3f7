"""Grading workers on a real JupyterHub (`hub setup --exchange http --grading-workers 2`), on loopback.

The hub runs two workers as services of the grader account, each in its own course copy. One is killed (found
by its command line) and the hub starts it again. Autograde is turned on, two students submit through their
own servers, the workers grade the submissions and give the feedback back, and the autograde service records
their scores in the course gradebook, where `hub export` reads them. Opt in with DEVICELAB_HUB_TESTS=1, as
root; under CI=true a skip is a failure.
"""

from pathlib import Path

import psutil
import pytest

from tests.hub.test_hub_http_exchange import wait_for_exchange
from tests.hub_support import (
    Hub,
    class_hub,
    free_port,
    graded_by_workers,
    hub_parts,
    hub_tests_or_skip,
    smallest_assignment,
    start_server,
    wait_until,
)

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
    return {int(name.rsplit("-", 1)[1]): proc for name, proc in hub_parts(hub).items() if name != "exchange"}


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

    servers = {"ann": start_server(hub, "ann", ann), "bob": start_server(hub, "bob", bob)}
    graded_by_workers(hub, servers, assignment)
    assert not (paths.course / "autograde" / "graded" / assignment / "grades.csv").exists()
