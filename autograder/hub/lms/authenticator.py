"""The hub's LTI 1.3 login: the JupyterHub community's LTI13Authenticator, bound to one course of one LMS.

ltiauthenticator verifies the launch (signature against the platform's key set, issuer, audience, expiry, age,
the nonce this browser was given, the OAuth state). On top of it this authenticator refuses launches from
another deployment or course and replayed nonces (launch.py), gives the person the account the hub made
for them, or makes one on their first launch, never an existing one (admission.py), with the role the
course gives them now, and remembers the course's service URLs for grade passback (tool.py).
"""

import asyncio
import json
from pathlib import Path

from jupyterhub.handlers import BaseHandler
from ltiauthenticator.lti13.auth import LTI13Authenticator
from ltiauthenticator.lti13.error import InvalidAudienceError, ValidationError
from ltiauthenticator.lti13.handlers import LTI13CallbackHandler
from tornado import web
from traitlets import Unicode

from autograder.hub.lms.admission import admit
from autograder.hub.lms.launch import Launch, LaunchRefused, NonceLedger, check_course, course_role
from autograder.hub.lms.people import LmsKey, LmsPerson
from autograder.hub.lms.tool import ToolFiles
from autograder.hub.settings import HubError, HubSettings
from autograder.hub.setup.roster import hub_groups

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

    def settings(self) -> HubSettings:
        """Return the hub's settings as they are now."""
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
        """Return the hub user of a verified launch (made on first launch) with the role the course gives now;
        refuse other courses, replays and any account that is not the person's."""
        launch = Launch.from_claims(data or {})
        try:
            s, person = self.arrival(launch)
            NonceLedger(s.paths.lti_nonces).use(launch.nonce, launch.expires)
            admitted = await asyncio.get_running_loop().run_in_executor(None, admit, s, person, launch)
        except (LaunchRefused, HubError) as exc:
            self.log.warning("LTI launch refused (%s, %s): %s", launch.sub, launch.context_id, exc)
            raise web.HTTPError(403, f"This launch was refused: {exc}. {AGAIN}") from None
        for line in admitted.done:
            self.log.info("LTI launch of %s: %s", admitted.user, line)
        role = admitted.member.role
        return {"name": admitted.user, "admin": role == "instructor", "groups": hub_groups(role, s.course_id),
                "launched": True}

    def arrival(self, launch: Launch) -> tuple[HubSettings, LmsPerson]:
        """Check the launch's course and role; return the settings and the person as the course sees them."""
        s = self.settings()
        if s.lti is None:
            raise LaunchRefused("this hub is not set up for LTI (hub setup --authenticator lti13)")
        check_course(launch, s.lti.deployment_id, s.lti.context_id)
        role = course_role(launch.roles)
        if role is None:
            raise LaunchRefused("your role in this course is neither learner, teaching assistant nor "
                                "instructor")
        if not launch.sub or not launch.issuer:
            raise LaunchRefused("the launch does not say who you are in the LMS (no sub or issuer)")
        key = LmsKey(launch.issuer, launch.deployment_id, launch.sub)
        return s, LmsPerson.of(key, launch.claims, role, s.lti.username_claim)
