"""A class on the hub in a real browser: a student logs in (PAM), fetches, answers, saves and submits from the
Assignments tab; the autograde service grades it, and the student fetches the feedback and opens it (the score
shown); the instructor sees the graded submission in formgrader, with no step of theirs in between. Headless
Chromium (Debian's), screenshots to artifacts/screenshots/ (to docs/images/, the hub guide's, with
DEVICELAB_UPDATE_IMAGES=1). Needs what tests/hub/test_hub_end_to_end.py needs
(DEVICELAB_HUB_TESTS=1, root) and Chromium; under CI=true a skip is a failure.
"""

import os
import re
import time
import urllib.parse
from pathlib import Path

import nbformat
import pytest

from autograder.grading.demo import MARKER
from autograder.hub.setup import accounts
from tests.browser_support import launched_chromium, screenshot
from tests.hub_support import Hub, class_hub, hub_tests_or_skip

ROOT = Path(__file__).resolve().parents[2]
# The hub guide's pictures: refreshed only when asked (DEVICELAB_UPDATE_IMAGES=1), else kept with the
# other screenshots, so that a test run leaves the working tree as it was.
IMAGES = (ROOT / "docs" / "images" if os.environ.get("DEVICELAB_UPDATE_IMAGES") == "1"
          else ROOT / "artifacts" / "screenshots")
COURSE = "device-lab"
ROSTER = "id,name,role\nann,Ann Lee,student\nivy,Ivy Teacher,instructor\n"

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1800)]


def smallest_assignment() -> str:
    """Return the assignment in release/ with the smallest notebook."""
    return min((p for p in (ROOT / "release").glob("*/*.ipynb")), key=lambda p: p.stat().st_size).parent.name


def first_answer(assignment: str) -> str:
    """Return the instructor's solution of the assignment's first answer cell (the markers dropped)."""
    source = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    cell = next(c for c in source.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")
                and c.cell_type == "code")
    return MARKER.sub("", cell.source)


@pytest.fixture
def hub(tmp_path: Path):
    hub_tests_or_skip()
    with class_hub(tmp_path, ROSTER) as running_hub:
        yield running_hub


@pytest.fixture
def browser(hub):
    with launched_chromium() as chromium:
        yield chromium


def log_in(browser, hub: Hub, member: str, to: str | None = None):
    """Log in at the hub's login page as the member (PAM); return the page, on their JupyterLab (or on the
    hub path `to`, where the login page sends them: then no server of theirs is started)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(120_000)  # a ceiling for each step on a loaded machine, not a pace
    page = context.new_page()
    page.goto(f"{hub.public}/hub/login" + (f"?next={urllib.parse.quote(to)}" if to else ""))
    page.fill("input[name=username]", hub.user(member))
    page.fill("input[name=password]", hub.passwords[member])
    page.click("input[type=submit], button[type=submit]")
    if to:
        page.wait_for_url(re.compile(re.escape(to)), timeout=240_000)
        return page
    page.wait_for_url(re.compile(rf"/user/{re.escape(hub.user(member))}/lab"), timeout=240_000)
    page.wait_for_selector(".jp-LabShell", timeout=120_000)
    return page


SAVE_TRIES, SAVE_WAIT_MS = 3, 45_000


def save(page) -> None:
    """Save the notebook with Ctrl+S, as the student does, once the edit is in it (its tab says unsaved), and
    press it again, as the student would, when the tab still says unsaved after SAVE_WAIT_MS.

    The students' JupyterLab never asks its news question, which on a loaded machine came late and took the
    keystroke (the hub turns its plugin off, tests/hub/test_hub_config.py)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # (browser_support skips without it)

    page.wait_for_selector(".jp-mod-dirty")
    for _ in range(SAVE_TRIES):  # a student whose Ctrl+S did nothing presses it again
        page.keyboard.press("Control+S")
        try:
            page.wait_for_function("!document.querySelector('.jp-mod-dirty')", timeout=SAVE_WAIT_MS)
            return
        except PlaywrightTimeout:  # once at load 5 on two cores, one Ctrl+S saved nothing in 120 s
            pass
    shot = ROOT / "artifacts" / "screenshots" / "hub-save-failed.png"  # say what the page showed instead
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    dialogs = page.locator(".jp-Dialog").all_inner_texts()
    status = page.locator("#jp-main-statusbar").all_inner_texts()
    raise AssertionError(f"{SAVE_TRIES} Ctrl+S saved nothing in {SAVE_TRIES * SAVE_WAIT_MS // 1000} s; "
                         f"dialogs {dialogs}, status bar {status}, screenshot {shot}")


