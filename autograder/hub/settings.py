"""The hub's settings (chosen once by `hub setup`, saved as hub.json) and the paths they imply."""

import json
import os
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from autograder.grading.defaults import DEFAULT_SANDBOX, SANDBOX_CHOICES, SANDBOX_HELP
from autograder.options import at_least, between, option
from autograder.options import port as port_number

DEFAULT_ROOT = Path("/srv/devicelab-hub")
SETTINGS_FILE = "hub.json"
AUTHENTICATORS = ("pam", "native", "dummy", "lti13")
EXCHANGES = ("files", "http")
NODES = ("one", "namespaces")  # hub setup --nodes: the machine's network, or each part in its own namespaces
SERVER_BOXES = ("bwrap", "none")  # each server in a box of its own (spawning/server_box.py), or not
LOOPBACK = ("127.0.0.1", "::1", "localhost")
# how long a grading worker holds a submission before the exchange hands it out again: longer than one
# grading (the autograde service's time limit per notebook, the kernel's start)
LEASE_S = 900.0
LEASE_CHECK = between(10, 24 * 3600, " s")  # a grading must fit in one; a day at most
# The commands the hub's parts run, installed by devicelab-grader (grader/pyproject.toml's [project.scripts];
# tests/test_packaging.py checks the two agree). Each runs by absolute path from the hub's environment
# (HubSettings.command): no `python -m`, no PYTHONPATH.
GRADE = "devicelab-grade"
EXCHANGE = "devicelab-exchange"
DUE_DATES = "devicelab-due-dates"
EXCHANGE_SERVICE = "devicelab-exchange-service"
EXCHANGE_STAFF = "devicelab-exchange-staff"
AUTOGRADE = "devicelab-autograde"
GRADING_WORKER = "devicelab-grading-worker"
PASSBACK = "devicelab-passback"
COURSE_GRADEBOOK = "devicelab-course-gradebook"
COMMANDS = (GRADE, EXCHANGE, DUE_DATES, EXCHANGE_SERVICE, EXCHANGE_STAFF, AUTOGRADE, GRADING_WORKER,
            PASSBACK, COURSE_GRADEBOOK)
# JupyterHub's plugins by their entry-point names (groups jupyterhub.spawners and jupyterhub.authenticators)
SPAWNER = "devicelab-limited"
LTI_AUTHENTICATOR = "devicelab-lti13"
# The installed grader package's folder (boxes show it read-only: nbgrader's HTTP exchange classes are in it)
GRADER_PACKAGE = Path(__file__).resolve().parent.parent


def node_hub_address(subnet: int) -> str:
    """Return the hub's own address in its nodes' network 10.X.0.0/16 (hub/spawning/nodes.py)."""
    return f"10.{subnet}.0.1"


class HubError(RuntimeError):
    """A hub command cannot go on; the message says why and what to do."""


