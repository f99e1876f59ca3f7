"""The exchange service: nbgrader's release, fetch, submit, collect and feedback over HTTP.

    devicelab-exchange-service --store DIR     (or --config FILE, as the hub runs it: `hub setup` writes it)

The hub runs it as the grader account (a managed service with a URL; its store is a folder only that account
can enter). Every request carries a hub token (a student's server's JUPYTERHUB_API_TOKEN, the formgrader
service's token) and the hub says whose it is and what it may do: `access:services!service=<this service>`
to use it at all, STAFF_SCOPE to release, list everyone's submissions, collect and give feedback back. A
submission is filed under the token's user and the service's own clock, never under a name or a time the
request carries; its files arrive as a tar stream, cut off at the cap while it streams in and unpacked with
archive.py's refusals.

    GET  api/assignments                          released assignments and their notebooks
    GET  api/assignments/A                        one, as a tar stream
    PUT  api/assignments/A[?force=1]              release (staff)
    POST api/submissions/A                        submit, as the token's user
    GET  api/submissions[?assignment=A&student=S] your own submissions (staff: everyone's)
    GET  api/submissions/A/S/T                    one submission, as a tar stream (staff)
    PUT  api/feedback/A/S/T                       give a submission's feedback pages back (staff)
    GET  api/feedback/A                           your own feedback pages, TIMESTAMP/NOTEBOOK.html
    POST api/work[?assignment=A,B]                lease the oldest ungraded submission (staff; 204: none)
    POST api/work/A/S/T?lease=L                   renew that lease while it is graded (staff; 409: ended)
    PUT  api/work {"submissions": [{...}, ...]}   hand out exactly these submissions, each with how (staff)
    PUT  api/work {"assignments": [A, ...]}       hand out only these assignments' submissions (staff)
    PUT  api/results/A/S/T?lease=L                a worker's result and feedback pages, recorded once (staff)
    GET  api/results[?assignment=A]               the recorded results (staff)
    POST api/results/A/S/T/feedback               give a recorded result's pages to its student, unless
                                                  feedback was given back already (staff)

A worker's feedback pages are held, not given to the student, until the autograde service has recorded
their result: it may leave the result out (a newer submission of the student's superseded it), and a
student never sees feedback the gradebook does not have. They are removed once given back, or once feedback
given back first means they never can be.
"""

import argparse
import asyncio
import contextlib
import datetime
import io
import json
import logging
import os
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from tornado import web
from tornado.httpserver import HTTPServer

from autograder.grading.results import Status
from autograder.hub.exchange.http.api import (
    FEEDBACK_LIMITS,
    MAX_SUBMISSIONS,
    RELEASE_LIMITS,
    STAFF_SCOPE,
    SUBMISSION_LIMITS,
    SubmissionInfo,
    notebooks,
)
from autograder.hub.exchange.http.archive import ArchiveRefused, pack_files, upload_cap
from autograder.hub.exchange.http.store import FEEDBACK, RELEASED, SUBMITTED, FolderStore, Store, check_part
from autograder.hub.exchange.http.work import (
    HELD_FEEDBACK,
    MAX_LEASES,
    MAX_RESULT_BYTES,
    RESULT_FILE,
    RESULT_LIMITS,
    RESULTS,
    Handout,
    Leases,
    WorkResult,
)
from autograder.hub.part_settings import ServiceSettings
from autograder.hub.text import printable
from autograder.options import parse

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format
# A request's headers and body must arrive within these (tornado's default is an hour each): an upload that
# stalls is cut off, and its file closed, instead of being held open for whoever sent it.
IDLE_TIMEOUT_S = 60.0  # for a connection's next request, and for a request's headers
BODY_TIMEOUT_S = 120.0  # for a whole body: the largest cap, on a hub's own network, with room to spare
UPLOADS_PER_CALLER = 4  # uploads one user (or service) may have open at once; past it: 429
MAX_OPEN_UPLOADS = 256  # uploads open at once, everyone's: past it 503, well inside a service's 1024 files
NAME = r"([^/]+)"
log = logging.getLogger("devicelab.exchange")


@dataclass(frozen=True)
class Caller:
    """Who a request's token belongs to, as the hub says: a user or a service, staff or not."""

    name: str
    kind: str
    staff: bool


