"""What the instructor's exchange commands check and record whichever backend they use: that the assignment
was built, and its due date."""

import datetime

from autograder.hub.exchange.arrival import parse_utc
from autograder.hub.settings import HubError, HubSettings
from autograder.hub.setup.accounts import GraderAccount
from autograder.hub.setup.roster import read_roster
from autograder.hub.setup.students import course_gradebook


def require_built(s: HubSettings, assignment: str) -> None:
    """Refuse an assignment the course has not built a student version of."""
    if not (s.paths.course / "release" / assignment).is_dir():
        have = sorted(p.name for p in (s.paths.course / "release").iterdir() if p.is_dir())
        raise HubError(f"no assignment {assignment!r} in {s.paths.course / 'release'} (have: "
                       f"{', '.join(have)})")


def record_due(s: HubSettings, assignment: str, due_utc: datetime.datetime) -> str:
    """Record a released assignment's due date in the gradebook (as the grader); say what it means."""
    dated = course_gradebook(GraderAccount.of(s), s.course_id, "due", assignment,
                             f"{due_utc:%Y-%m-%d %H:%M:%S} UTC", check=False)
    if dated.returncode != 0:
        raise HubError(
            f"released, but the due date was not recorded: {(dated.stdout + dated.stderr).strip()}")
    return (f"due {due_utc:%Y-%m-%d %H:%M:%S} UTC; a later submission is late, and nbgrader's "
            "LateSubmissionPlugin.penalty_method (nbgrader_config.py; default 'none': marked late, no "
            "penalty) decides what it costs")


def parse_due(text: str) -> datetime.datetime:
    """Return a due date as naive UTC, read as nbgrader reads it (a time without a zone or offset is UTC)."""
    try:
        return parse_utc(text)
    except (ValueError, OverflowError) as exc:
        raise HubError(f"cannot read the due date {text!r} ({exc}); write it like '2026-12-01 17:00:00 UTC' "
                       "or '2026-12-01T17:00:00-05:00'") from None


def collected(s: HubSettings, student: str, assignment: str) -> bool:
    """Return whether a student's submission of an assignment is in the course's submitted/."""
    return (s.paths.course / "submitted" / student / assignment).is_dir()


def students(s: HubSettings) -> list[str]:
    """Return the accounts of the roster's students."""
    return [m.username(s.prefix) for m in read_roster(s.paths.roster, s.prefix) if m.role == "student"]
