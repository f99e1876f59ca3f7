"""A class submitting at once to the HTTP exchange, graded by workers over its API (a benchmark, not a test).

    .venv/bin/python benchmarks/http_exchange_load.py [--students 200] [--spread 60] [--runs 1,2,2-kill]

The real exchange service (autograder/hub/exchange/http/service.py's application, over real HTTP on
loopback) runs as a subprocess, and so do the grading workers (`python -m
autograder.hub.service.grading_worker`, each with its own copy of the course, in the sandbox `auto` finds).
There is no hub: 200 Unix accounts and a server each are too heavy for this machine, so the hub's answer to
"whose token is this" comes from a table of tokens the benchmark writes (one per student, one with the staff
scope for the workers). Each student submits
a right answer of the smallest assignment through nbgrader's own client (`HttpSubmit`, the Assignments tab's
Submit), at a random moment within `--spread` seconds. A student's feedback is ready when the service has
recorded their result (the pages are stored first): one clock starts when the student pressed Submit, the
other when their submit returned. Runs: one worker, two workers, and two workers of which one is killed
(SIGKILL, its zygote with it) once half the class is graded: its lease expires (`--lease-s`) and the
submission it held is graded by the other. Each run counts the results per submission: the service's list and
the workers' own "recorded" lines (nothing lost, nothing doubled).
"""

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nbformat

from autograder.hub.exchange.http.api import STAFF_SCOPE, ServiceClient, ServiceError
from tests.hub_support import answers, smallest_assignment

COURSE = "course"
SERVICE = f"{COURSE}-exchange"
ACCESS = f"access:services!service={SERVICE}"
PREFIX = f"/services/{SERVICE}/"


class TokenTable:
    """Stands in for HubAuth: each token's user and scopes, from the benchmark's table."""

    access_scopes = frozenset({ACCESS})

    def __init__(self, table: dict[str, dict]) -> None:
        self.table = table

    async def get_user(self, handler, sync: bool = False) -> dict | None:
        return self.table.get(handler.request.headers.get("Authorization", "").removeprefix("token "))

    def check_scopes(self, required, model: dict):
        from jupyterhub.services.auth import check_scopes

        return check_scopes(required, set(model["scopes"]))


def serve(store: Path, port: int, tokens: Path, lease_s: float) -> None:
    """Run the exchange service's application on loopback with the token table (the `serve` subcommand)."""
    from tornado.httpserver import HTTPServer

    from autograder.hub.exchange.http.service import make_app
    from autograder.hub.exchange.http.store import FolderStore
    from autograder.hub.exchange.http.work import Leases

    async def forever() -> None:
        table = TokenTable(json.loads(tokens.read_text()))
        app = make_app(FolderStore(store), table, PREFIX, Leases(lease_s))
        HTTPServer(app, max_body_size=1 << 30).listen(port, "127.0.0.1")
        await asyncio.Event().wait()

    asyncio.run(forever())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def p95(values: list[float]) -> float:
    """Return the 95th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


@dataclass
class Student:
    """One student's submit: when they pressed it, when it returned, when their result was recorded."""

    name: str
    pressed: float = 0.0
    returned: float = 0.0
    ready: float = 0.0
    error: str = ""


