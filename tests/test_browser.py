"""The course in a real browser: JupyterLab + headless Chromium, as a student and an instructor see it."""

import pytest

from tests.browser_support import (
    CHROMIUM_ARGS,
    browser_or_skip,
    cell_index,
    cell_text,
    open_notebook,
    run_all,
    running_lab,
    scratch_course,
    screenshot,
)

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


@pytest.fixture
def page(lab):
    """A fresh headless Chromium page."""
    from playwright.sync_api import sync_playwright

    _, executable = lab
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


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
