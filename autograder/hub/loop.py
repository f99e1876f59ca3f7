"""The instructor's commands: set up, release, status, collect, grade (with our grader), feedback, extensions,
autograde, passback, roster, export."""

import csv
import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path

from autograder.csv_cells import restored
from autograder.hub.exchange.folder import tree as exchange
from autograder.hub.exchange.folder.arrival import parse_utc
from autograder.hub.exchange.folder.tree import BadName, CollectReport, Exchange
from autograder.hub.extensions import Extension
from autograder.hub.grade_export import ExportFormat, nbgrader_csv, read_table, write_csv
from autograder.hub.settings import AUTOGRADE, EXCHANGE, EXTENSIONS, GRADE, PASSBACK, HubError, HubSettings
from autograder.hub.setup import accounts, install, members
from autograder.hub.setup.accounts import GraderAccount
from autograder.hub.setup.install import SetupReport, secure_exchange
from autograder.hub.setup.roster import read_roster
from autograder.hub.setup.students import course_gradebook
from autograder.safe_copy import Refusal


@dataclass(frozen=True)
class Handin:
    """One student's state for an assignment: when they last submitted (None: never), whether it was
    collected.
    """

    student: str
    submitted: str | None
    collected: bool


@dataclass(frozen=True)
class Grade:
    """One row of our grader's grades.csv."""

    student: str
    score: float
    max_score: float
    status: str
    detail: str


def setup(s: HubSettings, roster: Path) -> SetupReport:
    """Make the whole hub (setup.install) and, with an LMS, the hub's side of it (lms.admission)."""
    report = install.setup(s, roster)
    if report.settings.lti is not None:
        from autograder.hub.lms.admission import prepare_lms  # pylti1p3, cryptography: only with an LMS

        prepare_lms(report.settings)
    return report


def require_built(s: HubSettings, assignment: str) -> None:
    """Refuse an assignment the course has not built a student version of (both exchanges' commands ask)."""
    if not (s.paths.course / "release" / assignment).is_dir():
        have = sorted(p.name for p in (s.paths.course / "release").iterdir() if p.is_dir())
        raise HubError(f"no assignment {assignment!r} in {s.paths.course / 'release'} (have: "
                       f"{', '.join(have)})")


def release(s: HubSettings, assignment: str, force: bool = False, due: str | None = None) -> str:
    """Put the student version into the exchange for every student to fetch; record its due date when given.
    """
    due_utc = parse_due(due) if due else None
    require_built(s, assignment)
    repaired = secure_exchange(s.grader, _exchange(s))
    try:
        exchange.release(_exchange(s), s.paths.course / "release" / assignment, assignment, force)
    except (FileExistsError, Refusal) as exc:
        raise HubError(str(exc)) from None
    said = "\n".join([*repaired, f"released {assignment} to {_exchange(s).outbound / assignment}"])
    return said if due_utc is None else f"{said}\n{record_due(s, assignment, due_utc)}"


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


def _exchange(s: HubSettings) -> Exchange:
    return Exchange(s.paths.exchange, s.course_id)


@dataclass
class Handins:
    """Who has submitted an assignment, and the inbound's folders that are nobody's submission."""

    handins: list[Handin]
    skipped: list[BadName] = field(default_factory=list)


def status(s: HubSettings, assignment: str) -> Handins:
    """Return every student on the roster with their latest own submission in the exchange."""
    inbox = _exchange(s).read_inbox({assignment})
    latest = {student: sub.name.timestamp for student, sub in inbox.newest().items()}
    students = [m.username(s.prefix) for m in read_roster(s.paths.roster, s.prefix) if m.role == "student"]
    collected = s.paths.course / "submitted"
    return Handins([Handin(u, latest.get(u), (collected / u / assignment).is_dir())
                   for u in sorted(set(students) | set(latest))], inbox.skipped)


def _as_grader(s: HubSettings, action: str, assignment: str) -> str:
    """Run an exchange action (exchange.py's main) as the grader account; return what it printed."""
    done = GraderAccount.of(s).command(EXCHANGE, action, assignment, "--course",
                                      str(s.paths.course), "--exchange", str(s.paths.exchange), "--course-id",
                                      s.course_id)
    return done.stdout.strip().splitlines()[-1]


def _extensions_as_grader(s: HubSettings, assignment: str, student: str | None = None,
                          how: tuple[str, ...] = ()) -> object:
    """Run extensions.py as the grader account (the gradebook is the grader's); return what it printed.

    The names come after `--`, so that no id is ever read as an option.
    """
    done = GraderAccount.of(s).command(EXTENSIONS, "--course", str(s.paths.course),
                                      "--course-id", s.course_id, *how, "--", assignment,
                                      *([student] if student else []), timeout=120)
    said = json.loads(done.stdout.strip().splitlines()[-1])
    if isinstance(said, dict) and "error" in said:
        raise HubError(said["error"])
    return said


def extend(s: HubSettings, assignment: str, student: str, until: str | None = None,
           hours: float | None = None) -> Extension:
    """Give a student an extension until a date or by some hours (neither: take it back)."""
    require_built(s, assignment)
    account = student if student.startswith(s.prefix) else f"{s.prefix}{student}"
    how = ("--until", until) if until else ("--by", f"{hours}") if hours else ("--remove",)
    return Extension(**_extensions_as_grader(s, assignment, account, how))


