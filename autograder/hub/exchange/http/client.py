"""nbgrader's exchange classes for the exchange service: set in ExchangeFactory, they replace the folders.

The student's server (the Assignments tab, `nbgrader fetch_assignment|submit|fetch_feedback|list`) and the
grader's (formgrader's Collect, `nbgrader release_assignment|collect|release_feedback`) call the service with
their hub token (JUPYTERHUB_API_TOKEN): the service, not this side, decides who is submitting. What comes
back is unpacked with archive.py's caps and refusals, into a new folder, then moved into place.
"""

import glob
import io
import json
import os
import re
import shutil
import tempfile
from fnmatch import fnmatch
from pathlib import Path

from nbgrader.exchange.abc import (
    Exchange,
    ExchangeCollect,
    ExchangeFetchAssignment,
    ExchangeFetchFeedback,
    ExchangeList,
    ExchangeReleaseAssignment,
    ExchangeReleaseFeedback,
    ExchangeSubmit,
)
from nbgrader.utils import parse_utc
from traitlets import Bool, Float, Unicode, default

from autograder.hub.exchange.arrival import STAMP_FILE, write_stamp
from autograder.hub.exchange.http.api import (
    FETCHED_FEEDBACK_LIMITS,
    RELEASE_LIMITS,
    SUBMISSION_LIMITS,
    ServiceClient,
    ServiceError,
    SubmissionInfo,
)
from autograder.hub.exchange.http.archive import ArchiveRefused, md5_file, pack, pack_files, unpack
from autograder.safe_copy import Limits


class HttpExchange(Exchange):
    """What every class shares: the service's address, the token, where assignments live locally."""

    url = Unicode("", help="The exchange service's address, e.g. http://127.0.0.1:9998/services/c-exchange/"
                  ).tag(config=True)
    course = Unicode("", help="The one course the service serves (its assignments are listed under it)."
                     ).tag(config=True)
    token = Unicode(help="A hub token (default: $JUPYTERHUB_API_TOKEN, the server's own).").tag(config=True)
    path_includes_course = Bool(False, help="Keep assignments in COURSE/ASSIGNMENT, not ASSIGNMENT."
                                ).tag(config=True)
    timeout_s = Float(120.0, help="How long one request may take.").tag(config=True)

    @default("token")
    def _token(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    def init_src(self) -> None:
        """Nothing to check before the transfer (the service checks)."""

    def init_dest(self) -> None:
        """Nothing to prepare (each class makes its folder when it has what goes in it)."""

    def copy_files(self) -> None:
        """Nothing to copy: each class's start does the transfer."""

    def course_id(self) -> str:
        """Return the course asked for, failing for a course this service does not serve."""
        asked = self.coursedir.course_id or self.course
        if not asked:
            self.fail("No course id specified. Re-run with --course flag.")
        if self.course and asked != self.course:
            self.fail(f"this exchange serves the course {self.course}, not {asked}")
        return asked

    def local(self, assignment: str) -> Path:
        """Return the student's folder of an assignment."""
        parts = [self.course_id(), assignment] if self.path_includes_course else [assignment]
        return Path(self.assignment_dir, *parts)

    def call(self, method: str, path: str, body: bytes | None = None, **query: str) -> bytes:
        """Send one request with the token; return the body (ServiceError when the service refuses)."""
        if not self.url:
            self.fail("HttpExchange.url is not set: the hub's configuration names the exchange service")
        try:
            return ServiceClient(self.url, self.token, self.timeout_s).call(method, path, body, **query)
        except ServiceError as exc:
            if exc.status == 0:
                self.fail(exc.reason)
            raise

    def ignored(self, rel: str) -> bool:
        """Return whether a path is one nbgrader leaves out of a transfer (CourseDirectory.ignore)."""
        return any(fnmatch(part, p) for part in rel.split("/") for p in self.coursedir.ignore)

    def call_json(self, method: str, path: str, **query: str):
        return json.loads(self.call(method, path, **query))

    def unpack_into(self, body: bytes, limits: Limits, near: Path) -> Path:
        """Unpack a tar stream into a new folder next to `near` (refused: fail); return the folder."""
        near.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".exchange-", dir=near.parent))
        try:
            unpack(io.BytesIO(body), scratch, limits)
        except ArchiveRefused as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            self.fail(f"refused what the exchange sent: {exc}")
        return scratch

    def submissions(self, assignment: str, **query: str) -> list[SubmissionInfo]:
        asked = {"assignment": assignment} if assignment else {}
        listed = self.call_json("GET", "submissions", **asked, **query)["submissions"]
        return [SubmissionInfo(**s) for s in listed]


