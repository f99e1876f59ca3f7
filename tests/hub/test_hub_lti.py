"""A class run from an LMS course page, end to end on loopback: the LMS stand-in (a real LTI 1.3 platform)
launches people into a real hub, a student submits, the autograde service grades, the score lands in the LMS's
gradebook; bad launches are refused with a page that says so. Then who a launch becomes, tried as a student
or a teacher of another course would: no launch becomes a system or staff account, nor an account of another
LMS person (a roster instructor's name, a lookalike, a changed email), and roles follow the LMS at every
launch and across a restart. Root only, with DEVICELAB_HUB_TESTS=1.
"""

import html
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import requests

from autograder.hub.setup import accounts
from autograder.hub.setup.hub_api import HubAPI
from autograder.hub.setup.roster import Member, read_roster
from tests.hub.test_hub_autograde import wait_for_feedback
from tests.hub_support import (
    ROOT,
    answers,
    hand_in,
    hub_tests_or_skip,
    smallest_assignment,
    start_server,
    wait_until,
)
from tests.lms_standin import (
    INSTRUCTOR,
    LEARNER,
    TEACHING_ASSISTANT,
    Class,
    LmsStandin,
    Person,
    connected_class,
)
from tests.spreadsheet import checked

pytestmark = pytest.mark.timeout(1800)
LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
CANVAS_TA = (LIS + "institution/person#Student", INSTRUCTOR, TEACHING_ASSISTANT, LIS + "system/person#User")
ANN = Person("lms-ann-7f3", "Ann Lee", "ann@school.example")
IVY = Person("lms-ivy-21c", "Ivy Teach", "ivy@school.example", (INSTRUCTOR,))
BOB = Person("lms-bob-99a", "Bob Ray", "bob@school.example")
EVE = Person("lms-eve-404", "Eve Other", "eve@school.example")
# Who would take an account that is not theirs.
ROOTY = Person("lms-root-1d0", "Rooty", "root@example.org")
NOBODY = Person("lms-nob-2e1", "No Body", "nobody@example.org")
SAM = Person("lms-sam-3f2", "Sam Student", "sam@school.example")  # his email's name is a staff login
TOM = Person("lms-tom-4a3", "Tom Teach", "tom@school.example", (INSTRUCTOR,))  # on the roster, never launched
MAL = Person("lms-mal-5b4", "Mal Icious", "Tom@evil.example")  # the instructor's name as his email
KIM = Person("lms-kim-6c5", "Kim Lee", "kim@school.example")
KELVIN = Person("lms-kel-7d6", "Kel Vin", "\u212aim@evil.example")  # the Kelvin sign lowercases to k
JOHN = Person("lms-jsd-8e7", "John Smith", "John.Smith@school.example")
JOHN2 = Person("lms-jsm-9f8", "John Smith", "john-smith@school.example")
NEL = Person("lms-nel-a09", "Nel\nLine", "nel@school.example")  # a newline in the name
HYP = Person("lms-hyp-b1a", '=HYPERLINK("http://x","click")', "hyp@school.example")
GIL = Person("lms-gil-c2b", "Gil Marker", "gil@school.example", CANVAS_TA)
ROSE = Person("lms-rose-d3c", "Rose Teach", "rose@school.example", (INSTRUCTOR,))


@pytest.fixture(scope="module")
def lti_class(tmp_path_factory: pytest.TempPathFactory):
    """Start the LMS stand-in, set a hub up with --authenticator lti13 for it, register the hub in the LMS.

    One hub for the module (each hub start costs a minute); each test launches people of its own.
    """
    hub_tests_or_skip()
    with connected_class(tmp_path_factory.mktemp("lti"), (ANN, IVY, EVE), ()) as connected:
        yield connected


@dataclass
class Launched:
    """What a browser got at the end of a launch: the hub's reply to the id_token form, and the browser."""

    reply: requests.Response
    browser: requests.Session
    form: dict[str, str]
    action: str
    cookies: requests.cookies.RequestsCookieJar  # the browser's when it posted the form (state, nonce)


