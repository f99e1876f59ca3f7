"""The course as a book (`make book`): each page made from its notebook, the site built, and read in Chromium.

The site is built once for the module (`python -m book build`, as `make book` runs it) into a scratch folder.
"""

import contextlib
import functools
import html
import http.server
import importlib
import json
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import nbformat
import pytest

from autograder import COURSE_ROOT
from autograder.colab_cells import Repository, load_repository
from autograder.course import assignment_notebooks, assignments, lessons
from benchmarks.gpu_smoke import OUTPUT_TAG, RECORDED
from book import pages
from book.site import FIGURES, GUIDES, REFERENCE
from tests.browser_support import browser_or_skip, launched_chromium

REPO = load_repository(COURSE_ROOT)
LESSONS = [p.relative_to(COURSE_ROOT).as_posix() for p in lessons()]
RELEASED = [nb.relative_to(COURSE_ROOT).as_posix() for a in assignments(folder="release")
            for nb in assignment_notebooks(a, folder="release")]
SOURCES = [nb for a in assignments() for nb in assignment_notebooks(a)]
NOTEBOOK_PAGES = LESSONS + RELEASED
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
# The build and the browser checks together stay near a minute on the project's 2-core machine.
BUILD_SECONDS = 60


def _html_name(page: str) -> str:
    return page.rsplit(".", 1)[0] + ".html"


def _lesson(page: str):
    return nbformat.read(COURSE_ROOT / page, as_version=4)


def _notes(nb) -> list[str]:
    return [c.source for c in nb.cells
            if c.cell_type == "markdown" and OUTPUT_TAG in c.metadata.get("tags", [])]


# --- each page, made without building -------------------------------------------------------------------


def test_a_recorded_gpu_output_is_titled_with_its_gpu_torch_and_date():
    recorded = RECORDED.format(device="NVIDIA T4", torch="2.9.0+cu126", date="2026-01-02")
    note = recorded + "\n\n```text\n12 ms\n```"
    block = pages.recorded_block(note)
    assert block.startswith("::::{admonition} Recorded on a GPU: NVIDIA T4, torch 2.9.0+cu126, 2026-01-02\n")
    assert ":class: recorded-output" in block and "```text\n12 ms\n```" in block
    not_yet = "*Not yet run on a GPU: no output has been recorded for the cell above.*"
    assert pages.recorded_block(not_yet) == not_yet


@pytest.mark.parametrize("page", LESSONS, ids=lambda p: Path(p).stem)
def test_every_recorded_note_of_a_lesson_is_labelled_on_its_page(page):
    nb = _lesson(page)
    made = pages.lesson_page(nb, page, REPO, _predictions(nb), _figures(page))
    blocks = [c.source for c in made.cells if ":class: recorded-output" in c.source]
    recordings = [pages.recording_of(n) for n in _notes(nb)]
    assert len(blocks) == sum(r is not None for r in recordings)
    for block, recording in zip(blocks, [r for r in recordings if r], strict=True):
        assert recording.device in block and recording.torch in block and recording.date in block


def _predictions(nb) -> dict:
    module = pages.lesson_module(nb)
    if module is None:
        return {}
    return pages.predictions_in((COURSE_ROOT / "devicelab" / "exercises" / f"{module}.py").read_text())


def _figures(page: str) -> list:
    return [f for f in pages.load_figures(FIGURES) if f.lesson == Path(page).stem]


@pytest.mark.parametrize("page", LESSONS, ids=lambda p: Path(p).stem)
def test_predictions_read_without_importing_match_the_lesson_module(page):
    nb = _lesson(page)
    module = pages.lesson_module(nb)
    if module is None:
        pytest.skip("this lesson asks nothing")
    imported = importlib.import_module(f"devicelab.exercises.{module}").PREDICTIONS
    assert _predictions(nb) == {name: pages.Question(p.question, p.answer, p.reason, p.choices)
                                for name, p in imported.items()}


@pytest.mark.parametrize("page", LESSONS, ids=lambda p: Path(p).stem)
def test_every_ask_cell_becomes_its_question_with_the_answer_folded(page):
    nb = _lesson(page)
    asked = [pages.asked(c) for c in nb.cells if pages.asked(c)]
    made = pages.lesson_page(nb, page, REPO, _predictions(nb), _figures(page))
    assert not [c for c in made.cells if c.cell_type == "code" and pages.asked(c)]
    blocks = [c.source for c in made.cells if ":class: prediction" in c.source]
    assert len(blocks) == len(asked)
    for name, block in zip(asked, blocks, strict=True):
        question = _predictions(nb)[name]
        before, folded = block.split(":::{dropdown}", 1)
        assert question.question in before and f"**{question.answer}**" not in before
        assert f"**{question.answer}**" in folded and question.reason in folded


