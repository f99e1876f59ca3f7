"""A hostile student against the exchange, on a real hub with real accounts (issue 24, holes 3-9).

One hub for the module (DEVICELAB_HUB_TESTS=1, root; under CI=true a skip is a failure). Honest students
submit through their own servers; the hostile student (cat) works from their Unix account, as their terminal
would: folders planted in the exchange before the first release, a submission of links to the course's files,
a folder in another student's name with a far-future time, a malformed time, terminal escapes in a name, a
FIFO as submission_secret.txt, a 1 GiB sparse file, too many files. The instructor's commands and the
autograde service must refuse each for cat alone and carry on for everyone else.
"""

import copy
import csv
import datetime
import html
import pwd
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from autograder.grading.redact import FEEDBACK_PREFIX
from autograder.hub.exchange.arrival import nbgrader_time
from autograder.hub.service.autograde_queue import State
from autograder.hub.setup.hub_api import HubAPI
from tests.hub.test_hub_autograde import queue_of, wait_for_feedback
from tests.hub.test_hub_end_to_end import refused
from tests.hub_support import (
    COURSE,
    Hub,
    answers,
    class_hub,
    hand_in,
    hub_tests_or_skip,
    server_pid,
    smallest_assignment,
    start_server,
    submissions_of,
)

ROSTER = ("id,name,role\nann,Ann Honest,student\nbob,Bob Victim,student\ncat,Cat Hostile,student\n"
          "ivy,Ivy Teacher,instructor\n")

pytestmark = pytest.mark.timeout(1800)


@dataclass
class Klass:
    """The module's hub, its assignment, the answers and the honest students' servers."""

    hub: Hub
    assignment: str
    notebooks: dict
    servers: dict

    @property
    def exchange(self) -> Path:
        return Path(self.hub.settings.paths.exchange) / COURSE

    @property
    def course(self) -> Path:
        return Path(self.hub.settings.paths.course)


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """One hub for every attack of the module; removed afterwards with every trace."""
    hub_tests_or_skip()
    with class_hub(tmp_path_factory.mktemp("redteam"), ROSTER) as hub:
        assignment = smallest_assignment()
        yield Klass(hub, assignment, answers(assignment), {})


def as_student(klass: Klass, member: str, script: str, *args: str) -> None:
    """Run a shell script as the member's Unix account, its arguments as $1, $2, ..."""
    done = subprocess.run(["runuser", "-u", klass.hub.user(member), "--", "sh", "-c", script, "sh", *args],
                          capture_output=True, text=True, cwd="/", check=False)
    assert done.returncode == 0, done.stderr


def plant(klass: Klass, member: str, folder_name: str, files: dict[str, str], extra: str = "") -> Path:
    """As the member, make a submission folder in the inbound with these files and run `extra` in it, writing
    the secret last, as nbgrader's submit does (the service waits for the secret before it takes a folder)."""
    folder = klass.exchange / "inbound" / folder_name
    names = sorted(files, key=lambda name: name == "submission_secret.txt")  # the secret last
    writes = [f'printf %s "${n + 2}" > "$1/{name}"' for n, name in enumerate(names)]
    last = writes.pop() if names and names[-1] == "submission_secret.txt" else "true"
    script = f'mkdir "$1" && {" && ".join(writes) or "true"} && (cd "$1" && {extra or "true"}) && {last}'
    as_student(klass, member, script, str(folder), *(files[name] for name in names))
    return folder


def now_stamp(offset_s: float = 0) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    return nbgrader_time(now + datetime.timedelta(seconds=offset_s))


def submission_files(klass: Klass, kind: str, stamp: str) -> dict[str, str]:
    return {f"{klass.assignment}.ipynb": nbformat.writes(klass.notebooks[kind]), "timestamp.txt": stamp,
            "submission_secret.txt": "cat-secret"}


def grades(klass: Klass) -> dict[str, dict]:
    with (klass.course / "graded" / klass.assignment / "grades.csv").open() as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def solution_lines(klass: Klass) -> list[str]:
    """Return distinctive lines of the instructor's solutions and hidden tests (what must never reach cat).

    A hidden block's `# Feedback:` lines are the instructor's message for students, shown on purpose, and a
    line the student version also has (a hidden test repeating a visible assert) is no secret.
    """
    a = klass.assignment
    source = nbformat.read(klass.course / "source" / a / f"{a}.ipynb", as_version=4)
    release = nbformat.read(klass.course / "release" / a / f"{a}.ipynb", as_version=4)
    public = "\n".join(cell.source for cell in release.cells)
    lines = []
    for cell in source.cells:
        inside = False
        for line in cell.source.splitlines():
            if "BEGIN SOLUTION" in line or "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END SOLUTION" in line or "END HIDDEN TESTS" in line:
                inside = False
            elif (inside and len(line.strip()) > 20 and not line.strip().startswith(FEEDBACK_PREFIX)
                  and line.strip() not in public):
                lines.append(line.strip())
    assert lines
    return lines


