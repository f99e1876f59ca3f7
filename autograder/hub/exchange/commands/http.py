"""The instructor's commands on the HTTP exchange: no exchange folder is touched.

Root asks the running hub for a token of the grader's hub user that may only use the exchange service, as
staff, for ten minutes, and runs nbgrader's own commands as the grader account with it (`nbgrader
release_assignment, collect, release_feedback`: the grader's nbgrader_config.py gives them the HTTP exchange's
classes). `status` reads the service's list of submissions with such a token.
"""

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace

from autograder.hub.exchange.commands.assignments import (
    collected,
    parse_due,
    record_due,
    require_built,
    students,
)
from autograder.hub.exchange.http.api import STAFF_SCOPE, SubmissionInfo
from autograder.hub.exchange.interfaces import CollectReport, Handin, Handins
from autograder.hub.settings import EXCHANGE_STAFF, HubError, HubSettings
from autograder.hub.setup.accounts import GraderAccount
from autograder.hub.setup.hub_api import HubAPI
from autograder.hub.setup.parts import exchange_service, exchange_url
from autograder.hub.text import printable

TOKEN_S = 600


@dataclass(frozen=True)
class HttpCommands:
    """`interfaces.StaffExchange` on the hub's exchange service."""

    s: HubSettings

    def prepare(self) -> list[str]:
        """Nothing: the exchange service makes its own store, in the course (setup.install makes it ahead on
        a node of its own, whose box shows that folder only)."""
        return []

    def release(self, assignment: str, force: bool = False, due: str | None = None) -> str:
        """Release the student version through the exchange service; record its due date when given."""
        due_utc = parse_due(due) if due else None
        require_built(self.s, assignment)
        said = self._nbgrader("release_assignment", assignment, *(["--force"] if force else []))
        said = "\n".join([*said, f"released {assignment} through {exchange_url(self.s)}"])
        return said if due_utc is None else f"{said}\n{record_due(self.s, assignment, due_utc)}"

    def status(self, assignment: str) -> Handins:
        """Return every student on the roster with their latest submission in the exchange service."""
        latest: dict[str, str] = {}
        for sub in self.submissions(assignment):
            latest[sub.student_id] = max(latest.get(sub.student_id, ""), sub.timestamp)
        return Handins([Handin(u, latest.get(u), collected(self.s, u, assignment))
                        for u in sorted(set(students(self.s)) | set(latest))])

    def collect(self, assignment: str) -> CollectReport:
        """Collect each student's newest submission into the course's submitted/ (nbgrader collect, as the
        grader); what nbgrader said is the report's log."""
        require_built(self.s, assignment)
        return CollectReport(log=self._nbgrader("collect", assignment, "--update"))

    def feedback(self, assignment: str) -> list[str]:
        """Give the grader's feedback pages back through the service; return the students they went to."""
        s = self.s
        require_built(s, assignment)
        done = GraderAccount.of(s).command(EXCHANGE_STAFF, "feedback", assignment, "--course",
                                          str(s.paths.course))
        staged = json.loads(done.stdout.strip().splitlines()[-1])
        if not staged:
            raise HubError(f"no graded submissions of {assignment} to give feedback on: run `hub grade` "
                           "first")
        self._nbgrader("release_feedback", assignment)
        return staged

    def submissions(self, assignment: str) -> list[SubmissionInfo]:
        """Return every stored submission of an assignment, as the service lists them to staff."""
        url = exchange_url(self.s) + "api/submissions?" + urllib.parse.urlencode({"assignment": assignment})
        request = urllib.request.Request(url, headers={"Authorization": f"token {self.staff_token()}"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return [SubmissionInfo(**x) for x in json.loads(response.read())["submissions"]]
        except (OSError, ValueError) as exc:
            raise HubError(f"the exchange service did not list the submissions ({exc})") from None

    def staff_token(self) -> str:
        """Return a new token of the grader's hub user that may only use the exchange, as staff (ten
        minutes)."""
        s = self.s
        api = HubAPI.for_settings(s)
        if not api.up():
            raise HubError("the hub is not running, and the HTTP exchange is one of its services: "
                           "`hub start` first")
        reply = api.call("POST", f"/users/{s.grader}/tokens", {
            "note": "hub command: the exchange, as staff", "expires_in": TOKEN_S,
            "scopes": [f"access:services!service={exchange_service(s)}", STAFF_SCOPE]})
        if reply.status != 201:
            raise HubError(f"the hub gave no token to use the exchange with (HTTP {reply.status}: "
                           f"{reply.body}); {s.grader} must be in the group formgrade-{s.course_id}")
        return reply.body["token"]

    def _nbgrader(self, *args: str) -> list[str]:
        """Run an nbgrader command as the grader account with a staff token; return what it logged."""
        s = self.s
        grader = GraderAccount.of(s)
        grader = replace(grader, env={**grader.env, "JUPYTERHUB_API_TOKEN": self.staff_token()})
        done = grader.run([str(s.bin_dir / "nbgrader"), *args], timeout=900, check=False)
        said = [printable(line) for line in (done.stdout + done.stderr).splitlines() if "] " in line]
        if done.returncode != 0:
            raise HubError(f"nbgrader {args[0]} failed:\n" + "\n".join(said[-12:]))
        return [line.split("] ", 1)[1] for line in said]