def test_an_ask_without_its_prediction_stops_the_build():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A lesson"),
                                         nbformat.v4.new_code_cell('ask("missing")')])
    with pytest.raises(pages.PageError, match="missing"):
        pages.lesson_page(nb, "notebooks/99-x.ipynb", REPO, {}, [])


def test_the_colab_and_download_links_come_from_the_repository_setting():
    fork = Repository("someone/their-fork", "teaching")
    nb = _lesson(LESSONS[1])
    made = pages.lesson_page(nb, LESSONS[1], fork, _predictions(nb), _figures(LESSONS[1]),
                             in_repository=lambda _p: True)
    text = "\n".join(c.source for c in made.cells)
    assert (f'href="https://colab.research.google.com/github/someone/their-fork/blob/teaching/{LESSONS[1]}"'
            in text)
    assert f'href="https://raw.githubusercontent.com/someone/their-fork/teaching/{LESSONS[1]}"' in text
    assert "devicelab-course" not in text.replace(nb.cells[1].source, ""), "no other repository is named"
    moved = pages.rewrite_links("see [the magic](../devicelab/magics.py#L3) and "
                                "[03](03-moving-tensors.ipynb)",
                                LESSONS[1], fork, in_book=lambda p: p.startswith("notebooks/"),
                                in_repository=lambda _p: True)
    assert moved == ("see [the magic](https://github.com/someone/their-fork/blob/teaching/devicelab/magics.py#L3)"
                     " and [03](03-moving-tensors.ipynb)")
    front = pages.rewrite_links("[start](../README.md#two-commands)", "docs/students.md", fork,
                                in_book=lambda _p: False, in_repository=lambda _p: True,
                                renamed={"README.md": "index.md"})
    assert front == "[start](../index.md#two-commands)", "README.md is the book's front page"


def test_a_recorded_figure_goes_under_its_widget_and_a_stale_list_stops_the_build():
    page = "notebooks/06-pinned-memory-and-dataloader.ipynb"
    nb = _lesson(page)
    figures = _figures(page)
    assert figures, "lesson 06 shows the transfer lab's and the overlap timeline's GPU figures"
    made = pages.lesson_page(nb, page, REPO, _predictions(nb), figures)
    ids = [c.get("id") for c in made.cells]
    for figure in figures:
        block = made.cells[ids.index(figure.after_cell) + 1].source
        assert block.startswith(f":::{{figure}} ../{figure.image}") and figure.device in block
        assert (COURSE_ROOT / figure.image).is_file()
    stale = [pages.RecordedFigure(**{**figures[0].__dict__, "after_cell": "no-such-cell"})]
    with pytest.raises(pages.PageError, match="no-such-cell"):
        pages.lesson_page(nb, page, REPO, _predictions(nb), stale)


# --- the built site -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The book, built as `make book` builds it, into a scratch folder."""
    out = tmp_path_factory.mktemp("book")
    build_book(out)
    return out / "html"


