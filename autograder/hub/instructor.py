"""What the instructor's `hub` commands do beyond the exchange (exchange/commands/ has release, status,
collect and feedback): set up, grade (with our grader), extensions, autograde, passback, roster, export."""

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from autograder.csv_cells import restored
from autograder.hub.due_dates import Extension
from autograder.hub.exchange.choice import staff_exchange
from autograder.hub.exchange.commands.assignments import require_built
from autograder.hub.grade_export import ExportFormat, nbgrader_csv, read_table, write_csv
from autograder.hub.part_settings import AutogradeSwitches
from autograder.hub.settings import AUTOGRADE, DUE_DATES, GRADE, PASSBACK, HubError, HubSettings
from autograder.hub.setup import accounts, install, members
from autograder.hub.setup.accounts import GraderAccount
from autograder.hub.setup.install import SetupReport
from autograder.options import argv_of


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
    report = install.setup(s, roster, lambda settings: staff_exchange(settings).prepare())
    if report.settings.lti is not None:
        from autograder.hub.lms.admission import prepare_lms  # pylti1p3, cryptography: only with an LMS

        prepare_lms(report.settings)
    return report


def _extensions_as_grader(s: HubSettings, assignment: str, student: str | None = None,
                          how: tuple[str, ...] = ()) -> object:
    """Run due_dates.py as the grader account (the gradebook is the grader's); return what it printed.

    The names come after `--`, so that no id is ever read as an option.
    """
    done = GraderAccount.of(s).command(DUE_DATES, "--course", str(s.paths.course),
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


def autograde(s: HubSettings, mode: str, assignment: str,
              switches: AutogradeSwitches | None = None) -> str:
    """Turn autograde-on-submit on (with its switches) or off for an assignment, or list its queue (as the
    grader account)."""
    require_built(s, assignment)
    options = argv_of(switches) if mode == "on" and switches is not None else []
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
