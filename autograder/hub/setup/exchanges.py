"""The exchange's backends, each named once: the one place that picks a backend by the hub's setting
`exchange` (settings.EXCHANGES).

Each backend says what the hub's set-up makes for it: the programs it runs beside JupyterHub, the ports they
listen on, the settings it cannot work with, the autograde service's settings, and its fragments of the
generated configs (`templates/exchange/<name>/`). It also names the classes that use it once the hub runs, as
nbgrader's ExchangeFactory and JupyterHub's `spawner_class` name theirs (exchange/choice.py builds them): the
instructor's commands (`interfaces.StaffExchange`) and the autograde service's side
(`interfaces.AutogradeExchange`). A third backend (object storage, a cluster's) is one more class here, its
template fragments and the two classes it names.
"""

from typing import ClassVar, Protocol

from autograder.hub.part_settings import AutogradeSettings
from autograder.hub.settings import HubSettings
from autograder.hub.setup.parts import Part, exchange_part, exchange_url, worker_parts


class ExchangeSetup(Protocol):
    """What one backend asks of the hub's set-up, and the classes that use it."""

    name: str  # its value of `hub setup --exchange`
    staff: str  # its `interfaces.StaffExchange`, as module.Class (built from the HubSettings)
    autograde: str  # its `interfaces.AutogradeExchange`, as module.Class (built by from_settings)
    templates: str  # the folder of its fragments of the generated configs, under templates/

    def parts(self, s: HubSettings) -> list[Part]:
        """Return the programs it runs beside JupyterHub, the grading workers among them."""

    def workers(self, s: HubSettings) -> list[Part]:
        """Return the grading workers that lease submissions from it (none where it has none)."""

    def ports(self, s: HubSettings) -> dict[str, int]:
        """Return the ports of its own programs, by what listens on each."""

    def problems(self, s: HubSettings) -> list[str]:
        """Return why these settings cannot work with it (none when they can)."""

    def autograde_settings(self, s: HubSettings) -> AutogradeSettings:
        """Return the autograde service's settings (a managed service of the hub on every backend)."""


class FilesSetup:
    """nbgrader's exchange folder, made safe: shared with every server, written by nbgrader's own classes."""

    name: ClassVar[str] = "files"
    staff: ClassVar[str] = "autograder.hub.exchange.commands.folder.FolderCommands"
    autograde: ClassVar[str] = "autograder.hub.exchange.folder.autograde.FolderAutograde"
    templates: ClassVar[str] = "exchange/files"

    def parts(self, s: HubSettings) -> list[Part]:
        return []

    def workers(self, s: HubSettings) -> list[Part]:
        return []

    def ports(self, s: HubSettings) -> dict[str, int]:
        return {}

    def problems(self, s: HubSettings) -> list[str]:
        wrong = []
        if s.grading_workers:
            wrong.append(f"--grading-workers {s.grading_workers} needs --exchange http: workers take "
                         "submissions from the HTTP exchange service's API (the files exchange has none)")
        if s.nodes == "namespaces":
            wrong.append("--nodes namespaces needs --exchange http (the parts share no folder: they talk "
                         "over the hub's proxy)")
        return wrong

    def autograde_settings(self, s: HubSettings) -> AutogradeSettings:
        return AutogradeSettings(course=str(s.paths.course), exchange=str(s.paths.exchange),
                                 course_id=s.course_id, backend=self.name)


class HttpSetup:
    """The exchange service of the hub (exchange/http/): no shared folder, and the grading workers' leases."""

    name: ClassVar[str] = "http"
    staff: ClassVar[str] = "autograder.hub.exchange.commands.http.HttpCommands"
    autograde: ClassVar[str] = "autograder.hub.exchange.http.autograde.HttpAutograde"
    templates: ClassVar[str] = "exchange/http"

    def parts(self, s: HubSettings) -> list[Part]:
        workers = self.workers(s)
        return [exchange_part(s, bool(workers)), *workers]

    def workers(self, s: HubSettings) -> list[Part]:
        return worker_parts(s)

    def ports(self, s: HubSettings) -> dict[str, int]:
        return {"exchange service": s.exchange_port}

    def problems(self, s: HubSettings) -> list[str]:
        return []

    def autograde_settings(self, s: HubSettings) -> AutogradeSettings:
        # its store is the folder hidden from the sandbox, as the exchange folder is otherwise
        return AutogradeSettings(course=str(s.paths.course), exchange=str(s.paths.exchange_store),
                                 course_id=s.course_id, backend=self.name, http_exchange=exchange_url(s),
                                 workers=bool(s.grading_workers))


# the choices of settings.EXCHANGES, each one backend
BACKENDS: dict[str, ExchangeSetup] = {b.name: b for b in (FilesSetup(), HttpSetup())}


def exchange_setup(s: HubSettings) -> ExchangeSetup:
    """Return the hub's exchange backend (its setting `exchange`)."""
    return BACKENDS[s.exchange]
