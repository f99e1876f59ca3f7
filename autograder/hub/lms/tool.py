"""The hub as an LTI tool: its key pair, the LMS's service endpoints and who is who (the grader's lti/).

Root writes these (`hub setup`, and the hub on each launch); the grader account reads them to post scores and
read the roster. The folder is the grader's (0700), inside the course, which students cannot enter.
"""

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pylti1p3.registration import Registration
from pylti1p3.service_connector import REQUESTS_USER_AGENT, ServiceConnector

from autograder.hub.lms.launch import Launch
from autograder.hub.settings import LtiSettings


@dataclass(frozen=True)
class Platform:
    """What the tool needs to call the LMS's services (AGS, NRPS) outside a launch."""

    issuer: str
    client_id: str
    deployment_id: str
    token_url: str
    lineitems_url: str = ""  # learned from launches (the AGS claim)
    memberships_url: str = ""  # learned from launches (the NRPS claim)
    # hub user name -> the LMS's user id (sub), for passback: a copy; who is who is people.py's ledger
    people: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolFiles:
    """The files of the tool's side of LTI."""

    folder: Path

    @property
    def private_key(self) -> Path:
        return self.folder / "tool-private.pem"

    @property
    def jwks(self) -> Path:
        """Return the tool's public key set (the LMS checks the tool's service requests with it)."""
        return self.folder / "tool-jwks.json"

    @property
    def platform(self) -> Path:
        return self.folder / "platform.json"

    @property
    def queue(self) -> Path:
        """Return the grade passback queue."""
        return self.folder / "passback.sqlite"

    def read_platform(self) -> Platform:
        """Return the LMS's endpoints and people (raises FileNotFoundError on a hub without LTI)."""
        return Platform(**json.loads(self.platform.read_text(encoding="utf-8")))

    def write_platform(self, platform: Platform, owner: tuple[int, int] | None = None) -> None:
        """Replace platform.json atomically (owned by `owner` (uid, gid) when given)."""
        _write(self.platform, json.dumps(asdict(platform), indent=2, sort_keys=True) + "\n", owner)

    def public_jwks(self) -> dict:
        """Return the tool's public key set."""
        return json.loads(self.jwks.read_text(encoding="utf-8"))


def _write(path: Path, text: str, owner: tuple[int, int] | None, mode: int = 0o600) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    if owner is not None:
        os.chown(tmp, *owner)
    tmp.replace(path)


def prepare(files: ToolFiles, lti: LtiSettings, owner: tuple[int, int] | None = None) -> None:
    """Make the tool's key pair (once) and write the LMS's settings, keeping what launches taught."""
    files.folder.mkdir(parents=True, exist_ok=True)
    files.folder.chmod(0o700)
    if owner is not None:
        os.chown(files.folder, *owner)
    if not files.private_key.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        _write(files.private_key, pem, owner)
    public = _public_pem(files.private_key.read_text(encoding="utf-8"))
    _write(files.jwks, json.dumps({"keys": [Registration.get_jwk(public)]}, indent=2) + "\n", owner, 0o644)
    try:
        known = files.read_platform()
    except FileNotFoundError:
        known = Platform(lti.issuer, lti.client_id, lti.deployment_id, lti.token_url)
    files.write_platform(replace(known, issuer=lti.issuer, client_id=lti.client_id,
                                 deployment_id=lti.deployment_id, token_url=lti.token_url), owner)


def _public_pem(private_pem: str) -> str:
    key = serialization.load_pem_private_key(private_pem.encode(), password=None)
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def remember(files: ToolFiles, people: dict[str, str], launch: Launch | None = None,
             owner: tuple[int, int] | None = None) -> None:
    """Keep what services need: people's LMS ids (hub user -> sub) and a launch's service URLs."""
    platform = files.read_platform()
    platform = replace(platform, people={**platform.people, **people})
    if launch is not None:
        platform = replace(platform, lineitems_url=launch.lineitems_url or platform.lineitems_url,
                           memberships_url=launch.memberships_url or platform.memberships_url)
    files.write_platform(platform, owner)


class TimeoutSession(requests.Session):
    """A requests session whose calls give up after a while (PyLTI1p3 sets no timeout)."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.timeout = timeout
        self.headers["User-Agent"] = REQUESTS_USER_AGENT

    def request(self, *args, **kwargs):
        """Send a request with the session's timeout unless the caller gave one."""
        kwargs.setdefault("timeout", self.timeout)
        return super().request(*args, **kwargs)


def connector(files: ToolFiles, platform: Platform, timeout: float = 15) -> ServiceConnector:
    """Return PyLTI1p3's service connector for the LMS, signing its token requests with the tool's key."""
    private = files.private_key.read_text(encoding="utf-8")
    registration = (Registration().set_issuer(platform.issuer).set_client_id(platform.client_id)
                    .set_auth_token_url(platform.token_url).set_tool_private_key(private)
                    .set_tool_public_key(_public_pem(private)))
    return ServiceConnector(registration, requests_session=TimeoutSession(timeout))
