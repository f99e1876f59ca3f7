"""A class on a real JupyterHub, end to end, on loopback.

`python -m autograder hub setup` makes the Unix accounts (a unique prefix, removed afterwards, even on
failure), `hub start` runs JupyterHub with the real configurable-http-proxy on free loopback ports. Three
students fetch the smallest assignment through their own single-user servers (nbgrader's REST handlers, with
each student's hub token), answer it (one right, one wrong, one hostile: an infinite loop) and submit; the
instructor's loop (status, collect, grade with our grader, feedback, export) runs through the command line;
each student fetches feedback and reads the score the grader gave. Then one student tries what the setup must
refuse: another student's files, the exchange's inbound and feedback folders, the course's source/ and
gradebook, formgrader, another student's server. Opt in with DEVICELAB_HUB_TESTS=1, as root; under CI=true a
skip is a failure.
"""

import csv
import http.cookiejar
import json
import re
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest

from autograder.hub.setup.hub_api import HubAPI
from tests.hub_support import Hub, answers, class_hub, hub_tests_or_skip, smallest_assignment, start_server

ROOT = Path(__file__).resolve().parents[2]
COURSE = "device-lab"
SCORE = re.compile(r"<h4>(?P<nb>[^<]+) \(Score: (?P<score>[\d.]+) / (?P<max>[\d.]+)\)</h4>")

ROSTER = ("id,name,role\nann,Ann Right,student\nbob,Bob Wrong,student\ncat,Cat Hostile,student\n"
          "ivy,Ivy Teacher,instructor\n")

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture
def hub(tmp_path: Path):
    """Make the accounts, set the hub up, start it; afterwards stop it and remove every trace."""
    hub_tests_or_skip()
    with class_hub(tmp_path, ROSTER) as running_hub:
        yield running_hub


def feedback_score(server: HubAPI, assignment: str) -> tuple[float, float]:
    """Fetch the feedback through the student's server and return the score on its page."""
    reply = server.call("POST", "/assignments/fetch_feedback",
                        {"course_id": COURSE, "assignment_id": assignment})
    assert reply.status == 200 and reply.body["success"], reply
    folder = f"{COURSE}/{assignment}/feedback"
    listing = server.call("GET", f"/api/contents/{folder}")
    assert listing.status == 200, listing
    (stamp,) = [c["name"] for c in listing.body["content"] if c["type"] == "directory"]
    page = server.call("GET",
                       f"/api/contents/{folder}/{urllib.parse.quote(stamp)}/{assignment}.html?type=file")
    assert page.status == 200, page
    match = SCORE.search(page.body["content"])
    assert match, page.body["content"][:500]
    return float(match["score"]), float(match["max"])


def refused(hub: Hub, member: str, command: list[str]) -> str:
    """Run a shell command as the member's Unix account (as their terminal would); return its error."""
    done = subprocess.run(["runuser", "-u", hub.user(member), "--", *command], capture_output=True, text=True,
                          cwd="/", check=False)
    assert done.returncode != 0, f"{member} could: {' '.join(command)}\n{done.stdout[:300]}"
    return done.stderr