def extensions(s: HubSettings, assignment: str) -> list[Extension]:
    """Return every extension of an assignment."""
    require_built(s, assignment)
    return [Extension(**e) for e in _extensions_as_grader(s, assignment)]


def collect(s: HubSettings, assignment: str) -> CollectReport:
    """Copy each student's newest own submission into the course's submitted/ (as the grader account)."""
    require_built(s, assignment)
    return CollectReport.from_json(_as_grader(s, "collect", assignment))


def grade_collected(s: HubSettings, assignment: str, extra: list[str]) -> list[Grade]:
    """Grade the collected submissions with `python -m autograder grade`, as the grader account: nbgrader's
    full pages, hidden tests and all, which `hub feedback` gives the students (the full feedback of after the
    due date; before it, autograde on submit's pages keep them hidden)."""
    require_built(s, assignment)
    course = s.paths.course
    if not any((course / "submitted").glob(f"*/{assignment}")):
        raise HubError(f"nothing collected for {assignment}: run `hub collect {assignment}` first")
    out = course / "graded" / assignment
    GraderAccount.of(s).command(GRADE, "grade", assignment, str(course / "submitted"), "--course",
                               str(course), "--out", str(out), "--hide", str(s.paths.exchange), "--quiet",
                               "--show-hidden-tests", *extra)
    return read_grades(out / "grades.csv")


def read_grades(path: Path) -> list[Grade]:
    """Read our grader's grades.csv."""
    with path.open(newline="", encoding="utf-8") as handle:
        return [Grade(r["student"], float(r["score"] or 0), float(r["max_score"] or 0), r["status"],
                      r["detail"])
                for r in map(restored, csv.DictReader(handle))]


def feedback(s: HubSettings, assignment: str) -> list[str]:
    """Release the grader's feedback pages to the students who were graded; return those students."""
    require_built(s, assignment)
    released = json.loads(_as_grader(s, "feedback", assignment))
    if not released:
        raise HubError(f"no graded submissions of {assignment} to give feedback on: run `hub grade` first")
    return released


def autograde(s: HubSettings, mode: str, assignment: str, per_hour: int | None = None,
              timeout: float | None = None, hidden_tests: str | None = None) -> str:
    """Turn autograde-on-submit on or off for an assignment, or list its queue (as the grader account)."""
    require_built(s, assignment)
    options = [*(["--per-hour", str(per_hour)] if per_hour is not None and mode == "on" else []),
               *(["--timeout", str(timeout)] if timeout is not None and mode == "on" else []),
               *(["--hidden-tests", hidden_tests] if hidden_tests is not None and mode == "on" else [])]
    done = GraderAccount.of(s).command(AUTOGRADE, mode, "--course",
                                      str(s.paths.course), assignment, *options, timeout=120)
    return done.stdout


def pass_back(s: HubSettings, assignment: str) -> list[str]:
    """Queue the graded scores of an assignment for the LMS and post what is due (as the grader account)."""
    return _passback(s, "offer", assignment, timeout=600)


def passback_status(s: HubSettings, assignment: str | None) -> list[str]:
    """Return the passback queue: every score, pending, sent or failed (as the grader account)."""
    return _passback(s, "status", *([assignment] if assignment else []), timeout=120)


def flush_passback(s: HubSettings) -> list[str]:
    """Post the scores that are due now (as the grader account)."""
    return _passback(s, "flush", timeout=600)


def _passback(s: HubSettings, *args: str, timeout: float) -> list[str]:
    """Run grade passback (lms/passback.py) as the grader account; return the lines it printed."""
    done = GraderAccount.of(s).command(PASSBACK, *args, "--course", str(s.paths.course),
                                      timeout=timeout)
    return done.stdout.strip().splitlines()


def roster_from_lms(s: HubSettings) -> list[str]:
    """Give every member of the LMS course their account (made now if new) and their role now, as a launch
    does; a member who cannot be taken is skipped and said, and the rest carry on."""
    from autograder.hub.lms.admission import admit
    from autograder.hub.lms.members import read_lms_roster
    from autograder.hub.lms.tool import ToolFiles

    accounts.require_root("hub roster --from-lms")
    if s.lti is None:
        raise HubError("the hub was not set up with --authenticator lti13: there is no LMS to ask")
    found = read_lms_roster(ToolFiles(s.paths.lti), s.lti.username_claim)
    lines = [f"skipped {why}" for why in found.skipped]
    for person in found.members:
        try:
            admitted = admit(s, person)
        except HubError as exc:
            lines.append(f"skipped {person.name}: {exc}")
            continue
        done = [*admitted.done] or ["on the roster"]
        if admitted.done:
            try:
                done.append(members.publish(s, admitted.member))
            except HubError as exc:
                done.append(str(exc))
        lines += [f"{admitted.user}: {line}" for line in done]
    return lines


def export(s: HubSettings, to: Path, layout: ExportFormat | None = None, by_question: bool = False) -> Path:
    """Write the course gradebook's grades (every assignment) as CSV.

    Without a layout, `nbgrader export`'s own (a row per student and assignment); with one, a row per student
    in that layout (grade_export.py), with a column per graded cell and task when `by_question`. Both are
    written from the gradebook by grade_export, quoted and spreadsheet-safe (nbgrader export's own file is
    not: a comma in a name adds a column there).
    """
    if layout is None:
        to.write_text(nbgrader_csv(s.paths.course, s.course_id), encoding="utf-8")
        return to
    to.write_text(write_csv(read_table(s.paths.course, s.course_id, by_question), layout), encoding="utf-8")
    return to
