"""What the exchange service and its clients agree on: the staff scope, the caps, a submission as listed."""

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from autograder.safe_copy import Limits

STAFF_SCOPE = "custom:devicelab-exchange:staff"  # release, everyone's submissions, collect, feedback
SUBMISSION_LIMITS = Limits()  # the caps of the file-system exchange's collect (autograder/safe_copy.py)
RELEASE_LIMITS = Limits(total_bytes=1 << 30)
FEEDBACK_LIMITS = Limits(entries=200, depth=1)  # NOTEBOOK.html pages
FETCHED_FEEDBACK_LIMITS = Limits(entries=2000, depth=2)  # TIMESTAMP/NOTEBOOK.html
MAX_SUBMISSIONS = 50  # kept per student and assignment (each within SUBMISSION_LIMITS)


@dataclass(frozen=True)
class SubmissionInfo:
    """One stored submission as the API lists it: whose, of what, when, its notebooks, its feedback pages."""

    student_id: str
    assignment_id: str
    timestamp: str
    notebooks: list[str]
    feedback: dict[str, str] = field(default_factory=dict)  # notebook -> MD5 of its page


def notebooks(names: list[str]) -> list[str]:
    """Return the notebook names (without .ipynb) among the names at the top of a tree."""
    return [name[:-6] for name in names if name.endswith(".ipynb")]


class ServiceError(Exception):
    """The service answered with an error (its status and reason), or could not be reached (status 0)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status}: {reason}" if status else reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class ServiceClient:
    """The exchange service's API at one address, with one hub token."""

    url: str  # e.g. http://127.0.0.1:9998/services/COURSE-exchange/
    token: str
    timeout_s: float = 120.0

    def call(self, method: str, path: str, body: bytes | None = None, **query: str) -> bytes:
        """Send one request; return the body (ServiceError with the service's reason when it refuses)."""
        quoted = "/".join(urllib.parse.quote(p, safe="") for p in path.split("/"))
        url = self.url.rstrip("/") + "/api/" + quoted + ("?" + urllib.parse.urlencode(query) if query else "")
        request = urllib.request.Request(url, data=body, method=method,
                                         headers={"Authorization": f"token {self.token}",
                                                  **({"Content-Type": "application/x-tar"} if body else {})})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            raise ServiceError(exc.code, _reason(exc)) from None
        except OSError as exc:
            raise ServiceError(0, f"the exchange service cannot be reached ({exc})") from None

    def call_json(self, method: str, path: str, **query: str):
        return json.loads(self.call(method, path, **query))

    def submissions(self, assignment: str = "", **query: str) -> list[SubmissionInfo]:
        """Return the submissions the token may list (its user's own; staff: everyone's, or `student=`)."""
        listed = self.call_json("GET", "submissions", **({"assignment": assignment} if assignment else {}),
                                **query)
        return [SubmissionInfo(**s) for s in listed["submissions"]]


def _reason(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"])
    except (ValueError, KeyError, OSError):
        return str(exc.reason)
