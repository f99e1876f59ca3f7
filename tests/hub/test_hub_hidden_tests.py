"""Hidden tests stay hidden on a real hub until the instructor releases the full feedback (issue 24, hole 10).

A student with a hub account submits ps01 through their own server with autograding on: a `describe` that
fails only a hidden test, and cells that read the hidden tests while they run and try to carry them out
(print, an exception, an earlier display updated later, the repr of a value a visible test prints). They fetch
their feedback with nbgrader's Fetch Feedback seconds later: its score, the visible tests and the instructor's
message for the failing hidden block, and no hidden test line. After `hub collect`, `hub grade` and
`hub feedback` (the full feedback, as after the due date) the same fetch shows the hidden tests.

DEVICELAB_HUB_TESTS=1 and root; under CI=true a skip is a failure.
"""

import copy
import urllib.parse

import pytest

from autograder.cells import grade_id
from tests.course.test_redact import PS01, SCORE, leaks, ps01_class, text_of
from tests.hub.test_hub_autograde import wait_for_feedback
from tests.hub_support import COURSE, Hub, class_hub, hand_in, hub_tests_or_skip, start_server

ROSTER = "id,name,role\nann,Ann Curious,student\nivy,Ivy Teacher,instructor\n"
MESSAGE = "each value must be the plain Python type the prompt names"  # ps01's describe-tests-basic Feedback


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """One hub for the module's tests: the accounts, set up and started; afterwards every trace removed."""
    hub_tests_or_skip()
    with class_hub(tmp_path_factory.mktemp("hidden-tests"), ROSTER) as running_hub:
        yield running_hub


def curious_answer():
    """Return ps01 answered by a thief whose describe fails a hidden test only."""
    students = ps01_class()
    nb = copy.deepcopy(students["thief"])
    wrong = next(c for c in students["hidden-wrong"].cells if grade_id(c) == "describe")
    next(c for c in nb.cells if grade_id(c) == "describe").source = wrong.source
    return nb


def fetched_page(server, stamp: str) -> str:
    """Fetch the feedback (the student's Fetch Feedback) and return the page of that submission."""
    reply = server.call("POST", "/assignments/fetch_feedback", {"course_id": COURSE, "assignment_id": PS01})
    assert reply.status == 200 and reply.body["success"], reply
    folder = f"{COURSE}/{PS01}/feedback/{urllib.parse.quote(stamp)}"
    page = server.call("GET", f"/api/contents/{folder}/{PS01}.html?type=file")
    assert page.status == 200, page
    return page.body["content"]


def test_feedback_on_submit_hides_hidden_tests_until_the_full_feedback(hub: Hub) -> None:
    hub.cli("release", PS01)
    assert "on" in hub.cli("autograde", "on", PS01).stdout
    server = start_server(hub, "ann", hub.token("ann"))
    hand_in(server, PS01, curious_answer())
    stamp = wait_for_feedback(server, PS01, seconds=300)

    on_submit = text_of(fetched_page(server, stamp))
    score = SCORE.search(on_submit)
    assert score and 0 < float(score["score"]) < float(score["max"]), on_submit[:2000]
    assert leaks(on_submit) == [], leaks(on_submit)[:5]  # red while the service releases nbgrader's full page
    assert "A hidden test of this cell failed." in on_submit and MESSAGE in on_submit

    hub.cli("collect", PS01)
    hub.cli("grade", PS01)
    hub.cli("feedback", PS01)
    full = text_of(fetched_page(server, stamp))
    assert SCORE.search(full)[0] == score[0]
    assert len(leaks(full)) > 50  # the full feedback: every hidden test, and what the thief carried out
