"""The `hub` sub-command: its arguments and what each action prints."""

import argparse
import os
import sys
from pathlib import Path

from autograder.grading.defaults import DEFAULT_TIMEOUT, SANDBOX_CHOICES
from autograder.hub.grade_export import ExportFormat
from autograder.hub.part_settings import AutogradeSwitches
from autograder.hub.settings import (
    DEFAULT_ROOT,
    HubError,
    HubSettings,
    LtiSettings,
)
from autograder.options import add_options, given, kept

ROOT_ENV = "DEVICELAB_HUB_ROOT"


def add_arguments(hub: argparse.ArgumentParser, course_root: Path) -> None:
    """Add the hub's actions and their options to its parser."""
    default_root = os.environ.get(ROOT_ENV, str(DEFAULT_ROOT))
    actions = hub.add_subparsers(dest="action", required=True)

    def action(name: str, help_: str) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_, description=help_)
        parser.add_argument("--root", default=default_root,
                            help=f"the hub's folder (default: ${ROOT_ENV} or {DEFAULT_ROOT})")
        return parser

    setup = action("setup", "make the Unix accounts, the exchange, the grader's course and the hub's config")
    setup.add_argument("--roster", default=None,
                       help="CSV with columns id,name,role (student|grader|instructor); optional with lti13 "
                            "(LMS people get accounts of their own at their first launch or from `hub roster "
                            "--from-lms`; the CSV's accounts are never given to a launch)")
    lti = setup.add_argument_group("LTI 1.3 (--authenticator lti13; docs/lms.md)")
    add_options(lti, LtiSettings)
    setup.add_argument("--proxy", default=None, help="configurable-http-proxy executable (default: `make "
                                                     "hub-setup`'s .hub/node_modules/.bin, else PATH)")
    add_options(setup, HubSettings)  # each setting's flag, default, help and check: HubSettings
    setup.add_argument("--course", default=str(course_root),
                       help="the course to install (default: this repo)")
    setup.add_argument("--database-url", default=None, metavar="URL",
                       help="PostgreSQL for JupyterHub's database, the gradebook and the queues: postgresql://"
                            "ROLE@HOST:PORT/DATABASE, no password (docs/hub.md); `sqlite`: sqlite files (the "
                            "first setup's default); default: as the last setup")
    setup.add_argument("--database-password-file", default=None, type=Path, metavar="FILE",
                       help="a file only its owner can read that holds the PostgreSQL password (or set "
                            "DEVICELAB_DATABASE_PASSWORD); default: the one the last setup kept")
    add = action("add-user", "add one person to the hub (account, roster, gradebook, running hub)")
    add.add_argument("id")
    add.add_argument("--name", default="")
    add.add_argument("--role", choices=["student", "grader", "instructor"], default="student")
    roster = action("roster", "give every member of the LMS course their account (made if new) and their "
                              "role now (LTI NRPS)")
    roster.add_argument("--from-lms", action="store_true", required=True,
                        help="read the class list from the LMS (hub set up with --authenticator lti13)")
    passback = action("passback", "grade passback to the LMS: what is pending, sent or failed; flush posts "
                                  "what is due now")
    passback.add_argument("mode", choices=["status", "flush"])
    passback.add_argument("assignment", nargs="?")
    start = action("start", "run JupyterHub in the foreground")
    start.add_argument("--debug", action="store_true")
    for name, text in [("release", "release an assignment to the students"),
                       ("status", "who has submitted an assignment"),
                       ("collect", "collect the latest submissions into the course"),
                       ("grade", "grade the collected submissions with the course's grader"),
                       ("feedback", "release the feedback pages to the students")]:
        parser = action(name, text)
        parser.add_argument("assignment")
        if name == "release":
            parser.add_argument("--force", action="store_true", help="release again, replacing the release")
            parser.add_argument("--due", default=None, metavar="WHEN",
                                help="due date, e.g. '2026-12-01 17:00:00 UTC' or "
                                     "'2026-12-01T17:00:00-05:00' (no zone: UTC, as nbgrader reads it); "
                                     "later submissions are late")
        if name == "grade":
            parser.add_argument("--timeout", default=None,
                                help=f"seconds per notebook (grade's default: {DEFAULT_TIMEOUT:g})")
            parser.add_argument("--jobs", default=None, help="students at the same time (default: CPU cores)")
            parser.add_argument("--sandbox", default=None, choices=SANDBOX_CHOICES)
            parser.add_argument("--force", action="store_true", help="grade every student again")
    extend = action("extend", "give one student more time for an assignment (nbgrader's extension: late "
                              "penalties count from their own due date); without --until/--by/--remove, "
                              "list the assignment's extensions")
    extend.add_argument("assignment")
    extend.add_argument("student", nargs="?", help="the student's id (with or without the account prefix)")
    how = extend.add_mutually_exclusive_group()
    how.add_argument("--until", metavar="WHEN", help="their own due date, e.g. '2026-12-03 17:00:00 UTC'")
    how.add_argument("--by", type=float, metavar="HOURS", dest="hours",
                     help="hours after the assignment's due date")
    how.add_argument("--remove", action="store_true", help="take the extension back")
    autograde = action("autograde", "grade each submission of an assignment as it arrives (the autograde "
                                    "service), or stop; status lists its queue")
    autograde.add_argument("mode", choices=["on", "off", "status"])
    autograde.add_argument("assignment")
    add_options(autograde, AutogradeSwitches)
    export = action("export", "write the gradebook's grades as CSV")
    export.add_argument("--to", default="grades.csv", help="CSV file to write (default: grades.csv)")
    export.add_argument("--by-question", action="store_true",
                        help="a column per graded cell and task (with its points) beside each assignment's "
                             "total")
    export.add_argument("--format", choices=list(ExportFormat), default=None, dest="layout",
                        help="a row per student: table (the default with --by-question), or the CSV that "
                             "Canvas's or Moodle's gradebook import reads; without it and --by-question, "
                             "nbgrader export's own layout")


