"""Submit-to-feedback latency of autograde on submit, on a real class hub (a benchmark, not a test).

Run as root, with what the hub tests need (docs/hub.md, "The tests"):

    sudo .venv/bin/python benchmarks/hub_latency.py [--students 20] [--single 5] [--cold-submit]

It sets up a hub on loopback with N students (accounts removed afterwards), releases the smallest assignment
and turns autograding on. Each student fetches it and submits a right answer with nbgrader's own submit run
as their Unix account, without a browser or a server per student. The Assignments tab's Submit button runs
nbgrader's submit inside the student's running server, where nbgrader is imported already: so each student's
submit runs in a Python of their own that imported nbgrader before the clock (`--cold-submit`: a new
`nbgrader submit` process instead, which also charges the 20 students' Python start-ups, about 1.5 s of CPU
each, to the grading beside them). Two clocks stop when a student's feedback is in the exchange, i.e. when
their Assignments tab offers Fetch Feedback: one started when the student pressed Submit (what the student
waits), the other when their submit returned (the grading alone; with many students most feedback is ready
before the student's own submit has returned, so this one alone flatters). First one student alone, several
times in a row; then every student at once. It prints the median and the 95th percentile of each.
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nbgrader.utils import notebook_hash

from autograder.hub.setup import accounts
from autograder.hub.setup.install import NO_HUB_AUTH
from tests.hub_support import COURSE, Hub, answers, class_hub, smallest_assignment

# nbgrader imported before the click, as in the student's running server; the submit runs when a line comes
WARM_SUBMIT = ("import sys\n"
               "from nbgrader.apps.nbgraderapp import NbGraderApp\n"
               "print('ready', flush=True)\n"
               "sys.stdin.readline()\n"
               "NbGraderApp.launch_instance(sys.argv[1:])\n")


def student_env(hub: Hub) -> dict[str, str]:
    """Return the environment of nbgrader in a student's server (their config, the course's Python)."""
    s = hub.settings
    return {"JUPYTER_CONFIG_PATH": str(s.paths.student_etc), "PATH": f"{s.bin_dir}:/usr/bin:/bin"}


def as_student(hub: Hub, member: str, *args: str) -> subprocess.CompletedProcess:
    """Run an nbgrader command as the student's Unix account, in their home, as their server would."""
    home = accounts.lookup(hub.user(member)).home
    command = [str(hub.settings.bin_dir / "nbgrader"), *args, "--course", COURSE, NO_HUB_AUTH]
    return accounts.run_as(hub.user(member), command, cwd=home, env=student_env(hub), timeout=600)


class WarmSubmit:
    """A Python of the student's (their account, home and environment) that has imported nbgrader and submits
    the assignment when told to, as the Assignments tab's Submit button does in their server."""

    def __init__(self, hub: Hub, member: str, assignment: str) -> None:
        name = hub.user(member)
        command = [str(hub.settings.bin_dir / "python"), "-c", WARM_SUBMIT, "submit", assignment, "--course",
                   COURSE, NO_HUB_AUTH]
        self.process = subprocess.Popen(accounts.as_account(name, command, student_env(hub)),
                                        cwd=accounts.lookup(name).home, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{member}'s submit did not start: {self.process.communicate()[1][-2000:]}")

    def submit(self) -> None:
        """Submit now; return when nbgrader's submit has returned."""
        _, err = self.process.communicate("go\n", timeout=600)
        if self.process.returncode != 0:
            raise RuntimeError(f"submit failed (exit {self.process.returncode}): {err[-2000:]}")


def prepare(hub: Hub, member: str, assignment: str, notebook: str) -> None:
    """Fetch the assignment and put the answer in place (not timed)."""
    as_student(hub, member, "fetch_assignment", assignment)
    account = accounts.lookup(hub.user(member))
    target = account.home / COURSE / assignment / f"{assignment}.ipynb"
    target.write_text(notebook, encoding="utf-8")
    os.chown(target, account.uid, account.gid)


def newest_secret(hub: Hub, member: str, assignment: str) -> tuple[str, str]:
    """Return the (timestamp, secret) of the student's newest submission in the exchange's inbound folder."""
    inbound = hub.settings.paths.exchange / COURSE / "inbound"
    folder = max(p for p in inbound.iterdir() if p.name.startswith(f"{hub.user(member)}+{assignment}+"))
    return folder.name.split("+")[2], (folder / "submission_secret.txt").read_text().strip()


@dataclass(frozen=True)
class Latency:
    """Seconds from a press of Submit to the feedback, and from the submit's return to the feedback."""

    from_press: float
    from_return: float


def submit_and_wait(hub: Hub, member: str, assignment: str, warm: WarmSubmit | None,
                    timeout: float = 600) -> Latency:
    """Submit (through `warm`, or a new `nbgrader submit` process), then wait for the feedback of that
    submission; return both clocks."""
    pressed = time.monotonic()
    if warm is not None:
        warm.submit()
    else:
        as_student(hub, member, "submit", assignment)
    start = time.monotonic()
    _, secret = newest_secret(hub, member, assignment)
    page = (hub.settings.paths.exchange / COURSE / "feedback"
            / f"{notebook_hash(secret=secret, notebook_id=assignment)}.html")
    while not page.exists():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"no feedback for {member} within {timeout} s")
        time.sleep(0.05)
    done = time.monotonic()
    return Latency(from_press=done - pressed, from_return=done - start)