@dataclass
class HubSettings:
    """Everything the generated configuration depends on."""

    root: str
    course_id: str
    course_source: str  # the course repository whose source/, release/ and nbgrader_config.py are installed
    prefix: str = option("", "prefix of every Unix account name (e.g. dl-; required with lti13: LMS people "
                             "get new accounts under it only)")
    authenticator: str = option("pam", "pam (Unix passwords), native (sign-up, approved by an admin), dummy "
                                       "(one shared password; loopback only), lti13 (launched from an LMS "
                                       "course page)", choices=AUTHENTICATORS)
    ip: str = option("127.0.0.1", "address the hub listens on")
    port: int = option(8000, "public port", check=port_number)
    hub_port: int = option(8081, "the hub's internal port", check=port_number)
    proxy_api_port: int = option(8001, "the proxy's API port", check=port_number)
    service_port: int = option(9999, "the formgrader service's port", check=port_number)
    cull_idle_s: int = option(3600, "stop servers idle this many seconds (0: never)", flag="cull-idle",
                              check=at_least(0))
    python: str = option(sys.executable, "the Python environment every server runs (every account must be "
                                         "able to run it)")
    proxy: str = ""  # configurable-http-proxy's executable; empty: the one on PATH
    dummy_password: str = ""
    extra_group: str = option("", "an existing Unix group every account joins (e.g. one that may read a "
                                  "shared data folder)")
    mem_limit_mib: int = option(2048, "memory of each server, its kernels included, in MiB (0: none)",
                                flag="mem-limit", metavar="MIB", check=at_least(0))
    cpu_limit: float = option(1.0, "CPUs each server may use (0: none)", metavar="CPUS", check=at_least(0))
    tasks_limit: int = option(1024, "processes and threads each server may run (0: none)", metavar="N",
                              check=at_least(0))
    server_box: str = option("bwrap", "bwrap: each server in a box of its own (private /tmp and /dev/shm, "
                                      "own process view, no shared folder but the exchange; needs "
                                      "bubblewrap); none: servers share the machine's /tmp and /proc "
                                      "(SECURITY.md: not isolated)", choices=SERVER_BOXES)
    exchange: str = option("files", "files: nbgrader's exchange folder, made safe; http: an exchange service"
                                    " of the hub (no shared folder; who submits is the hub token's user; "
                                    "docs/hub.md)", choices=EXCHANGES, kept=True)
    exchange_port: int = option(9998, "the HTTP exchange service's port", check=port_number, kept=True)
    grading_workers: int = option(0, "N grading workers as hub services, each with its own course copy "
                                     "(needs --exchange http; docs/hub.md); 0: none",
                                     metavar="N", check=at_least(0), kept=True)
    worker_sandbox: str = option(DEFAULT_SANDBOX, f"the grading workers': {SANDBOX_HELP}",
                                 choices=SANDBOX_CHOICES, kept=True)
    lease_s: float = option(LEASE_S, "how long a grading worker holds a submission: one killed while grading "
                            "loses it to another after this", metavar="SECONDS", kept=True,
                            check=LEASE_CHECK)
    # JupyterHub's database, the gradebook and the queues in one PostgreSQL database (hub/database.py:
    # postgresql://ROLE@HOST:PORT/DATABASE, no password); empty: each in its sqlite file
    database_url: str = ""
    nodes: str = option("one", "one: every part on this machine's network; namespaces: the exchange service, "
                        "each grading worker and each student's server in network and mount namespaces of "
                        "their own, linked only to the hub's (needs --exchange http; docs/hub.md, Beyond one "
                        "machine)", choices=NODES, kept=True)
    # with nodes "namespaces", the hub at 10.X.0.1 with X = node_subnet (hub/spawning/nodes.py)
    node_subnet: int = 0
    lti: "LtiSettings | None" = None  # the LMS, with --authenticator lti13

    def __post_init__(self) -> None:
        if isinstance(self.lti, dict):  # read back from hub.json
            self.lti = LtiSettings(**self.lti)

    @property
    def paths(self) -> "HubPaths":
        """Return the folders and files under the root."""
        return HubPaths(Path(self.root), self.course_id)

    @property
    def hub_address(self) -> str:
        """Return the address the hub's API and its services listen on for the other parts."""
        return node_hub_address(self.node_subnet) if self.nodes == "namespaces" else "127.0.0.1"

    @property
    def grader(self) -> str:
        """Return the shared grader account (it runs formgrader and owns the course directory)."""
        return f"{self.prefix}grader"

    @property
    def bin_dir(self) -> Path:
        """Return the folder of the Python environment's commands (jupyterhub, nbgrader, ...)."""
        return Path(self.python).parent

    def command(self, name: str) -> str:
        """Return the absolute path of one of the hub's installed commands (COMMANDS), in its environment."""
        return str(self.bin_dir / name)

    def save(self) -> None:
        """Write hub.json (root only: it names the dummy password when there is one)."""
        path = self.paths.settings
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        path.chmod(0o600)

    @classmethod
    def load(cls, root: Path) -> "HubSettings":
        """Read hub.json from a root made by `hub setup`."""
        path = HubPaths(root, "").settings
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise HubError(
                f"no hub in {root} (no {path}); run `python -m autograder hub setup` first") from None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class LtiSettings:
    """The LMS (LTI 1.3 platform) the hub is registered with, and the one course it serves."""

    issuer: str = option("", "the platform's issuer (iss), e.g. https://canvas.instructure.com",
                         flag="lti-issuer")
    client_id: str = option("", "the tool's client id at the platform (the token's audience)",
                            flag="lti-client-id")
    deployment_id: str = option("", "the tool's deployment id (a launch from another one is refused)",
                                flag="lti-deployment-id")
    keyset_url: str = option("", "the platform's public key set (JWKS) URL", flag="lti-keyset-url")
    authorize_url: str = option("", "the platform's OIDC authorization URL", flag="lti-authorize-url")
    token_url: str = option("", "the platform's OAuth2 token URL (grade passback and roster need it)",
                            flag="lti-token-url")
    context_id: str = option("", "the LMS course's context id (required: a launch from another course is "
                             "refused)", flag="lti-context-id")
    username_claim: str = option("email", "the launch claim that suggests a new account's name: email (its "
                                 "part before the @), preferred_username, sub, or custom_NAME for a custom "
                                 "parameter (a name taken already gets a short hash; a person keeps their "
                                 "account whatever it says later)", flag="lti-username-claim")


