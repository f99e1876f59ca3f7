"""Several nodes on one machine (issue 52): `hub setup --exchange http --grading-workers 2 --nodes
namespaces`.

A real JupyterHub, proxy and Unix accounts. The hub's node is this machine's namespaces; the exchange service,
two grading workers and each student's server run in network and mount namespaces of their own, linked only to
the hub's. Written before the design: each part's namespaces differ from every other's; no part sees another
part's folder; a student's code reaches the hub's proxy and nothing else (not the exchange's address, not
another student's server, not this machine's loopback); a worker killed is started again on its node; and a
class runs end to end through that (release, fetch, submit, graded by the workers, feedback, gradebook).
Opt in with DEVICELAB_HUB_TESTS=1, as root; under CI=true a skip is a failure.
"""

import csv
import json
import os
import pwd
import re
import subprocess
from pathlib import Path

import psutil
import pytest

from autograder.hub.spawning.nodes import EXCHANGE_INDEX, NETNS_FOLDER, Node, hub_address
from tests.hub.test_hub_http_exchange import COURSE, SCORE, wait_for_exchange
from tests.hub_support import (
    Hub,
    answers,
    class_hub,
    free_port,
    graded_by_workers,
    hand_in,
    hub_parts,
    hub_tests_or_skip,
    run_in_kernel,
    smallest_assignment,
    start_server,
    submissions_of,
    wait_until,
)

ROSTER = "id,name,role\nann,Ann Right,student\nbob,Bob Wrong,student\nivy,Ivy Teacher,instructor\n"

pytestmark = [pytest.mark.timeout(1800), pytest.mark.usefixtures("machine_of_its_own")]
LEASE_S = 60  # longer than grading the hostile notebook with autograde's --timeout TIMEOUT_S (and its retry)
TIMEOUT_S = 15


@pytest.fixture
def hub(tmp_path: Path):
    """A hub whose parts have nodes of their own; afterwards stopped, every trace removed."""
    hub_tests_or_skip()
    options = ("--exchange", "http", f"--exchange-port={free_port()}", "--grading-workers", "2",
               "--nodes", "namespaces", "--lease-s", str(LEASE_S))
    with class_hub(tmp_path, ROSTER, setup_args=options) as running:
        yield running
        subnet = running.settings.node_subnet
    # the hub stopped: no namespace of its network, and not its address, is left behind
    left = [p.name for p in NETNS_FOLDER.glob(f"dl{subnet}n*")] if NETNS_FOLDER.is_dir() else []
    addresses = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    assert not left and hub_address(subnet) not in addresses, (left, addresses)


def server_process(account: str) -> int:
    """Return the pid of the account's server itself (inside its box: bwrap's own process is not)."""
    for proc in psutil.process_iter(["username", "cmdline"]):
        line = proc.info["cmdline"] or []
        if (proc.info["username"] == account and any("jupyterhub-singleuser" in a for a in line)
                and not line[0].endswith("bwrap")):
            return proc.pid
    raise AssertionError(f"no server of {account} runs")


def namespace(pid: int, kind: str) -> str:
    """Return the identity of a process's namespace of one kind (net, mnt)."""
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def sees(pid: int, path: Path) -> bool:
    """Return whether a process's view of the file system has `path`."""
    return os.path.exists(f"/proc/{pid}/root{path}")


def service_url(pid: int) -> str:
    """Return the address a server listens on (JupyterHub hands it JUPYTERHUB_SERVICE_URL)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"JUPYTERHUB_SERVICE_URL="))


PROBE = """
import json, socket
def reach(host, port):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); return "connected"
    except OSError as exc:
        return type(exc).__name__
    finally:
        s.close()