def readable_text(path: Path) -> str:
    """Return a file's text as its reader sees it (a page's tags removed, entities decoded)."""
    text = path.read_text(errors="replace")
    return html.unescape(re.sub(r"<[^>]+>", "", text)) if path.suffix == ".html" else text


def log_tail(hub: Hub) -> str:
    """Return the end of the hub's log (the autograde service writes there), for a failure's message."""
    return hub.log.read_text(errors="replace")[-6000:]


def test_folders_planted_in_the_exchange_before_the_first_release_are_removed(klass: Klass) -> None:
    hub, a = klass.hub, klass.assignment
    # After setup the course's folder is root's: a student cannot plant anything in it.
    refused(hub, "cat", ["mkdir", "-p", str(klass.exchange / "outbound" / a)])
    refused(hub, "cat", ["ls", str(klass.exchange / "inbound")])
    # A hub set up before the exchange was root's: the student made the course's folder first.
    subprocess.run(["rm", "-rf", str(klass.exchange)], check=True)
    as_student(klass, "cat", 'mkdir -p "$1/outbound/$2" && printf trap > "$1/outbound/$2/$2.ipynb" && '
               'ln -s "$HOME" "$1/inbound" && chmod -R 777 "$1/outbound"', str(klass.exchange), a)
    said = hub.cli("release", a).stdout
    assert "planted by user id" in said, said
    for folder, mode in (("", 0o755), ("inbound", 0o1753), ("outbound", 0o755), (f"outbound/{a}", 0o755)):
        st = (klass.exchange / folder).lstat()
        assert (st.st_uid, st.st_mode & 0o7777) == (0, mode), folder
    released = klass.exchange / "outbound" / a / f"{a}.ipynb"
    assert released.read_bytes() == (klass.course / "release" / a / f"{a}.ipynb").read_bytes()
    # The students fetch the real release and can submit.
    for member in ("ann", "bob"):
        klass.servers[member] = start_server(hub, member, hub.token(member))
        fetched = klass.servers[member].call("POST", "/assignments/fetch",
                                             {"course_id": COURSE, "assignment_id": a})
        assert fetched.status == 200 and fetched.body["success"], fetched


