"""LTI launches as the course reads them: roles, account names, who is who, the course, replays (no hub)."""

import os
from dataclasses import replace
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

from autograder.hub.lms import launch as lti_launch
from autograder.hub.lms.launch import Launch, LaunchRefused, NonceLedger, check_course, course_role
from autograder.hub.lms.names import account_name, claimed_name, fold, label
from autograder.hub.lms.people import LmsKey, People
from autograder.hub.settings import HubError, HubSettings, LtiSettings
from autograder.hub.setup import accounts
from autograder.hub.setup.checks import check_lti
from autograder.hub.setup.render import render_all, write_all
from autograder.hub.setup.roster import NAME, Member, hub_groups
from tests.lms_standin import INSTRUCTOR, LEARNER, TEACHING_ASSISTANT

ROOT = Path(__file__).resolve().parents[2]
CLAIM = lti_launch.CLAIM
LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
# What Canvas sends for a TA: the principal role Instructor comes with the sub-role, and institution roles.
CANVAS_TA = (LIS + "institution/person#Student", INSTRUCTOR, TEACHING_ASSISTANT, LIS + "system/person#User")
CANVAS_SUB = "535fa085f22b4655f48cd5a36a9215f64c062838"  # 40 characters, as Canvas makes them
ANN = LmsKey("https://lms.example", "deploy-1", "lms-ann")
MAL = LmsKey("https://lms.example", "deploy-1", "lms-mal")


def claims(**extra) -> dict:
    """Return the claims of a good launch of Ann, a learner of course-101, with `extra` changed."""
    base = {"iss": "https://lms.example", "sub": "lms-ann", "name": "Ann Lee",
            "email": "Ann.Lee@school.example", "nonce": "n1", "exp": 2_000_000_000,
            CLAIM + "roles": [LEARNER], CLAIM + "deployment_id": "deploy-1",
            CLAIM + "context": {"id": "course-101", "title": "Device Lab 101"},
            lti_launch.AGS_CLAIM: {"lineitems": "https://lms/lineitems"},
            lti_launch.NRPS_CLAIM: {"context_memberships_url": "https://lms/members"}}
    return {**base, **extra}


def lti(**changes) -> LtiSettings:
    base = LtiSettings(issuer="https://lms.example", client_id="tool-1", deployment_id="deploy-1",
                       keyset_url="https://lms.example/jwks", authorize_url="https://lms.example/auth",
                       context_id="course-101")
    return replace(base, **changes)


# Roles: this course's membership, full LIS URIs matched exactly (or the simple names); a TA is a grader.

@pytest.mark.parametrize(("roles", "role"), [
    ([LEARNER], "student"),
    ([INSTRUCTOR], "instructor"),
    ([TEACHING_ASSISTANT], "grader"),
    (["Instructor"], "instructor"),
    (["Learner"], "student"),
    (["TeachingAssistant"], "grader"),
    ([LEARNER, TEACHING_ASSISTANT], "grader"),
    ([LEARNER, INSTRUCTOR], "instructor"),
    (list(CANVAS_TA), "grader"),
    ([TEACHING_ASSISTANT, INSTRUCTOR], "grader"),
    ([LIS + "institution/person#Administrator"], None),
    ([LIS + "institution/person#Instructor"], None),  # an instructor somewhere, not of this course
    ([LIS + "membership#Mentor"], None),
    ([], None),
])
def test_lms_roles_become_course_roles(roles: list[str], role: str | None) -> None:
    assert course_role(roles) == role


@pytest.mark.parametrize("role", [
    "https://evil.example/membership#Instructor",
    INSTRUCTOR + "/x",
    INSTRUCTOR + "X",
    "x" + INSTRUCTOR,
    "NotAnInstructor",
    "Instructor ",
    "https://evil.example/membership/Instructor#TeachingAssistant",
    "urn:x:membership#Learner",
])
def test_a_role_that_only_contains_the_word_is_no_role(role: str) -> None:
    assert course_role([role]) is None
    assert course_role([role, LEARNER]) == "student"


def test_groups_follow_the_role() -> None:
    assert hub_groups("student", "dl") == ["nbgrader-dl"]
    assert hub_groups("grader", "dl") == ["formgrade-dl"]
    assert hub_groups("instructor", "dl") == ["nbgrader-dl", "formgrade-dl"]


# Names from claims: ASCII, folded (NFKC, case, accents, punctuation), never someone else's account.

