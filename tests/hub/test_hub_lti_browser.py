"""The LTI 1.3 launch in a real browser: a student opens the tool from the course page of the LMS stand-in (a
real LTI 1.3 platform on loopback) and headless Chromium goes the whole way by itself: the button posts the
login initiation to the hub's /hub/lti13/oauth_login, the hub sends the browser to the LMS's authorize
endpoint, the LMS's auto-submitting form posts the signed id_token to /hub/lti13/oauth_callback, and the
student ends in her own JupyterLab on the hub, her account made by that first launch. A launch from another
course, and one with a forged signature, end on the hub's refusal page with its message; no account is
made, no session given.
Needs DEVICELAB_HUB_TESTS=1 (root) and Chromium (Debian's); under CI=true a skip is a failure.
"""

import json
import re
from collections.abc import Iterator

import pytest

from autograder.hub.setup import accounts
from autograder.hub.setup.hub_api import HubAPI
from autograder.hub.setup.roster import Member, read_roster
from tests.browser_support import fresh_page, launched_chromium, screenshot
from tests.hub_support import hub_tests_or_skip
from tests.lms_standin import Class, LmsStandin, Person, connected_class

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1800)]
CAL = Person("lms-cal-5e1", "Cal Diaz", "cal@school.example")
EVE = Person("lms-eve-404", "Eve Other", "eve@school.example")
LOGIN_COOKIE = "jupyterhub-hub-login"  # the hub's session of a logged-in user


@pytest.fixture(scope="module")
def lti_class(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Class]:
    """Start the LMS stand-in, set a hub up with --authenticator lti13 for it, register the hub in the LMS.

    One hub for the module's launches: each test launches its own people in its own browser context.
    """
    hub_tests_or_skip()
    tmp_path = tmp_path_factory.mktemp("lti-browser")
    with connected_class(tmp_path, (CAL, EVE), ("cal", "eve")) as connected:
        yield connected


@pytest.fixture(scope="module")
def chromium(lti_class: Class):
    """One headless Chromium for the module's launches (each test gets a context of its own)."""
    with launched_chromium() as browser:
        yield browser


@pytest.fixture
def page(chromium):
    """A fresh page, in a fresh browser context: no cookies of another test's launch."""
    with fresh_page(chromium, 1400, 900) as fresh:
        yield fresh


def open_tool(page, lms: LmsStandin, person: Person, variant: str = ""):
    """Open the course page in the LMS as the person and click the tool's button; return the hub's reply to
    the id_token the LMS's form posted (the browser follows every step by itself)."""
    page.goto(lms.course_url(person.sub, variant))
    with page.expect_response(lambda r: "/hub/lti13/oauth_callback" in r.url, timeout=120_000) as callback:
        page.get_by_role("button", name="Open Device Lab").click()
    return callback.value


def logged_in(page) -> bool:
    """Return whether the browser holds the hub's login cookie."""
    return any(c["name"].endswith(LOGIN_COOKIE) for c in page.context.cookies())


def test_a_student_launches_from_the_lms_into_her_lab(lti_class: Class, page) -> None:
    hub, lms = lti_class.hub, lti_class.lms
    user = hub.user("cal")
    assert accounts.lookup(user) is None
    try:
        reply = open_tool(page, lms, CAL)
        assert reply.status == 302 and reply.request.method == "POST", (reply.status, reply.text()[:2000])
        # The hub sends her on to her own server, started for her: she is in JupyterLab, as herself.
        page.wait_for_url(re.compile(rf"/user/{re.escape(user)}/lab"), timeout=240_000)
        page.wait_for_selector(".jp-LabShell", timeout=120_000)
        config = json.loads(page.locator("#jupyter-config-data").text_content())
        assert config["hubUser"] == user, config
        assert logged_in(page), page.context.cookies()
        page.goto(f"{hub.public}/hub/home")
        assert page.url == f"{hub.public}/hub/home", page.url
        assert user in page.locator("body").inner_text()
    except Exception:
        screenshot(page, "hub-lti-launch-failed")
        raise
    # Her account, her gradebook entry and her hub user were made by the launch: a student, not an admin.
    course = hub.settings.course_id
    said = HubAPI.for_settings(hub.settings).call("GET", f"/users/{user}").body
    assert not said["admin"] and said["groups"] == [f"nbgrader-{course}"], said
    assert said["servers"][""]["ready"], said
    assert accounts.lookup(user) is not None
    assert Member("cal", "Cal Diaz", "student") in read_roster(hub.settings.paths.roster, hub.prefix)


@pytest.mark.parametrize(("variant", "said"), [
    ("other-course", "this launch comes from another course (Another course)"),
    ("forged", "Signature verification failed"),
])
def test_a_bad_launch_shows_the_refusal_page(lti_class: Class, page, variant: str, said: str) -> None:
    hub, lms = lti_class.hub, lti_class.lms
    try:
        reply = open_tool(page, lms, EVE, variant)
        assert reply.status in (400, 401, 403), (reply.status, reply.text()[:2000])
        page.get_by_text("This launch was refused").first.wait_for(timeout=60_000)  # the page, once shown
        text = page.locator("body").inner_text()
        assert said in text and "This launch was refused" in text, text
        assert "Open the course from your LMS again" in text, text
        assert "/hub/lti13/oauth_callback" in page.url, page.url  # the browser stays on the refusal
        assert not logged_in(page), page.context.cookies()
        page.goto(f"{hub.public}/hub/home")  # no session: the hub does not let her in
        assert not page.url.startswith(f"{hub.public}/hub/home"), page.url
    except Exception:
        screenshot(page, f"hub-lti-refused-{variant}-failed")
        raise
    assert accounts.lookup(hub.user("eve")) is None
    assert HubAPI.for_settings(hub.settings).call("GET", f"/users/{hub.user('eve')}").status == 404
    assert "eve" not in {m.id for m in read_roster(hub.settings.paths.roster, hub.prefix)}
