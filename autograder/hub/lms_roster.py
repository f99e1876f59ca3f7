"""The class list from the LMS (LTI Advantage, Names and Role Provisioning Services), as roster members."""

from dataclasses import dataclass

from pylti1p3.exception import LtiException
from pylti1p3.names_roles import NamesRolesProvisioningService

from autograder.hub.lti_launch import LaunchRefused, account_id, course_role
from autograder.hub.lti_tool import ToolFiles, connector
from autograder.hub.roster import Member
from autograder.hub.settings import HubError


@dataclass(frozen=True)
class LmsMember:
    """A person of the LMS course: the roster member they become and their LMS id."""

    member: Member
    lms_id: str


@dataclass(frozen=True)
class LmsRoster:
    """The course's members as the LMS lists them, and the ones the hub cannot take (with why)."""

    members: list[LmsMember]
    skipped: list[str]


def read_lms_roster(files: ToolFiles, username_claim: str) -> LmsRoster:
    """Return the active members of the LMS course with a role the course knows."""
    platform = files.read_platform()
    if not platform.memberships_url:
        raise HubError("the LMS has not told the hub where the course's members are listed yet: open the hub "
                       "from the course page once (as the instructor), then run this again")
    service = NamesRolesProvisioningService(connector(files, platform),
                                            {"context_memberships_url": platform.memberships_url})
    try:
        listed = service.get_members()
    except LtiException as exc:
        raise HubError(f"the LMS did not give the course's members: {exc}") from None
    members, skipped = [], []
    for person in listed:
        lms_id = str(person.get("user_id") or "")
        role = course_role(person.get("roles") or [])
        if person.get("status", "Active") != "Active" or role is None or not lms_id:
            skipped.append(f"{person.get('name') or lms_id}: not an active learner, TA or instructor")
            continue
        try:
            ident = account_id({**person, "sub": lms_id}, username_claim)
        except LaunchRefused as exc:
            skipped.append(f"{person.get('name') or lms_id}: {exc}")
            continue
        members.append(LmsMember(Member(ident, str(person.get("name") or ident), role), lms_id))
    return LmsRoster(members, skipped)