@pytest.mark.parametrize(("claim", "extra", "ident"), [
    ("email", {}, "ann-lee"),
    ("preferred_username", {"preferred_username": "ALee7"}, "alee7"),
    ("sub", {"sub": "42"}, "u42"),
    ("custom_login", {CLAIM + "custom": {"login": "ann_l"}}, "ann_l"),
    ("email", {"email": "root@example.org"}, "root"),
    ("email", {"email": "\u212aate@example.org"}, "kate"),  # the Kelvin sign lowercases to k
    ("email", {"email": "\uff52\uff4f\uff4f\uff54@example.org"}, "root"),  # fullwidth letters
    ("email", {"email": "John.Smith@example.org"}, "john-smith"),
    ("email", {"email": "john-smith@example.org"}, "john-smith"),
    ("email", {"email": "j\u00f6hn@example.org"}, "john"),
    ("email", {"email": "j\u00e4hn@example.org"}, "jahn"),
    ("email", {"email": "jo\u0308hn@example.org"}, "john"),  # o and a combining diaeresis
    ("email", {"email": "Stra\u00dfe@example.org"}, "strasse"),
    ("email", {"email": "a@b@example.org"}, "a-b"),
    ("email", {"email": "\u65e5\u672c@example.org"}, "user"),  # nothing ASCII to keep
])
def test_account_ids_are_ascii_names_from_the_chosen_claim(claim: str, extra: dict, ident: str) -> None:
    assert claimed_name(claims(**extra), claim) == ident


def test_a_launch_without_the_naming_claim_is_refused() -> None:
    with pytest.raises(LaunchRefused, match="no 'preferred_username'"):
        claimed_name(claims(), "preferred_username")


def test_a_free_name_is_used_as_it_is() -> None:
    assert account_name("dl-", "ann", ANN.tag, set()) == "dl-ann"


def test_a_taken_name_gives_a_distinct_stable_name_never_the_account() -> None:
    taken = {"dl-ann"}
    name = account_name("dl-", "ann", MAL.tag, taken)
    assert name.startswith("dl-ann-") and NAME.match(name) and name not in taken
    assert account_name("dl-", "ann", MAL.tag, taken) == name  # stable: the same person, the same name
    assert account_name("dl-", "ann", ANN.tag, taken) != name  # another person, another name
    with pytest.raises(LaunchRefused, match="no account name"):
        account_name("dl-", "ann", MAL.tag, {"dl-ann", name})


@pytest.mark.parametrize("other", ["dl-john_smith", "dl-John-Smith", "dl-john--smith"])
def test_names_that_fold_together_collide(other: str) -> None:
    assert fold("dl-john-smith") == fold(other)
    assert account_name("dl-", "john-smith", MAL.tag, {other}).startswith("dl-john-smith-")


def test_canvas_length_subs_name_accounts_within_32_characters() -> None:
    base = claimed_name(claims(sub=CANVAS_SUB), "sub")
    first = account_name("devicelab-", base, LmsKey("https://canvas", "d", CANVAS_SUB).tag, set())
    twin = CANVAS_SUB[:30] + "0" * 10  # the same first 30 characters
    second = account_name("devicelab-", claimed_name(claims(sub=twin), "sub"),
                          LmsKey("https://canvas", "d", twin).tag, set())
    assert NAME.match(first) and NAME.match(second) and len(first) <= 32 and first != second


def test_display_names_are_one_line_labels() -> None:
    assert label("Nel\nLine\x07  Ray\r\n", "nel") == "Nel Line Ray"
    assert label(" \n", "nel") == "nel"
    assert len(label("x" * 500, "x")) <= 100


# Who is who: (issuer, deployment, sub) -> one account, kept in the hub's root-only folder.

def test_one_lms_person_is_one_account_and_never_another_s(tmp_path: Path) -> None:
    path = tmp_path / "people.sqlite"
    people = People(path)
    people.bind(ANN, "dl-ann")
    people.bind(ANN, "dl-ann")  # again: nothing changes
    assert people.account_of(ANN) == "dl-ann" and people.owner_of("dl-ann") == ANN
    with pytest.raises(LaunchRefused, match="another person"):
        people.bind(MAL, "dl-ann")
    with pytest.raises(LaunchRefused, match="already have the account dl-ann"):
        people.bind(ANN, "dl-ann2")
    assert People(path).account_of(ANN) == "dl-ann"  # kept on disk
    assert path.stat().st_mode & 0o777 == 0o600
    assert people.account_of(replace(ANN, issuer="https://other-lms.example")) is None  # another person
    assert people.accounts() == {"dl-ann"}


