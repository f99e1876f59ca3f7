"""LTI launches as the course reads them: roles, account names, the course bound, replays (no hub)."""

from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

from autograder.hub import lti_launch
from autograder.hub.lti_launch import (
    Launch,
    LaunchRefused,
    NonceLedger,
    account_id,
    check_course,
    course_role,
)
from autograder.hub.render import render_all, write_all
from autograder.hub.roster import hub_groups
from autograder.hub.settings import HubSettings, LtiSettings
from tests.lms_standin import INSTRUCTOR, LEARNER, TEACHING_ASSISTANT

ROOT = Path(__file__).resolve().parent.parent
CLAIM = lti_launch.CLAIM


def claims(**extra) -> dict:
    """Return the claims of a good launch of Ann, a learner of course-101, with `extra` changed."""
    base = {"sub": "lms-ann", "name": "Ann Lee", "email": "Ann.Lee@school.example", "nonce": "n1",
            "exp": 2_000_000_000, CLAIM + "roles": [LEARNER], CLAIM + "deployment_id": "deploy-1",
            CLAIM + "context": {"id": "course-101", "title": "Device Lab 101"},
            lti_launch.AGS_CLAIM: {"lineitems": "https://lms/lineitems"},
            lti_launch.NRPS_CLAIM: {"context_memberships_url": "https://lms/members"}}
    return {**base, **extra}


@pytest.mark.parametrize(("roles", "role"), [
    ([LEARNER], "student"),
    ([INSTRUCTOR], "instructor"),
    ([TEACHING_ASSISTANT], "grader"),
    (["Instructor"], "instructor"),
    ([LEARNER, TEACHING_ASSISTANT], "grader"),
    (["http://purl.imsglobal.org/vocab/lis/v2/institution/person#Administrator"], None),
    ([], None),
])
def test_lms_roles_become_course_roles(roles: list[str], role: str | None) -> None:
    assert course_role(roles) == role


def test_groups_follow_the_role() -> None:
    assert hub_groups("student", "dl") == ["nbgrader-dl"]
    assert hub_groups("grader", "dl") == ["formgrade-dl"]
    assert hub_groups("instructor", "dl") == ["nbgrader-dl", "formgrade-dl"]


@pytest.mark.parametrize(("claim", "extra", "ident"), [
    ("email", {}, "ann-lee"),
    ("preferred_username", {"preferred_username": "ALee7"}, "alee7"),
    ("sub", {"sub": "42"}, "u42"),
    ("custom_login", {CLAIM + "custom": {"login": "ann_l"}}, "ann_l"),
])
def test_account_ids_are_unix_names_from_the_chosen_claim(claim: str, extra: dict, ident: str) -> None:
    assert account_id(claims(**extra), claim) == ident


def test_a_launch_without_the_naming_claim_is_refused() -> None:
    with pytest.raises(LaunchRefused, match="no 'preferred_username'"):
        account_id(claims(), "preferred_username")


def test_the_launch_keeps_what_services_need() -> None:
    launch = Launch.from_claims(claims())
    assert (launch.sub, launch.context_id, launch.deployment_id) == ("lms-ann", "course-101", "deploy-1")
    assert launch.lineitems_url == "https://lms/lineitems" and launch.memberships_url == "https://lms/members"


def test_launches_from_another_course_or_deployment_are_refused() -> None:
    check_course(Launch.from_claims(claims()), "deploy-1", "course-101")
    check_course(Launch.from_claims(claims()), "deploy-1", "")  # not bound yet: any course of the deployment
    other_course = Launch.from_claims(claims(**{CLAIM + "context": {"id": "c-2", "title": "Chemistry"}}))
    with pytest.raises(LaunchRefused, match="another course \\(Chemistry\\)"):
        check_course(other_course, "deploy-1", "course-101")
    with pytest.raises(LaunchRefused, match="deployment"):
        check_course(Launch.from_claims(claims(**{CLAIM + "deployment_id": "d-9"})), "deploy-1", "course-101")


def test_a_nonce_is_accepted_once_until_it_expires() -> None:
    ledger = NonceLedger()
    ledger.use("n1", expires=1_000, now=100)
    with pytest.raises(LaunchRefused, match="already used"):
        ledger.use("n1", expires=1_000, now=200)
    ledger.use("n2", expires=1_000, now=200)
    with pytest.raises(LaunchRefused):
        ledger.use("", expires=1_000, now=200)
    ledger.use("n1", expires=5_000, now=2_000)  # long expired: forgotten (its token is refused as expired)


def test_the_lti13_config_uses_the_course_authenticator_and_lets_it_manage_groups(tmp_path: Path) -> None:
    lti = LtiSettings(issuer="https://lms.example", client_id="tool-1", deployment_id="deploy-1",
                      keyset_url="https://lms.example/jwks", authorize_url="https://lms.example/auth")
    s = HubSettings(root=str(tmp_path), course_id="device-lab", course_source=str(ROOT),
                    authenticator="lti13", lti=lti)
    write_all(render_all(s, []))
    s.paths.cli_token.write_text("t0ken\n")
    c = PyFileConfigLoader(s.paths.config.name, path=str(s.paths.hub)).load_config()
    assert c.JupyterHub.authenticator_class == "autograder.hub.lti_authenticator.CourseLTI13Authenticator"
    assert c.CourseLTI13Authenticator.client_id == ["tool-1"]
    assert c.CourseLTI13Authenticator.jwks_endpoint == "https://lms.example/jwks"
    assert c.CourseLTI13Authenticator.hub_root == str(tmp_path)
    assert c.Authenticator.manage_groups is True
    assert "load_groups" not in c.JupyterHub  # groups come from each launch's role


def test_the_authenticator_the_config_names_is_importable() -> None:
    from autograder.hub.lti_authenticator import CourseLTI13Authenticator

    assert CourseLTI13Authenticator.login_service == "LTI 1.3"


def test_settings_with_lti_survive_hub_json(tmp_path: Path) -> None:
    lti = LtiSettings("https://lms", "tool", "dep", "https://lms/jwks", "https://lms/auth", context_id="c1")
    HubSettings(root=str(tmp_path), course_id="dl", course_source=str(ROOT), lti=lti).save()
    assert HubSettings.load(tmp_path).lti == lti