def _guard(exchange: HttpExchange, action):
    try:
        return action()
    except ServiceError as exc:
        exchange.fail(f"the exchange service refused: {exc.reason} (HTTP {exc.status})")


class HttpFetchAssignment(HttpExchange, ExchangeFetchAssignment):
    """Fetch a released assignment into the student's folder (refused when it is there, as nbgrader does)."""

    def start(self) -> None:
        super().start()
        assignment = self.coursedir.assignment_id
        dest = self.local(assignment)
        if dest.exists() and not self.replace_missing_files:
            self.fail(f"You already have a copy of the assignment in this directory: {assignment}")
        body = _guard(self, lambda: self.call("GET", f"assignments/{assignment}"))
        scratch = self.unpack_into(body, RELEASE_LIMITS, dest)
        try:
            if not dest.exists():
                os.rename(scratch, dest)
            else:
                for top, _, names in os.walk(scratch):
                    for name in names:
                        target = dest / Path(top, name).relative_to(scratch)
                        if not target.exists():
                            target.parent.mkdir(parents=True, exist_ok=True)
                            shutil.copyfile(Path(top, name), target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self.log.info(f"Successfully fetched {assignment} to {dest}")


class HttpSubmit(HttpExchange, ExchangeSubmit):
    """Submit the student's folder of an assignment; the service files it under the token's user."""

    def start(self) -> None:
        super().start()
        course, assignment = self.course_id(), self.coursedir.assignment_id
        src = self.local(assignment)
        if not src.is_dir():
            self.fail(f"Assignment not found: {src}")
        released = {a["assignment_id"]: a["notebooks"]
                    for a in _guard(self, lambda: self.call_json("GET", "assignments"))["assignments"]}
        if assignment not in released:
            self.fail(f"Assignment {assignment} is not released in {course}")
        missing = sorted(set(released[assignment]) - {p.stem for p in src.glob("*.ipynb")})
        if missing:
            message = "Possible missing notebooks: " + ", ".join(f"{n}.ipynb" for n in missing)
            if self.strict:
                self.fail(message)
            self.log.warning(message)
        try:
            body = pack(src, self.ignored, SUBMISSION_LIMITS)
        except ArchiveRefused as exc:
            self.fail(f"not submitted: {exc}")
        done = _guard(self, lambda: json.loads(self.call("POST", f"submissions/{assignment}", body)))
        self.log.info(f"Submitted as: {course} {assignment} {done['timestamp']}")


class HttpList(HttpExchange, ExchangeList):
    """List released assignments, or the student's own submissions (staff: everyone's) with feedback flags."""

    def list_files(self) -> list[dict]:
        if not self.coursedir.course_id and not self.course:
            return []
        if self.coursedir.course_id and self.course and self.coursedir.course_id != self.course:
            return []  # another course's: not this exchange's
        if self.inbound or self.cached:
            return self.submitted()
        return self.released()

    def remove_files(self) -> list[dict]:
        self.fail("the exchange service keeps submissions: nothing is removed from it")
        return []

    def released(self) -> list[dict]:
        course, wanted = self.course_id(), self.coursedir.assignment_id
        found = []
        for item in _guard(self, lambda: self.call_json("GET", "assignments"))["assignments"]:
            assignment = item["assignment_id"]
            if wanted and assignment != wanted:
                continue
            local = self.local(assignment)
            if local.exists():
                status, path = "fetched", local.resolve()
                notebooks = [{"notebook_id": p.stem, "path": str(p.resolve())}
                             for p in sorted(path.glob("*.ipynb"))]
            else:
                status, path = "released", f"{self.url.rstrip('/')}/api/assignments/{assignment}"
                notebooks = [{"notebook_id": n, "path": f"{path}/{n}.ipynb"} for n in item["notebooks"]]
            found.append({"course_id": course, "assignment_id": assignment, "status": status,
                          "path": str(path), "notebooks": notebooks})
            self.log.info(f"{course} {assignment}" + (" (already downloaded)" if status == "fetched" else ""))
        return found

    def submitted(self) -> list[dict]:
        course = self.course_id()
        query = {"student": self.coursedir.student_id} if self.coursedir.student_id not in ("", "*") else {}
        groups: dict[tuple[str, str], list[dict]] = {}
        for sub in _guard(self, lambda: self.submissions(self.coursedir.assignment_id, **query)):
            groups.setdefault((sub.student_id, sub.assignment_id), []).append(self.one(course, sub))
        return [{"course_id": course, "student_id": student, "assignment_id": assignment,
                 "status": "submitted", "submissions": sorted(subs, key=lambda s: s["timestamp"])}
                for (student, assignment), subs in sorted(groups.items())]

    def one(self, course: str, sub: SubmissionInfo) -> dict:
        """Return one submission as nbgrader's list describes it, with its feedback's state here and there."""
        folder = self.local(sub.assignment_id) / "feedback" / sub.timestamp
        notebooks = []
        for name in sub.notebooks:
            page = folder / f"{name}.html"
            here = page.is_file()
            there = name in sub.feedback
            notebooks.append({"notebook_id": name, "path": "", "has_local_feedback": here,
                              "has_exchange_feedback": there,
                              "local_feedback_path": str(page) if here else None,
                              "feedback_updated": here and there and md5_file(page) != sub.feedback[name]})
        def every(flag: str) -> bool:
            return bool(notebooks) and all(n[flag] for n in notebooks)

        info = {"course_id": course, "student_id": sub.student_id, "assignment_id": sub.assignment_id,
                "timestamp": sub.timestamp, "status": "submitted", "path": "", "notebooks": notebooks,
                "has_local_feedback": every("has_local_feedback"),
                "has_exchange_feedback": every("has_exchange_feedback"),
                "feedback_updated": any(n["feedback_updated"] for n in notebooks)}
        info["local_feedback_path"] = str(folder) if info["has_local_feedback"] else None
        self.log.info(f"{course} {sub.student_id} {sub.assignment_id} {sub.timestamp}")
        return info


class HttpFetchFeedback(HttpExchange, ExchangeFetchFeedback):
    """Fetch the student's own feedback pages into ASSIGNMENT/feedback/TIMESTAMP/."""

    def start(self) -> None:
        super().start()
        assignment = self.coursedir.assignment_id
        dest = self.local(assignment) / "feedback"
        try:
            body = self.call("GET", f"feedback/{assignment}")
        except ServiceError as exc:
            if exc.status != 404:
                self.fail(f"the exchange service refused: {exc.reason} (HTTP {exc.status})")
            self.log.warning(f"No feedback for {assignment} yet")
            return
        scratch = self.unpack_into(body, FETCHED_FEEDBACK_LIMITS, dest)
        try:
            for page in sorted(scratch.glob("*/*.html")):
                target = dest / page.parent.name / page.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(page, target)
                self.log.info(f"Fetched feedback: {target}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


class HttpReleaseAssignment(HttpExchange, ExchangeReleaseAssignment):
    """Release the course's release/ASSIGNMENT through the service (staff)."""

    def start(self) -> None:
        super().start()
        self.course_id()
        assignment = self.coursedir.assignment_id
        src = Path(self.coursedir.format_path(self.coursedir.release_directory, ".", assignment))
        if not src.is_dir():
            self.fail(f"Assignment not found: {src}")
        try:
            body = pack(src, self.ignored, RELEASE_LIMITS)
        except ArchiveRefused as exc:
            self.fail(f"not released: {exc}")
        _guard(self, lambda: self.call("PUT", f"assignments/{assignment}", body,
                                        **({"force": "1"} if self.force else {})))
        self.log.info(f"Released {assignment}")


class HttpCollect(HttpExchange, ExchangeCollect):
    """Collect each student's newest submission into submitted/STUDENT/ASSIGNMENT (staff), stamped by the
    service's clock."""

    def start(self) -> None:
        super().start()
        self.course_id()
        assignment = self.coursedir.assignment_id
        query = {"student": self.coursedir.student_id} if self.coursedir.student_id not in ("", "*") else {}
        due = self.due_date(assignment) if self.before_duedate else None
        newest: dict[str, SubmissionInfo] = {}
        listed = _guard(self, lambda: self.submissions(assignment, **query))
        for sub in sorted(listed, key=lambda x: x.timestamp):
            kept = newest.get(sub.student_id)
            # with before_duedate, as nbgrader: the last one before the due date, else the last one
            if (kept is None or due is None or parse_utc(sub.timestamp) <= due
                    or parse_utc(kept.timestamp) > due):
                newest[sub.student_id] = sub
        if not newest:
            self.log.warning(f"No submissions of '{assignment}' for course '{self.course_id()}' to collect")
        for _, sub in sorted(newest.items()):
            self.collect_one(sub)

    def due_date(self, assignment: str):
        """Return the assignment's due date in the gradebook (naive UTC; None when it has none)."""
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                return gb.find_assignment(assignment).duedate
            except MissingEntry:
                return None

    def collect_one(self, sub: SubmissionInfo) -> None:
        dest = Path(self.coursedir.format_path(self.coursedir.submitted_directory, sub.student_id,
                                               sub.assignment_id))
        stamp = dest / STAMP_FILE
        if dest.is_dir():
            existing = stamp.read_text(encoding="utf-8").strip() if stamp.is_file() else ""
            if existing == sub.timestamp or not self.update:
                self.log.info(f"No newer submission to collect: {sub.student_id} {sub.assignment_id}")
                return
        body = _guard(self, lambda: self.call(
            "GET", f"submissions/{sub.assignment_id}/{sub.student_id}/{sub.timestamp}"))
        scratch = self.unpack_into(body, SUBMISSION_LIMITS, dest)
        write_stamp(scratch, sub.timestamp)
        if dest.is_dir():
            shutil.rmtree(dest)
        os.rename(scratch, dest)
        self.log.info(f"Collected submission: {sub.student_id} {sub.assignment_id} ({sub.timestamp})")


class HttpReleaseFeedback(HttpExchange, ExchangeReleaseFeedback):
    """Give each student's feedback pages back for the submission they were made from (staff)."""

    def start(self) -> None:
        super().start()
        self.course_id()
        assignment = self.coursedir.assignment_id
        student = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else "*"
        pattern = self.coursedir.format_path(self.coursedir.feedback_directory, student, assignment)
        whose = re.compile(self.coursedir.format_path(
            self.coursedir.feedback_directory, "(?P<student_id>[^/]+)", assignment, escape=True) + "$")
        for folder in sorted(Path(p) for p in glob.glob(pattern)):
            stamp, pages, match = folder / STAMP_FILE, sorted(folder.glob("*.html")), whose.match(str(folder))
            if pages and stamp.is_file() and match:
                self.release_one(match["student_id"], stamp.read_text(encoding="utf-8").strip(), pages)

    def release_one(self, student: str, timestamp: str, pages: list[Path]) -> None:
        body = pack_files({page.name: page.read_bytes() for page in pages})
        where = f"feedback/{self.coursedir.assignment_id}/{student}/{timestamp}"
        _guard(self, lambda: self.call("PUT", where, body))
        self.log.info(f"Released feedback for {student} on {self.coursedir.assignment_id} ({timestamp})")