def test_the_account_of_a_known_person_does_not_follow_the_claim(tmp_path: Path) -> None:
    from autograder.hub.lms.admission import account_for

    people = People(tmp_path / "people.sqlite")
    assert account_for(people, ANN, "ann", "dl-", set()) == ("dl-ann", True)
    assert account_for(people, ANN, "annie", "dl-", set()) == ("dl-ann", False)  # her email changed
    mal, new = account_for(people, MAL, "ann", "dl-", {"dl-ann"})  # he took her name as his email
    assert new and mal.startswith("dl-ann-") and people.account_of(MAL) == mal
    assert account_for(people, MAL, "ann", "dl-", {"dl-ann", mal}) == (mal, False)


def test_only_accounts_of_the_hub_s_range_and_prefix_are_the_hub_s() -> None:
    uids = (1000, 60000)
    ours = accounts.Account("dl-ann", 1500, 1500, Path("/home/dl-ann"))
    assert accounts.not_the_hubs(ours, "dl-", uids) == ""
    assert "system account" in accounts.not_the_hubs(accounts.lookup("root"), "dl-", uids)
    assert "system account" in accounts.not_the_hubs(replace(ours, uid=999), "dl-", uids)
    assert "system account" in accounts.not_the_hubs(replace(ours, uid=65534), "dl-", uids)  # nobody's
    assert "prefix" in accounts.not_the_hubs(replace(ours, name="ubuntu"), "dl-", uids)
    assert "prefix" in accounts.not_the_hubs(ours, "", uids)


def test_the_hub_s_uid_range_comes_from_login_defs(tmp_path: Path) -> None:
    defs = tmp_path / "login.defs"
    defs.write_text("# UID_MIN 5\nUID_MIN\t\t 2000\nUID_MAX   3000\n")
    assert accounts.uid_range(defs) == (2000, 3000)
    assert accounts.uid_range(tmp_path / "missing") == (1000, 60000)


# The course: a launch from any other course (or a hub bound to none) is refused.

def test_the_launch_keeps_what_services_need() -> None:
    launch = Launch.from_claims(claims())
    assert (launch.issuer, launch.sub, launch.context_id, launch.deployment_id) == (
        "https://lms.example", "lms-ann", "course-101", "deploy-1")
    assert launch.lineitems_url == "https://lms/lineitems" and launch.memberships_url == "https://lms/members"


def test_launches_from_another_course_or_deployment_are_refused() -> None:
    check_course(Launch.from_claims(claims()), "deploy-1", "course-101")
    other_course = Launch.from_claims(claims(**{CLAIM + "context": {"id": "c-2", "title": "Chemistry"}}))
    with pytest.raises(LaunchRefused, match="another course \\(Chemistry\\)"):
        check_course(other_course, "deploy-1", "course-101")
    with pytest.raises(LaunchRefused, match="deployment"):
        check_course(Launch.from_claims(claims(**{CLAIM + "deployment_id": "d-9"})), "deploy-1", "course-101")


def test_a_hub_bound_to_no_course_takes_no_launch() -> None:
    with pytest.raises(LaunchRefused, match="--lti-context-id"):
        check_course(Launch.from_claims(claims()), "deploy-1", "")


def test_lti_setup_needs_a_prefix_and_the_course_s_context_id(tmp_path: Path) -> None:
    s = HubSettings(root=str(tmp_path), course_id="dl", course_source=str(ROOT), prefix="dl-",
                    authenticator="lti13", lti=lti())
    check_lti(s)
    with pytest.raises(HubError, match="--lti-context-id"):
        check_lti(replace(s, lti=lti(context_id="")))
    with pytest.raises(HubError, match="--prefix"):
        check_lti(replace(s, prefix=""))
    for bad in ("Dl-", "9x-", "a b", "x" * 20):
        with pytest.raises(HubError, match="--prefix"):
            check_lti(replace(s, prefix=bad))


# Replays: a nonce is used once, also across a restart of the hub.