def run(args: argparse.Namespace) -> int:
    """Run one hub action; return the exit code (2 when it cannot run)."""
    try:
        return _run(args)
    except HubError as exc:
        print(f"hub {args.action}: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from autograder.hub import instructor, start
    from autograder.hub.exchange.choice import staff_exchange
    from autograder.hub.setup import install, members
    from autograder.hub.setup.roster import Member
    from autograder.hub.text import printable

    root = Path(args.root)
    if args.action == "setup":
        last = _last_setup(root)
        settings = HubSettings(
            root=str(root), course_id=_course_id(Path(args.course)), course_source=args.course,
            **{**kept(last, HubSettings), "node_subnet": last.node_subnet, **given(args, HubSettings)},
            proxy=args.proxy or install.find_proxy(Path(args.course)),
            lti=_lti_settings(args) if (args.authenticator or HubSettings.authenticator) == "lti13" else None,
            database_url=_database_url(args.database_url, root))
        if settings.database_url:
            install.keep_database_password(settings, args.database_password_file)
        report = instructor.setup(settings, _roster_file(args))
        s = report.settings
        print(f"hub for {s.course_id} in {s.paths.root}: {len(report.members)} people, grader account "
              f"{s.grader}")
        if report.created:
            print(f"accounts created: {', '.join(report.created)}")
        print(f"config: {s.paths.config}")
        if s.authenticator == "pam":
            print("people log in with their Unix password: set one with `passwd <account>` (or chpasswd)")
        elif s.authenticator == "dummy":
            print(f"dummy login, loopback only; the shared password is in {s.paths.settings}")
        elif s.authenticator == "lti13":
            for line in _lti_next_steps(s):
                print(line)
        if s.nodes == "namespaces":
            print(f"nodes: the exchange, {s.grading_workers} grading worker(s) and each student's server in "
                  f"namespaces of their own, linked only to the hub at {s.hub_address}; browsers reach it at "
                  f"http://{s.hub_address if s.ip in ('', '0.0.0.0') else s.ip}:{s.port}/")
        print(f"next: sudo python -m autograder hub start --root {s.paths.root}")
        return 0
    settings = HubSettings.load(root)
    exchange = staff_exchange(settings)
    if args.action == "add-user":
        for line in members.add_user(settings, Member(args.id.lower(), args.name or args.id, args.role)):
            print(line)
    elif args.action == "start":
        start.start(settings, args.debug)
    elif args.action == "release":
        print(exchange.release(args.assignment, args.force, args.due))
    elif args.action == "status":
        found = exchange.status(args.assignment)
        for row in found.handins:
            print(printable(f"{row.student:24} {row.submitted or 'not submitted':28} "
                            f"{'collected' if row.collected else ''}"))
        for bad in found.skipped:
            print(f"not a submission: {bad.line()}")
        print(f"{sum(1 for r in found.handins if r.submitted)} of {len(found.handins)} submitted")
    elif args.action == "collect":
        print("\n".join(exchange.collect(args.assignment).lines()))
    elif args.action == "grade":
        extra = [*(["--timeout", args.timeout] if args.timeout else []),
                 *(["--jobs", args.jobs] if args.jobs else []),
                 *(["--sandbox", args.sandbox] if args.sandbox else []), *(["--force"] if args.force else [])]
        for g in instructor.grade_collected(settings, args.assignment, extra):
            print(f"{g.student:24} {g.score:g}/{g.max_score:g} {g.status}")
        print(f"grades, feedback and summary: {settings.paths.course / 'graded' / args.assignment}")
        if settings.lti is not None:
            print("\n".join(printable(line) for line in instructor.pass_back(settings, args.assignment)))
    elif args.action == "passback":
        if args.mode == "flush":
            print("\n".join(printable(line) for line in instructor.flush_passback(settings)))
        else:
            said = instructor.passback_status(settings, args.assignment)
            print("\n".join(printable(line) for line in said))
    elif args.action == "roster":
        print("\n".join(printable(line) for line in instructor.roster_from_lms(settings)))
    elif args.action == "feedback":
        print("feedback released to: " + ", ".join(exchange.feedback(args.assignment)))
    elif args.action == "autograde":
        said = instructor.autograde(settings, args.mode, args.assignment,
                                    AutogradeSwitches(**given(args, AutogradeSwitches)))
        print("\n".join(printable(line) for line in said.splitlines()))
    elif args.action == "extend":
        if args.student is None:
            for found in instructor.extensions(settings, args.assignment):
                print(printable(found.line()))
        elif args.until is None and args.hours is None and not args.remove:
            raise HubError("say --until WHEN, --by HOURS or --remove (or leave the student out to list)")
        else:
            found = instructor.extend(settings, args.assignment, args.student, args.until, args.hours)
            print(printable(found.line()))
    elif args.action == "export":
        layout = ExportFormat(args.layout) if args.layout else None
        if layout is None and args.by_question:
            layout = ExportFormat.TABLE
        print(f"wrote {instructor.export(settings, Path(args.to).resolve(), layout, args.by_question)}")
    return 0


def _database_url(given: str | None, root: Path) -> str:
    """Return `--database-url` ('' for sqlite), or the last setup's when not given."""
    if given is not None:
        return "" if given in ("", "sqlite") else given
    try:
        return HubSettings.load(root).database_url
    except HubError:
        return ""


def _last_setup(root: Path) -> HubSettings:
    """Return the last setup's settings (the defaults when there was none), for options not given again."""
    try:
        return HubSettings.load(root)
    except HubError:
        return HubSettings(root=str(root), course_id="", course_source="")


def _lti_settings(args: argparse.Namespace) -> LtiSettings:
    """Return the LTI settings of `hub setup`'s --lti-* options."""
    return LtiSettings(**given(args, LtiSettings))


def _roster_file(args: argparse.Namespace) -> Path:
    """Return the roster to set up from: --roster, or (lti13 only) an empty one in the hub's folder."""
    if args.roster:
        return Path(args.roster)
    if args.authenticator != "lti13":
        raise HubError("--roster is needed (only --authenticator lti13 adds people as they arrive)")
    empty = Path(args.root) / "hub" / "roster.csv"
    if not empty.exists():
        empty.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        empty.write_text("id,name,role\n", encoding="utf-8")
    return empty


def _lti_next_steps(s: HubSettings) -> list[str]:
    """Return what the instructor registers in the LMS."""
    from autograder.hub.setup.render import bind_url

    public = bind_url(s.ip, s.port).rstrip("/")
    base = public + "/hub/lti13"
    return ["LTI 1.3: register these in the LMS (behind a TLS proxy, use its https:// address instead):",
            f"  OIDC login (initiation) URL: {base}/oauth_login",
            f"  redirect (launch) URL:       {base}/oauth_callback",
            f"  tool public key set URL:     {base}/jwks   (or paste {s.paths.lti / 'tool-jwks.json'})",
            f"  target link URI:             {public}/hub/"]


def _course_id(course: Path) -> str:
    from autograder.course import course_directory

    course_id = course_directory(course).course_id
    if not course_id:
        raise HubError(f"{course / 'nbgrader_config.py'} sets no CourseDirectory.course_id")
    return course_id
