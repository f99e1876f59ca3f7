"""A real JupyterLab on a loopback port and headless Chromium driving it, for the end-to-end tests."""

import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder import COURSE_ROOT
from book.warm_kernels import warm_kernels
from tests.hub_support import free_port, release_port

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
# Flags for a closed network and a root user (containers, CI): nothing downloaded, no sandbox as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
ARTIFACTS = COURSE_ROOT / "artifacts" / "screenshots"


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab serving a scratch copy of the course."""

    url: str
    token: str
    root: Path

    def tree(self, relpath: str) -> str:
        """Return the address that opens `relpath` in JupyterLab."""
        # reset: no tabs left from earlier tests
        return f"{self.url}/lab/tree/{relpath}?reset&token={self.token}"


def browser_or_skip() -> str:
    """Return the Chromium executable; skip on a user's machine without one, fail in CI."""
    found = next((c for c in CHROMIUM_CANDIDATES if Path(c).exists()), shutil.which("chromium"))
    missing = found is None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = True
    if missing:
        message = "browser tests need Chromium (Debian: apt-get install chromium) and playwright (pip)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {message}")
        pytest.skip(message)
    return found


@contextlib.contextmanager
def launched_chromium(executable: str | None = None) -> Iterator:
    """Launch headless Chromium (Debian's, with the closed-network flags) for the block; close it after."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable or browser_or_skip(), headless=True,
                                              args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@contextlib.contextmanager
def fresh_page(browser, width: int, height: int) -> Iterator:
    """Yield a page in a new context of `browser`: no cookies or storage of another test's pages."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        yield context.new_page()
    finally:
        context.close()


def scratch_course(target: Path) -> Path:
    """Copy what a student or instructor opens, so the browser never writes into the repository."""
    for name in ("notebooks", "release", "source"):
        shutil.copytree(COURSE_ROOT / name, target / name)
    shutil.copy(COURSE_ROOT / "nbgrader_config.py", target)
    config = target / ".jupyter-config"
    (config / "labconfig").mkdir(parents=True)
    # No "get notified of Jupyter news?" toast over the screenshots.
    (config / "labconfig" / "page_config.json").write_text(
        '{"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": true}}')
    # Render every cell (JupyterLab 4 otherwise only draws the cells in view), so tests can find widgets.
    settings = target / ".lab-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    # A private nbgrader exchange, so formgrader and the assignment list have one to read.
    (target / "exchange").mkdir()
    (config / "nbgrader_config.py").write_text("c = get_config()\n"
                                               f"c.Exchange.root = {str(target / 'exchange')!r}\n")
    return target


@contextlib.contextmanager
def running_lab(root: Path, log: Path):
    """Start JupyterLab on a free loopback port (held for it until it stops) and stop it afterwards."""
    port, token = free_port(), "devicelab-e2e"
    env = warm_kernels().with_python3({  # the notebooks' kernels, forked warm (warm_kernels.py)
        **os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "JUPYTER_CONFIG_DIR": str(root / ".jupyter-config")})
    # port_retries=0: on another port than ours the test would wait on ours; it fails at once instead
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0",
               f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
               "--LabApp.expose_app_in_browser=True", f"--LabApp.user_settings_dir={root / '.lab-settings'}",
               # never the user's, nor another test run's
               f"--LabApp.workspaces_dir={root / '.lab-workspaces'}", "--ServerApp.disable_check_xsrf=False"]
    if hasattr(os, "getuid") and os.getuid() == 0:
        command.append("--allow-root")
    with open(log, "w") as out:
        server = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.5)
        yield Lab(url, token, root)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)
        release_port(port)


def open_notebook(page, lab: Lab, relpath: str) -> None:
    """Open a notebook and wait until its kernel is idle."""
    page.goto(lab.tree(relpath))
    page.wait_for_function("window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel?.status"
                           " === 'idle'", timeout=90_000)


LAST_COUNT_JS = ("Math.max(0, ...window.jupyterapp.shell.currentWidget.content.widgets"
                 ".map(c => c.model.executionCount || 0))")


RUN_ALL_JS = """() => {
  const app = window.jupyterapp;
  app.shell.activateById(app.shell.currentWidget.id);
  if (!app.commands.isEnabled('notebook:run-all-cells')) return false;
  app.commands.execute('notebook:run-all-cells');  // not awaited: a stuck cell ends in a timeout, not a hang
  return true;
}"""
BUSY_JS = ("window.jupyterapp.shell.currentWidget.content.widgets.some(c => c.model.type === 'code'"
           " && c.promptNode && c.promptNode.textContent.includes('*'))")


def run_all(page, timeout_ms: int = 300_000) -> None:
    """Run all cells (JupyterLab stops at a failing one) and wait until the kernel has finished with them."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    before = page.evaluate(LAST_COUNT_JS)
    started = f"(before) => {BUSY_JS} || {LAST_COUNT_JS} > before"
    try:
        for _attempt in range(3):  # a command sent before the notebook has focus is dropped: send it again
            if page.evaluate(RUN_ALL_JS):
                with contextlib.suppress(PlaywrightTimeout):
                    page.wait_for_function(started, arg=before, timeout=20_000, polling=250)
                    break
            page.wait_for_timeout(1000)
        else:
            raise AssertionError("JupyterLab never started running the cells")
        page.wait_for_function(
            "(before) => { const nb = window.jupyterapp.shell.currentWidget;"
            " const idle = nb?.sessionContext?.session?.kernel?.status === 'idle';"
            f" return idle && !({BUSY_JS}) && {LAST_COUNT_JS} > before; }}",
            arg=before, timeout=timeout_ms, polling=500)
    except Exception as error:
        screenshot(page, "run-all-timed-out")
        raise AssertionError(f"run-all did not finish: {notebook_state(page)}") from error


STATE_JS = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const cells = nb.content.widgets.map((c, i) => ({i, prompt: c.promptNode?.textContent || '',
      source: c.model.sharedModel.getSource().slice(0, 120)}));
  return {kernel: nb.sessionContext?.session?.kernel?.status,
          busy: cells.filter(c => c.prompt.includes('*')),
          last: cells.filter(c => /\\[\\d+\\]/.test(c.prompt)).slice(-1)};
}"""


def notebook_state(page) -> str:
    """Describe the kernel status and the running or queued cells, for a failure message."""
    from playwright.sync_api import Error as PlaywrightError

    try:
        return repr(page.evaluate(STATE_JS))
    except PlaywrightError as error:  # the page itself may be gone
        return f"(could not read the notebook: {error})"


def cell_text(page, index: int) -> str:
    """Return the rendered output text of the cell at `index`."""
    return page.evaluate(f"window.jupyterapp.shell.currentWidget.content.widgets[{index}].node.innerText")


def cell_index(page, predicate_js: str) -> int:
    """Return the index of the first cell whose model satisfies a JS predicate over `c` (the cell widget)."""
    return page.evaluate("window.jupyterapp.shell.currentWidget.content.widgets.findIndex(c => "
                         f"{predicate_js})")


def screenshot(page, name: str) -> Path:
    """Save a screenshot as a test artifact and return its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path
