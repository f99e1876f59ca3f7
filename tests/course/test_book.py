"""The course as a book (`make book`): each page made from its notebook, the site built, and read in Chromium.

The site is built once for the module (`python -m book build`, as `make book` runs it) into a scratch folder,
from the lessons' executed copies (book/execution.py `executed_copy`, in build/executed/), which
tests/lessons/test_lessons.py reads too: whichever module comes first executes a lesson, the other reuses it.
"""

import contextlib
import copy
import functools
import html
import html.parser
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
from autograder.colab_cells import BADGE_TAG, SETUP_TAG, Repository, load_repository
from autograder.course import assignment_notebooks, assignments, lessons
from benchmarks.gpu_smoke import OUTPUT_TAG, RECORDED
from book import execution, pages
from book.execution import REQUIRES_CUDA, executed_copies, executed_copy, execution_key
from book.site import FIGURES, GUIDES, REFERENCE
from tests.browser_support import browser_or_skip, fresh_page, launched_chromium

REPO = load_repository(COURSE_ROOT)
LESSONS = [p.relative_to(COURSE_ROOT).as_posix() for p in lessons()]
RELEASED = [nb.relative_to(COURSE_ROOT).as_posix() for a in assignments(folder="release")
            for nb in assignment_notebooks(a, folder="release")]
SOURCES = [nb for a in assignments() for nb in assignment_notebooks(a)]
NOTEBOOK_PAGES = LESSONS + RELEASED
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
# The build and the browser checks together stay near a minute on the project's 2-core machine.
BUILD_SECONDS = 60
# The first test of the site may execute the ten lessons (4 min on the loaded 2-core machine), or wait for a
# worker that is executing them, before the build (1 min loaded); pytest-timeout's default is 600 s.
SITE_SECONDS = 1800


def on_the_site(test):
    """Mark a test that reads the built site: it executes notebooks (the lessons), and may wait for them."""
    return pytest.mark.notebook(pytest.mark.timeout(SITE_SECONDS)(test))


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


