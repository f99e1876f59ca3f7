"""Script in a submission never runs for staff: a real hub, a real browser, a hostile student.

The student submits a notebook whose every corner carries script (markdown, rich outputs made while it is
graded: text/html, text/markdown, image/svg+xml, application/javascript, an ipywidgets HTML widget; an SVG
attachment; notebook and cell metadata; an extra .html file and a file whose name is markup). The class is
collected and graded with the instructor's commands; the instructor logs in (PAM, headless Chromium) and opens
everything staff look at: the submission in formgrader, the submitted .html file through formgrader's link,
the feedback page and summary.html through the grader's JupyterLab (/files/), the autograded notebook and its
folder in that JupyterLab. Each would-be script fetches a canary on loopback, asks the hub to make the student
an admin, writes a file through the grader server's contents API and opens a dialog. The test asserts none of
that happened. Needs DEVICELAB_HUB_TESTS=1 (root) and Chromium; under CI=true a skip is a failure.
"""

import base64
import contextlib
import copy
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from autograder.hub.setup.hub_api import HubAPI
from tests.browser_support import launched_chromium, screenshot
from tests.hub.test_hub_browser import log_in
from tests.hub_support import (
    Hub,
    answers,
    class_hub,
    hub_tests_or_skip,
    smallest_assignment,
    start_server,
)

COURSE = "device-lab"
ROSTER = "id,name,role\nmal,Mal Hostile,student\nivy,Ivy Teacher,instructor\n"
PWNED = "pwned-"  # the name every would-be script writes under through the grader server's contents API
MARKUP_FILE = "<img src=x onerror=alert(7)>.txt"  # a file name that is markup

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1800)]


