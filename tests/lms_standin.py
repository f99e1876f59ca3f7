"""An LMS stand-in for the tests: a real LTI 1.3 platform on loopback, built on `lti1p3platform`.

It starts launches (OIDC login initiation: a redirect, or a course page whose button posts it for a browser),
answers the tool's authorization request with a signed id_token in an auto-submitting form, serves its key
set, issues client-credentials tokens, and serves Assignment and Grade Services (line items, scores) and Names
and Role Provisioning Services (members). Every line item and score it receives is kept in gradebook.json,
which tests read. `down = True` answers 503 to every service call.
Test support, not shipped.
"""

import contextlib
import html
import json
import re
import secrets
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lti1p3platform.exceptions import (
    LtiException,
    MissingRequiredClaim,
    PreflightRequestValidationException,
    UnsupportedGrantType,
)
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request

LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"
TEACHING_ASSISTANT = "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant"
CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
# Launches that a tool must refuse: what each changes in an otherwise good id_token.
VARIANTS = ("forged", "audience", "expired", "other-course", "other-deployment")


@dataclass(frozen=True)
class Person:
    """A member of the stand-in's course."""

    sub: str
    name: str
    email: str
    roles: tuple[str, ...] = (LEARNER,)


@dataclass
class Gradebook:
    """What the tool sent: line items (id -> the line item) and every score posted, in order."""

    lineitems: dict[str, dict] = field(default_factory=dict)
    scores: list[dict] = field(default_factory=list)

    def scores_of(self, tag: str) -> list[dict]:
        """Return the scores posted to the line item tagged `tag`."""
        ids = {i for i, item in self.lineitems.items() if item.get("tag") == tag}
        return [s for s in self.scores if s["lineitem"] in ids]


def _pem_pair() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


class PlatformConf(LTI1P3PlatformConfAbstract):
    """lti1p3platform's platform configuration: one registration, the tool's."""

    def init_platform_config(self, **kwargs) -> None:
        """Keep the registration given."""
        self.registration = kwargs["registration"]

    def get_registration_by_params(self, **kwargs) -> Registration:
        """Return the one registration."""
        return self.registration


class FormRequest(Request):
    """A request as lti1p3platform reads it: the query (or form) fields."""

    def build_metadata(self, request: dict) -> dict:
        """Return lti1p3platform's request metadata of a dict of fields."""
        return {"method": "GET", "form_data": {}, "get_data": request, "headers": {}, "content_type": None,
                "path": "", "json": None}


class OIDCLogin(OIDCLoginAbstract):
    """The first step of a launch: send the browser to the tool's login URL."""

    def set_lti_message_hint(self, **kwargs) -> None:
        """Keep the hint that names the pending launch."""
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url: str) -> str:
        """Return the URL to redirect to."""
        return url


class MessageLaunch(LTIAdvantageMessageLaunchAbstract):
    """The last step of a launch: an auto-submitting form that posts the id_token to the tool."""

    def render_launch_form(self, launch_data: dict, **kwargs) -> dict:
        """Return the launch data; the handler writes the form."""
        return launch_data


