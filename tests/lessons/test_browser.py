"""The course in a real browser: JupyterLab + headless Chromium, as a student and an instructor see it."""

import contextlib
import re

import pytest

from tests.browser_support import (
    browser_or_skip,
    cell_index,
    cell_text,
    fresh_page,
    launched_chromium,
    open_notebook,
    run_all,
    running_lab,
    scratch_course,
    screenshot,
)

# `make test` runs them on their own after the parallel run, one after the other, against one JupyterLab.
pytestmark = [pytest.mark.browser, pytest.mark.notebook]

PS01 = "release/ps01-tensors-and-devices/ps01-tensors-and-devices.ipynb"
DESCRIBE = '''def describe(t: torch.Tensor) -> dict:
    """Return the shape, dtype, device and size in bytes of the elements of `t`."""
    return {"shape": tuple(t.shape), "dtype": t.dtype, "device": t.device, "nbytes": t.nbytes}'''


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab serving a scratch copy of the course."""
    executable = browser_or_skip()
    root = scratch_course(tmp_path_factory.mktemp("course"))
    with running_lab(root, tmp_path_factory.mktemp("logs") / "lab.log") as server:
        yield server, executable


@pytest.fixture(scope="module")
def chromium(lab):
    """One headless Chromium for the module's tests (each test gets a context of its own)."""
    _, executable = lab
    with launched_chromium(executable) as browser:
        yield browser


@pytest.fixture
def page(chromium):
    """A fresh page, in a fresh browser context."""
    with fresh_page(chromium, 1400, 1000) as fresh:
        yield fresh


def test_student_fills_an_exercise_and_check_says_correct(lab, page):
    server, _ = lab
    open_notebook(page, server, PS01)
    answer = cell_index(page, "c.model.getMetadata('nbgrader')?.grade_id === 'describe'")
    assert answer > 0
    editor = page.locator(".jp-Notebook .jp-Cell").nth(answer).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(DESCRIBE)
    run_all(page)
    check = cell_index(page, "c.model.sharedModel.getSource().startsWith('check(\"describe\")')")
    page.locator(".jp-Notebook .jp-Cell").nth(check).scroll_into_view_if_needed()
    screenshot(page, "assignment-check-correct")
    assert "Correct: describe" in cell_text(page, check)


def test_student_sees_nbgrader_validate_and_assignment_list(lab, page):
    server, _ = lab
    open_notebook(page, server, PS01)
    validate = page.locator(".jp-Toolbar-item", has_text="Validate").first
    validate.click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=120_000)
    page.wait_for_function("document.querySelector('.jp-Dialog')?.innerText.includes('Validation Results')",
                           timeout=120_000)
    screenshot(page, "nbgrader-validate")
    assert "failed" in dialog.inner_text(), "the untouched student version fails validation"
    page.keyboard.press("Escape")
    page.evaluate("window.jupyterapp.commands.execute('nbgrader:open-assignment-list')")
    panel = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tabLabel", has_text="Assignments")
    panel.first.wait_for(timeout=30_000)
    page.wait_for_timeout(1500)
    screenshot(page, "nbgrader-assignment-list")


def test_instructor_opens_formgrader(lab, page):
    server, _ = lab
    page.goto(f"{server.url}/formgrader?token={server.token}")
    page.get_by_text("Manage Assignments").first.wait_for(timeout=30_000)
    page.get_by_text("ps01-tensors-and-devices").first.wait_for(timeout=30_000)
    screenshot(page, "formgrader")
    assert page.get_by_text("Loading, please wait").count() == 0


def test_timing_lies_chart_renders(lab, page):
    server, _ = lab
    open_notebook(page, server, "notebooks/05-async-and-timing.ipynb")
    run_all(page)
    box = page.locator(".widget-vbox", has=page.locator(".widget-output img")).first
    box.scroll_into_view_if_needed()
    chart = box.locator(".widget-output img").first
    chart.wait_for(timeout=60_000)
    assert chart.bounding_box()["width"] > 200, "the bar chart is drawn"
    screenshot(page, "timing-lies-widget")


def test_transfer_lab_runs_grows_and_stops(lab, page):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    server, _ = lab
    open_notebook(page, server, "notebooks/06-pinned-memory-and-dataloader.ipynb")
    run_all(page)
    lab_box = page.locator(".widget-vbox", has=page.locator("button", has_text="Clear plot")).first
    lab_box.scroll_into_view_if_needed()
    status = lab_box.locator(".widget-html").filter(has_text=re.compile("press Run|Done|Stopped")).first
    plot = lab_box.locator("img").first
    before_plot = plot.get_attribute("src")
    rows_before = lab_box.locator("table tr").count()

    lab_box.locator("button", has_text=re.compile(r"^\s*Run\s*$")).click()
    page.wait_for_function("(el) => /Done:/.test(el.innerText)", arg=status.element_handle(), timeout=120_000)
    assert lab_box.locator("table tr").count() > rows_before, "the results table fills in"
    assert plot.get_attribute("src") != before_plot, "the plot grows with the new run"
    screenshot(page, "transfer-lab-run")

    # A long sweep to stop: the largest size on offer, ten repeats each.
    largest = lab_box.locator(".widget-dropdown:has(label:text-is('to')) select")
    largest.select_option(index=largest.locator("option").count() - 1)
    lab_box.locator(".widget-dropdown:has(label:text-is('Repeats')) select").select_option(label="10")
    for _attempt in range(5):  # on a fast machine a sweep may end before the click arrives: try again
        lab_box.locator("button", has_text=re.compile(r"^\s*Run\s*$")).click()
        with contextlib.suppress(PlaywrightTimeout):  # the sweep may already be over: then it says Done
            lab_box.locator("button", has_text="Stop").click(timeout=5_000)
        page.wait_for_function("(el) => /Stopped after|Done:/.test(el.innerText) && "
                               "!/Stopping/.test(el.innerText)", arg=status.element_handle(), timeout=120_000)
        stopped = re.search(r"Stopped after (\d+) of (\d+)", status.inner_text())
        if stopped and int(stopped.group(1)) < int(stopped.group(2)):
            break
    assert stopped, f"Stop ends the sweep early: {status.inner_text()}"
    done, total = map(int, stopped.groups())
    assert done < total, "Stop ends the sweep before its last size"
    from playwright.sync_api import expect

    expect(lab_box.locator("button", has_text=re.compile(r"^\s*Run\s*$")),
           "Run is usable again").to_be_enabled()
    screenshot(page, "transfer-lab-stopped")