print(json.dumps({name: reach(host, port) for name, (host, port) in TARGETS.items()}))
"""


def test_a_class_on_nodes_of_their_own(hub: Hub) -> None:
    s, paths = hub.settings, hub.settings.paths
    assignment = smallest_assignment()
    ann, bob = hub.token("ann"), hub.token("bob")
    wait_for_exchange(hub, ann)
    first = wait_until(lambda: hub_parts(hub), lambda p: sorted(p) == ["exchange", "worker-1", "worker-2"],
                       120, "the exchange and two workers did not start", hub)
    assert {p.username() for p in first.values()} == {s.grader}

    # a worker killed is started again on its node
    first["worker-1"].kill()
    killed = first["worker-1"].pid
    again = wait_until(lambda: hub_parts(hub), lambda p: "worker-1" in p and p["worker-1"].pid != killed, 120,
                       "the killed worker was not started again", hub)
    assert again["worker-2"].pid == first["worker-2"].pid

    servers = {"ann": start_server(hub, "ann", ann), "bob": start_server(hub, "bob", bob)}
    pids = {name: proc.pid for name, proc in again.items()} | {
        m: server_process(hub.user(m)) for m in servers}

    # each part in network and mount namespaces of its own, none the hub's (this machine's)
    for kind in ("net", "mnt"):
        ours = {name: namespace(pid, kind) for name, pid in pids.items()}
        assert len(set(ours.values())) == len(ours), (kind, ours)
        assert namespace(os.getpid(), kind) not in ours.values(), kind

    # no part sees another part's folder (nor the course's source/, with its hidden tests)
    folders = {"exchange": paths.exchange_store, "worker-1": paths.worker_course(1),
               "worker-2": paths.worker_course(2),
               **{m: Path(pwd.getpwnam(hub.user(m)).pw_dir) for m in ("ann", "bob")}}
    for name, pid in pids.items():
        assert sees(pid, folders[name]), (name, folders[name])
        others = [f for other, f in folders.items() if other != name]
        assert not any(sees(pid, f) for f in others), (name, [f for f in others if sees(pid, f)])
        assert not sees(pid, paths.course / "source"), name
        assert not sees(pid, paths.hub), name

    # a student's code reaches the hub's proxy, and nothing else
    exchange = Node(s.node_subnet, EXCHANGE_INDEX)
    bob_server = service_url(pids["bob"]).split("//", 1)[1].split("/", 1)[0].split(":")
    targets = {"proxy": (s.hub_address, s.port), "exchange": (exchange.address, s.exchange_port),
               "bob's server": (bob_server[0], int(bob_server[1])),
               "this machine's loopback": ("127.0.0.1", s.hub_port)}
    run = run_in_kernel(hub, "ann", ann, f"TARGETS = {targets!r}\n{PROBE}")
    reached = json.loads(run.output.strip().splitlines()[-1])
    assert reached["proxy"] == "connected", reached
    assert all(reached[name] != "connected" for name in targets if name != "proxy"), reached

    # the class, end to end, through the hub only
    scores = graded_by_workers(hub, servers, assignment)

    # the same scores and feedback as today's one-machine path: the instructor collects and grades on the
    # hub's node with the course's own grader, and each student's fetched feedback shows the workers' score
    hub.cli("collect", assignment)
    graded = hub.cli("grade", assignment, "--jobs", "2").stdout
    with (paths.course / "graded" / assignment / "grades.csv").open() as handle:
        grades = {row["student"]: float(row["score"]) for row in csv.DictReader(handle)}
    assert grades == scores, (graded, grades, scores)
    for member, server in servers.items():
        stamp = submissions_of(server, assignment)[0]["timestamp"]
        fetched = server.call("POST", "/assignments/fetch_feedback",
                              {"course_id": COURSE, "assignment_id": assignment})
        assert fetched.status == 200 and fetched.body["success"], fetched
        home = Path(pwd.getpwnam(hub.user(member)).pw_dir)
        page = (home / COURSE / assignment / "feedback" / stamp / f"{assignment}.html").read_text()
        shown = SCORE.search(page)
        assert shown and float(shown["score"]) == scores[hub.user(member)], member

    # a worker killed while it grades (bob's notebook that never ends, graded to the time limit): its lease
    # runs out, the other worker grades the submission, and its result is recorded once
    hub.cli("autograde", "on", assignment, "--timeout", str(TIMEOUT_S))
    seen = len(hub.log.read_text())
    hand_in(servers["bob"], assignment, answers(assignment)["hostile"], fetch=False)
    newest = submissions_of(servers["bob"], assignment)[0]["timestamp"]
    leased = re.compile(rf"(device-lab-worker-(\d)) leased {re.escape(hub.user('bob'))} {assignment} ")
    holder = wait_until(lambda: leased.search(hub.log.read_text()[seen:]), bool, 120,
                        "no worker leased bob's new submission", hub)
    victim = hub_parts(hub)[f"worker-{holder[2]}"]
    victim.kill()
    wait_until(lambda: submissions_of(servers["bob"], assignment)[0]["has_exchange_feedback"], bool,
               LEASE_S + 300, "no feedback after a worker was killed", hub)
    status = hub.cli("autograde", "status", assignment).stdout
    rows = [line for line in status.splitlines() if hub.user("bob") in line and newest in line]
    assert len(rows) == 1 and "graded by" in rows[0] and "timeout" in rows[0], status
    assert hub_parts(hub)[f"worker-{holder[2]}"].pid != victim.pid  # started again on its node