def p95(values: list[float]) -> float:
    """Return the 95th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def line(label: str, values: list[float]) -> str:
    """One printed figure: count, median, 95th percentile and maximum."""
    return (f"{label:48} n={len(values):3}  median {statistics.median(values):5.1f} s  p95 "
            f"{p95(values):5.1f} s  max {max(values):5.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--single", type=int, default=5,
                        help="submissions of one student, one after the other")
    parser.add_argument("--service-log", type=Path, default=None,
                        help="write the autograde service's lines of the hub's log here (its batches, timed)")
    parser.add_argument("--cold-submit", action="store_true",
                        help="submit with a new `nbgrader submit` process per student (Python start-up and "
                             "imports included) instead of a warm one, as in the student's server")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("run as root (it makes Unix accounts and starts a hub)", file=sys.stderr)
        return 2
    assignment = smallest_assignment()
    import nbformat

    right = nbformat.writes(answers(assignment)["right"])
    members = [f"s{i:02}" for i in range(1, args.students + 1)]
    roster = "id,name,role\n" + "".join(f"{m},Student {m},student\n" for m in members)
    with tempfile.TemporaryDirectory() as tmp, class_hub(Path(tmp), roster) as hub:
        hub.cli("release", assignment)
        hub.cli("autograde", "on", assignment)
        for member in members:
            prepare(hub, member, assignment, right)
        def ready(member: str) -> WarmSubmit | None:
            return None if args.cold_submit else WarmSubmit(hub, member, assignment)

        single = [submit_and_wait(hub, members[0], assignment, ready(members[0])) for _ in range(args.single)]
        crowd: dict[str, Latency] = {}
        submits = {m: ready(m) for m in members}
        threads = [threading.Thread(target=lambda m=m: crowd.__setitem__(
            m, submit_and_wait(hub, m, assignment, submits[m]))) for m in members]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"{assignment} on {platform.node()}: {len(os.sched_getaffinity(0))} cores, "
              f"{os.getloadavg()[0]:.1f} load; each submit "
              + ("a new `nbgrader submit` process" if args.cold_submit
                 else "in a warm Python, as in a student's server"))
        crowd_label = f"{len(members)} students at once"
        for label, runs in (("one submission", single), (crowd_label, list(crowd.values()))):
            print(line(f"{label}, from Submit pressed", [r.from_press for r in runs]))
            print(line(f"{label}, from submit returned", [r.from_return for r in runs]))
        print(hub.cli("autograde", "status", assignment).stdout.splitlines()[0])
        if args.service_log:
            lines = hub.log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
            args.service_log.write_text("".join(x for x in lines if x.startswith("[autograde ")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