# --- a lesson's outputs, from its executed copy ----------------------------------------------------------

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def _ran(*cells, models: dict | None = None):
    """An executed copy: `cells` as (id, source, outputs, tags)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A lesson", id="title")]
    for cell_id, source, outputs, tags in cells:
        cell = nbformat.v4.new_code_cell(source, id=cell_id, metadata={"tags": list(tags)})
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        nb.cells.append(cell)
    if models:
        nb.metadata["widgets"] = {pages.WIDGET_STATE: {"state": models, "version_major": 2,
                                                       "version_minor": 0}}
    return nb


def _display(data: dict) -> dict:
    return {"output_type": "display_data", "data": data, "metadata": {}}


def _stream(name: str, text: str) -> dict:
    return {"output_type": "stream", "name": name, "text": text}


TABLE = "<table><tr><td>1</td></tr></table>"
TRACEBACK = ["\x1b[31m---------\x1b[0m", "Traceback (most recent call last)",
             "File /home/me/.venv/lib/x.py:3", "ZeroDivisionError: division by zero"]


def test_a_lesson_page_shows_each_cpu_cell_s_outputs_from_its_executed_copy():
    chart = _display({"image/png": PNG, "text/plain": "<Figure>"})
    models = {  # a widget: a box holding a label and an Output widget that drew a chart and printed a line
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_label", "IPY_MODEL_out"]}},
        "label": {"model_name": "HTMLModel", "state": {"value": "<b>a label</b>"}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [
            chart, _stream("stdout", "drawn in 2 s\n")]}},
        "lone": {"model_name": "ButtonModel", "state": {}}}
    widget = {"model_id": "box", "version_major": 2, "version_minor": 0}
    cells = [
        ("printed", "print('hello')", [_stream("stdout", "hello\n"), _stream("stderr", "W1202 a log\n")], ()),
        ("progress", "bench()", [_stream("stdout", "a table\r\n\rcopies:  0%| 0/2"), _stream(
            "stdout", "\r     \rrow 1\r\n\rcopies: 50%| 1/2\rcopies: 100%| 2/2\r\n")], ()),
        ("table", "show()", [{"output_type": "execute_result", "execution_count": 3, "metadata": {},
                              "data": {"text/html": TABLE, "text/plain": "1"}}], ()),
        ("script", "js()", [_display({"application/javascript": "alert(1)"})], ()),
        ("plot", "plot()", [chart], ()),
        ("widget", "lab()", [_display({pages.WIDGET_VIEW: widget, "text/plain": "VBox(children=...)"})], ()),
        ("button", "button()", [_display({pages.WIDGET_VIEW: {**widget, "model_id": "lone"},
                                          "text/plain": "Button()"})], ()),
        ("fails", "1 / 0", [{"output_type": "error", "ename": "ZeroDivisionError",
                            "evalue": "division by zero", "traceback": TRACEBACK}], ("raises-exception",)),
    ]
    ran = _ran(*cells, models=models)
    lesson = copy.deepcopy(ran)
    for cell in lesson.cells:
        if cell.cell_type == "code":
            cell.outputs = []  # the lesson as committed
    lesson.cells.append(nbformat.v4.new_code_cell("torch.cuda.synchronize()", id="on-gpu",
                                                  metadata={"tags": [REQUIRES_CUDA]}))  # not in the copy
    made = pages.lesson_page(lesson, "notebooks/99-x.ipynb", REPO, {}, [], executed=ran)
    out = {c.id: c.get("outputs") for c in made.cells if c.cell_type == "code"}
    assert [o["text"] for o in out["printed"]] == ["hello\n"], "stdout shown, the C++ log on stderr not"
    assert [o["text"] for o in out["progress"]] == ["a table\nrow 1\ncopies: 100%| 2/2\n"], (
        "one stream, each progress bar's line as it was left")
    assert out["table"][0]["data"] == {"text/html": TABLE, "text/plain": "1"}
    assert out["script"] == [], "no script runs in the book"
    assert out["plot"][0]["data"]["image/png"] == PNG
    note, drawn, printed = out["widget"]
    assert "interactive widget" in note["data"]["text/markdown"] and "displays when it starts" in (
        note["data"]["text/markdown"])
    assert drawn["data"]["image/png"] == PNG and printed["text"] == "drawn in 2 s\n"
    assert not any(pages.WIDGET_VIEW in o.get("data", {}) for c in made.cells for o in c.get("outputs", []))
    assert [o["data"]["text/markdown"] for o in out["button"]] == [pages.WIDGET_NOTE]
    assert [o["traceback"] for o in out["fails"]] == [["ZeroDivisionError: division by zero"]], (
        "the error's message, not the building machine's traceback")
    assert out["on-gpu"] == [], "a GPU cell keeps its code alone (its recorded note says what a GPU gave)"
    assert pages.OUTPUTS_NOTE in made.cells[1].source + made.cells[2].source
    assert "widgets" not in made.metadata, "no widget state for a page that has no widgets"


def test_an_executed_copy_that_is_not_the_lesson_s_stops_the_build():
    ran = _ran(("a", "x = 1", [], ()))
    lesson = copy.deepcopy(ran)
    lesson.cells[1].source = "x = 2"
    with pytest.raises(pages.PageError, match=r"'a'.*executed copy"):
        pages.lesson_page(lesson, "notebooks/99-x.ipynb", REPO, {}, [], executed=ran)
    lesson.cells[1].source = "x = 1"
    lesson.cells.append(nbformat.v4.new_code_cell("y = 1", id="new"))
    with pytest.raises(pages.PageError, match="'new'"):
        pages.lesson_page(lesson, "notebooks/99-x.ipynb", REPO, {}, [], executed=ran)


# --- the executed copies the book and the lesson tests share (book/execution.py) -----------------


def _small_lesson(folder: Path, line: str = "print('ran')") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "99-small.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(line, id="only")]
    nbformat.write(nb, path)
    return path


@pytest.fixture
def counted(monkeypatch, tmp_path) -> list[Path]:
    """The notebooks execute_notebook runs from here on (each really runs). The course's package, part of
    every key, is a scratch one (others may be editing devicelab/ meanwhile)."""
    package = tmp_path / "package"
    package.mkdir()
    (package / "helpers.py").write_text("X = 1\n")
    monkeypatch.setattr(execution, "PACKAGE", package)
    runs: list[Path] = []
    real = execution.execute_notebook

    def counting(path, **kwargs):
        runs.append(Path(path))
        return real(path, **kwargs)

    monkeypatch.setattr(execution, "execute_notebook", counting)
    return runs


@pytest.mark.notebook
def test_an_executed_copy_is_made_once_then_reused_until_the_notebook_changes(tmp_path, counted):
    lesson, cache = _small_lesson(tmp_path / "lesson"), tmp_path / "cache"
    first = executed_copy(lesson, gpu=False, folder=cache)
    assert first.parent == cache and first.name.startswith("99-small-") and len(counted) == 1
    assert nbformat.read(first, as_version=4).cells[0].outputs[0]["text"] == "ran\n"
    made = first.stat().st_mtime_ns
    assert executed_copy(lesson, gpu=False, folder=cache) == first and len(counted) == 1, "reused, not rerun"
    assert first.stat().st_mtime_ns == made
    assert execution_key(lesson, gpu=True, skip=cache) != execution_key(lesson, gpu=False, skip=cache)
    _small_lesson(tmp_path / "lesson", "print('changed')")
    second = executed_copy(lesson, gpu=False, folder=cache)
    assert second != first and len(counted) == 2, "a changed notebook has a new key, and runs"
    assert nbformat.read(second, as_version=4).cells[0].outputs[0]["text"] == "changed\n"
    key = second.name.removesuffix(".ipynb").split("-")[-1]
    assert execution_key(lesson, gpu=False, skip=cache) == key
    (tmp_path / "lesson" / "data.txt").write_text("what the lesson reads")
    assert execution_key(lesson, gpu=False, skip=cache) != key, "a file beside the lesson is part of its key"
    key = execution_key(lesson, gpu=False, skip=cache)
    (tmp_path / "package" / "helpers.py").write_text("X = 2\n")
    assert execution_key(lesson, gpu=False, skip=cache) != key, "so is the course's package"


def test_the_book_s_build_files_a_lesson_under_the_key_the_tests_compute():
    """The build runs in a Python of its own (`python -m book`): it must find the copies the tests made.
    (Under pytest, sys.path also holds setuptools' vendored packages, once read as installed versions.)"""
    lesson = COURSE_ROOT / LESSONS[0]
    here = execution_key(lesson, gpu=False)
    program = ("import sys; from pathlib import Path; from book.execution import execution_key; "
               "print(execution_key(Path(sys.argv[1]), gpu=False))")
    there = subprocess.run([sys.executable, "-c", program, str(lesson)], cwd=COURSE_ROOT, capture_output=True,
                           text=True, check=True, timeout=120).stdout
    assert there.strip() == here


@pytest.mark.notebook
def test_a_process_that_finds_the_lesson_executing_waits_and_reads_that_copy(tmp_path, counted):
    from filelock import FileLock

    lesson, cache = _small_lesson(tmp_path / "lesson"), tmp_path / "cache"
    cache.mkdir()
    target = cache / f"99-small-{execution_key(lesson, gpu=False, skip=cache)}.ipynb"
    found: list = []
    with FileLock(cache / "99-small.lock"):  # another process is executing it
        assert executed_copy(lesson, gpu=False, folder=cache, wait=False) is None
        waiting = threading.Thread(target=lambda: found.append(executed_copy(lesson, gpu=False,
                                                                             folder=cache)))
        waiting.start()
        time.sleep(1)
        assert waiting.is_alive() and not found, "it waits for the lock"
        nbformat.write(nbformat.v4.new_notebook(), target)  # the other process's copy
    waiting.join(60)
    assert found == [target] and counted == [], "it read the other's copy and ran nothing"


@pytest.mark.notebook
def test_a_notebook_that_fails_leaves_no_copy(tmp_path, counted):
    from nbclient.exceptions import CellExecutionError

    lesson, cache = _small_lesson(tmp_path / "lesson", "1 / 0"), tmp_path / "cache"
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        executed_copy(lesson, gpu=False, folder=cache)
    assert not list(cache.glob("*.ipynb")) and not list(cache.glob(".*"))


# --- the built site -------------------------------------------------------------------------------------


def executed_lessons() -> dict[str, Path]:
    """Each lesson's executed copy, as the book's build takes it (repository path -> copy): made here when
    missing; where a worker is executing one (tests/lessons/test_lessons.py), waiting for it."""
    copies = executed_copies(lessons(), gpu=False)
    return {path.relative_to(COURSE_ROOT).as_posix(): copy for path, copy in copies.items()}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The book, built as `make book` builds it, into a scratch folder, from the lessons' executed copies."""
    executed_lessons()
    out = tmp_path_factory.mktemp("book")
    build_book(out)
    return out / "html"


def build_book(out: Path) -> None:
    """Build the book as `make book` does, into `out`; fail with its output when it does not build."""
    done = subprocess.run([sys.executable, "-m", "book", "build", "--out", str(out)], cwd=COURSE_ROOT,
                          capture_output=True, text=True, timeout=SITE_SECONDS // 2, check=False)
    assert done.returncode == 0, f"the book did not build:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"


@pytest.mark.bench
def test_bench_the_book_builds_within_its_target(tmp_path):
    """A benchmark (`pytest -m bench -s`), not a behaviour test: prints the build time against its target, the
    lessons' executed copies made first (the test suite's lesson tests make them)."""
    executed_lessons()
    started = time.perf_counter()
    build_book(tmp_path)
    seconds = time.perf_counter() - started
    print(f"\nthe book: built in {seconds:.1f} s (target {BUILD_SECONDS} s)")
    assert seconds < BUILD_SECONDS, f"the book took {seconds:.0f} s to build"


@on_the_site
def test_every_lesson_problem_set_and_guide_is_a_page(site):
    for page in ["index.md", *NOTEBOOK_PAGES, *GUIDES, *REFERENCE]:
        assert (site / _html_name(page)).is_file(), f"{page} is missing from the book"
    assert not (site / "source").exists(), "no instructor notebook is in the book"


def _text(path: Path) -> str:
    """Return a built file's text as a reader (or a search engine) gets it: tags dropped, entities decoded."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    return html.unescape(re.sub(r"<[^>]+>", "", raw)) if path.suffix == ".html" else raw


def _hidden_lines() -> set[str]:
    """Lines of source/'s solutions and hidden tests that nothing the book is made of shows, nor the course's
    helper package, which every student installs and lessons print from (02 shows `best_device`'s source:
    three of its lines are lines of ps01's solution). Its exercises' checks and hints are not counted."""
    cells = [cell.source for nb in NOTEBOOK_PAGES
             for cell in nbformat.read(COURSE_ROOT / nb, as_version=4).cells]
    helpers = [p.read_text() for p in sorted((COURSE_ROOT / "devicelab").glob("*.py"))]
    shown = "\n".join(cells + helpers + [(COURSE_ROOT / p).read_text()
                                         for p in (*GUIDES, *REFERENCE, "README.md")])
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


@on_the_site
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


@on_the_site
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


class _BuiltCells(html.parser.HTMLParser):
    """A page's code cells as MyST-NB built them, in order: each one's output text (None: none) and images."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.cells: list[dict] = []
        self._depth = 0
        self._cell: int | None = None  # the depth of the cell's div, while inside one
        self._output: int | None = None

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "img" and self._output is not None:
            self.cells[-1]["images"] += 1
        if tag != "div":
            return
        self._depth += 1
        classes = (dict(attrs).get("class") or "").split()
        if self._cell is None and "cell" in classes:
            self._cell = self._depth
            self.cells.append({"output": None, "images": 0})
        elif self._cell is not None and self._output is None and "cell_output" in classes:
            self._output = self._depth
            self.cells[-1]["output"] = ""

    def handle_endtag(self, tag) -> None:
        if tag != "div":
            return
        if self._depth == self._output:
            self._output = None
        if self._depth == self._cell:
            self._cell = None
        self._depth -= 1

    def handle_data(self, data) -> None:
        if self._output is not None:
            self.cells[-1]["output"] += data


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _squeezed(text: str) -> str:
    return "".join(ANSI.sub("", text).split())


def _stdout(output) -> bool:
    return output.get("output_type") == "stream" and output.get("name") == "stdout"


def _shown_by(outputs: list, models: dict) -> tuple[list[str], int, int]:
    """What an executed cell's outputs put on a page: (texts, images, widgets). Read from the executed copy
    directly: stdout, displays (their HTML's text, else the plain text), errors' messages, and each widget's
    Output widgets (its own state: the models it lays out, "IPY_MODEL_<id>" children)."""
    texts, images, widgets = [], 0, 0
    merged: list = []  # consecutive stdout as one stream, as Jupyter shows it
    for output in outputs:
        if merged and _stdout(output) and _stdout(merged[-1]):
            merged[-1] = {**merged[-1], "text": merged[-1]["text"] + output["text"]}
        else:
            merged.append(output)
    for output in merged:
        data = output.get("data", {})
        if _stdout(output):
            # each line as a terminal leaves it: a progress bar's \r rewrites its line
            lines = [line.rsplit("\r", 1)[-1] for line in output["text"].replace("\r\n", "\n").split("\n")]
            texts += [line for line in lines if line.strip()]
        elif output.get("output_type") == "error":
            texts.append(f"{output['ename']}: {output['evalue']}")
        elif "image/png" in data:
            images += 1
        elif pages.WIDGET_VIEW in data:
            widgets += 1
            held, todo = [], [data[pages.WIDGET_VIEW]["model_id"]]
            while todo:
                model = models[todo.pop(0)]
                held += model["state"].get("outputs", []) if model["model_name"] == "OutputModel" else []
                todo += [c.removeprefix("IPY_MODEL_") for c in model["state"].get("children", [])]
            inner = _shown_by(held, models)
            texts, images, widgets = texts + inner[0], images + inner[1], widgets + inner[2]
        elif "text/html" in data:
            texts.append(html.unescape(re.sub(r"<[^>]+>", "", data["text/html"])))
        elif "text/plain" in data:
            texts.append(data["text/plain"])
    return texts, images, widgets


@on_the_site
def test_every_cpu_cell_shows_what_it_printed_and_drew_on_its_lesson_page(site):
    """On each lesson's page, every code cell that runs without a GPU shows what it printed or displayed when
    the lesson was executed (read from the executed copy, not from what the book made of it), each figure as
    an image; a GPU cell shows no output of its own (its recorded note, tested above, does)."""
    copies = executed_lessons()
    figures: dict[str, int] = {}
    for page in LESSONS:
        lesson = _lesson(page)
        ran = nbformat.read(copies[page], as_version=4)
        models = pages.widget_models(ran)
        by_id = {c.id: c for c in ran.cells if c.cell_type == "code"}
        shown = [c for c in lesson.cells if c.cell_type == "code" and c.source.strip() and not pages.asked(c)
                 and not {SETUP_TAG, BADGE_TAG} & set(c.metadata.get("tags", []))]  # MyST-NB skips empty ones
        parser = _BuiltCells()
        parser.feed((site / _html_name(page)).read_text(encoding="utf-8"))
        assert len(parser.cells) == len(shown), f"{page}: {len(parser.cells)} code cells, not {len(shown)}"
        printed = 0
        for cell, built in zip(shown, parser.cells, strict=True):
            where = f"{page} cell {cell.id}"
            if REQUIRES_CUDA in cell.metadata.get("tags", []):
                assert built["output"] is None, f"{where}: a GPU cell shows an output"
                continue
            texts, images, widgets = _shown_by(by_id[cell.id].outputs, models)
            if not (texts or images or widgets):
                assert built["output"] is None, f"{where}: an output it did not print"
                continue
            printed += 1
            assert built["output"] is not None, f"{where}: it printed or displayed; the page shows nothing"
            for text in texts:
                assert _squeezed(text) in _squeezed(built["output"]), f"{where}: missing {text[:80]!r}"
            assert built["images"] == images, f"{where}: {built['images']} images, {images} figures drawn"
            assert built["output"].count("interactive widget") == widgets, where
            figures[page] = figures.get(page, 0) + images
        assert printed, f"{page}: no cell's output is on the page"
    assert figures.get("notebooks/05-async-and-timing.ipynb", 0) >= 3, "05's timelines and timing chart"
    assert sum(figures.values()) >= 10, figures


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


@pytest.fixture(scope="module")
def chromium():
    """One browser for the module's page checks (a launch costs 1.5 s of CPU); each test opens a context of
    its own, with no cookies or storage of another's."""
    browser_or_skip()
    with launched_chromium() as browser:
        yield browser


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


class Visitor:
    """One page that opens the site's pages one after the other, hearing every console error, page error and
    failed request of each. (One page for all: a new page per address cost half again the CPU, 16 s of 45.)
    Each visit waits until the page's network is idle, so no request of one page (a favicon fetched after
    `load`) ends during the next and is counted against it."""

    def __init__(self, page) -> None:
        self.page, self.problems = page, []
        page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}")
                if m.type == "error" else None)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"failed: {r.url} ({r.failure})"))
        page.on("response", lambda r: self.problems.append(f"HTTP {r.status}: {r.url}")
                if r.status >= 400 else None)

    def visit(self, url: str) -> dict:
        """Open `url`; return what the page holds and its problems."""
        self.problems = []
        self.page.goto(url, wait_until="networkidle")
        return {**self.page.evaluate(PAGE_JS), "problems": self.problems}