def build_book(out: Path) -> None:
    """Build the book as `make book` does, into `out`; fail with its output when it does not build."""
    done = subprocess.run([sys.executable, "-m", "book", "build", "--out", str(out)], cwd=COURSE_ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"the book did not build:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"


@pytest.mark.bench
def test_bench_the_book_builds_within_its_target(tmp_path):
    """A benchmark (`pytest -m bench -s`), not a behaviour test: prints the build time against its target."""
    started = time.perf_counter()
    build_book(tmp_path)
    seconds = time.perf_counter() - started
    print(f"\nthe book: built in {seconds:.1f} s (target {BUILD_SECONDS} s)")
    assert seconds < BUILD_SECONDS, f"the book took {seconds:.0f} s to build"


def test_every_lesson_problem_set_and_guide_is_a_page(site):
    for page in ["index.md", *NOTEBOOK_PAGES, *GUIDES, *REFERENCE]:
        assert (site / _html_name(page)).is_file(), f"{page} is missing from the book"
    assert not (site / "source").exists(), "no instructor notebook is in the book"


def _text(path: Path) -> str:
    """Return a built file's text as a reader (or a search engine) gets it: tags dropped, entities decoded."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    return html.unescape(re.sub(r"<[^>]+>", "", raw)) if path.suffix == ".html" else raw


def _hidden_lines() -> set[str]:
    """Lines of source/'s solutions and hidden tests that nothing the book is made of shows."""
    cells = [cell.source for nb in NOTEBOOK_PAGES
             for cell in nbformat.read(COURSE_ROOT / nb, as_version=4).cells]
    shown = "\n".join(cells + [(COURSE_ROOT / p).read_text() for p in (*GUIDES, *REFERENCE, "README.md")])
    hidden = set()
    for source in SOURCES:
        for cell in nbformat.read(source, as_version=4).cells:
            inside = False
            for line in cell.source.splitlines():
                if any(f"### {m}" in line for m in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS")):
                    inside = True
                elif any(f"### {m}" in line for m in ("END SOLUTION", "END HIDDEN TESTS")):
                    inside = False
                elif inside and len(line.strip()) >= 12 and line.strip() not in shown:
                    hidden.add(line.strip())
    return hidden


def test_the_site_holds_no_solution_and_no_hidden_test(site):
    hidden = _hidden_lines()
    assert len(hidden) > 50, "the check found the solutions and hidden tests of source/ to look for"
    leaks = []
    for path in sorted(p for p in site.rglob("*") if p.is_file() and p.suffix in (".html", ".js", ".txt",
                                                                                  ".ipynb", ".json")):
        text = _text(path)
        leaks += [f"{path.relative_to(site)}: {m}" for m in MARKERS if m in text]
        leaks += [f"{path.relative_to(site)}: {line}" for line in hidden if line in text]
    assert not leaks, "the book shows what only instructors may see:\n" + "\n".join(leaks[:20])


def test_each_recorded_output_shows_in_its_lesson_labelled(site):
    for page in LESSONS:
        built = (site / _html_name(page)).read_text(encoding="utf-8")
        recordings = [r for r in map(pages.recording_of, _notes(_lesson(page))) if r]
        titles = re.findall(r'<div class="[^"]*\brecorded-output\b[^"]*">\s*'
                            r'<p class="admonition-title">(.*?)</p>', built, flags=re.DOTALL)
        assert len(titles) == len(recordings), page
        for title, recording in zip(titles, recordings, strict=True):
            assert html.unescape(title) == recording.label()
    figure_page = (site / _html_name("notebooks/06-pinned-memory-and-dataloader.ipynb")).read_text()
    assert figure_page.count('class="recorded-figure') == len(_figures(
        "notebooks/06-pinned-memory-and-dataloader.ipynb"))


# --- in Chromium ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(site):
    """The site on a loopback port, as a web server would serve it."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_args) -> None:  # no line per request in the test's output
        pass


PAGE_JS = """() => ({
  links: [...document.querySelectorAll('a[href]')].map(a => ({href: a.href, cls: a.className,
                                                               text: a.innerText.trim()})),
  broken_images: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src),
  ids: [...document.querySelectorAll('[id]')].map(e => e.id),
  predictions: [...document.querySelectorAll('div.prediction')].map(p => ({
      folded: !!p.querySelector('details') && !p.querySelector('details').open,
      answer: p.querySelector('details')?.textContent.includes('The answer:')})),
})"""


def _visit(page, url: str) -> dict:
    """Open `url`; return what the page holds and every console error, page error and failed request."""
    problems: list[str] = []
    page.on("console",
            lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(url, wait_until="load")
    return {**page.evaluate(PAGE_JS), "problems": problems}


def _repository_file(url: str, prefix: str) -> str | None:
    """Return the repository path a link to `prefix` + path names, or None for another address."""
    return urllib.parse.unquote(url[len(prefix):].split("#")[0]) if url.startswith(prefix) else None


@pytest.mark.browser
def test_every_page_loads_cleanly_and_every_link_and_image_resolves(site, served):
    browser_or_skip()
    names = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                   if not p.relative_to(site).as_posix().startswith("_static/"))  # the theme's template parts
    colab = f"https://colab.research.google.com/github/{REPO.name}/blob/{REPO.branch}/"
    raw = f"https://raw.githubusercontent.com/{REPO.name}/{REPO.branch}/"
    blob = f"https://github.com/{REPO.name}/blob/{REPO.branch}/"
    failures: list[str] = []
    targets: dict[str, set[str]] = {}  # page address -> fragments linked to
    ids: dict[str, set[str]] = {}
    started = time.perf_counter()
    outside: list[str] = []
    with launched_chromium() as chromium:
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(served)
                      else (outside.append(route.request.url), route.abort()))
        for name in names:
            page = context.new_page()  # a page of its own: its listeners hear only it
            found = _visit(page, served + name)
            page.close()
            failures += [f"{name}: {p}" for p in found["problems"]]
            failures += [f"{name}: broken image {src}" for src in found["broken_images"]]
            ids[served + name] = set(found["ids"])
            for link in found["links"]:
                href = link["href"]
                if href.startswith(served):
                    address, _, fragment = href.partition("#")
                    targets.setdefault(address, set()).add(fragment)
                for prefix in (colab, raw, blob):
                    path = _repository_file(href, prefix)
                    if path is not None and not (COURSE_ROOT / path).exists():
                        failures.append(f"{name}: {href} names no file of the repository")
                if "colab.research.google.com/github/" in href and not href.startswith(colab):
                    failures.append(f"{name}: a Colab link to another repository: {href}")
                if "raw.githubusercontent.com" in href and not href.startswith(raw):
                    failures.append(f"{name}: a download link to another repository: {href}")
            source = next((p for p in NOTEBOOK_PAGES if _html_name(p) == name), None)
            if source is not None:
                opens = {lk["href"] for lk in found["links"] if lk["href"].startswith(colab)}
                downloads = {lk["href"] for lk in found["links"] if "download-link" in lk["cls"]}
                if opens != {colab + source} or downloads != {raw + source}:
                    failures.append(f"{name}: Colab {opens}, download {downloads}; wanted this notebook's")
            if name.startswith("notebooks/"):
                failures += [f"{name}: a prediction shows its answer unfolded" for p in found["predictions"]
                             if not (p["folded"] and p["answer"])]
        context.close()
        failures += [f"a request left the site: {url}" for url in outside]
    for address, fragments in targets.items():
        name = address[len(served):] or "index.html"
        if not (site / name).is_file() and not (site / name / "index.html").is_file():
            failures.append(f"a link to {name}, which the site lacks")
            continue
        if address not in ids:
            with contextlib.suppress(OSError):
                ids[address] = set(re.findall(r'id="([^"]+)"', (site / name).read_text(encoding="utf-8")))
        missing = {f for f in fragments if f and f not in ids.get(address, set())}
        failures += [f"a link to {name}#{f}, which has no such anchor" for f in sorted(missing)]
    print(f"{len(names)} pages read in Chromium in {time.perf_counter() - started:.1f} s")
    assert not failures, "\n".join(failures[:40])


@pytest.mark.browser
@pytest.mark.parametrize("width", [390, 700, 1280])
def test_the_menu_opens_and_leads_to_a_page_at_phone_tablet_and_desktop_width(site, served, width):
    """The visible menu button works at every width (pydata-sphinx-theme#2451: both themes bound only the
    hidden copy of it): below 992 px it opens the menu over the page, and a link there leads to its page;
    above, it folds the sidebar away. The contents button opens the page's contents the same way."""
    browser_or_skip()
    with launched_chromium() as chromium:
        context = chromium.new_context(viewport={"width": width, "height": 844})
        page = context.new_page()
        page.goto(served + "notebooks/03-moving-tensors.html", wait_until="load")
        menu = page.locator(".primary-toggle:visible").first
        if width < 992:
            menu.click()
            dialog = page.locator("dialog#pst-primary-sidebar-modal[open]")
            dialog.wait_for(state="visible", timeout=30_000)
            dialog.get_by_role("link", name=re.compile(r"^04 · Device mismatch")).first.click()
            page.wait_for_url(re.compile(r"04-device-mismatch\.html"), timeout=30_000)
            page.locator(".secondary-toggle:visible").first.click()
            page.locator("dialog#pst-secondary-sidebar-modal[open]").wait_for(state="visible", timeout=30_000)
        else:
            sidebar = page.locator("#pst-primary-sidebar")
            assert "pst-sidebar-hidden" not in (sidebar.get_attribute("class") or "")
            menu.click()
            page.wait_for_function("document.querySelector('#pst-primary-sidebar').classList"
                                   ".contains('pst-sidebar-hidden')", timeout=30_000)
        context.close()


@pytest.mark.browser
def test_search_results_quote_the_page_around_the_word(site, served):
    """Every snippet read "...Colab" or "...System Settings Light Dark" (the header's buttons and the Colab
    links were the start of each page's text): now each quotes the lesson's own words."""
    browser_or_skip()
    with launched_chromium() as chromium:
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(served + "search.html?q=pinned", wait_until="load")
        page.wait_for_function("document.querySelectorAll('#search-results li p.context').length >= 3",
                               timeout=60_000)
        snippets = page.locator("#search-results li p.context").all_inner_texts()[:3]
        context.close()
    for text in snippets:
        assert "pinned" in text.lower() and "System Settings" not in text and "Colab" not in text[:40], text


@pytest.mark.browser
def test_no_page_is_wider_than_a_phone(site, served):
    """At 390 px nothing pushes a page sideways: long inline code wraps, wide tables scroll in their own box
    (the cheat sheet's ran off the screen)."""
    browser_or_skip()
    pages = ["docs/cheatsheet.html", "docs/facts.html", "docs/students.html", "docs/hub.html",
             "notebooks/05-async-and-timing.html",
             "release/ps01-tensors-and-devices/ps01-tensors-and-devices.html"]
    with launched_chromium() as chromium:
        context = chromium.new_context(viewport={"width": 390, "height": 844})
        page = context.new_page()
        wide = {}
        for name in pages:
            page.goto(served + name, wait_until="load")
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > 390:
                wide[name] = width
        context.close()
    assert not wide, wide


def test_the_recorded_figures_list_names_real_images():
    for entry in json.loads(FIGURES.read_text()):
        assert (COURSE_ROOT / entry["image"]).is_file(), entry["image"]
