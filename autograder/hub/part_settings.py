"""The settings of the programs the hub starts beside JupyterHub: the exchange service, each grading worker
and the autograde service. `hub setup` writes each one's into its config file (setup/parts.py, render.py);
the program reads it (`--config FILE`, `autograder.options.parse`): one declaration per setting, and no
process rebuilds another's command line from them."""

from dataclasses import MISSING, dataclass

from autograder.grading.defaults import DEFAULT_SANDBOX, SANDBOX_CHOICES, SANDBOX_HELP, timeout_problem
from autograder.hub.settings import EXCHANGES, LEASE_CHECK, LEASE_S
from autograder.options import at_least, option
from autograder.str_enum import StrEnum


class HiddenTests(StrEnum):
    """What feedback on submit shows of the hidden tests before the due date: only each one's score and the
    instructor's message (protected, the default), or everything, as nbgrader's feedback does (shown)."""

    PROTECTED = "protected"
    SHOWN = "shown"


AUTOGRADE_TIMEOUT = 120.0  # seconds per notebook on submit, unless the instructor sets --timeout


@dataclass(frozen=True)
class AutogradeSwitches:
    """`hub autograde on ASSIGNMENT`'s settings of an assignment (those not given keep their last value, at
    first the queue's defaults); root's command hands them to the autograde service's own `on`."""

    per_hour: int | None = option(None, "at most this many graded submissions per student per hour (0: no "
                                  "limit)", kind=int, check=lambda n: None if n is None else at_least(0)(n))
    timeout: float | None = option(None, f"seconds per notebook (at first {AUTOGRADE_TIMEOUT:g})",
                                   kind=float, check=timeout_problem)
    hidden_tests: str | None = option(None, "feedback on submit before the due date: the hidden tests' "
                                      "scores and the instructor's messages only (protected, at first), or "
                                      "everything (shown)", choices=tuple(HiddenTests))


@dataclass(frozen=True)
class ServiceSettings:
    """The HTTP exchange service (exchange/http/service.py)."""

    store: str = option(MISSING, "the folder the service keeps everything in", metavar="FOLDER")
    lease_s: float = option(LEASE_S, "how long a grading worker holds a submission before it is handed out "
                            "again", metavar="SECONDS", check=LEASE_CHECK)
    hand_out_when_told: bool = option(False, "lease no submission until `PUT api/work` names the "
                                      "assignments (the autograde service does, with grading workers); else "
                                      "every assignment's")
    lease_database: str = option("", "keep the grading leases in this database (a SQLAlchemy URL: a sqlite "
                                 "file, or the hub's PostgreSQL schema `exchange`), where they outlive a "
                                 "restart of the service; empty: in memory", metavar="URL")


@dataclass(frozen=True)
class WorkerSettings:
    """A grading worker (service/grading_worker.py)."""

    url: str = option(MISSING, "the exchange service's address", metavar="URL")
    course: str = option(MISSING, "this worker's copy of the course", metavar="FOLDER")
    token_file: str = option("", "a file holding a hub token with the staff scope (api.STAFF_SCOPE); empty: "
                             "$JUPYTERHUB_API_TOKEN, the token of a hub-managed service", metavar="FILE")
    assignments: tuple[str, ...] = option((), "grade only this assignment (repeatable)", flag="assignment",
                                          metavar="ASSIGNMENT")
    sandbox: str = option(DEFAULT_SANDBOX, SANDBOX_HELP, choices=SANDBOX_CHOICES)
    hidden_tests: str = option(HiddenTests.PROTECTED, "what feedback shows of the hidden tests before the "
                               "due date, unless the autograde service says", choices=tuple(HiddenTests))
    timeout: float | None = option(None, "seconds per notebook, unless the autograde service says",
                                   kind=float, check=timeout_problem)
    once: bool = option(False, "stop when nothing is waiting")


@dataclass(frozen=True)
class AutogradeSettings:
    """The autograde service's run (service/autograde.py)."""

    course: str = option(MISSING, "the grader's course", metavar="FOLDER")
    exchange: str = option(MISSING, "the exchange's root folder (hidden from student code in any case)",
                           metavar="FOLDER")
    course_id: str = option(MISSING, "the course's id in the exchange")
    backend: str = option(MISSING, "the exchange's backend (hub setup --exchange; setup/exchanges.py)",
                          choices=EXCHANGES)
    http_exchange: str = option("", "the HTTP exchange service's address (backend http, which needs it)",
                                metavar="URL")
    workers: bool = option(False, "grading workers grade the HTTP exchange's submissions: record their "
                           "results")
    jobs: int | None = option(None, "students graded at once (default: the CPU cores)", kind=int,
                              check=lambda n: None if n is None else at_least(1)(n))
    once: bool = option(False, "stop when the queue is empty")
