"""Build the hub's exchange backend, as setup/exchanges.py names it (the one place that picks one): the
instructor's side from the hub's settings, the autograde service's from its own."""

from pkgutil import resolve_name

from autograder.hub.exchange.http.autograde import HttpAutograde
from autograder.hub.exchange.interfaces import AutogradeExchange, StaffExchange
from autograder.hub.part_settings import AutogradeSettings
from autograder.hub.settings import HubSettings
from autograder.hub.setup.exchanges import BACKENDS, exchange_setup


def staff_exchange(s: HubSettings) -> StaffExchange:
    """Return the instructor's side of the hub's exchange."""
    return resolve_name(exchange_setup(s).staff)(s)


def autograde_exchange(s: AutogradeSettings) -> AutogradeExchange:
    """Return the autograde service's side of the exchange its settings name (ValueError for settings that
    contradict their backend: an exchange service's address without the HTTP backend, or none with it)."""
    if bool(s.http_exchange) != (s.backend == "http") or (s.workers and s.backend != "http"):
        raise ValueError(f"backend {s.backend} with http_exchange {s.http_exchange!r} and workers "
                         f"{s.workers}: the HTTP backend, and only it, needs the exchange service's address "
                         "and has workers")
    return resolve_name(BACKENDS[s.backend].autograde).from_settings(s)


def grading_workers(exchange: AutogradeExchange) -> HttpAutograde:
    """Return the exchange the grading workers lease submissions from (a backend that hands work out)."""
    if not isinstance(exchange, HttpAutograde):
        raise TypeError(f"grading workers take their submissions from the HTTP exchange, not "
                        f"{type(exchange).__name__}")
    return exchange