def _repository_file(url: str, prefix: str) -> str | None:
    """Return the repository path a link to `prefix` + path names, or None for another address."""
    return urllib.parse.unquote(url[len(prefix):].split("#")[0]) if url.startswith(prefix) else None


@pytest.mark.browser
@on_the_site
def test_every_page_loads_cleanly_and_every_link_and_image_resolves(site, served, chromium):
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
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    try:
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(served)
                      else (outside.append(route.request.url), route.abort()))
        visitor = Visitor(context.new_page())
        for name in names:
            found = visitor.visit(served + name)
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
    finally:
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
@on_the_site
@pytest.mark.parametrize("width", [390, 700, 1280])
def test_the_menu_opens_and_leads_to_a_page_at_phone_tablet_and_desktop_width(site, served, width, chromium):
    """The visible menu button works at every width (pydata-sphinx-theme#2451: both themes bound only the
    hidden copy of it): below 992 px it opens the menu over the page, and a link there leads to its page;
    above, it folds the sidebar away. The contents button opens the page's contents the same way."""
    with fresh_page(chromium, width, 844) as page:
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


@pytest.mark.browser
@on_the_site
def test_search_results_quote_the_page_around_the_word(site, served, chromium):
    """Every snippet read "...Colab" or "...System Settings Light Dark" (the header's buttons and the Colab
    links were the start of each page's text): now each quotes the lesson's own words."""
    with fresh_page(chromium, 1280, 900) as page:
        page.goto(served + "search.html?q=pinned", wait_until="load")
        page.wait_for_function("document.querySelectorAll('#search-results li p.context').length >= 3",
                               timeout=60_000)
        snippets = page.locator("#search-results li p.context").all_inner_texts()[:3]
    for text in snippets:
        assert "pinned" in text.lower() and "System Settings" not in text and "Colab" not in text[:40], text