@dataclass
class Run:
    """One run of the class: its label, its students, the workers' lines, the results listed at the end."""

    label: str
    students: list[Student]
    lines: list[dict] = field(default_factory=list)
    listed: list[dict] = field(default_factory=list)
    killed_at: float | None = None
    took_s: float = 0.0

    def report(self) -> str:
        done = [s for s in self.students if s.ready]
        from_press = [s.ready - s.pressed for s in done]
        from_return = [s.ready - s.returned for s in done]
        per_listed = Counter((r["student_id"], r["timestamp"]) for r in self.listed)
        per_line = Counter((r["student"], r["timestamp"]) for r in self.lines if r.get("recorded"))
        first = min(s.pressed for s in self.students)
        last = max((s.ready for s in done), default=first)
        rate = 60 * len(done) / (last - first) if last > first else 0.0
        lines = [(f"{self.label}: {len(done)}/{len(self.students)} graded in {last - first:.0f} s from the "
                  f"first press: {rate:.1f} submissions graded per minute")]
        for label, values in (("from press", from_press), ("from submit returned", from_return)):
            if values:
                lines.append(f"  latency {label:22} median {statistics.median(values):6.1f} s  p95 "
                             f"{p95(values):6.1f} s  max {max(values):6.1f} s")
        lost = len(self.students) - len(per_listed)
        doubled = sum(1 for n in per_listed.values() if n > 1) + sum(1 for n in per_line.values() if n > 1)
        refused_posts = sum(1 for r in self.lines if not r.get("recorded"))
        lines.append(f"  results: {len(per_listed)} submissions with one recorded result each; lost {lost}, "
                     f"doubled {doubled}; worker posts recorded {sum(per_line.values())}, refused as already "
                     f"recorded {refused_posts}; submit errors {sum(1 for s in self.students if s.error)}")
        graded_s = [r["seconds"] for r in self.lines if "seconds" in r]
        if graded_s:
            lines.append(f"  one submission leased, taken, graded and posted by a worker: median "
                         f"{statistics.median(graded_s):.2f} s, p95 {p95(graded_s):.2f} s")
        errors = sorted({s.error for s in self.students if s.error})
        if errors:
            lines.append(f"  first submit error: {errors[0][:300]}")
        if self.killed_at is not None:
            lines.append(f"  one worker killed (SIGKILL) {self.killed_at - first:.0f} s after the first "
                         "press")
        return "\n".join(lines)