def launch(lms: LmsStandin, person: Person, variant: str = "") -> Launched:
    """Click the tool's link in the LMS as a browser would (the LMS's auto-submitting form posted by hand)."""
    browser = requests.Session()
    page = browser.get(lms.launch_url(person.sub, variant), timeout=60)  # LMS -> hub's login -> LMS's form
    assert page.status_code == 200 and 'id="launch"' in page.text, page.text[:500]
    action = html.unescape(re.search(r'action="([^"]+)"', page.text)[1])
    form = {k: html.unescape(v) for k, v in re.findall(r'name="(\w+)" value="([^"]*)"', page.text)}
    cookies = browser.cookies.copy()
    reply = browser.post(action, data=form, allow_redirects=False, timeout=120)
    return Launched(reply, browser, form, action, cookies)


def replay(launched: Launched) -> Launched:
    """Post a launch's id_token again, from a browser holding the cookies it was first posted with (so that
    ltiauthenticator's own checks of the state and nonce pass: only the hub's nonce ledger is left)."""
    browser = requests.Session()
    browser.cookies.update(launched.cookies)
    reply = browser.post(launched.action, data=launched.form, allow_redirects=False, timeout=60)
    return Launched(reply, browser, launched.form, launched.action, launched.cookies)


def who(launched: Launched) -> str:
    """Return the hub user a launch logged in (failing if it was refused), as the hub's home page names it."""
    assert launched.reply.status_code == 302, launched.reply.text[:2000]
    home = launched.browser.get(launched.action.split("/hub/")[0] + "/hub/home", timeout=60)
    found = re.search(r'id="login_widget">\s*<span class="me-1">([^<]+)</span>', home.text)
    assert found, home.text[:2000]
    return html.unescape(found[1])


def hub_user(hub, name: str) -> dict:
    """Return the hub's record of a user (admin, groups)."""
    reply = HubAPI.for_settings(hub.settings).call("GET", f"/users/{name}")
    assert reply.status == 200, (name, reply)
    return reply.body


def roster_of(hub) -> dict[str, Member]:
    """Return the hub's roster by id."""
    return {m.id: m for m in read_roster(hub.settings.paths.roster, hub.prefix)}


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
    assert roster_of(hub)["ann"] == Member("ann", "Ann Lee", "student")
    assert "already used" in refused(replay(ann_launch))

    # She fetches, submits; the autograde service grades; the score appears in the LMS's gradebook.
    assignment = smallest_assignment()
    hub.cli("release", assignment)
    hub.cli("autograde", "on", assignment)
    server = start_server(hub, "ann", hub.token("ann"))
    hand_in(server, assignment, answers(assignment)["right"])
    wait_for_feedback(server, assignment)
    [posted] = wait_until(lambda: lms.gradebook().scores_of(assignment), bool, 300,
                          lambda: f"no score in the LMS: {hub.cli('passback', 'status', assignment).stdout}",
                          hub)
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
    assert roster_of(hub)["bob"] == Member("bob", "Bob Ray", "student")