@pytest.mark.browser
@on_the_site
@pytest.mark.parametrize("width", [390, 1280])
def test_the_search_page_shows_one_search_box(site, served, width, chromium):
    """The search page has its own box; the header's and the sidebar's search buttons made two more."""
    with fresh_page(chromium, width, 900) as page:
        page.goto(served + "search.html?q=pinned", wait_until="load")
        boxes = page.locator("input[type=search]:visible, .search-button-field:visible").count()
        elsewhere = page.context.new_page()
        elsewhere.goto(served + "notebooks/03-moving-tensors.html", wait_until="load")
        others = elsewhere.locator(".search-button-field:visible, .search-button:visible").count()
    assert boxes == 1, f"{boxes} search boxes on the search page at {width} px"
    assert others >= 1, "the other pages keep their search button"


@pytest.mark.browser
@on_the_site
def test_no_page_is_wider_than_a_phone(site, served, chromium):
    """At 390 px nothing pushes a page sideways: long inline code wraps, wide tables scroll in their own box
    (the cheat sheet's ran off the screen)."""
    pages = ["docs/cheatsheet.html", "docs/facts.html", "docs/students.html", "docs/hub.html",
             "notebooks/05-async-and-timing.html",
             "release/ps01-tensors-and-devices/ps01-tensors-and-devices.html"]
    with fresh_page(chromium, 390, 844) as page:
        wide = {}
        for name in pages:
            page.goto(served + name, wait_until="load")
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > 390:
                wide[name] = width
    assert not wide, wide


def test_the_recorded_figures_list_names_real_images():
    for entry in json.loads(FIGURES.read_text()):
        assert (COURSE_ROOT / entry["image"]).is_file(), entry["image"]