def submit(url: str, token: str, home: Path, assignment: str) -> None:
    """Submit the student's folder with nbgrader's own client, as the Assignments tab's Submit does."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    from autograder.hub.exchange.http.client import HttpSubmit

    config = Config()
    config.HttpExchange.url, config.HttpExchange.course, config.HttpExchange.token = url, COURSE, token
    config.HttpExchange.path_includes_course = True
    config.Exchange.assignment_dir = str(home)
    config.CourseDirectory.root, config.CourseDirectory.course_id = str(home), COURSE
    config.CourseDirectory.assignment_id = assignment
    HttpSubmit(coursedir=CourseDirectory(config=config), authenticator=Authenticator(config=config),
               config=config).start()


def start_worker(url: str, token_file: Path, course: Path, assignment: str, log: Path) -> subprocess.Popen:
    """Start one grading worker (its own session: killing it kills its zygote too)."""
    command = [sys.executable, "-m", "autograder.hub.service.grading_worker", "--url", url, "--token-file",
               str(token_file), "--course", str(course), "--assignment", assignment]
    with log.open("ab") as err:
        return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})


def one_run(label: str, workers: int, kill: bool, args, scratch: Path, assignment: str) -> Run:
    """Serve a fresh store, start the workers, let the class submit, wait for every result."""
    folder = scratch / label
    folder.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}{PREFIX}"
    tokens = {"staff-token": {"name": "grader", "kind": "service", "scopes": [ACCESS, STAFF_SCOPE]}}
    names = [f"student{i:03d}" for i in range(args.students)]
    tokens.update({f"{n}-token": {"name": n, "kind": "user", "scopes": [ACCESS]} for n in names})
    (folder / "tokens.json").write_text(json.dumps(tokens))
    (folder / "secret").mkdir(mode=0o700)
    token_file = folder / "secret" / "token"
    token_file.write_text("staff-token")
    service = subprocess.Popen([sys.executable, __file__, "serve", "--store", str(folder / "store"), "--port",
                                str(port), "--tokens", str(folder / "tokens.json"), "--lease-s",
                                str(args.lease_s)], stdout=subprocess.DEVNULL,
                               stderr=(folder / "service.log").open("wb"))
    staff = ServiceClient(url, "staff-token", timeout_s=60)
    procs: list[subprocess.Popen] = []
    run = Run(label, [Student(n) for n in names])
    try:
        for _ in range(100):
            try:
                staff.call("GET", "assignments")
                break
            except ServiceError:
                time.sleep(0.1)
        release = ROOT / "release" / assignment
        from autograder.hub.exchange.http.archive import pack

        staff.call("PUT", f"assignments/{assignment}", pack(release, lambda rel: False))
        right = answers(assignment)["right"]
        for s in run.students:
            home = folder / "homes" / s.name
            (home / COURSE / assignment).mkdir(parents=True)
            nbformat.write(right, home / COURSE / assignment / f"{assignment}.ipynb")
        for i in range(workers):
            course = folder / f"worker{i}"
            (course / "source").mkdir(parents=True)
            shutil.copyfile(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
            shutil.copytree(ROOT / "source" / assignment, course / "source" / assignment)
            procs.append(start_worker(url, token_file, course, assignment, folder / f"worker{i}.log"))
        readers = [threading.Thread(target=read_lines, args=(p, run.lines), daemon=True) for p in procs]
        for r in readers:
            r.start()
        time.sleep(args.warm_s)  # the workers' imports, before the first press
        rng = random.Random(7)
        start = time.monotonic()

        def student(s: Student) -> None:
            time.sleep(rng.uniform(0, args.spread))
            s.pressed = time.monotonic()
            try:
                submit(url, f"{s.name}-token", folder / "homes" / s.name, assignment)
            except Exception as exc:  # noqa: BLE001 (any failure of a submit is counted, and reported)
                s.error = str(exc)
            s.returned = time.monotonic()

        threads = [threading.Thread(target=student, args=(s,), daemon=True) for s in run.students]
        for t in threads:
            t.start()
        by_name = {s.name: s for s in run.students}
        deadline = start + args.spread + args.wait
        while time.monotonic() < deadline:
            listed = staff.call_json("GET", "results", assignment=assignment)["results"]
            now = time.monotonic()
            for r in listed:
                s = by_name[r["student_id"]]
                s.ready = s.ready or now
            if kill and run.killed_at is None and len(listed) >= len(names) // 2:
                os.killpg(procs[0].pid, signal.SIGKILL)
                run.killed_at = now
            if len(listed) == len(names) and all(not t.is_alive() for t in threads):
                break
            time.sleep(0.2)
        time.sleep(1)  # a post still in flight
        run.listed = staff.call_json("GET", "results", assignment=assignment)["results"]
        run.took_s = time.monotonic() - start
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(30)
        service.terminate()
        service.wait(30)
    return run


def read_lines(proc: subprocess.Popen, into: list[dict]) -> None:
    """Collect a worker's JSON lines (one per submission it graded)."""
    for raw in proc.stdout:
        try:
            into.append(json.loads(raw))
        except ValueError:
            continue


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        parser = argparse.ArgumentParser(prog="serve")
        parser.add_argument("--store", type=Path, required=True)
        parser.add_argument("--port", type=int, required=True)
        parser.add_argument("--tokens", type=Path, required=True)
        parser.add_argument("--lease-s", type=float, required=True)
        args = parser.parse_args(sys.argv[2:])
        serve(args.store, args.port, args.tokens, args.lease_s)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--spread", type=float, default=60.0, help="every student submits within this (s)")
    parser.add_argument("--runs", default="1,2,2-kill", help="workers per run; -kill: one is killed halfway")
    parser.add_argument("--lease-s", type=float, default=20.0, help="the service's lease")
    parser.add_argument("--warm-s", type=float, default=5.0, help="the workers' start before the first press")
    parser.add_argument("--wait", type=float, default=1800.0, help="at most this long after the spread (s)")
    args = parser.parse_args()
    assignment = smallest_assignment()
    print(f"{platform.node()}: {os.cpu_count()} cores, {platform.platform()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.students} students submit a right "
          f"answer of {assignment} within {args.spread:g} s; lease {args.lease_s:g} s", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="exchange-load-"))
    try:
        for spec in args.runs.split(","):
            workers, kill = int(spec.split("-")[0]), spec.endswith("-kill")
            run = one_run(f"{workers} worker{'s' if workers > 1 else ''}{', one killed' if kill else ''}",
                          workers, kill, args, scratch, assignment)
            print(run.report(), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
