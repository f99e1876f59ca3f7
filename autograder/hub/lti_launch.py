"""An LTI 1.3 launch as the course sees it: who (account name and role), from which course, used once.

The JupyterHub authenticator (`ltiauthenticator`) has already checked the id_token's signature against the
platform's key set, its issuer, audience, expiry, age and that its nonce is the one this browser was given.
What it does not check, and this module does: the deployment and the course (context) the launch comes from,
that a nonce is used only once on this hub, and what role and account name the LMS user gets.
"""

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from autograder.hub.settings import HubError

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
CUSTOM_PREFIX = "custom_"

# LIS context roles, most powerful first (a TA's role URI contains "Instructor", so it is tested first).
ROLE_RULES = (
    (re.compile(r"(membership/Instructor#TeachingAssistant|^TeachingAssistant$)"), "grader"),
    (re.compile(r"(membership#Instructor|^Instructor$)"), "instructor"),
    (re.compile(r"(membership#Learner|^Learner$)"), "student"),
)
RANK = {"student": 0, "grader": 1, "instructor": 2}


class LaunchRefused(HubError):
    """A launch this hub does not accept; the message is shown to the person who launched."""


@dataclass(frozen=True)
class Launch:
    """The claims of a verified launch that the course uses."""

    sub: str  # the LMS's stable id of the person
    name: str
    email: str
    roles: tuple[str, ...]
    deployment_id: str
    context_id: str
    context_title: str
    nonce: str
    expires: float
    lineitems_url: str = ""  # AGS: where line items of the course are listed and created
    memberships_url: str = ""  # NRPS: the course's members
    claims: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_claims(cls, token: dict[str, Any]) -> "Launch":
        """Return the launch of a verified id_token's claims."""
        context = token.get(CLAIM + "context") or {}
        return cls(
            sub=str(token.get("sub") or ""), name=str(token.get("name") or ""),
            email=str(token.get("email") or ""), roles=tuple(token.get(CLAIM + "roles") or ()),
            deployment_id=str(token.get(CLAIM + "deployment_id") or ""),
            context_id=str(context.get("id") or ""), context_title=str(context.get("title") or ""),
            nonce=str(token.get("nonce") or ""), expires=float(token.get("exp") or 0),
            lineitems_url=str((token.get(AGS_CLAIM) or {}).get("lineitems") or ""),
            memberships_url=str((token.get(NRPS_CLAIM) or {}).get("context_memberships_url") or ""),
            claims=token)


def course_role(roles: tuple[str, ...] | list[str]) -> str | None:
    """Return the course role (student, grader, instructor) of LIS roles, the highest one; None if none."""
    found = [role for value in roles for rule, role in ROLE_RULES if rule.search(value)]
    return max(found, key=RANK.__getitem__) if found else None


def account_id(claims: dict[str, Any], claim: str) -> str:
    """Return the course id (a Unix-safe name) of a person from their claims (a launch's, an NRPS member's).

    `email` gives the part before the @; `custom_X` reads X from the LTI custom claim; any other claim is
    read as it is. Letters are lowercased, anything but letters, digits, - and _ becomes -.
    """
    if claim.startswith(CUSTOM_PREFIX):
        value = (claims.get(CLAIM + "custom") or {}).get(claim[len(CUSTOM_PREFIX):])
    else:
        value = claims.get(claim)
    text = str(value or "").strip().lower()
    if claim == "email":
        text = text.partition("@")[0]
    text = re.sub(r"[^a-z0-9_-]+", "-", text).strip("-")
    if not text:
        raise LaunchRefused(f"the LMS sent no {claim!r} for this person, and the hub names accounts by "
                            "it; ask the instructor to have the LMS share it (privacy settings of the tool)")
    return text if re.match(r"^[a-z_]", text) else f"u{text}"


def check_course(launch: Launch, deployment_id: str, context_id: str) -> None:
    """Refuse a launch from another deployment of the tool or another course than this hub's."""
    if launch.deployment_id != deployment_id:
        raise LaunchRefused("this launch comes from a deployment of the tool this hub does not serve "
                            f"({launch.deployment_id or 'none'}); open the course's own link in the LMS")
    if context_id and launch.context_id != context_id:
        course = launch.context_title or launch.context_id or "no course"
        raise LaunchRefused(f"this launch comes from another course ({course}); this hub serves one course "
                            "only: open it from that course")


class NonceLedger:
    """The nonces of launches already accepted, kept until their token expires: a replay is refused."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def use(self, nonce: str, expires: float, now: float | None = None) -> None:
        """Record the nonce; raise LaunchRefused when it was used before (or is empty)."""
        now = time.time() if now is None else now
        with self._lock:
            self._seen = {n: exp for n, exp in self._seen.items() if exp >= now}
            if not nonce or nonce in self._seen:
                raise LaunchRefused("this launch was already used (a replayed login); open the course from "
                                    "the LMS again")
            self._seen[nonce] = max(expires, now + 600)
