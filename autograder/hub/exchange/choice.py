"""The one place that picks the exchange's backend: the hub's setting `exchange` ("folder" or "http")."""

from pathlib import Path

from autograder.hub.exchange.commands.folder import FolderCommands
from autograder.hub.exchange.commands.http import HttpCommands
from autograder.hub.exchange.folder.autograde import FolderAutograde
from autograder.hub.exchange.http.autograde import HttpAutograde
from autograder.hub.exchange.interfaces import AutogradeExchange, StaffExchange
from autograder.hub.part_settings import AutogradeSettings
from autograder.hub.settings import HubSettings


def staff_exchange(s: HubSettings) -> StaffExchange:
    """Return the instructor's side of the hub's exchange."""
    return HttpCommands(s) if s.exchange == "http" else FolderCommands(s)


def autograde_exchange(s: AutogradeSettings) -> AutogradeExchange:
    """Return the autograde service's side of the exchange: the HTTP exchange service when its settings name
    one (its store still hidden from the sandbox), else the exchange folder."""
    if s.http_exchange:
        return HttpAutograde(s.http_exchange, (Path(s.exchange),))
    return FolderAutograde.at(Path(s.exchange), s.course_id)


def grading_workers(exchange: AutogradeExchange) -> HttpAutograde:
    """Return the exchange the grading workers lease submissions from: only the HTTP exchange has them."""
    if not isinstance(exchange, HttpAutograde):
        raise TypeError("grading workers take their submissions from the HTTP exchange (--http-exchange)")
    return exchange