def test_an_lti_setup_without_a_prefix_or_the_course_is_refused(tmp_path: Path) -> None:
    """Without a prefix, names from claims could be system or staff logins; without the course's context id,
    the first instructor launch from any course of the deployment would bind the hub."""
    hub_tests_or_skip()
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name,role\n")
    lti = ["--authenticator", "lti13", "--lti-issuer", "https://lms.example", "--lti-client-id", "tool",
           "--lti-deployment-id", "deploy-1", "--lti-keyset-url", "https://lms.example/jwks",
           "--lti-authorize-url", "https://lms.example/auth"]
    for extra, said in [(["--prefix", "dl-"], "--lti-context-id"),
                        (["--lti-context-id", "course-101"], "--prefix")]:
        done = subprocess.run([sys.executable, "-m", "autograder", "hub", "setup", "--root",
                               str(tmp_path / "hub"), "--roster", str(roster), *lti, *extra], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2 and said in done.stderr, (done.stdout, done.stderr)
        assert not (tmp_path / "hub").exists()  # nothing was made


def test_no_launch_becomes_a_system_or_staff_account(lti_class: Class) -> None:
    hub, lms = lti_class.hub, lti_class.lms
    staff = hub.user("sam")  # a staff member's own login, made by hand, that the hub did not make
    subprocess.run(["useradd", "--create-home", staff], check=True)
    staff_uid = accounts.lookup(staff).uid
    for person in (ROOTY, NOBODY, SAM):
        lms.enrol(person)

    assert who(launch(lms, ROOTY)) == hub.user("root")  # root@example.org: an account of the hub's, not root
    assert who(launch(lms, NOBODY)) == hub.user("nobody")
    sam = who(launch(lms, SAM))
    assert sam.startswith(hub.user("sam-")) and len(sam) <= 32  # a name of his own, not the staff login
    low, high = accounts.uid_range()
    for made in (hub.user("root"), hub.user("nobody"), sam):
        assert low <= accounts.lookup(made).uid <= high
    assert accounts.lookup(staff).uid == staff_uid
    users = {u["name"] for u in HubAPI.for_settings(hub.settings).call("GET", "/users").body}
    assert not {"root", "nobody", staff} & users, users
    assert staff not in {hub.user(m) for m in roster_of(hub)}


def test_an_account_is_its_lms_person_s_whoever_takes_the_name_first(lti_class: Class) -> None:
    hub, lms = lti_class.hub, lti_class.lms
    course = hub.settings.course_id
    lms.enrol(KIM)
    assert who(launch(lms, KIM)) == hub.user("kim")  # (the launch also tells the hub where NRPS is)

    # The roster from the LMS binds each new account to its LMS person (NRPS user id), names as labels.
    for person in (TOM, JOHN, JOHN2, NEL, HYP):
        lms.enrol(person)
    said = hub.cli("roster", "--from-lms").stdout
    assert f"{hub.user('tom')}: account {hub.user('tom')} created" in said, said
    johns = sorted(m.id for m in roster_of(hub).values() if m.name == "John Smith")
    assert johns[0] == "john-smith" and johns[1].startswith("john-smith-"), (johns, said)  # two people
    members = roster_of(hub)
    assert (members["nel"].name, members["hyp"].name) == ("Nel Line", HYP.name)
    assert members["tom"].role == "instructor"
    checked(hub.settings.paths.roster.read_text(encoding="utf-8"))  # spreadsheet-safe, one line each

    # Two people join and launch first: one gives the instructor's name as his email, one a lookalike.
    lms.enrol(MAL)
    lms.enrol(KELVIN)
    mal = who(launch(lms, MAL))
    assert mal.startswith(hub.user("tom-")), mal
    assert not hub_user(hub, mal)["admin"] and hub_user(hub, mal)["groups"] == [f"nbgrader-{course}"]
    kelvin = who(launch(lms, KELVIN))
    assert kelvin.startswith(hub.user("kim-")), kelvin
    assert len({mal, kelvin, hub.user("tom"), hub.user("kim")}) == 4

    # The real ones get their own accounts, with their roles.
    assert who(launch(lms, TOM)) == hub.user("tom") and hub_user(hub, hub.user("tom"))["admin"]
    assert who(launch(lms, KIM)) == hub.user("kim")
    again = hub.cli("roster", "--from-lms").stdout  # nothing moves
    assert f"{hub.user('tom')}: on the roster" in again and "created" not in again, again

    # Kim changes her email: the same LMS person, the same account.
    lms.enrol(replace(KIM, email="kimberly@school.example"))
    assert who(launch(lms, KIM)) == hub.user("kim")
    assert accounts.lookup(hub.user("kimberly")) is None and "kimberly" not in roster_of(hub)


def test_roles_follow_the_lms_at_every_launch_and_across_a_restart(lti_class: Class) -> None:
    hub, lms = lti_class.hub, lti_class.lms
    course = hub.settings.course_id
    lms.enrol(GIL)
    lms.enrol(ROSE)

    # A Canvas TA (Instructor comes with the TA role): a grader, not an admin.
    gil = who(launch(lms, GIL))
    assert not hub_user(hub, gil)["admin"] and hub_user(hub, gil)["groups"] == [f"formgrade-{course}"]
    assert roster_of(hub)["gil"].role == "grader"

    # An instructor loses the role in the LMS: her next launch takes admin and the formgrader group away.
    rose = who(launch(lms, ROSE))
    assert hub_user(hub, rose)["admin"]
    lms.enrol(replace(ROSE, roles=(LEARNER,)))
    before_restart = launch(lms, ROSE)
    assert who(before_restart) == rose
    assert not hub_user(hub, rose)["admin"] and hub_user(hub, rose)["groups"] == [f"nbgrader-{course}"]
    assert roster_of(hub)["rose"].role == "student"

    # A restart gives nothing back from a stale roster, and a launch from before it cannot be replayed.
    hub.restart()
    assert not hub_user(hub, rose)["admin"] and hub_user(hub, rose)["groups"] == [f"nbgrader-{course}"]
    assert "already used" in refused(replay(before_restart))
