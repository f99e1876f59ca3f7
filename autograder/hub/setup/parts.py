"""The processes the HTTP exchange's hub runs beside JupyterHub: the exchange service and the grading workers.

On one machine (`--nodes one`) JupyterHub starts each as a managed service, as the grader account. With
`--nodes namespaces` `hub start` runs each on a node of its own (nodes.py, node_start.py): a network namespace
linked only to the hub's, in a box (server_box.py) that shows it its own folder, Python and the course's
packages, and no other part's folder; JupyterHub knows them as external services with a token each.
"""

import textwrap
from dataclasses import dataclass
from pathlib import Path

from autograder.grading.sandbox import python_locations, student_package_folders
from autograder.hub.database import part_url
from autograder.hub.part_settings import ServiceSettings, WorkerSettings
from autograder.hub.settings import EXCHANGE_SERVICE, GRADER_PACKAGE, GRADING_WORKER, HubSettings
from autograder.hub.spawning.nodes import EXCHANGE_INDEX, FIRST_WORKER_INDEX, Node, part_address


@dataclass(frozen=True)
class Part:
    """One process of the hub's: its hub service, its command, its own folder and its node's number."""

    service: str
    command: str  # its program (an installed command, HubSettings.command)
    settings: object  # its settings (a dataclass of `autograder.options`), written to its config file
    config_file: Path  # where `hub setup` writes them (render.py) and the program reads them (--config)
    folder: Path  # its working folder, the only one it writes (its box's home on a node of its own)
    index: int  # its node's number (nodes.Node)
    port: int = 0  # the port it serves HTTP on (0: none)
    about: str = ""  # what it does, as the generated config says above it

    @property
    def about_lines(self) -> list[str]:
        """Return `about` in lines that fit the generated config beside their comment sign."""
        return textwrap.wrap(self.about, 106)

    @property
    def argv(self) -> tuple[str, ...]:
        """Return its command line: its program and its config file, nothing rebuilt from the settings."""
        return (self.command, "--config", str(self.config_file))

    def node(self, s: HubSettings) -> Node:
        """Return its node in the hub's network."""
        return Node(s.node_subnet, self.index)

    def url(self, s: HubSettings) -> str:
        """Return where the hub (its proxy) reaches it: its node's address, or loopback on one machine."""
        host = part_address(s.node_subnet, self.index) if s.nodes == "namespaces" else "127.0.0.1"
        return f"http://{host}:{self.port}"

    def token_file(self, s: HubSettings) -> Path:
        """Return the file of its hub token, with --nodes namespaces (root only)."""
        return s.paths.hub / f"{self.service}.token"


def exchange_service(s: HubSettings) -> str:
    """Return the name of the HTTP exchange's hub service (exchange "http")."""
    return f"{s.course_id}-exchange"


def exchange_url(s: HubSettings) -> str:
    """Return where the others reach the HTTP exchange's API: the service itself on loopback, or, on nodes of
    their own, the hub's proxy (the only address they can reach)."""
    if s.nodes == "namespaces":
        return f"http://{s.hub_address}:{s.port}/services/{exchange_service(s)}/"
    return f"http://127.0.0.1:{s.exchange_port}/services/{exchange_service(s)}/"


def exchange_part(s: HubSettings, workers: bool) -> Part:
    """Return the exchange service (`workers`: it hands out only what the autograde service says)."""
    store = s.paths.exchange_store
    settings = ServiceSettings(str(store), s.lease_s, hand_out_when_told=workers,
                               lease_database=lease_database(s) if workers else "")
    folder = store if s.nodes == "namespaces" else s.paths.course
    about = ("The exchange (autograder/hub/exchange/http/service.py): release, fetch, submit, collect and "
             "feedback over HTTP, its files in a folder of the grader account's"
             + (" (it hands workers only the submissions the autograde service names)." if workers else "."))
    return Part(exchange_service(s), s.command(EXCHANGE_SERVICE), settings,
                s.paths.grader_etc / "exchange-service.json", folder, EXCHANGE_INDEX, s.exchange_port, about)


def lease_database(s: HubSettings) -> str:
    """Return where the exchange service keeps the grading workers' leases: the hub's PostgreSQL database
    (schema `exchange`) when it has one and the service runs on the hub's machine; else a sqlite file in the
    service's store (on a node of its own, the only folder its box shows), hidden from its keys (a dot
    name)."""
    if s.database_url and s.nodes != "namespaces":
        return part_url(s.database_url, "exchange", s.paths.grader_passfile)
    return f"sqlite:///{s.paths.exchange_store / '.leases' / 'leases.sqlite'}"


def worker_parts(s: HubSettings) -> list[Part]:
    """Return the HTTP exchange's grading workers, each with its own course copy."""
    parts = []
    for k in range(1, s.grading_workers + 1):
        course = s.paths.worker_course(k)
        settings = WorkerSettings(exchange_url(s), str(course), sandbox=s.worker_sandbox)
        about = (f"Grading worker {k} (autograder/hub/service/grading_worker.py): leases a submission from "
                 "the exchange service, grades it in the sandbox in its own course copy, posts the result; "
                 "no URL. A lease it held when killed runs out and goes to another worker.")
        parts.append(Part(f"{s.course_id}-worker-{k}", s.command(GRADING_WORKER), settings,
                          s.paths.grader_etc / f"worker-{k}.json", course, FIRST_WORKER_INDEX + k - 1,
                          about=about))
    return parts


def autograde_config(s: HubSettings) -> Path:
    """Return the autograde service's config file (`devicelab-autograde run --config FILE`)."""
    return s.paths.grader_etc / "autograde.json"


def readable_folders(s: HubSettings) -> tuple[Path, ...]:
    """Return what a part's box shows read-only: Python, the course's packages and the grader's config."""
    return (*map(Path, python_locations()), *student_package_folders(), GRADER_PACKAGE,
            s.paths.grader_etc)