class LmsStandin:
    """The stand-in LMS, serving on a free loopback port until closed."""

    def __init__(self, folder: Path, client_id: str = "devicelab-tool", deployment_id: str = "deploy-1",
                 context_id: str = "course-101") -> None:
        self.folder, self.client_id, self.deployment_id, self.context_id = folder, client_id, deployment_id, \
            context_id
        self.private_key, self.public_key = _pem_pair()
        self.people: dict[str, Person] = {}
        self.pending: dict[str, tuple[str, str]] = {}  # message hint -> (sub, variant)
        self.down = False
        self.lock = threading.Lock()
        self.tool_login_url = self.tool_launch_url = ""
        self.tool_jwks: dict = {"keys": []}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.gradebook_file = folder / "gradebook.json"
        self._save(Gradebook())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def issuer(self) -> str:
        return self.url

    @property
    def keyset_url(self) -> str:
        return self.url + "/jwks"

    @property
    def authorize_url(self) -> str:
        return self.url + "/authorize"

    @property
    def token_url(self) -> str:
        return self.url + "/token"

    def setup_args(self) -> tuple[str, ...]:
        """Return `hub setup`'s options for this platform."""
        return ("--authenticator", "lti13", "--lti-issuer", self.issuer, "--lti-client-id", self.client_id,
                "--lti-deployment-id", self.deployment_id, "--lti-keyset-url", self.keyset_url,
                "--lti-authorize-url", self.authorize_url, "--lti-token-url", self.token_url,
                "--lti-context-id", self.context_id)

    def register_tool(self, login_url: str, launch_url: str, jwks: dict) -> None:
        """Register the tool (its login initiation and launch URLs, its public key set)."""
        self.tool_login_url, self.tool_launch_url, self.tool_jwks = login_url, launch_url, jwks

    def enrol(self, person: Person) -> None:
        """Put a person into the course."""
        self.people[person.sub] = person

    def launch_url(self, sub: str, variant: str = "") -> str:
        """Return the URL a person clicks on the course page to open the tool (variant: a bad launch)."""
        query = urllib.parse.urlencode({"user": sub, "variant": variant})
        return f"{self.url}/launch?{query}"

    def course_url(self, sub: str, variant: str = "") -> str:
        """Return the course page as the person sees it in the LMS: its tool link is a button that posts the
        login initiation to the tool, as Canvas and Moodle do (for a browser; variant: a bad launch)."""
        query = urllib.parse.urlencode({"user": sub, "variant": variant})
        return f"{self.url}/course?{query}"

    def gradebook(self) -> Gradebook:
        """Return what the tool has sent so far."""
        return Gradebook(**json.loads(self.gradebook_file.read_text()))

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()

    # what the handler calls

    def registration(self) -> Registration:
        """Return lti1p3platform's registration of the tool."""
        return (Registration().set_iss(self.issuer).set_client_id(self.client_id)
                .set_deployment_id(self.deployment_id).set_oidc_login_url(self.tool_login_url)
                .set_launch_url(self.tool_launch_url).set_platform_public_key(self.public_key)
                .set_platform_private_key(self.private_key).set_tool_key_set(self.tool_jwks))

    def platform(self) -> PlatformConf:
        """Return lti1p3platform's platform with the tool registered."""
        conf = PlatformConf(registration=self.registration())
        conf.get_registration()
        return conf

    def start_launch(self, sub: str, variant: str) -> str:
        """Return the tool's login initiation URL for a new launch of this person."""
        hint = secrets.token_urlsafe(16)
        self.pending[hint] = (sub, variant)
        login = OIDCLogin(None, self.platform())
        login.set_lti_message_hint(hint=hint)
        return login.initiate_login(sub)

    def finish_launch(self, fields: dict[str, str]) -> dict:
        """Answer the tool's authorization request: the id_token and state, and where to post them."""
        sub, variant = self.pending.pop(fields.get("lti_message_hint", ""), ("", ""))
        if fields.get("login_hint") != sub or sub not in self.people:
            raise LookupError("no such launch")
        person = self.people[sub]
        launch = MessageLaunch(FormRequest(fields), self.platform())
        launch.set_user_data(person.sub, list(person.roles), person.name, person.email)
        launch.set_resource_link_claim("resource-link-1", title="Device Lab")
        launch.set_launch_context_claim(self.context_id, context_title="Device Lab 101",
                                        context_label="DL101")
        launch.set_ags(lineitems_url=self.url + "/lineitems", allow_creating_lineitems=True)
        launch.set_nrps(self.url + "/memberships")
        data = launch.lti_launch()
        if variant:
            data["id_token"] = self._spoil(data["id_token"], variant)
        return data

    def _spoil(self, id_token: str, variant: str) -> str:
        """Return the id_token made bad the way `variant` says, signed again."""
        claims = jwt.decode(id_token, options={"verify_signature": False})
        kid = jwt.get_unverified_header(id_token).get("kid")
        key = self.private_key
        if variant == "forged":
            key = _pem_pair()[0]  # someone else's key, presented under the platform's key id
        elif variant == "audience":
            claims["aud"] = claims["azp"] = "another-tool"
        elif variant == "expired":
            claims["iat"], claims["exp"] = int(time.time()) - 3600, int(time.time()) - 1800
        elif variant == "other-course":
            claims[CLAIM + "context"] = {"id": "course-999", "title": "Another course", "label": "X999"}
        elif variant == "other-deployment":
            claims[CLAIM + "deployment_id"] = "deploy-999"
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})

    def token(self, fields: dict[str, str]) -> dict:
        """Answer a client-credentials request (the tool's JWT checked against its key set)."""
        with self.lock:
            return self.platform().get_access_token(fields)

    def authorized(self, header: str, scope: str) -> bool:
        """Return whether the bearer token is ours, valid and grants the scope."""
        token = header.removeprefix("Bearer ").strip()
        try:
            return bool(token) and self.platform().validate_token(token, allowed_scopes=[scope])
        except (LtiException, jwt.PyJWTError, ValueError):
            return False

    def _save(self, book: Gradebook) -> None:
        tmp = self.gradebook_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(book), indent=2))
        tmp.replace(self.gradebook_file)

    def add_lineitem(self, item: dict) -> dict:
        """Create a line item; return it with its id."""
        with self.lock:
            book = self.gradebook()
            item = {**item, "id": f"{self.url}/lineitems/{len(book.lineitems) + 1}"}
            book.lineitems[item["id"]] = item
            self._save(book)
            return item

    def add_score(self, lineitem: str, score: dict) -> bool:
        """Record a score for a line item; return False when there is no such line item."""
        with self.lock:
            book = self.gradebook()
            if lineitem not in book.lineitems:
                return False
            book.scores.append({**score, "lineitem": lineitem})
            self._save(book)
            return True

    def members(self) -> dict:
        """Return the course's membership container (NRPS)."""
        return {"id": self.url + "/memberships",
                "context": {"id": self.context_id, "title": "Device Lab 101"},
                "members": [{"user_id": p.sub, "name": p.name, "email": p.email, "roles": list(p.roles),
                             "status": "Active"} for p in self.people.values()]}