def test_collect_refuses_links_forged_names_bad_times_and_escapes(klass: Klass) -> None:
    hub, a = klass.hub, klass.assignment
    if not klass.servers:
        pytest.skip("needs the release of the first test")
    course = klass.course
    # cat: a folder in bob's name with a far-future time (a wrong answer), before bob's real submission
    plant(klass, "cat", f"{hub.user('bob')}+{a}+2099-01-01 00:00:00.000000 UTC+forged",
          submission_files(klass, "wrong", "2099-01-01 00:00:00.000000 UTC"))
    # cat's own submission: links to the course's source notebook and gradebook
    plant(klass, "cat", f"{hub.user('cat')}+{a}+{now_stamp()}+links",
          {"timestamp.txt": now_stamp(), "submission_secret.txt": "cat-secret"},
          f'ln -s "{course / "source" / a / (a + ".ipynb")}" "{a}.ipynb" && '
          f'ln -s "{course / "gradebook.db"}" gradebook.db && ln -s "{course / "source"}" source')
    plant(klass, "cat", f"{hub.user('cat')}+{a}+not a time at all+bad", {"timestamp.txt": "whenever"})
    plant(klass, "cat", f"{hub.user('cat')}\x1b[2J\x1b]0;pwned\x07+{a}+{now_stamp(-60)}+esc", {})
    hand_in(klass.servers["ann"], a, klass.notebooks["right"], fetch=False)
    hand_in(klass.servers["bob"], a, klass.notebooks["right"], fetch=False)

    status = hub.cli("status", a).stdout
    assert "\x1b" not in status and "\\x1b[2J" in status, status
    (bob_row,) = [line for line in status.splitlines() if line.startswith(hub.user("bob") + " ")]
    assert "2099" not in bob_row, status

    said = hub.cli("collect", a).stdout
    assert "\x1b" not in said and "\\x1b[2J" in said, said
    assert f"claims to be {hub.user('bob')}'s but was made by {hub.user('cat')}" in said, said
    assert "not a time at all" in said and "cannot be read" in said, said
    assert f"collected {hub.user('bob')}" in said and f"collected {hub.user('ann')}" in said, said
    assert f"{a}.ipynb: a symbolic link, not copied" in said and "gradebook.db: a symbolic link" in said, said
    cat_folder = course / "submitted" / hub.user("cat") / a
    assert sorted(p.name for p in cat_folder.iterdir()) == ["submission_secret.txt", "timestamp.txt"]
    assert "2099" not in (course / "submitted" / hub.user("bob") / a / "timestamp.txt").read_text()

    hub.cli("grade", a, "--jobs", "2")  # grade's own time limit: no notebook here runs forever
    got = grades(klass)
    top = float(got[hub.user("ann")]["max_score"])
    assert float(got[hub.user("ann")]["score"]) == top and float(got[hub.user("bob")]["score"]) == top, got
    assert float(got.get(hub.user("cat"), {}).get("score") or 0) == 0, got
    hub.cli("feedback", a)
    leaked = solution_lines(klass)
    for folder in (course / "submitted" / hub.user("cat"), course / "feedback" / hub.user("cat")):
        for path in (p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []:
            text = readable_text(path)
            assert not [line for line in leaked if line in text], path


def late_loader(klass: Klass, places: list[str]) -> nbformat.NotebookNode:
    """Return a notebook whose every answer cell runs the first answer file it finds in `places` at grading
    time (cell n loads `cell<n>.py`), so the answers can be written after it is handed in."""
    loading = nbformat.from_dict(nbformat.v4.upgrade(klass.notebooks["wrong"]))
    cells = [c for c in loading.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")
             and c.cell_type == "code"]
    for n, cell in enumerate(cells):
        cell.source = (f"import os\nfor _place in {places!r}:\n"
                       f"    if os.path.exists(os.path.join(_place, 'cell{n}.py')):\n"
                       f"        exec(open(os.path.join(_place, 'cell{n}.py')).read())\n        break\n")
    return loading


def test_an_answer_written_after_the_hand_in_into_a_shared_folder_is_not_graded(klass: Klass) -> None:
    """Issue 49.4: an on-time submission loaded its answer at grading time from a world-writable folder the
    sandbox showed; the student wrote the real answer there after the due date, and it was graded as on time.
    Here cat writes from a shell (stronger than her boxed server can): /run/lock, her home, the inbound."""
    hub, a = klass.hub, klass.assignment
    if not klass.servers:
        pytest.skip("needs the release of the first test")
    cat = hub.user("cat")
    home = Path(pwd.getpwnam(cat).pw_dir)
    places = [f"/run/lock/{cat}-answers", str(home / "answers"), str(klass.exchange / "inbound" / "answers")]
    stamp = now_stamp()
    plant(klass, "cat", f"{cat}+{a}+{stamp}+late", {f"{a}.ipynb": nbformat.writes(late_loader(klass, places)),
                                                   "timestamp.txt": stamp, "submission_secret.txt": "x"})
    right = [c.source for c in klass.notebooks["right"].cells
             if c.get("metadata", {}).get("nbgrader", {}).get("solution") and c.cell_type == "code"]
    for place in places:  # after handing in (and after any due date): the real answers, readable by all
        as_student(klass, "cat", 'mkdir -p "$1" && chmod 755 "$1" "$(dirname "$1")" 2>/dev/null; true', place)
        for n, source in enumerate(right):
            as_student(klass, "cat", 'printf %s "$2" > "$1"', f"{place}/cell{n}.py", source)
    try:
        said = hub.cli("collect", a).stdout
        assert f"collected {cat}" in said, said
        hub.cli("grade", a, "--jobs", "2")
        got = grades(klass)
        assert float(got[cat]["score"] or 0) == 0, got[cat]  # nothing of the answers was there to load
        assert float(got[hub.user("ann")]["score"]) == float(got[hub.user("ann")]["max_score"]), got
    finally:
        subprocess.run(["rm", "-rf", places[0], places[2]], check=False)


def test_special_files_and_huge_files_stall_nobody(klass: Klass) -> None:
    hub, a = klass.hub, klass.assignment
    if not klass.servers:
        pytest.skip("needs the release of the first test")
    hub.cli("autograde", "on", a)  # autograde's own time limit: no notebook here runs forever
    cat = hub.user("cat")

    def cat_done(suffix: str, seconds: float = 240):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            mine = [e for e in queue_of(hub).entries(a) if e.student == cat and e.folder.endswith(suffix)]
            if mine and mine[0].state in (State.DONE, State.FAILED):
                return mine[0]
            time.sleep(0.5)
        pytest.fail(f"cat's {suffix} submission not finished: {queue_of(hub).entries(a)}\n{log_tail(hub)}")

    stamp = now_stamp()
    plant(klass, "cat", f"{cat}+{a}+{stamp}+fifo", {f"{a}.ipynb": nbformat.writes(klass.notebooks["wrong"]),
                                                   "timestamp.txt": stamp}, "mkfifo submission_secret.txt")
    fifo = cat_done("fifo")
    assert "submission_secret.txt: a FIFO, not copied" in fifo.detail, (fifo, log_tail(hub))
    before = submissions_of(klass.servers["ann"], a)[0]["timestamp"]
    hand_in(klass.servers["ann"], a, klass.notebooks["right"], fetch=False)
    wait_for_feedback(klass.servers["ann"], a, after=before)  # ann is not held up by cat

    stamp = now_stamp(1)
    plant(klass, "cat", f"{cat}+{a}+{stamp}+sparse", submission_files(klass, "wrong", stamp),
          "truncate -s 1G huge.bin")
    sparse = cat_done("sparse")
    assert "huge.bin: 1024.0 MiB, more than the 20 MiB allowed" in sparse.detail, sparse

    stamp = now_stamp(2)
    plant(klass, "cat", f"{cat}+{a}+{stamp}+many", submission_files(klass, "wrong", stamp),
          "mkdir d && cd d && seq 1 1200 | xargs touch")
    many = cat_done("many")
    assert (many.state, many.status) == (State.FAILED,
                                         "refused") and "more than 1000 files" in many.detail, many
    before = submissions_of(klass.servers["bob"], a)[0]["timestamp"]
    hand_in(klass.servers["bob"], a, klass.notebooks["right"], fetch=False)
    wait_for_feedback(klass.servers["bob"], a, after=before)

    listed = hub.cli("autograde", "status", a).stdout
    assert "more than 1000 files" in listed and "a FIFO" in listed, listed
    said = hub.cli("collect", a).stdout  # cat's newest is the one with too many files: cat alone is skipped
    assert f"{cat}+{a}+{stamp}+many: not copied: more than 1000 files" in said, said
    assert all(hub.user(m) in said for m in ("ann", "bob")), said


def test_swapping_a_file_for_a_link_while_the_service_copies_leaks_nothing(klass: Klass) -> None:
    """Hole 5: cat swaps their notebook for a link to the instructor's source, over and over, while it is
    copied.
    """
    hub, a = klass.hub, klass.assignment
    if not klass.servers:
        pytest.skip("needs the release of the first test")
    hub.cli("autograde", "on", a)
    cat, source = hub.user("cat"), klass.course / "source" / a / f"{a}.ipynb"
    home = pwd.getpwnam(cat).pw_dir
    stamp = now_stamp(3)
    folder = plant(klass, "cat", f"{cat}+{a}+{stamp}+swap", submission_files(klass, "wrong", stamp),
                   f'cp "{a}.ipynb" "{home}/.real.ipynb"')
    swap = (f'cd "{folder}" && while :; do ln -sfn "{source}" "{home}/.link" && mv -Tf "{home}/.link" '
            f'"{a}.ipynb"; cp "{home}/.real.ipynb" "{home}/.copy" && mv -Tf "{home}/.copy" "{a}.ipynb"; done')
    swapper = subprocess.Popen(["runuser", "-u", cat, "--", "sh", "-c", swap], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, cwd="/")
    try:
        deadline, entry = time.monotonic() + 240, None
        while time.monotonic() < deadline and entry is None:
            mine = [e for e in queue_of(hub).entries(a) if e.student == cat and e.folder.endswith("+swap")]
            entry = mine[0] if mine and mine[0].state in (State.DONE, State.FAILED) else None
            time.sleep(0.5)
    finally:
        swapper.kill()
        swapper.wait()
    assert entry is not None, f"cat's swap submission not finished\n{log_tail(hub)}"
    assert not entry.score, entry  # a wrong answer or a refused link: never the instructor's solutions' marks
    leaked = solution_lines(klass)
    service = klass.course / "autograde"
    for folder in (klass.course / "feedback" / cat, service / "graded" / a / "feedback-on-submit" / cat):
        for path in (p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []:
            text = readable_text(path)
            assert not [line for line in leaked if line in text], path


def service_token(hub: Hub) -> str:
    """Return the grader service's hub token as code running as the grader account reads it: from the
    service's environment, which every kernel and terminal of the service inherits."""
    environ = Path(f"/proc/{server_pid(hub.user('grader'))}/environ").read_bytes().split(b"\0")
    (token,) = [v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"JUPYTERHUB_API_TOKEN=")]
    return token


def test_formgrader_runs_no_submission_and_its_token_makes_no_one_a_grader(klass: Klass) -> None:
    """Issue 49.1: formgrader's Autograde (and Validate) ran a collected notebook as the grader account,
    outside the sandbox. cat's code copies the instructor's notebook into the course folder, which only the
    grader may write; the hub token that code could read from the service's environment made cat a grader."""
    hub, a = klass.hub, klass.assignment
    if not klass.servers:
        pytest.skip("needs the release of the first test")
    hub.cli("autograde", "off", a)  # collected by hand here, as a grader would before pressing Autograde
    cat, course = hub.user("cat"), klass.course
    marker, source = course / "copied-by-cat.txt", course / "source" / a / f"{a}.ipynb"
    nb = copy.deepcopy(klass.notebooks["wrong"])
    answer = next(c for c in nb.cells if c.cell_type == "code"
                  and c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    answer.source = (f"import pathlib\npathlib.Path({str(marker)!r}).write_text("
                     f"pathlib.Path({str(source)!r}).read_text())\n\n{answer.source}")
    stamp = now_stamp(4)
    plant(klass, "cat", f"{cat}+{a}+{stamp}+formgrader",
          {f"{a}.ipynb": nbformat.writes(nb), "timestamp.txt": stamp, "submission_secret.txt": "cat-secret"})
    said = hub.cli("collect", a).stdout
    assert f"collected {cat}" in said, said
    holes = []
    hub.cli("grade", a, "--jobs", "2")  # our grader: cat's code runs in the sandbox
    if marker.exists():
        holes.append("our grader let cat's code write into the course")
        marker.unlink()

    formgrader = hub.as_user(hub.token("ivy"), f"/services/{COURSE}")
    pressed = formgrader.call("POST", f"/formgrader/api/submission/{a}/{cat}/autograde", timeout=300)
    assert pressed.status == 200, pressed
    if marker.exists():
        holes.append("formgrader's Autograde ran cat's code as the grader")
        marker.unlink()
    validated = formgrader.call("POST", "/assignments/validate", {"path": f"submitted/{cat}/{a}/{a}.ipynb"},
                                timeout=300)
    assert validated.status == 200, validated
    if marker.exists():
        holes.append("the grader server's Validate ran cat's code as the grader")
        marker.unlink()
    token = service_token(hub)
    service = HubAPI(f"http://127.0.0.1:{hub.settings.hub_port}/hub/api", token)
    made_grader = service.call("POST", f"/groups/formgrade-{COURSE}/users", {"users": [cat]})
    if made_grader.status < 300:
        holes.append(f"the service's token made cat a grader (HTTP {made_grader.status})")
        cli = HubAPI.for_settings(hub.settings)
        cli.call("DELETE", f"/groups/formgrade-{COURSE}/users", {"users": [cat]})
    if service.call("GET", f"/users/{cat}").status == 200:
        holes.append("the service's token reads other users")
    assert not holes, holes

    # What formgrader says instead, and what it still does with the token's one scope.
    assert not pressed.body["success"] and f"hub grade {a}" in pressed.body.get("log", ""), pressed.body
    assert not (course / "autograded" / cat / a).exists()
    assert not validated.body["success"], validated.body
    assert "python -m autograder validate" in validated.body["value"], validated.body
    grader = service.call("GET", f"/users/{hub.user('grader')}")
    assert grader.status == 200 and f"formgrade-{COURSE}" in grader.body["groups"], grader
    listed = formgrader.call("GET", f"/formgrader/api/submissions/{a}")
    assert listed.status == 200 and cat in {row["student"] for row in listed.body}, listed
    courses = formgrader.call("GET", "/formgraders")  # the grader's Courses tab
    assert courses.status == 200 and courses.body["success"], courses
    assert COURSE in {c["course_id"] for c in courses.body["value"] if c["kind"] == "jupyterhub"}, courses
