"""Take the README's screenshots from a student's view: `make screenshots` (or `.venv/bin/python
docs/images/screenshots.py [FOLDER]`) writes transfer-lab.png and assignment-check.png into docs/images/ (or
FOLDER).

A student's JupyterLab has the course only (`make lab`): no nbgrader menus, so nbgrader's JupyterLab
extension is switched off here. Each picture is cropped to what it shows (the transfer lab's widget; an answer
cell and the check under it), drawn at twice the pixels so that it stays readable when the page shrinks it.
A real JupyterLab and headless Chromium, as the browser tests use (tests/browser_support.py).
"""

import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the course's packages and its test helpers

from tests.browser_support import (
    launched_chromium,
    open_notebook,
    run_all,
    running_lab,
    scratch_course,
)

PS01 = "release/ps01-tensors-and-devices/ps01-tensors-and-devices.ipynb"
LESSON_06 = "notebooks/06-pinned-memory-and-dataloader.ipynb"
DESCRIBE = '''def describe(t: torch.Tensor) -> dict:
    """Return the shape, dtype, device and size in bytes of the elements of `t`."""
    return {"shape": tuple(t.shape), "dtype": t.dtype, "device": t.device, "nbytes": t.nbytes}'''
VIEWPORT = {"width": 1400, "height": 1500}
SCALE = 2  # device pixels per CSS pixel
NBGRADER_OFF = '{"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": true, ' \
               '"@jupyter/nbgrader": true}}'


def cells(page):
    return page.locator(".jp-Notebook .jp-Cell")


def index_of(page, predicate_js: str) -> int:
    found = page.evaluate("window.jupyterapp.shell.currentWidget.content.widgets.findIndex(c => "
                          f"{predicate_js})")
    if found < 0:
        raise RuntimeError(f"no cell where {predicate_js}")
    return found


def assignment_check(page, lab, target: Path) -> None:
    """ps01's `describe` answered, and `check("describe")` under it saying Correct."""
    open_notebook(page, lab, PS01)
    answer = index_of(page, "c.model.getMetadata('nbgrader')?.grade_id === 'describe'")
    editor = cells(page).nth(answer).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(DESCRIBE)
    page.keyboard.press("Control+Home")  # the editor shows its lines from their start
    run_all(page)
    check = index_of(page, "c.model.sharedModel.getSource().startsWith('check(\"describe\")')")
    page.wait_for_function(f"window.jupyterapp.shell.currentWidget.content.widgets[{check}].node.innerText"
                           ".includes('Correct')", timeout=120_000)
    page.evaluate("document.activeElement?.blur()")  # no cursor in the picture
    cells(page).nth(answer).scroll_into_view_if_needed()
    top, bottom = cells(page).nth(answer).bounding_box(), cells(page).nth(check).bounding_box()
    clip = {"x": top["x"], "y": top["y"], "width": max(top["width"], bottom["width"]),
            "height": bottom["y"] + bottom["height"] - top["y"]}
    page.screenshot(path=str(target), clip=clip)


def transfer_lab(page, lab, target: Path) -> None:
    """Lesson 06's transfer lab after a pageable and a pinned sweep on the simulated T4 (a machine without a
    GPU measures only host-to-host copies; the lab says so and offers the simulated T4, labelled as such)."""
    open_notebook(page, lab, LESSON_06)
    run_all(page)
    box = page.locator(".widget-vbox", has=page.locator("button", has_text="Clear plot")).first
    box.scroll_into_view_if_needed()
    simulate = box.locator("button", has_text="Simulate a T4 GPU")
    if simulate.count() and simulate.first.is_visible():  # no GPU here: the simulated T4, as a student clicks
        simulate.first.click()
    status = box.locator(".widget-html").filter(has_text=re.compile("press Run|Done|Stopped")).first
    for host in ("pageable", "pinned"):  # two runs, two labelled curves
        box.locator(".widget-toggle-buttons button", has_text=host).first.click()
        box.locator("button", has_text=re.compile(r"^\s*Run\s*$")).click()
        page.wait_for_function("(el) => /Done:/.test(el.innerText)", arg=status.element_handle(),
                               timeout=180_000)
        page.wait_for_function("(el) => !el.disabled", arg=box.locator(
            "button", has_text=re.compile(r"^\s*Run\s*$")).element_handle(), timeout=60_000)
    page.evaluate("document.activeElement?.blur()")
    box.evaluate("el => el.scrollIntoView({block: 'start'})")
    top, plot = box.bounding_box(), box.locator("img").first.bounding_box()  # down to the plot, not the table
    page.screenshot(path=str(target), clip={"x": top["x"], "y": top["y"], "width": top["width"],
                                            "height": plot["y"] + plot["height"] + 8 - top["y"]})


SHOTS = {"assignment-check.png": assignment_check, "transfer-lab.png": transfer_lab}


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else HERE
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="devicelab-screenshots-") as scratch:
        root = scratch_course(Path(scratch) / "course")
        (root / ".jupyter-config" / "labconfig" / "page_config.json").write_text(NBGRADER_OFF)
        with running_lab(root, Path(scratch) / "lab.log") as lab, launched_chromium() as browser:
            for name, take in SHOTS.items():
                context = browser.new_context(viewport=VIEWPORT, device_scale_factor=SCALE)
                try:
                    take(context.new_page(), lab, folder / name)
                finally:
                    context.close()
                print(f"wrote {folder / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
