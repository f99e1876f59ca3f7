"""A class run from an LMS course page, end to end on loopback: the LMS stand-in (a real LTI 1.3 platform)
launches people into a real hub, a student submits, the autograde service grades, the score lands in the LMS's
gradebook; bad launches are refused with a page that says so. Root only, with DEVICELAB_HUB_TESTS=1.
"""

import html
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from autograder.hub import accounts
from autograder.hub.api import HubAPI
from tests.hub_support import (
    answers,
    hand_in,
    hub_tests_or_skip,
    smallest_assignment,
    start_server,
)
from tests.lms_standin import INSTRUCTOR, Class, LmsStandin, Person, connected_class
from tests.test_hub_autograde import wait_for_feedback

pytestmark = pytest.mark.timeout(1800)
ANN = Person("lms-ann-7f3", "Ann Lee", "ann@school.example")
IVY = Person("lms-ivy-21c", "Ivy Teach", "ivy@school.example", (INSTRUCTOR,))
BOB = Person("lms-bob-99a", "Bob Ray", "bob@school.example")
EVE = Person("lms-eve-404", "Eve Other", "eve@school.example")


@pytest.fixture
def lti_class(tmp_path: Path):
    """Start the LMS stand-in, set a hub up with --authenticator lti13 for it, register the hub in the LMS."""
    hub_tests_or_skip()
    later = ("ann", "ivy", "bob", "eve")  # accounts the launches and the roster make
    with connected_class(tmp_path, (ANN, IVY, EVE), later) as connected:
        yield connected


@dataclass
class Launched:
    """What a browser got at the end of a launch: the hub's reply to the id_token form, and the browser."""

    reply: requests.Response
    browser: requests.Session
    form: dict[str, str]
    action: str


def launch(lms: LmsStandin, person: Person, variant: str = "") -> Launched:
    """Click the tool's link in the LMS as a browser would (the LMS's auto-submitting form posted by hand)."""
    browser = requests.Session()
    page = browser.get(lms.launch_url(person.sub, variant), timeout=60)  # LMS -> hub's login -> LMS's form
    assert page.status_code == 200 and 'id="launch"' in page.text, page.text[:500]
    action = html.unescape(re.search(r'action="([^"]+)"', page.text)[1])
    form = {k: html.unescape(v) for k, v in re.findall(r'name="(\w+)" value="([^"]*)"', page.text)}
    reply = browser.post(action, data=form, allow_redirects=False, timeout=120)
    return Launched(reply, browser, form, action)


def refused(launched: Launched) -> str:
    """Return the text of the hub's refusal page (failing if the launch was let in)."""
    status = launched.reply.status_code
    assert status in (400, 401, 403), (status, launched.reply.text[:300])
    text = html.unescape(launched.reply.text)
    assert "This launch was refused" in text or "not meant for this hub" in text, text[:2000]
    assert "Open the course from your LMS again" in text
    return text


def test_a_class_run_from_the_lms(lti_class: Class) -> None:
    hub, lms = lti_class.hub, lti_class.lms
    admin = HubAPI.for_settings(hub.settings)
    course = hub.settings.course_id

    # Bad launches: each refused with a page that says why; nobody is let in, no account is made.
    assert "Signature verification failed" in refused(launch(lms, EVE, "forged"))
    assert "not meant for this hub" in refused(launch(lms, EVE, "audience"))
    assert "expired" in refused(launch(lms, EVE, "expired"))
    assert "another course (Another course)" in refused(launch(lms, EVE, "other-course"))
    assert "deployment" in refused(launch(lms, EVE, "other-deployment"))
    assert accounts.lookup(hub.user("eve")) is None
    assert admin.call("GET", f"/users/{hub.user('eve')}").status == 404

    # The instructor's first launch: account, admin, formgrader's group.
    first = launch(lms, IVY)
    assert first.reply.status_code == 302, first.reply.text[:2000]
    ivy = admin.call("GET", f"/users/{hub.user('ivy')}").body
    assert ivy["admin"] and sorted(ivy["groups"]) == [f"formgrade-{course}", f"nbgrader-{course}"]

    # A student's first launch makes her account and logs her in; the same launch again is refused.
    ann_launch = launch(lms, ANN)
    assert ann_launch.reply.status_code == 302, ann_launch.reply.text[:2000]
    assert ann_launch.reply.headers["Location"].endswith("/hub/")
    assert any(c.name.startswith("jupyterhub-session") or c.name == "jupyterhub-hub-login"
               for c in ann_launch.browser.cookies)
    ann = admin.call("GET", f"/users/{hub.user('ann')}").body
    assert not ann["admin"] and ann["groups"] == [f"nbgrader-{course}"]
    assert accounts.lookup(hub.user("ann")) is not None
    assert "ann,Ann Lee,student" in hub.settings.paths.roster.read_text()
    replayed = ann_launch.browser.post(ann_launch.action, data=ann_launch.form, allow_redirects=False,
                                       timeout=60)
    refused(Launched(replayed, ann_launch.browser, ann_launch.form, ann_launch.action))

    # She fetches, submits; the autograde service grades; the score appears in the LMS's gradebook.
    assignment = smallest_assignment()
    hub.cli("release", assignment)
    hub.cli("autograde", "on", assignment, "--timeout", "60")
    server = start_server(hub, "ann", hub.token("ann"))
    hand_in(server, assignment, answers(assignment)["right"])
    wait_for_feedback(server, assignment)
    deadline = time.monotonic() + 90
    while not lms.gradebook().scores_of(assignment) and time.monotonic() < deadline:
        time.sleep(1)
    [posted] = lms.gradebook().scores_of(assignment)
    queue = hub.cli("autograde", "status", assignment).stdout
    assert posted["userId"] == ANN.sub and posted["scoreGiven"] == posted["scoreMaximum"] > 0, (posted, queue)
    assert posted["gradingProgress"] == "FullyGraded"
    assert "1 sent" in hub.cli("passback", "status", assignment).stdout

    # The instructor grades again by hand: the same score is not posted twice.
    hub.cli("collect", assignment)
    graded = hub.cli("grade", assignment).stdout
    assert "queued for the LMS: 0 new scores" in graded, graded
    assert len(lms.gradebook().scores_of(assignment)) == 1

    # The roster from the LMS: Bob, enrolled after the hub was set up, gets his account.
    lms.enrol(BOB)
    said = hub.cli("roster", "--from-lms").stdout
    assert f"{hub.user('bob')}: account {hub.user('bob')} created" in said, said
    assert accounts.lookup(hub.user("bob")) is not None
    assert "bob,Bob Ray,student" in hub.settings.paths.roster.read_text()