def page(hub: Hub, token: str, path: str) -> str:
    """Return an HTML page behind the proxy, requested with a token."""
    request = urllib.request.Request(hub.public + path, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read().decode()


def csp(hub: Hub, token: str, path: str) -> str:
    """Return the Content-Security-Policy header of a page behind the proxy."""
    request = urllib.request.Request(hub.public + path, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.headers.get("Content-Security-Policy", "")


def pam_login(hub: Hub, member: str, password: str) -> str:
    """Log in at the hub's login page (PAM) and return the path it lands on."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{hub.public}/hub/login", timeout=30).read().decode()
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page)
    data = {"username": hub.user(member), "password": password, **({"_xsrf": xsrf[1]} if xsrf else {})}
    try:
        response = opener.open(f"{hub.public}/hub/login", urllib.parse.urlencode(data).encode(), timeout=60)
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    return urllib.parse.urlparse(response.geturl()).path


def ignores_sigint(pid: int) -> bool:
    """Return True when the process ignores SIGINT (its SigIgn mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(re.search(r"^SigIgn:\s*([0-9a-f]+)$", status, re.MULTILINE).group(1), 16)
    return bool(mask >> (signal.SIGINT - 1) & 1)


def test_a_class_on_the_hub(hub: Hub) -> None:
    # The hub was started as a script's background job (`hub start &`), which inherits SIGINT ignored: neither
    # it nor its services keep that, or each service would outlast JupyterHub's 10 s wait at every shutdown.
    services = psutil.Process(hub.pid).children(recursive=True)
    assert len(services) >= 2  # the formgrader's server and the autograde service at least
    assert [p for p in [hub.pid, *(s.pid for s in services)] if ignores_sigint(p)] == []

    assignment = smallest_assignment()
    plan = {"ann": "right", "bob": "wrong", "cat": "hostile"}
    notebooks = answers(assignment)

    # The instructor releases; each student fetches, answers and submits through their own server.
    said = hub.cli("release", assignment, "--due", "2099-12-31T17:00:00-05:00").stdout
    assert "due 2099-12-31 22:00:00 UTC" in said, said
    # An extension for one student (roster id or account name), listed, and one for nobody refused.
    said = hub.cli("extend", assignment, "bob", "--by", "24").stdout
    assert f"{hub.user('bob')}: {assignment} due 2100-01-01 22:00:00 UTC, an extension of 24 h" in said, said
    assert hub.user("bob") in hub.cli("extend", assignment).stdout
    refused_extension = subprocess.run([sys.executable, "-m", "autograder", "hub", "extend", "--root",
                                        hub.settings.root, assignment, "nobody", "--by", "1"], cwd=ROOT,
                                       capture_output=True, text=True, timeout=300, check=False)
    assert refused_extension.returncode == 2 and "no student" in refused_extension.stderr, refused_extension
    servers = {}
    for member, kind in plan.items():
        servers[member] = server = start_server(hub, member, hub.token(member))
        listed = server.call("GET", f"/assignments?course_id={COURSE}")
        assert [a["assignment_id"] for a in listed.body["value"]] == [assignment], listed
        fetched = server.call("POST", "/assignments/fetch",
                              {"course_id": COURSE, "assignment_id": assignment})
        assert fetched.status == 200 and fetched.body["success"], fetched
        path = f"{COURSE}/{assignment}/{assignment}.ipynb"
        saved = server.call("PUT", f"/api/contents/{path}", {"type": "notebook", "format": "json",
                                                              "content": json.loads(
                                                                  nbformat.writes(notebooks[kind]))})
        assert saved.status == 200, saved
        submitted = server.call("POST", "/assignments/submit",
                                {"course_id": COURSE, "assignment_id": assignment})
        assert submitted.status == 200 and submitted.body["success"], submitted

    status = hub.cli("status", assignment).stdout
    assert "3 of 3 submitted" in status, status

    # The instructor's loop: collect, grade with our grader, release feedback, export.
    hub.cli("collect", assignment)
    # cat's cell never ends: the run waits the whole limit for it. ann's and bob's take a few seconds each,
    # and many more on a loaded machine: the limit is theirs too, so it leaves them room (25 s did not).
    graded = hub.cli("grade", assignment, "--timeout", "90", "--jobs", "2").stdout
    course = Path(hub.settings.paths.course)
    with (course / "graded" / assignment / "grades.csv").open() as handle:
        grades = {row["student"]: row for row in csv.DictReader(handle)}
    assert set(grades) == {hub.user(m) for m in plan}, graded
    ann, bob, cat = (grades[hub.user(m)] for m in plan)
    top = float(ann["max_score"])
    assert top > 0 and float(ann["score"]) == top and ann["status"] == "graded", ann
    assert float(bob["score"]) < top and bob["status"] == "graded", bob
    assert cat["status"] == "timeout" and float(cat["score"]) < top, cat
    released = hub.cli("feedback", assignment).stdout
    assert all(hub.user(m) in released for m in plan), released
    export = Path(hub.settings.root) / "export.csv"
    hub.cli("export", "--to", str(export))
    with export.open() as handle:
        exported = {row["student_id"]: row for row in csv.DictReader(handle)
                    if row["assignment"] == assignment}
    for member in plan:
        assert float(exported[hub.user(member)]["score"]) == float(grades[hub.user(member)]["score"])
        assert exported[hub.user(member)]["duedate"].startswith("2099-12-31 22:00:00")  # set by release --due
        assert float(exported[hub.user(member)]["late_submission_penalty"]) == 0
    # The same grades per question, and as Canvas's gradebook import reads them.
    by_question = Path(hub.settings.root) / "by-question.csv"
    hub.cli("export", "--by-question", "--to", str(by_question))
    with by_question.open() as handle:
        table = {row["student_id"]: row for row in csv.DictReader(handle)}
    questions = [c for c in next(iter(table.values())) if c.startswith(f"{assignment} {assignment}:")]
    assert questions, table
    for member in plan:
        row = table[hub.user(member)]
        total = float(row[f"{assignment} (max {top:g})"])
        assert total == float(grades[hub.user(member)]["score"])
        assert sum(float(row[q]) for q in questions) == pytest.approx(total), row
    canvas = Path(hub.settings.root) / "canvas.csv"
    hub.cli("export", "--format", "canvas", "--to", str(canvas))
    header, points, *students = list(csv.reader(canvas.open()))
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and assignment in header
    assert points[0].strip() == "Points Possible" and float(points[header.index(assignment)]) == top
    assert {r[3]: float(r[header.index(assignment)]) for r in students} == {
        hub.user(m): float(grades[hub.user(m)]["score"]) for m in plan}

    # Each student fetches their feedback and reads the score they were given.
    for member in plan:
        score, max_score = feedback_score(servers[member], assignment)
        assert (score, max_score) == (float(grades[hub.user(member)]["score"]), top), member

    # What a student must not reach. As the hostile student's Unix account (their terminal):
    paths = hub.settings.paths
    ann_notebook = Path("/home") / hub.user("ann") / COURSE / assignment / f"{assignment}.ipynb"
    assert ann_notebook.exists()
    refused(hub, "cat", ["cat", str(ann_notebook)])
    refused(hub, "cat", ["ls", str(paths.exchange / COURSE / "inbound")])
    refused(hub, "cat", ["ls", str(paths.exchange / COURSE / "feedback")])
    refused(hub, "cat",
            ["sh", "-c", f"cat '{paths.exchange / COURSE / 'inbound'}'/{hub.user('ann')}+*/*.ipynb"])
    refused(hub, "cat", ["cat", str(course / "source" / assignment / f"{assignment}.ipynb")])
    refused(hub, "cat", ["cat", str(course / "gradebook.db")])
    refused(hub, "cat", ["ls", str(course / "submitted")])
    refused(hub, "cat", ["cat", str(paths.hub / "jupyterhub.sqlite")])
    # ... and through the hub, with their token:
    cat_token = hub.token("cat")
    assert hub.as_user(cat_token, f"/services/{COURSE}").call("GET", "/formgrader").status == 403
    assert hub.as_user(cat_token, f"/services/{COURSE}").call("GET", "/api/contents/source").status == 403
    assert hub.as_user(cat_token, f"/user/{hub.user('ann')}").call("GET", "/api/contents").status in (403,
                                                                                                      404)
    assert hub.as_user(cat_token, "/hub/api").call("GET", f"/users/{hub.user('ann')}").status in (403, 404)
    # The instructor reaches formgrader (the grader account's service), and sees the three submissions.
    formgrader = hub.as_user(hub.token("ivy"), f"/services/{COURSE}")
    reply = formgrader.call("GET", f"/formgrader/api/submissions/{assignment}")
    assert reply.status == 200, reply
    assert {s["student"] for s in reply.body} >= {hub.user(m) for m in plan}, reply.body

    # Students' JupyterLab has the Assignments tab and not formgrader's panels.
    config = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                       page(hub, hub.token("ann"), f"/user/{hub.user('ann')}/lab"), re.DOTALL)
    disabled = json.loads(config[1])["disabledExtensions"]
    assert "@jupyter/nbgrader:formgrader" in disabled and "@jupyter/nbgrader:assignment-list" not in disabled

    # JupyterHub 4.1+ forbids framing users' pages; only the grader service allows its own frames
    # (formgrader's JupyterLab panel), as nbgrader documents.
    assert "frame-ancestors 'none'" in csp(hub, hub.token("ann"), f"/user/{hub.user('ann')}/lab")
    assert "frame-ancestors 'self'" in csp(hub, hub.token("ivy"), f"/services/{COURSE}/formgrader")

    # The idle culler runs as a hub service with the scopes it needs.
    assert re.search(r"200 GET /hub/api/users\S* \(idle-culler@",
                     hub.log.read_text()), "the culler never asked"

    # Running setup again (an upgrade) keeps accounts, course and gradebook.
    s = hub.settings
    again = subprocess.run(
        [sys.executable, "-m", "autograder", "hub", "setup", "--roster", str(s.paths.roster), "--root",
         s.root,
         "--prefix", s.prefix, "--extra-group", s.extra_group, f"--port={s.port}", f"--hub-port={s.hub_port}",
         f"--proxy-api-port={s.proxy_api_port}", f"--service-port={s.service_port}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0 and "accounts created" not in again.stdout, again.stdout + again.stderr
    hub.cli("export", "--to", str(export))
    with export.open() as handle:
        kept = {row["student_id"]: row["score"] for row in csv.DictReader(handle)
                if row["assignment"] == assignment}
    assert kept == {k: v["score"] for k, v in exported.items()}

    # A late student joins the running hub, in the course's group, without a restart.
    hub.cli("add-user", "dan", "--name", "Dan Late", "--role", "student")
    joined = HubAPI.for_settings(hub.settings).call("GET", f"/users/{hub.user('dan')}")
    assert joined.status == 200 and joined.body["groups"] == [f"nbgrader-{COURSE}"], joined
    assert "dan" in hub.cli("status", assignment).stdout

    # The real login page: PAM checks the Unix password.
    assert pam_login(hub, "ann", "not the password").startswith(("/hub/login", "HTTP 403"))
    assert pam_login(hub, "ann", hub.passwords["ann"]).startswith(("/hub/spawn", f"/user/{hub.user('ann')}",
                                                                   "/hub/home"))