def test_a_nonce_is_accepted_once_until_it_expires(tmp_path: Path) -> None:
    ledger = NonceLedger(tmp_path / "nonces.sqlite")
    ledger.use("n1", expires=1_000, now=100)
    with pytest.raises(LaunchRefused, match="already used"):
        ledger.use("n1", expires=1_000, now=200)
    ledger.use("n2", expires=1_000, now=200)
    with pytest.raises(LaunchRefused):
        ledger.use("", expires=1_000, now=200)
    ledger.use("n1", expires=5_000, now=2_000)  # long expired: forgotten (its token is refused as expired)


def test_a_launch_cannot_be_replayed_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "nonces.sqlite"
    NonceLedger(path).use("n1", expires=1_000, now=100)
    with pytest.raises(LaunchRefused, match="already used"):
        NonceLedger(path).use("n1", expires=1_000, now=200)  # the hub started again
    assert path.stat().st_mode & 0o777 == 0o600


# The generated configuration.

def lti13_config(tmp_path: Path, members: list[Member]):
    """Return the lti13 hub's settings and its generated configuration, loaded."""
    s = HubSettings(root=str(tmp_path), course_id="device-lab", course_source=str(ROOT), prefix="dl-",
                    authenticator="lti13", lti=lti())
    write_all(render_all(s, members))
    s.paths.cli_token.write_text("t0ken\n")
    return s, PyFileConfigLoader(s.paths.config.name, path=str(s.paths.hub)).load_config()


def test_the_lti13_config_uses_the_course_authenticator_and_lets_it_manage_groups(tmp_path: Path) -> None:
    _, c = lti13_config(tmp_path, [])
    assert c.JupyterHub.authenticator_class == "devicelab-lti13"  # grader/pyproject.toml's entry point
    assert c.CourseLTI13Authenticator.client_id == ["tool-1"]
    assert c.CourseLTI13Authenticator.jwks_endpoint == "https://lms.example/jwks"
    assert c.CourseLTI13Authenticator.hub_root == str(tmp_path)
    assert c.Authenticator.manage_groups is True
    assert "load_groups" not in c.JupyterHub  # groups come from each launch's role


def test_the_lti13_config_grants_no_admin_from_the_roster(tmp_path: Path) -> None:
    """Admin follows the LMS role at each launch; a restart must not give it back from the roster."""
    _, c = lti13_config(tmp_path, [Member("ivy", "Ivy Teach", "instructor"), Member("ann", "Ann", "student")])
    assert c.Authenticator.admin_users == []


def test_the_authenticator_the_config_names_is_importable() -> None:
    from autograder.hub.lms.authenticator import CourseLTI13Authenticator

    assert CourseLTI13Authenticator.login_service == "LTI 1.3"


def test_settings_with_lti_survive_hub_json(tmp_path: Path) -> None:
    HubSettings(root=str(tmp_path), course_id="dl", course_source=str(ROOT), lti=lti()).save()
    assert HubSettings.load(tmp_path).lti == lti()


def test_the_hub_s_lti_ledgers_live_in_its_root_only_folder(tmp_path: Path) -> None:
    paths = HubSettings(root=str(tmp_path), course_id="dl", course_source=str(ROOT)).paths
    assert paths.lti_people.parent == paths.hub and paths.lti_nonces.parent == paths.hub
    assert os.path.commonpath([paths.lti_people, paths.lti]) != str(paths.lti)  # not the grader's lti/


def test_a_hub_set_up_before_the_ledger_keeps_who_launched_and_takes_nothing_later(tmp_path: Path) -> None:
    from autograder.hub.lms.admission import ledger
    from autograder.hub.lms.tool import Platform, ToolFiles

    s = HubSettings(root=str(tmp_path), course_id="dl", course_source=str(ROOT), prefix="dl-",
                    authenticator="lti13", lti=lti())
    s.paths.hub.mkdir(parents=True)
    s.paths.lti.mkdir(parents=True)
    files = ToolFiles(s.paths.lti)
    files.write_platform(Platform("https://lms.example", "tool-1", "deploy-1", "",
                                 people={"dl-ann": "lms-ann"}))
    people = ledger(s)
    assert people.account_of(ANN) == "dl-ann"
    people.close()
    # the grader account can write platform.json: what it says later decides nothing
    files.write_platform(Platform("https://lms.example", "tool-1", "deploy-1", "",
                                 people={"dl-ann": "lms-ann", "dl-ivy": "lms-mal"}))
    people = ledger(s)
    assert people.owner_of("dl-ivy") is None and people.account_of(MAL) is None
    people.close()