def now_stamp() -> str:
    """Return the service's clock as nbgrader writes a submission's time (UTC)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime(TIMESTAMP_FORMAT)


def submissions(store: Store, assignment: str | None, student: str | None) -> list[SubmissionInfo]:
    """List stored submissions of an assignment (all when None) by a student (all when None)."""
    found = []
    for a in [assignment] if assignment else store.children((SUBMITTED,)):
        for s in [student] if student else store.children((SUBMITTED, a)):
            for stamp in store.children((SUBMITTED, a, s)):
                pages = store.files((FEEDBACK, a, s, stamp))
                found.append(SubmissionInfo(s, a, stamp, notebooks(store.children((SUBMITTED, a, s, stamp))),
                                            {n[:-5]: md5 for n, md5 in pages.items() if n.endswith(".html")}))
    return found


class ApiHandler(web.RequestHandler):
    """A request of the API: its caller is whoever the hub says the token belongs to."""

    caller: Caller

    def initialize(self, store: Store, auth, leases: Leases) -> None:
        self.store, self.auth, self.leases = store, auth, leases

    async def prepare(self) -> None:
        model = await self.auth.get_user(self, sync=False)
        if not model or not self.auth.check_scopes(self.auth.access_scopes, model):
            raise web.HTTPError(403, "a hub token that may use this service is needed")
        self.caller = Caller(model["name"], model.get("kind", "user"),
                             bool(self.auth.check_scopes({STAFF_SCOPE}, model)))

    def check_xsrf_cookie(self) -> None:
        """Tokens only: a cookie never identifies anyone here, so there is no cross-site request to stop."""

    def require_staff(self) -> None:
        if not self.caller.staff:
            raise web.HTTPError(403, "only the course's staff may do this")

    def send_json(self, value) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(value))

    def send_tar(self, key: tuple[str, ...]) -> None:
        try:
            body = self.store.get(key)
        except KeyError:
            raise web.HTTPError(404, "nothing here") from None
        self.set_header("Content-Type", "application/x-tar")
        self.finish(body)

    def write_error(self, status_code: int, **kwargs) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        said = isinstance(error, web.HTTPError) and error.log_message
        message = error.log_message if said else self._reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message}))


class UploadSlots:
    """The uploads open now, by caller: one past its caller's share is refused (429), one past everyone's
    total is told to come back (503), before a file is opened for either. (One event loop: no lock.)"""

    def __init__(self) -> None:
        self.open: dict[str, int] = {}

    def take(self, caller: str) -> None:
        if self.open.get(caller, 0) >= UPLOADS_PER_CALLER:
            raise web.HTTPError(429, f"you have {UPLOADS_PER_CALLER} uploads open already: let one finish")
        if sum(self.open.values()) >= MAX_OPEN_UPLOADS:
            raise web.HTTPError(503, "the exchange is busy: try again in a minute")
        self.open[caller] = self.open.get(caller, 0) + 1

    def give_back(self, caller: str) -> None:
        left = self.open.get(caller, 0) - 1
        if left > 0:
            self.open[caller] = left
        else:
            self.open.pop(caller, None)


@web.stream_request_body
class UploadHandler(ApiHandler):
    """A request whose body is a tar stream, spooled to a temporary file and cut off past the cap; it holds
    one of its caller's upload slots until it ends, however it ends (finished, refused, cut off)."""

    limits = SUBMISSION_LIMITS
    slot: str | None = None

    def initialize(self, store: Store, auth, leases: Leases, uploads: UploadSlots) -> None:
        super().initialize(store, auth, leases)
        self.uploads = uploads

    async def prepare(self) -> None:
        await super().prepare()
        self.cap = upload_cap(self.limits)
        self.received = 0
        if self.request.method not in ("PUT", "POST"):
            return
        self.request.connection.set_max_body_size(self.cap)
        declared = int(self.request.headers.get("Content-Length", "0") or 0)
        if declared > self.cap:
            raise web.HTTPError(413, f"over the exchange's cap of {self.cap} bytes")
        self.uploads.take(self.caller.name)
        self.slot = self.caller.name
        self.body = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _end)

    def data_received(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.cap:
            raise web.HTTPError(413, f"over the exchange's cap of {self.cap} bytes")
        self.body.write(chunk)

    def _end(self) -> None:
        """Close the upload's file and give its slot back (once, whichever end comes first)."""
        if hasattr(self, "body"):
            self.body.close()
        if self.slot is not None:
            self.uploads.give_back(self.slot)
            self.slot = None

    def on_finish(self) -> None:
        self._end()

    def on_connection_close(self) -> None:  # the sender went away, or the body timeout cut it off
        self._end()
        super().on_connection_close()

    async def put_tree(self, key: tuple[str, ...], replace: bool) -> dict:
        """Unpack the upload as the tree at key, in a thread (other requests go on meanwhile)."""
        self.body.seek(0)
        try:
            done = await asyncio.to_thread(self.store.put, key, self.body, self.limits, replace)
        except ArchiveRefused as exc:
            raise web.HTTPError(400, f"refused: {printable(str(exc))}") from None
        except FileExistsError:
            raise web.HTTPError(409, "already there (release with force to replace it)") from None
        return {"files": list(done.files), "bytes": done.total_bytes}


class AssignmentsHandler(ApiHandler):
    def get(self) -> None:
        self.send_json({"assignments": [
            {"assignment_id": a, "notebooks": notebooks(self.store.children((RELEASED, a)))}
            for a in self.store.children((RELEASED,))]})


class ReleasedHandler(UploadHandler):
    limits = RELEASE_LIMITS

    def get(self, assignment: str) -> None:
        self.send_tar((RELEASED, _part(assignment)))

    async def put(self, assignment: str) -> None:
        self.require_staff()
        done = await self.put_tree((RELEASED, _part(assignment)), self.get_argument("force", "") == "1")
        log.info("released %s (%s)", printable(assignment), printable(self.caller.name))
        self.send_json(done)


class SubmissionsHandler(ApiHandler):
    def get(self) -> None:
        assignment = self.get_argument("assignment", "") or None
        # only staff may name a student; anyone else sees their own submissions, whatever the query says
        student = (self.get_argument("student", "") or None) if self.caller.staff else self.caller.name
        if assignment:
            _part(assignment)
        if student:
            _part(student)
        self.send_json({"submissions": [asdict(s) for s in submissions(self.store, assignment, student)]})


class Filing:
    """The submissions being unpacked now, by (assignment, student): they count against the cap with those
    kept, so uploads that finish together cannot all pass it. (One event loop: no lock.)"""

    def __init__(self) -> None:
        self.now: dict[tuple[str, str], int] = {}

    @contextlib.contextmanager
    def one(self, key: tuple[str, str]) -> Iterator[None]:
        self.now[key] = self.now.get(key, 0) + 1
        try:
            yield
        finally:
            self.now[key] -= 1
            if not self.now[key]:
                del self.now[key]


class SubmitHandler(UploadHandler):
    def initialize(self, filing: Filing, **rest) -> None:
        super().initialize(**rest)
        self.filing = filing

    async def post(self, assignment: str) -> None:
        if self.caller.kind != "user":
            raise web.HTTPError(403, "only a user submits (a service's token has no student)")
        if not self.store.children((RELEASED, _part(assignment))):
            raise web.HTTPError(404, f"{assignment} is not released")
        key = (assignment, _part(self.caller.name))
        if len(self.store.children((SUBMITTED, *key))) + self.filing.now.get(key, 0) >= MAX_SUBMISSIONS:
            raise web.HTTPError(429, f"{MAX_SUBMISSIONS} submissions of {assignment} are kept already: ask "
                                     "the course's staff")
        stamp = now_stamp()
        with self.filing.one(key):  # counted from the check on, until it is kept or refused
            done = await self.put_tree((SUBMITTED, *key, stamp), replace=False)
        log.info("%s submitted %s at %s: %d files", printable(self.caller.name), printable(assignment), stamp,
                 len(done["files"]))
        self.send_json({"student_id": self.caller.name, "assignment_id": assignment, "timestamp": stamp,
                        **done})


class SubmissionHandler(ApiHandler):
    def get(self, assignment: str, student: str, stamp: str) -> None:
        self.require_staff()
        self.send_tar((SUBMITTED, _part(assignment), _part(student), _part(stamp)))


class FeedbackHandler(UploadHandler):
    limits = FEEDBACK_LIMITS

    async def put(self, assignment: str, student: str, stamp: str) -> None:
        self.require_staff()
        key = (_part(assignment), _part(student), _part(stamp))
        if not self.store.children((SUBMITTED, *key)):
            raise web.HTTPError(404, "no such submission")
        self.send_json(await self.put_tree((FEEDBACK, *key), replace=True))


class OwnFeedbackHandler(ApiHandler):
    def get(self, assignment: str) -> None:
        if self.caller.kind != "user":
            raise web.HTTPError(403, "only a user has feedback")
        self.send_tar((FEEDBACK, _part(assignment), _part(self.caller.name)))


class WorkHandler(ApiHandler):
    async def post(self) -> None:
        self.require_staff()
        asked = ([_part(a) for a in self.get_argument("assignment", "").split(",") if a]
                 or self.store.children((SUBMITTED,)))
        if self.leases.handed_out is not None:  # only what the autograde service said (PUT api/work)
            asked = [a for a in asked if a in self.leases.handed_out]
        found = waiting(self.store, asked)
        given_up = self.leases.given_up(found)
        for handout in given_up:
            await record_given_up(self.store, self.leases, handout)
        done = {h.key for h in given_up}
        lease = self.leases.lease([w for w in found
                                   if (w.assignment_id, w.student_id, w.timestamp) not in done])
        if lease is None:
            self.set_status(204)
            self.finish()
            return
        log.info("%s leased %s %s %s", printable(self.caller.name), printable(lease.handout.student_id),
                 printable(lease.handout.assignment_id), lease.handout.timestamp)
        self.send_json(lease.offer(self.leases.clock()))

    def put(self) -> None:
        self.require_staff()
        try:
            body = json.loads(self.request.body)
            if not isinstance(body, dict):
                raise TypeError("an object with submissions (or assignments)")
            if "submissions" in body:
                if not isinstance(body["submissions"], list):
                    raise TypeError("submissions is a list")
                handouts = [Handout.from_json(h) for h in body["submissions"]]
                for part in (name for h in handouts for name in h.key):
                    _part(part)  # a name the store would refuse is refused here
                self.leases.hand_out(handouts)
            else:
                named = body["assignments"]
                if not isinstance(named, list):
                    raise TypeError("assignments is a list of names")
                self.leases.handed_out, self.leases.named = {_part(str(a)) for a in named}, None
        except (ValueError, TypeError, KeyError, web.HTTPError) as exc:
            raise web.HTTPError(400, f"not submissions or assignments: {printable(str(exc))}") from None
        self.send_json({"assignments": sorted(self.leases.handed_out)})


class LeaseHandler(ApiHandler):
    def post(self, assignment: str, student: str, stamp: str) -> None:
        """Renew a lease while its worker grades (work.keep_leased)."""
        self.require_staff()
        renewed = self.leases.renew((assignment, student, stamp), self.get_argument("lease", ""))
        if renewed is None:
            raise web.HTTPError(409, "that lease has ended: the submission may be another worker's now")
        self.send_json({"lease_s": renewed})


class ResultHandler(ApiHandler):
    async def put(self, assignment: str, student: str, stamp: str) -> None:
        self.require_staff()
        key = (_part(assignment), _part(student), _part(stamp))
        if len(self.request.body) > MAX_RESULT_BYTES:
            raise web.HTTPError(413, f"a result is at most {MAX_RESULT_BYTES} bytes")
        try:
            result = WorkResult.from_json(self.request.body)
        except ValueError as exc:
            raise web.HTTPError(400, printable(str(exc))) from None
        if not self.store.children((SUBMITTED, *key)):
            raise web.HTTPError(404, "no such submission")
        if self.store.children((RESULTS, *key)) or not self.leases.begin_recording(key):
            raise web.HTTPError(409, "already recorded: this submission's result is kept once")
        lease = self.get_argument("lease", "")
        if not self.leases.was_issued(key, lease):  # a result is the grading of a lease the service gave
            self.leases.end_recording(key, False)
            raise web.HTTPError(403, "no such lease of this submission: lease it first (POST api/work)")
        live = self.leases.live(key, lease)
        try:
            await record(self.store, self.leases, key, result)
        except ArchiveRefused as exc:
            raise web.HTTPError(400, f"refused: {printable(str(exc))}") from None
        except FileExistsError:
            raise web.HTTPError(409, "already recorded: this submission's result is kept once") from None
        log.info("%s: result for %s %s %s: %s%s", printable(self.caller.name), printable(student),
                 printable(assignment), stamp, printable(result.status),
                 "" if live else " (lease had expired)")
        self.send_json({"recorded": True, "lease_was_live": live})


class ResultFeedbackHandler(ApiHandler):
    async def post(self, assignment: str, student: str, stamp: str) -> None:
        """Give a recorded result's held pages to its student (the autograde service, once it is graded)."""
        self.require_staff()
        key = (_part(assignment), _part(student), _part(stamp))
        if not self.store.children((RESULTS, *key)):
            raise web.HTTPError(404, "no result of this submission is recorded")
        try:
            held = await asyncio.to_thread(self.store.get, (HELD_FEEDBACK, *key))
        except KeyError:  # none held: recorded before pages were held, or given back and removed
            self.send_json({"given_back": False})
            return
        try:  # never over feedback given back already: `hub feedback`'s full pages, or these
            await asyncio.to_thread(self.store.put, (FEEDBACK, *key), io.BytesIO(held), FEEDBACK_LIMITS)
            given_back = True
        except FileExistsError:
            given_back = False
        await remove_held(self.store, key)
        self.send_json({"given_back": given_back})


async def remove_held(store: Store, key: tuple[str, str, str]) -> None:
    """Remove a submission's held pages once given back, or once feedback there first means they never can
    be: nothing reads them again, and kept they only fill the disk. The pages are the student's already, so a
    failure is logged, not answered."""
    try:
        await asyncio.to_thread(store.remove, (HELD_FEEDBACK, *key))
    except OSError:
        log.exception("held pages of %s %s %s not removed", *map(printable, key))


class ResultsHandler(ApiHandler):
    def get(self) -> None:
        self.require_staff()
        asked = [_part(a) for a in self.get_arguments("assignment")] or self.store.children((RESULTS,))
        keys = [(a, s, t) for a in asked for s in self.store.children((RESULTS, a))
                for t in self.store.children((RESULTS, a, s))]
        self.send_json({"results": [{"assignment_id": a, "student_id": s, "timestamp": t,
                                     **asdict(recorded_result(self.store, (a, s, t)))} for a, s, t in keys]})


async def record(store: Store, leases: Leases, key: tuple[str, str, str], result: WorkResult) -> None:
    """Write a submission's result and hold its feedback pages, once (the caller has begun recording it: the
    leases' end_recording is called here, however it ends). Raises ArchiveRefused or FileExistsError."""
    recorded = False
    try:  # the pages first: a recorded result always has its pages to give back
        if store.children((RESULTS, *key)):  # one came in meanwhile (a worker's, beside a given-up lease)
            raise FileExistsError("/".join(key))
        pages = {f"{name}.html": text.encode() for name, text in result.pages.items()}
        await asyncio.to_thread(store.put, (HELD_FEEDBACK, *key), io.BytesIO(pack_files(pages)),
                                FEEDBACK_LIMITS, True)
        kept = io.BytesIO(pack_files({RESULT_FILE: result.to_json()}))
        await asyncio.to_thread(store.put, (RESULTS, *key), kept, RESULT_LIMITS, False)
        recorded = True
    finally:
        leases.end_recording(key, recorded)


async def record_given_up(store: Store, leases: Leases, handout: Handout) -> None:
    """Record a submission no worker finished as `invalid`, with a feedback page that says so, once."""
    from autograder.grading.report import not_graded_page  # nbconvert's templates: only when needed

    key = handout.key
    if not leases.begin_recording(key):
        return
    detail = (f"no grading worker finished it: {MAX_LEASES} leases ran out with no result (each worker that "
              f"took it stopped); ask your instructor")
    names = notebooks(store.children((SUBMITTED, *key))) or [handout.assignment_id]
    pages = {name: not_graded_page(handout.assignment_id, name, 0, Status.INVALID.value, detail)
             for name in names}
    try:
        await record(store, leases, key, WorkResult(Status.INVALID.value, None, None, detail, pages,
                                                    "exchange service"))
    except (ArchiveRefused, FileExistsError) as exc:  # a result came in meanwhile: it stands
        log.info("%s %s %s not recorded invalid: %s", printable(handout.student_id),
                 printable(handout.assignment_id), handout.timestamp, printable(str(exc)))
        return
    log.warning("%s %s %s recorded invalid: %s", printable(handout.student_id),
                printable(handout.assignment_id), handout.timestamp, detail)


def waiting(store: Store, assignments: list[str]) -> list[SubmissionInfo]:
    """Return the stored submissions of these assignments that have no result yet."""
    return [SubmissionInfo(s, a, t, []) for a in assignments for s in store.children((SUBMITTED, a))
            for t in store.children((SUBMITTED, a, s)) if not store.children((RESULTS, a, s, t))]


def recorded_result(store: Store, key: tuple[str, str, str]) -> WorkResult:
    """Return a submission's recorded result, without its pages (they are its feedback); one that does not
    read as a result (kept before results were checked, or changed by hand) is `invalid`, with why."""
    try:
        with tarfile.open(fileobj=io.BytesIO(store.get((RESULTS, *key)))) as archive:
            member = archive.extractfile(RESULT_FILE)
            kept = WorkResult.from_json(member.read() if member else b"")
    except (ValueError, OSError, tarfile.TarError, KeyError) as exc:
        return WorkResult(Status.INVALID.value, None, None, f"the result a worker posted could not be read "
                          f"({printable(str(exc))[:300]})")
    return replace(kept, pages={})


def _part(name: str) -> str:
    try:
        return check_part(name)
    except ArchiveRefused as exc:
        raise web.HTTPError(400, printable(str(exc))) from None


def make_app(store: Store, auth, prefix: str = "/", leases: Leases | None = None) -> web.Application:
    """Return the service's tornado application, its routes under the service's prefix."""
    api = prefix.rstrip("/") + "/api"
    args = {"store": store, "auth": auth, "leases": leases or Leases()}
    uploads = {**args, "uploads": UploadSlots()}
    return web.Application([
        (f"{api}/assignments", AssignmentsHandler, args),
        (f"{api}/assignments/{NAME}", ReleasedHandler, uploads),
        (f"{api}/submissions", SubmissionsHandler, args),
        (f"{api}/submissions/{NAME}", SubmitHandler, {**uploads, "filing": Filing()}),
        (f"{api}/submissions/{NAME}/{NAME}/{NAME}", SubmissionHandler, args),
        (f"{api}/feedback/{NAME}", OwnFeedbackHandler, args),
        (f"{api}/feedback/{NAME}/{NAME}/{NAME}", FeedbackHandler, uploads),
        (f"{api}/work", WorkHandler, args),
        (f"{api}/work/{NAME}/{NAME}/{NAME}", LeaseHandler, args),
        (f"{api}/results", ResultsHandler, args),
        (f"{api}/results/{NAME}/{NAME}/{NAME}", ResultHandler, args),
        (f"{api}/results/{NAME}/{NAME}/{NAME}/feedback", ResultFeedbackHandler, args),
    ])


def http_server(app: web.Application) -> HTTPServer:
    """Return the HTTP server the service runs its app in: bodies up to the largest cap (each route cuts its
    own lower), and no request, or upload, left open past its timeout."""
    return HTTPServer(app, max_body_size=upload_cap(RELEASE_LIMITS), idle_connection_timeout=IDLE_TIMEOUT_S,
                      body_timeout=BODY_TIMEOUT_S)


async def serve(store: Store, leases: Leases) -> None:
    """Serve the API where the hub says (JUPYTERHUB_SERVICE_URL) until stopped."""
    from jupyterhub.services.auth import HubAuth

    url = urlsplit(os.environ["JUPYTERHUB_SERVICE_URL"])
    app = make_app(store, HubAuth(cache_max_age=60), os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/"),
                   leases)
    http_server(app).listen(url.port or 80, url.hostname or "127.0.0.1")
    log.info("exchange service on %s, store %s", url.geturl(), getattr(store, "root", store))
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="exchange-service", description=__doc__.splitlines()[0])
    settings = parse(ServiceSettings, parser, argv)
    os.umask(0o077)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    book = None
    if settings.lease_database:
        from autograder.hub.exchange.http.lease_book import DatabaseLeaseBook  # SQLAlchemy: only with one

        book = DatabaseLeaseBook(settings.lease_database)
    leases = Leases(settings.lease_s, handed_out=set() if settings.hand_out_when_told else None, book=book)
    asyncio.run(serve(FolderStore(Path(settings.store)), leases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
