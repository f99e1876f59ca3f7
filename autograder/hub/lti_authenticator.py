"""The hub's LTI 1.3 login: the JupyterHub community's LTI13Authenticator, bound to one course of one LMS.

ltiauthenticator verifies the launch (signature against the platform's key set, issuer, audience, expiry, age,
the nonce this browser was given, the OAuth state). On top of it this authenticator refuses launches from
another deployment or course and replayed nonces (lti_launch.py), names the account and role as the course
does, makes the Unix account and the gradebook entry on the first launch (install.enroll, as `hub add-user`),
and remembers the person's LMS id and the course's service URLs for grade passback (lti_tool.py).
"""

import asyncio
import json
import threading
from dataclasses import replace
from pathlib import Path

from jupyterhub.handlers import BaseHandler
from ltiauthenticator.lti13.auth import LTI13Authenticator
from ltiauthenticator.lti13.error import InvalidAudienceError, ValidationError
from ltiauthenticator.lti13.handlers import LTI13CallbackHandler
from tornado import web
from traitlets import Unicode

from autograder.hub import accounts
from autograder.hub.lti_launch import (
    Launch,
    LaunchRefused,
    NonceLedger,
    account_id,
    check_course,
    course_role,
)
from autograder.hub.lti_tool import ToolFiles, remember
from autograder.hub.roster import Member, hub_groups, read_roster
from autograder.hub.settings import HubError, HubSettings

AGAIN = "Open the course from your LMS again; if this keeps happening, tell your instructor."


class CourseCallbackHandler(LTI13CallbackHandler):
    """ltiauthenticator's launch handler, with refusals that say what happened and what to do."""

    def decode_and_validate_launch_request(self):
        """Verify the launch as ltiauthenticator does; turn its errors into a clear refusal page."""
        try:
            return super().decode_and_validate_launch_request()
        except InvalidAudienceError as exc:
            raise web.HTTPError(401, f"This launch was not meant for this hub ({exc}). {AGAIN}") from None
        except ValidationError as exc:
            raise web.HTTPError(400, f"This launch was refused: {exc}. {AGAIN}") from None
        except web.HTTPError as exc:
            said = f"This launch was refused: {exc.log_message}. {AGAIN}"
            raise web.HTTPError(exc.status_code, said) from None


class ToolKeysHandler(BaseHandler):
    """Serve the tool's public key set (the LMS checks the hub's service requests with it)."""

    def get(self) -> None:
        """Write the key set as JSON."""
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(self.authenticator.tool_files().public_jwks()))


class CourseLTI13Authenticator(LTI13Authenticator):
    """LTI 1.3 login to this hub's course (settings from hub.json under `hub_root`)."""

    callback_handler = CourseCallbackHandler
    hub_root = Unicode(config=True, help="the hub's folder (`hub setup --root`)")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.nonces = NonceLedger()
        self.enrolling = threading.Lock()  # one roster change at a time

    def settings(self) -> HubSettings:
        """Return the hub's settings as they are now (an instructor's first launch binds the course)."""
        return HubSettings.load(Path(self.hub_root))

    def tool_files(self) -> ToolFiles:
        """Return the tool's LTI files of this hub."""
        return ToolFiles(self.settings().paths.lti)

    def get_handlers(self, app):
        """Add the tool's key set, at /hub/lti13/jwks, to ltiauthenticator's handlers."""
        return [*super().get_handlers(app), ("/lti13/jwks", ToolKeysHandler)]

    def check_allowed(self, username, authentication=None):
        """Allow whoever came through a checked launch of this course (and the configured users)."""
        return bool(authentication and authentication.get("launched")) or super().check_allowed(
            username, authentication)

    async def authenticate(self, handler, data=None):
        """Return the hub user of a verified launch (made on first launch); refuse other courses, replays."""
        launch = Launch.from_claims(data or {})
        try:
            s, member = self.admit(launch)
            self.nonces.use(launch.nonce, launch.expires)
            user = await asyncio.get_running_loop().run_in_executor(None, self.enroll, s, member, launch)
        except (LaunchRefused, HubError) as exc:
            self.log.warning("LTI launch refused (%s, %s): %s", launch.sub, launch.context_id, exc)
            raise web.HTTPError(403, f"This launch was refused: {exc}. {AGAIN}") from None
        return {"name": user, "admin": member.role == "instructor",
                "groups": hub_groups(member.role, s.course_id), "launched": True}

    def admit(self, launch: Launch) -> tuple[HubSettings, Member]:
        """Check the launch's course and role; return the settings (course bound if it was not) and member."""
        s = self.settings()
        if s.lti is None:
            raise LaunchRefused("this hub is not set up for LTI (hub setup --authenticator lti13)")
        check_course(launch, s.lti.deployment_id, s.lti.context_id)
        role = course_role(launch.roles)
        if role is None:
            raise LaunchRefused("your role in this course is neither learner, teaching assistant nor "
                                "instructor")
        if not s.lti.context_id:
            if role != "instructor":
                raise LaunchRefused("the instructor has not opened the hub from the course yet")
            s = replace(s, lti=replace(s.lti, context_id=launch.context_id))
            s.save()
            self.log.info("LTI: this hub now serves the course %s (%s)", launch.context_id,
                          launch.context_title)
        ident = account_id(launch.claims, s.lti.username_claim)
        return s, Member(ident, launch.name or ident, role)

    def enroll(self, s: HubSettings, member: Member, launch: Launch) -> str:
        """Make the member's account and gradebook entry on first launch; remember their LMS id."""
        from autograder.hub.install import enroll

        user = member.username(s.prefix)
        files = ToolFiles(s.paths.lti)
        grader = accounts.lookup(s.grader)
        assert grader is not None, f"no grader account {s.grader}"
        with self.enrolling:
            known = files.read_platform().people.get(user)
            if known and known != launch.sub:
                raise LaunchRefused(f"the account {user} belongs to another person of the LMS; ask the "
                                    "instructor to set --lti-username-claim to a claim that tells you apart")
            if not any(m.id == member.id for m in read_roster(s.paths.roster, s.prefix)):
                for line in enroll(s, member):
                    self.log.info("LTI first launch of %s: %s", user, line)
            remember(files, {user: launch.sub}, launch, (grader.uid, grader.gid))
        return user