def open_assignments(page) -> None:
    """Open the Assignments tab from the Nbgrader menu."""
    page.get_by_role("menuitem", name="Nbgrader").click()
    page.get_by_role("menuitem", name="Assignment List").click()
    page.get_by_text("Released assignments").first.wait_for(timeout=60_000)


def test_a_student_submits_in_the_browser_and_the_grader_sees_it(hub: Hub, browser) -> None:
    assignment = smallest_assignment()
    hub.cli("release", assignment)
    hub.cli("autograde", "on", assignment, "--timeout", "120")
    page = log_in(browser, hub, "ann")
    try:
        open_assignments(page)
        page.get_by_role("button", name="Fetch").first.click(timeout=60_000)
        page.get_by_role("button", name="Submit").first.wait_for(timeout=60_000)
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "hub-assignments.png"))

        page.goto(f"{hub.public}/user/{hub.user('ann')}/lab/tree/{COURSE}/{assignment}/{assignment}.ipynb")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        answer = page.locator(".jp-Notebook .jp-CodeCell", has_text="YOUR CODE HERE").first
        answer.scroll_into_view_if_needed(timeout=30_000)
        answer.locator(".cm-content").click()
        page.keyboard.press("Control+A")
        page.keyboard.insert_text(first_answer(assignment))
        save(page)

        open_assignments(page)
        page.get_by_role("button", name="Submit").first.click()
        page.get_by_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")).first.wait_for(timeout=60_000)
        page.screenshot(path=str(IMAGES / "hub-submitted.png"))

        # The autograde service grades it; seconds later the tab says feedback is there to fetch (on refresh).
        available = page.get_by_text("(feedback available to fetch)")
        deadline = time.monotonic() + 300  # a ceiling: grading starts a kernel, slowly on a loaded machine
        while not available.count():
            assert time.monotonic() < deadline, "no feedback to fetch within 300 s of Submit"
            page.locator("#refresh_assignments_list").click()
            page.wait_for_timeout(1000)
        page.get_by_role("button", name="Fetch Feedback").first.click()
        page.get_by_text("(view feedback)").first.wait_for(timeout=60_000)
        page.screenshot(path=str(IMAGES / "hub-feedback-fetched.png"))
        home = accounts.lookup(hub.user("ann")).home
        (fetched,) = (home / COURSE / assignment / "feedback").glob("*/*.html")
        page.goto(f"{hub.public}/user/{hub.user('ann')}/files/{urllib.parse.quote(str(fetched.relative_to(home)))}")
        shown = page.get_by_text(re.compile(r"\(Score: [\d.]+ / [\d.]+\)")).first
        shown.wait_for(timeout=60_000)
        score, top = map(float, re.search(r"Score: ([\d.]+) / ([\d.]+)", shown.inner_text()).groups())
        assert 0 < score < top, shown.inner_text()  # the saved answer: the first exercise only
        page.screenshot(path=str(IMAGES / "hub-feedback.png"))
    except Exception:
        screenshot(page, "hub-student-failed")
        raise
    status = hub.cli("status", assignment).stdout
    assert "1 of 1 submitted" in status, status

    # The grader goes straight to formgrader (a hub service: no server of their own is started for it).
    grader = log_in(browser, hub, "ivy", to=f"/services/{COURSE}/formgrader/manage_submissions/{assignment}")
    try:
        grader.get_by_text(hub.user("ann")).first.wait_for(timeout=120_000)
        grader.screenshot(path=str(IMAGES / "hub-formgrader.png"))
    except Exception:
        screenshot(grader, "hub-grader-failed")
        raise