class Canary:
    """A tiny HTTP server on loopback that records every request a would-be script sends it."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(204)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()

            do_POST = do_PUT = do_OPTIONS = do_GET

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


def payload(tag: str, canary: str, student: str) -> str:
    """Return the JavaScript each vector tries to run: beacon, hub admin, contents write, dialog."""
    code = (
        "(function(t){var c=CANARY;try{new Image().src=c+'img-'+t}catch(e){}"
        "try{fetch(c+'fetch-'+t,{mode:'no-cors'}).catch(function(){})}catch(e){}"
        "var x=(document.cookie.match(/_xsrf=([^;]+)/)||[])[1]||'';"
        "try{fetch('/hub/api/users/STUDENT',{method:'PATCH',credentials:'include',headers:{'X-XSRFToken':x},"
        "body:JSON.stringify({admin:true})}).catch(function(){})}catch(e){}"
        "try{fetch('/services/COURSE/api/contents/PWNED'+t+'.txt',{method:'PUT',credentials:'include',"
        "headers:{'X-XSRFToken':x,'Content-Type':'application/json'},"
        "body:JSON.stringify({type:'file',format:'text',content:t})}).catch(function(){})}catch(e){}"
        "alert(t)})(TAG)"
    )
    for name, value in (("CANARY", json.dumps(canary)), ("STUDENT", student), ("COURSE", COURSE),
                        ("PWNED", PWNED), ("TAG", json.dumps(tag))):
        code = code.replace(name, value)
    return code


def quoted(tag: str, canary: str, student: str) -> str:
    """Return the payload as an expression safe inside a double-quoted HTML attribute (no quotes, no slashes).
    """
    code = base64.b64encode(payload(tag, canary, student).encode()).decode()
    return f"eval(atob('{code}'))"


def hostile_notebook(assignment: str, canary: str, student: str) -> nbformat.NotebookNode:
    """Return a right answer to the assignment that carries script in every place a notebook can."""
    def js(tag: str) -> str:
        return payload(tag, canary, student)

    def attr(tag: str) -> str:
        return quoted(tag, canary, student)

    nb = copy.deepcopy(answers(assignment)["right"])
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" onload="{attr("svg-attachment-onload")}">'
           f"<script>{js('svg-attachment-script')}</script></svg>")
    markdown = nbformat.v4.new_markdown_cell(
        f"# Notes\n\n<script>{js('md-script')}</script>\n\n<img src=x onerror=\"{attr('md-img-onerror')}\">\n"
        "\n"
        f"<iframe srcdoc=\"<script>{attr('md-iframe-srcdoc')}</script>\"></iframe>\n\n"
        f"<a href=\"javascript:{attr('md-javascript-link')}\" id=jslink>more</a>\n\n"
        "![plot](attachment:plot.svg)\n\n[my page](submitted.html)\n")
    markdown.attachments = {"plot.svg": {"image/svg+xml": base64.b64encode(svg.encode()).decode()}}
    markdown.metadata["tags"] = [f"\"><img src=x onerror=\"{attr('cell-tag')}\">"]
    html_out = f"<script>{js('out-html-script')}</script><img src=x onerror=\"{attr('out-html-onerror')}\">"
    svg_out = (f'<svg xmlns="http://www.w3.org/2000/svg" onload="{attr("out-svg-onload")}">'
               f"<script>{js('out-svg-script')}</script></svg>")
    code = nbformat.v4.new_code_cell(
        "# <script>alert('code-source')</script>\n"
        "from IPython.display import HTML, SVG, Javascript, Markdown, display\n"
        f"display(HTML({html_out!r}))\n"
        f"display(SVG({svg_out!r}))\n"
        f"display(Javascript({js('out-javascript')!r}))\n"
        f"display(Markdown({html_out.replace('out-html', 'out-markdown')!r}))\n"
        "import ipywidgets\n"
        f"display(ipywidgets.HTML(value={html_out.replace('out-html', 'widget')!r}))\n")
    nb.cells += [markdown, code]
    nb.metadata["title"] = f"</title><script>{js('nb-title')}</script>"
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "version_major": 2, "version_minor": 0, "state": {"evil": {
            "model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls",
            "model_module_version": "2.0.0",
            "state": {"value": f"<img src=x onerror=\"{attr('widget-state')}\">"}}}}}
    return nb


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Iterator[Hub]:
    hub_tests_or_skip()
    with class_hub(tmp_path_factory.mktemp("xss"), ROSTER) as running_hub:
        yield running_hub


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    trap = Canary()
    try:
        yield trap
    finally:
        trap.server.shutdown()


@pytest.fixture(scope="module")
def graded(hub: Hub, canary: Canary) -> str:
    """Release, let the hostile student submit (with extra files), collect and grade; return the assignment.
    """
    assignment = smallest_assignment()
    hub.cli("release", assignment)
    server = start_server(hub, "mal", hub.token("mal"))
    fetched = server.call("POST", "/assignments/fetch", {"course_id": COURSE, "assignment_id": assignment})
    assert fetched.status == 200 and fetched.body["success"], fetched
    folder = f"{COURSE}/{assignment}"
    nb = hostile_notebook(assignment, canary.url, hub.user("mal"))
    saved = server.call("PUT", f"/api/contents/{folder}/{assignment}.ipynb",
                        {"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))})
    assert saved.status == 200, saved
    page = (f"<!doctype html><script>{payload('submitted-html', canary.url, hub.user('mal'))}</script>"
            f"<img src=x onerror=\"{quoted('submitted-html-img', canary.url, hub.user('mal'))}\">")
    for name, text in (("submitted.html", page), (MARKUP_FILE, "hello")):
        put = server.call("PUT", f"/api/contents/{folder}/{urllib.parse.quote(name)}",
                          {"type": "file", "format": "text", "content": text})
        assert put.status in (200, 201), put
    submitted = server.call("POST", "/assignments/submit", {"course_id": COURSE, "assignment_id": assignment})
    assert submitted.status == 200 and submitted.body["success"], submitted
    hub.cli("collect", assignment)
    hub.cli("grade", assignment, "--timeout", "120", "--jobs", "1")
    return assignment


@pytest.fixture(scope="module")
def browser(hub: Hub):
    with launched_chromium() as chromium:
        yield chromium


@contextlib.contextmanager
def watched(page, dialogs: list[str]) -> Iterator[None]:
    """Record (and dismiss) every dialog the page opens during the block."""
    def seen(dialog) -> None:
        dialogs.append(f"{page.url}: {dialog.message}")
        with contextlib.suppress(Exception):
            dialog.dismiss()

    page.on("dialog", seen)
    yield
    page.wait_for_timeout(3000)  # let any script that did start finish its requests


def test_a_grader_opens_a_hostile_submission_and_nothing_runs(hub: Hub, canary: Canary, graded: str,
                                                            browser) -> None:
    assignment, student = graded, hub.user("mal")
    base = f"{hub.public}/services/{COURSE}"
    course = Path(hub.settings.paths.course)
    feedback = course / "graded" / assignment / "feedback" / student / f"{assignment}.html"
    assert feedback.is_file(), sorted(p.name for p in feedback.parent.parent.glob("*/*"))
    dialogs: list[str] = []
    grader = log_in(browser, hub, "ivy")
    try:
        with watched(grader, dialogs):
            listed = grader.request.get(
                f"{base}/formgrader/api/submitted_notebooks/{assignment}/{assignment}")
            assert listed.ok, listed.text()
            (submission,) = [s["id"] for s in listed.json() if s["student"] == student]
            grader.goto(f"{base}/formgrader/submissions/{submission}/")
            grader.get_by_text("Student's answer").first.wait_for(timeout=120_000)
            with contextlib.suppress(Exception):
                grader.click("#jslink", timeout=3000)
            screenshot(grader, "xss-formgrader")
            grader.goto(f"{base}/formgrader/submissions/{submission}/submitted.html")
            grader.goto(f"{base}/files/graded/{assignment}/feedback/{student}/{assignment}.html")
            grader.get_by_text("Score:").first.wait_for(timeout=60_000)
            screenshot(grader, "xss-feedback")
            grader.goto(f"{base}/files/graded/{assignment}/summary.html")
            grader.get_by_text("class summary").first.wait_for(timeout=60_000)
            grader.goto(f"{base}/lab/tree/autograded/{student}/{assignment}/{assignment}.ipynb")
            grader.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            grader.wait_for_timeout(5000)  # outputs and widgets render
            screenshot(grader, "xss-grader-lab")
    except Exception:
        screenshot(grader, "xss-failed")
        raise
    admin = HubAPI.for_settings(hub.settings).call("GET", f"/users/{student}").body["admin"]
    written = sorted(p.name for p in course.rglob(f"{PWNED}*"))
    assert (canary.hits, dialogs, admin, written) == ([], [], False, []), \
        f"scripts ran: canary {canary.hits}, dialogs {dialogs}, admin {admin}, written {written}"
