"""An LTI 1.3 launch as the course sees it: who (the LMS person and their role), from which course, used once.

The JupyterHub authenticator (`ltiauthenticator`) has already checked the id_token's signature against the
platform's key set, its issuer, audience, expiry, age and that its nonce is the one this browser was given.
What it does not check, and this module does: the deployment and the course (context) the launch comes from,
that a nonce is used only once on this hub (also across a restart), and what role the LMS user has in this
course. Which account the person gets is admission.py's job.
"""

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.hub.settings import HubError

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
CUSTOM_PREFIX = "custom_"
NONCE_KEPT_S = 600  # at least as long as ltiauthenticator accepts a token's age

# LIS context roles (this course's membership), matched whole: the full URI or its simple name. A TA is a
# grader even when Instructor comes with it (Canvas sends both), so the TA role is looked for first.
MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership"
ROLE_RULES = (
    ({f"{MEMBERSHIP}/Instructor#TeachingAssistant", "TeachingAssistant"}, "grader"),
    ({f"{MEMBERSHIP}#Instructor", "Instructor"}, "instructor"),
    ({f"{MEMBERSHIP}#Learner", "Learner"}, "student"),
)


class LaunchRefused(HubError):
    """A launch this hub does not accept; the message is shown to the person who launched."""


@dataclass(frozen=True)
class Launch:
    """The claims of a verified launch that the course uses."""

    issuer: str
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
            issuer=str(token.get("iss") or ""),
            sub=str(token.get("sub") or ""), name=str(token.get("name") or ""),
            email=str(token.get("email") or ""), roles=tuple(token.get(CLAIM + "roles") or ()),
            deployment_id=str(token.get(CLAIM + "deployment_id") or ""),
            context_id=str(context.get("id") or ""), context_title=str(context.get("title") or ""),
            nonce=str(token.get("nonce") or ""), expires=float(token.get("exp") or 0),
            lineitems_url=str((token.get(AGS_CLAIM) or {}).get("lineitems") or ""),
            memberships_url=str((token.get(NRPS_CLAIM) or {}).get("context_memberships_url") or ""),
            claims=token)


def course_role(roles: tuple[str, ...] | list[str]) -> str | None:
    """Return the course role (grader, instructor, student) of LIS context roles, in that order; None if none.
    """
    given = {str(role) for role in roles}
    return next((role for names, role in ROLE_RULES if names & given), None)


def check_course(launch: Launch, deployment_id: str, context_id: str) -> None:
    """Refuse a launch from another deployment of the tool or another course than this hub's."""
    if not context_id:
        raise LaunchRefused("this hub is not bound to a course of the LMS yet; the instructor must run hub "
                            "setup again with --lti-context-id")
    if launch.deployment_id != deployment_id:
        raise LaunchRefused("this launch comes from a deployment of the tool this hub does not serve "
                            f"({launch.deployment_id or 'none'}); open the course's own link in the LMS")
    if launch.context_id != context_id:
        course = launch.context_title or launch.context_id or "no course"
        raise LaunchRefused(f"this launch comes from another course ({course}); this hub serves one course "
                            "only: open it from that course")


class NonceLedger:
    """The nonces of launches already accepted, on disk until their token expires: a replay is refused, also
    after a restart. The file is root's, in the hub's own folder (its table: stores/models.py's NonceRow)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def use(self, nonce: str, expires: float, now: float | None = None) -> None:
        """Record the nonce; raise LaunchRefused when it was used before (or is empty)."""
        from sqlalchemy import delete, insert, select

        from autograder.hub.stores.models import NonceRow
        from autograder.hub.stores.tables import Tables

        now = time.time() if now is None else now
        if not nonce:
            raise LaunchRefused("this launch has no nonce; open the course from the LMS again")
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))  # made root-only
        store = Tables(f"sqlite:///{self.path}", "nonces")
        try:
            with store.write() as db:
                db.execute(delete(NonceRow).where(NonceRow.expires < now))
                if db.execute(select(NonceRow.nonce).where(NonceRow.nonce == nonce)).first() is not None:
                    raise LaunchRefused("this launch was already used (a replayed login); open the course "
                                        "from the LMS again")
                db.execute(insert(NonceRow).values(nonce=nonce, expires=max(expires, now + NONCE_KEPT_S)))
        finally:
            store.close()
