"""The class list from the LMS (LTI Advantage, Names and Role Provisioning Services), as LMS people."""

from dataclasses import dataclass

from pylti1p3.exception import LtiException
from pylti1p3.names_roles import NamesRolesProvisioningService

from autograder.hub.lms.launch import LaunchRefused, course_role
from autograder.hub.lms.names import label
from autograder.hub.lms.people import LmsKey, LmsPerson
from autograder.hub.lms.tool import ToolFiles, connector
from autograder.hub.settings import HubError


@dataclass(frozen=True)
class LmsRoster:
    """The course's members as the LMS lists them, and the ones the hub cannot take (with why)."""

    members: list[LmsPerson]
    skipped: list[str]


def read_lms_roster(files: ToolFiles, username_claim: str) -> LmsRoster:
    """Return the active members of the LMS course with a role the course knows, keyed by their LMS id."""
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
        who = label(str(person.get("name") or ""), lms_id)
        if person.get("status", "Active") != "Active" or role is None or not lms_id:
            skipped.append(f"{who}: not an active learner, TA or instructor")
            continue
        try:
            key = LmsKey(platform.issuer, platform.deployment_id, lms_id)
            members.append(LmsPerson.of(key, {**person, "sub": lms_id}, role, username_claim))
        except LaunchRefused as exc:
            skipped.append(f"{who}: {exc}")
    return LmsRoster(members, skipped)