AGS = "https://purl.imsglobal.org/spec/lti-ags/scope/"
NRPS = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"


def _handler(lms: LmsStandin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """The stand-in's HTTP endpoints."""

        def log_message(self, *args) -> None:
            """Stay quiet."""

        def reply(self, status: int, body: object = None, kind: str = "application/json",
                  headers: dict | None = None) -> None:
            data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
            self.send_response(status)
            sent = {"Content-Type": kind, "Content-Length": str(len(data)), **(headers or {})}
            for name, value in sent.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def query(self) -> dict[str, str]:
            return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))

        def do_GET(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            if path == "/jwks":
                return self.reply(200, {"keys": lms.registration().get_jwks()})
            if path == "/launch":
                q = self.query()
                where = lms.start_launch(q["user"], q.get("variant", ""))
                return self.reply(302, headers={"Location": where})
            if path == "/course":
                q = self.query()
                action, _, fields = lms.start_launch(q["user"], q.get("variant", "")).partition("?")
                inputs = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                                 for k, v in urllib.parse.parse_qsl(fields))
                page = ("<html><head><title>Device Lab 101</title></head><body><h1>Device Lab 101</h1>"
                        f'<form id="tool" method="post" action="{html.escape(action)}">{inputs}'
                        '<button type="submit">Open Device Lab</button></form></body></html>')
                return self.reply(200, page.encode(), "text/html")
            if path == "/authorize":
                try:
                    data = lms.finish_launch(self.query())
                except (LookupError, PreflightRequestValidationException) as exc:
                    return self.reply(400, f"launch refused by the LMS: {exc}".encode(), "text/plain")
                inputs = "".join(f'<input type="hidden" name="{k}" value="{html.escape(data[k])}">'
                                 for k in ("id_token", "state"))
                action = html.escape(data["launch_url"])
                page = (f'<html><body><form id="launch" method="post" action="{action}">{inputs}</form>'
                        "<script>document.getElementById('launch').submit()</script></body></html>")
                return self.reply(200, page.encode(), "text/html")
            if lms.down:
                return self.reply(503, {"error": "down"})
            if path == "/lineitems":
                if not lms.authorized(self.headers.get("Authorization", ""), AGS + "lineitem"):
                    return self.reply(401, {"error": "unauthorized"})
                return self.reply(200, list(lms.gradebook().lineitems.values()),
                                  "application/vnd.ims.lis.v2.lineitemcontainer+json")
            if path == "/memberships":
                if not lms.authorized(self.headers.get("Authorization", ""), NRPS):
                    return self.reply(401, {"error": "unauthorized"})
                return self.reply(200, lms.members(),
                                  "application/vnd.ims.lti-nrps.v2.membershipcontainer+json")
            return self.reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if lms.down:
                return self.reply(503, {"error": "down"})
            if path == "/token":
                try:
                    return self.reply(200, lms.token(dict(urllib.parse.parse_qsl(raw.decode()))))
                except (LtiException, MissingRequiredClaim, UnsupportedGrantType, jwt.PyJWTError) as exc:
                    return self.reply(400, {"error": "invalid_client", "detail": str(exc)})
            scope = AGS + ("score" if path.endswith("/scores") else "lineitem")
            if not lms.authorized(self.headers.get("Authorization", ""), scope):
                return self.reply(401, {"error": "unauthorized"})
            if path == "/lineitems":
                return self.reply(201, lms.add_lineitem(json.loads(raw)),
                                  "application/vnd.ims.lis.v2.lineitem+json")
            found = re.fullmatch(r"(/lineitems/\d+)/scores", path)
            if found and lms.add_score(lms.url + found.group(1), json.loads(raw)):
                return self.reply(204)
            return self.reply(404, {"error": "no such line item"})

    return Handler


@dataclass
class Class:
    """A hub and the LMS stand-in it is connected to."""

    hub: object  # tests.hub_support.Hub
    lms: "LmsStandin"


@contextlib.contextmanager
def connected_class(tmp_path: Path, people: tuple, later: tuple[str, ...]):
    """Start the LMS stand-in with `people` enrolled, set a hub up with --authenticator lti13 for it (`later`:
    the accounts launches will make), and register the hub in the LMS; yield both."""
    import requests

    from tests.hub_support import class_hub

    (tmp_path / "lms").mkdir()
    lms = LmsStandin(tmp_path / "lms")
    for person in people:
        lms.enrol(person)
    try:
        with class_hub(tmp_path, "id,name,role\n", lms.setup_args(), later=later) as hub:
            keys = requests.get(hub.public + "/hub/lti13/jwks", timeout=30)
            assert keys.status_code == 200 and keys.json()["keys"][0]["kty"] == "RSA"
            lms.register_tool(hub.public + "/hub/lti13/oauth_login", hub.public + "/hub/", keys.json())
            yield Class(hub, lms)
    finally:
        lms.close()