@dataclass(frozen=True)
class HubPaths:
    """Where the hub keeps what."""

    root: Path
    course_id: str

    @property
    def hub(self) -> Path:
        """Return the hub's own folder (config, database, secrets: root only)."""
        return self.root / "hub"

    @property
    def settings(self) -> Path:
        """Return hub.json."""
        return self.hub / SETTINGS_FILE

    @property
    def config(self) -> Path:
        """Return the generated jupyterhub_config.py."""
        return self.hub / "jupyterhub_config.py"

    @property
    def roster(self) -> Path:
        """Return the hub's copy of the roster."""
        return self.hub / "roster.csv"

    @property
    def cli_token(self) -> Path:
        """Return the token the hub command uses for the hub's REST API."""
        return self.hub / "cli-token"

    @property
    def lti_people(self) -> Path:
        """Return the ledger of which LMS person each account was made for (lms/people.py; root only)."""
        return self.hub / "lti-people.sqlite"

    @property
    def lti_nonces(self) -> Path:
        """Return the nonces of accepted LTI launches, kept until their tokens expire (root only)."""
        return self.hub / "lti-nonces.sqlite"

    @property
    def database_passfile(self) -> Path:
        """Return root's copy of the PostgreSQL password (JupyterHub's, `hub setup`'s; libpq's format)."""
        return self.hub / "database.pgpass"

    @property
    def grader_passfile(self) -> Path:
        """Return the grader's copy of the PostgreSQL password (gradebook, queues), in the course (0600)."""
        return self.course / ".database.pgpass"

    @property
    def log(self) -> Path:
        """Return the hub's log file (`hub start --log`)."""
        return self.hub / "jupyterhub.log"

    @property
    def exchange(self) -> Path:
        """Return nbgrader's exchange root."""
        return self.root / "exchange"

    @property
    def exchange_store(self) -> Path:
        """Return the HTTP exchange service's store (in the course: only the grader account enters it)."""
        return self.course / "http-exchange"

    def worker_course(self, k: int) -> Path:
        """Return grading worker k's own copy of the course (its gradebook and graded/), in the course."""
        return self.course / "workers" / f"worker-{k}"

    @property
    def course(self) -> Path:
        """Return the course directory (owned by the grader account; students cannot enter it)."""
        return self.root / "course"

    @property
    def lti(self) -> Path:
        """Return the grader's LTI folder (the tool's key, the LMS's endpoints, the passback queue)."""
        return self.course / "lti"

    @property
    def grader_runtime(self) -> Path:
        """Return the grader service's Jupyter runtime folder (its kernels' IPC sockets), in the course."""
        return self.course / ".runtime"

    @property
    def student_etc(self) -> Path:
        """Return the Jupyter config folder of every user's server."""
        return self.root / "etc" / "student"

    @property
    def grader_etc(self) -> Path:
        """Return the Jupyter config folder of the grader's server and commands."""
        return self.root / "etc" / "grader"


def grader_env(s: HubSettings) -> dict[str, str]:
    """Return the environment of commands the grader account runs (nbgrader, the grader's commands)."""
    return {"JUPYTER_CONFIG_PATH": str(s.paths.grader_etc),
            "PATH": os.pathsep.join([str(s.bin_dir), "/usr/local/bin", "/usr/bin", "/bin"])}
