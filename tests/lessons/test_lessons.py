"""Every lesson runs top to bottom on this machine; GPU-only cells are marked so they can be skipped."""

import functools
import html
import importlib
import math
import re
import warnings
from pathlib import Path

import nbformat
import pytest
import torch

from autograder import COURSE_ROOT
from autograder.colab_cells import SETUP_TAG
from autograder.course import lessons
from book.execution import REQUIRES_CUDA, cuda_present, executed_copy
from devicelab.predict import ASK_CELL

LESSONS = lessons()
EXPECTED = ["00-start-here", "01-tensors", "02-devices"]


def test_lessons_exist_in_reading_order():
    names = [p.stem for p in LESSONS]
    assert names[: len(EXPECTED)] == EXPECTED
    assert names == sorted(names)


@functools.cache
def executed(path: Path):
    """Return the lesson as it runs here, outputs included: run once, read by every test of this file (they
    all run in one worker, `--dist loadfile`). The run is shared with the book (tests/course/test_book.py),
    and reused until the lesson or what it runs with changes (executed_copy)."""
    return nbformat.read(executed_copy(path, gpu=cuda_present()), as_version=4)


@pytest.mark.notebook
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_top_to_bottom(path):
    errors = [c for c in executed(path).cells if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.get("outputs", []))
              and "raises-exception" not in c.metadata.get("tags", [])]
    assert not errors


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_gpu_cells_carry_both_the_tag_and_the_magic(path):
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        tagged = REQUIRES_CUDA in cell.metadata.get("tags", [])
        magic = cell.cell_type == "code" and cell.source.lstrip().startswith("%%requires_cuda")
        assert tagged == magic, (f"{path.name} cell {index}: tag `requires-cuda` and `%%requires_cuda` go "
                                 "together")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_opens_with_imports_and_never_asserts_a_gpu(path):
    cells = nbformat.read(path, as_version=4).cells
    first_code = next(c for c in cells if c.cell_type == "code"
                      and SETUP_TAG not in c.metadata.get("tags", []))
    assert "import" in first_code.source, "the first code cell after the Colab setup cell holds the imports"
    text = "\n".join(c.source for c in cells)
    assert "assert torch.cuda.is_available()" not in text



def markdown_headings(path) -> list[str]:
    """Return every `#`-heading of a lesson's markdown cells, in order (headings may sit inside a cell)."""
    cells = nbformat.read(path, as_version=4).cells
    return [line for c in cells if c.cell_type == "markdown" for line in c.source.splitlines()
            if line.startswith("#")]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_says_how_long_it_takes_and_ends_with_next(path):
    cells = nbformat.read(path, as_version=4).cells
    opening = next(c.source for c in cells if c.cell_type == "markdown" and c.source.startswith("# "))
    assert re.search(r"\*About \d+ minutes",
                     opening), f"{path.name}: the title cell says how long the lesson takes"
    headings = markdown_headings(path)
    assert headings[-1] == "## Next", f"{path.name}: the last section is '## Next'"
    if "## Going further (optional)" in headings:
        assert headings.index("## Going further (optional)") < headings.index("## Next")
        assert "optional" in opening, (f"{path.name}: the title cell says the Going further section is "
                                       "optional")


MAX_WORDS = 200  # a markdown cell longer is a wall of text: split it, cut it, or move evidence to the docs


def words(text: str) -> int:
    """Return the words of a markdown text: tokens with a letter or digit (a table's pipes are not words)."""
    return sum(1 for token in text.split() if re.search(r"\w", token))


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_markdown_cell_is_a_wall_of_text(path):
    """Recorded GPU outputs are the recorder's to write, so only the lesson's own prose is counted."""
    cells = nbformat.read(path, as_version=4).cells
    walls = [f"cell {index} ({cell.get('id')}): {n} words" for index, cell in enumerate(cells)
             if cell.cell_type == "markdown" and "gpu-output" not in cell.metadata.get("tags", [])
             and (n := words(cell.source)) > MAX_WORDS]
    assert not walls, f"{path.name}: markdown cells over {MAX_WORDS} words: {walls}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_numbered_sections_run_in_order_and_references_to_them_exist(path):
    numbers = [int(m.group(1)) for h in markdown_headings(path) if (m := re.match(r"## (\d+)\. ", h))]
    assert numbers == list(range(1, len(numbers) + 1)), f"{path.name}: sections numbered {numbers}"
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    cited = {int(n) for n in re.findall(r"\bsections? (\d+)\b", text)}
    assert cited <= set(numbers), (f"{path.name}: refers to section(s) {sorted(cited - set(numbers))}, which "
                                   "it lacks")


PROMPT = "**Predict, then run:**"
ASK = ASK_CELL  # an `ask("name")` cell
def _lesson_predictions(cells) -> dict:
    """Return the PREDICTIONS of the lesson module the notebook imports `ask` from ({} when it asks none)."""
    source = "\n".join(c.source for c in cells if c.cell_type == "code")
    match = re.search(r"from (devicelab\.exercises\.lesson\d+) import [^\n]*\bask\b", source)
    return importlib.import_module(match.group(1)).PREDICTIONS if match else {}


ASKS_TO_PREDICT = re.compile(  # "Predict ...", "a prediction first", "Guess ...", "What do you expect ..."
    r"\bpredict(ion|ions)?\b|(^|[.:!?>*]\s*)guess\b|what do you (expect|think)|\bthink (first|before)\b",
    re.IGNORECASE | re.MULTILINE)
# "1. Predict ..., then check": the student's own experiment, no cell answers it
PRACTICE_ITEM = re.compile(r"^\s*\d+\.\s")
FOLDED = re.compile(r"<details>.*?</details>", re.DOTALL)  # a folded answer: opened after a guess


def _prediction_prompts(cells) -> list[tuple[int, str]]:
    """Return (cell index, paragraph) for every paragraph of the lesson's text that asks the student to
    predict.

    The title cell's outline ("each question comes with a prediction") and numbered practice items, which the
    student answers with their own code, ask nothing of the cell that follows.
    """
    prompts = []
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown" or cell.source.startswith("# "):
            continue
        for paragraph in re.split(r"\n\s*\n", FOLDED.sub("", cell.source).strip()):
            if ASKS_TO_PREDICT.search(paragraph) and not PRACTICE_ITEM.match(paragraph):
                prompts.append((index, paragraph))
    return prompts


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_prediction_is_asked_before_anything_answers_it(path):
    """Every request to predict ends its markdown cell and is followed at once by an `ask` cell, then the
    answer.
    """
    cells = nbformat.read(path, as_version=4).cells
    prompts = _prediction_prompts(cells)
    assert all(index in {i for i, _ in prompts} for index, c in enumerate(cells)
               if c.cell_type == "markdown"
               and PROMPT in c.source), f"{path.name}: a prompt was not recognised"
    for index, paragraph in prompts:
        where = f"{path.name} cell {index} ({paragraph[:50]!r}...)"
        last = re.split(r"\n\s*\n", FOLDED.sub("", cells[index].source).strip())[-1]
        assert paragraph == last, f"{where}: text follows the prediction"
        following = cells[index + 1] if index + 1 < len(cells) else None
        assert following is not None and following.cell_type == "code" and ASK.match(following.source), (
            f"{where}: a request to predict is followed at once by its `ask(...)` cell (devicelab.predict), "
            "so that the answer shows only after the student has committed a guess")
        answering = index + 2
        while answering < len(cells) and cells[answering].cell_type == "code" and ASK.match(
            cells[answering].source):
            answering += 1  # several predictions about one cell are asked one after the other
        assert answering < len(cells) and cells[answering].cell_type == "code", (
            f"{where}: the answering cell follows the ask() cell(s) at once")


# ---- A prediction is open: nothing a student has read before it answers it ------------------------------
#
# Each `Prediction` lists its `giveaways`: phrases that would answer it (" ... " in a phrase stands for a
# gap of a few words). Before an `ask` a student has read: the cells above it and the reveals of the
# predictions asked there; every earlier lesson with its reveals; the problem sets that an earlier lesson's
# "## Next" hands out; a READ_LAST page that any of those names; and the front pages, README.md and
# docs/students.md, with every lesson-map row in docs/. A giveaway found there fails the test, and so does a
# run of six words of the reveal's reason (three of them more than filler): the explanation was given
# already, so the question is recall.

FRONT_PAGES = ("README.md", "docs/students.md")  # read whole, before lesson 00
READ_LAST = {  # pages that hold the answers on purpose, read from the first notebook cell that names them
    "docs/cheatsheet.md": re.compile(r"cheatsheet\.md|cheat sheet", re.IGNORECASE),  # the course on one page
}
# A link from a lesson into a section of a guide ("../docs/facts.md#lesson-07-details"): a student who
# follows it before the question reads that section.
LINKED_SECTION = re.compile(r"\]\((?:\.\./)*(?P<page>(?:docs/)?[\w.-]+\.md)#(?P<anchor>[\w-]+)\)")
SHOWN_SVG = re.compile(r"!\[[^\]]*\]\((?P<src>[^)\s]+\.svg)\)")  # a drawn diagram: its labels are read too
LESSON_MAP_ROW = re.compile(r"^\s*(\||[-*] ).*\bnotebooks/\d\d-")  # a table row or list item naming a lesson
GAP = " ... "
NOT_READ = {"colab-badge", "colab-setup"}  # tags of generated cells that say nothing about the lesson
REASON_RUN = 6  # words of a reason that, read before the question, give its explanation away
FILLER = frozenset({  # words that carry no answer by themselves
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "do", "does", "for", "from", "has", "have", "in",
    "is", "it", "its", "no", "not", "of", "on", "once", "only", "or", "so", "than", "that", "the", "then",
    "there", "this", "to", "was", "we", "what", "when", "which", "while", "with", "you", "your",
})


def _plain(text: str) -> str:
    """Return text as a reader takes it in: lower case, one line, without block quotes, ticks or emphasis."""
    text = re.sub(r"^[ \t]*>[ \t]?", "", text, flags=re.MULTILINE)
    return re.sub(r"\s+", " ", re.sub(r"[`*]", "", text)).strip().lower()


def _pattern(phrase: str) -> re.Pattern:
    """Return the search for a giveaway: its words in order, a gap of up to 80 characters at each " ... "."""
    body = r".{0,80}?".join(re.escape(_plain(part)) for part in phrase.split(GAP))
    return re.compile((r"\b" if re.match(r"\w", body) else "") + body)


def _giveaways(prediction) -> tuple[str, ...]:
    """Return what would answer `prediction`: its giveaways, and its answer when that is a phrase itself."""
    return (*prediction.giveaways, *((prediction.answer,) if len(_plain(prediction.answer)) > 12 else ()))


def _reason_runs(prediction) -> list[str]:
    """Return each run of REASON_RUN words of the prediction's reason in which three or more aren't filler."""
    words = _plain(prediction.reason).split()
    runs = (words[i: i + REASON_RUN] for i in range(len(words) - REASON_RUN + 1))
    return [" ".join(run) for run in runs if sum(w.strip(",.:;()") not in FILLER for w in run) >= 3]


def _anchor(heading: str) -> str:
    """Return the anchor GitHub (and the book, myst_heading_anchors) gives a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _linked_section(page: str, anchor: str) -> str:
    """Return the section of `page` whose heading has `anchor`, down to the next heading as high (or "")."""
    path = COURSE_ROOT / (page if page.startswith("docs/") else f"docs/{page}")
    if not path.is_file():
        return ""
    lines, found, level = path.read_text().splitlines(), [], None
    for line in lines:
        heading = re.match(r"^(#+)\s", line)
        if heading and level is not None and len(heading.group(1)) <= level:
            break
        if heading and level is None and _anchor(line) == anchor:
            level = len(heading.group(1))
        if level is not None:
            found.append(line)
    return "\n".join(found)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_link_into_a_guide_names_a_section_it_has(path):
    """A link lands where it says (and the check above reads exactly the section a student would)."""
    cells = nbformat.read(path, as_version=4).cells
    links = [link for c in cells for link in LINKED_SECTION.finditer(c.source)]
    assert [link.group(0) for link in links if not _linked_section(link["page"], link["anchor"])] == []


def _lesson_module_name(cells) -> str:
    source = "\n".join(c.source for c in cells if c.cell_type == "code")
    match = re.search(r"from devicelab\.exercises\.(lesson\d+) import [^\n]*\bask\b", source)
    return match.group(1) if match else "?"


def _output_text(cell) -> str:
    """Return what a code cell's outputs show as text: printed streams, results, HTML without its tags."""
    shown = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            shown.append(output.get("text", ""))
        data = output.get("data", {})
        if "text/html" in data:
            shown.append(html.unescape(re.sub(r"<[^>]+>", " ", "".join(data["text/html"]))))
        elif "text/markdown" in data or "text/plain" in data:
            shown.append("".join(data.get("text/markdown", data.get("text/plain", ""))))
    return "\n".join(shown)


def _recorded_answers(cells, index: int) -> list[tuple[int, str]]:
    """Return (cell index, note) for each recorded GPU output of the cell that answers the ask at `index`
    that is open on screen (a note that answers a prediction is folded in a `<details>`)."""
    answering = index
    while answering < len(cells) and cells[answering].cell_type == "code" and ASK.match(
            cells[answering].source):
        answering += 1
    note = answering + 1
    if note < len(cells) and "gpu-output" in cells[note].metadata.get("tags", []) and not cells[
            note].source.startswith("<details>"):
        return [(note, cells[note].source)]
    return []


def _notebook_texts(path, upto: int | None = None, outputs: bool = False) -> list[tuple[str, str]]:
    """Return (where, text) for what a student reads in a notebook up to cell `upto`: its cells, the reveal of
    each prediction it asks, the READ_LAST pages it names, what the screen shows under the cell that answers
    the ask at `upto` and, with `outputs`, what its cells print when run here."""
    cells = nbformat.read(path, as_version=4).cells
    predictions, module = _lesson_predictions(cells), _lesson_module_name(cells)
    printed = {c.get("id"): _output_text(c) for c in executed(path).cells} if outputs else {}
    texts = []
    for index, cell in enumerate(cells[:upto]):
        if NOT_READ & set(cell.metadata.get("tags", [])):
            continue
        if cell.cell_type == "code" and (match := ASK.match(cell.source)):
            if (name := match.group("name")) in predictions:
                p = predictions[name]
                texts.append((f"{module} ask({name!r})'s reveal",
                              _plain(f"{p.question} {p.answer}. {p.reason}")))
            continue
        where = f"{path.parent.name}/{path.name} cell {index} ({cell.get('id')})"
        texts.append((where, _plain(cell.source)))
        if printed.get(cell.get("id")):
            texts.append((f"{where}'s output", _plain(printed[cell.get("id")])))
        for image in SHOWN_SVG.finditer(cell.source):
            if (svg := (path.parent / image["src"]).resolve()).is_file():
                labels = re.findall(r"<text\b[^>]*>(.*?)</text>", svg.read_text(), flags=re.DOTALL)
                texts.append((f"{image['src']}'s labels (shown in {where})",
                              _plain(html.unescape(" ".join(re.sub(r"<[^>]+>", "", t) for t in labels)))))
        for link in LINKED_SECTION.finditer(cell.source):
            if section := _linked_section(link["page"], link["anchor"]):
                texts.append((f"{link['page']}#{link['anchor']} (linked from {where})", _plain(section)))
        for page, named in READ_LAST.items():
            if named.search(cell.source):
                texts += [(f"{page} (named in {path.name} cell {index})", _plain(paragraph))
                          for paragraph in re.split(r"\n\s*\n", (COURSE_ROOT / page).read_text())]
    if upto is not None:
        where = f"{path.parent.name}/{path.name} cell {{}}, the recorded output open under the answering cell"
        texts += [(where.format(i), _plain(note)) for i, note in _recorded_answers(cells, upto)]
    return texts


def _problem_sets_after(path) -> list[Path]:
    """Return the release notebooks of the problem sets a lesson's "## Next" sends the student to."""
    cells = nbformat.read(path, as_version=4).cells
    following = next((c.source for c in cells if c.cell_type == "markdown"
                      and c.source.startswith("## Next")), "")
    return [COURSE_ROOT / "release" / ps / f"{ps}.ipynb"
            for ps in dict.fromkeys(re.findall(r"\bps\d\d-[a-z0-9-]+", following))]


def _read_before_lesson(path, outputs: bool = False) -> list[tuple[str, str]]:
    """Return (where, text) for all a student has read before opening lesson `path`, front pages aside (with
    `outputs`, what the earlier lessons print too)."""
    texts = []
    for earlier in LESSONS[: LESSONS.index(path)]:
        texts += _notebook_texts(earlier, outputs=outputs)
        for problem_set in _problem_sets_after(earlier):
            texts += _notebook_texts(problem_set)
    return texts


def _found(name: str, prediction, texts) -> list[str]:
    """Return a line for each giveaway, or run of its reason, of `prediction` found in `texts`, with where."""
    lines = []
    searches = [(phrase, _pattern(phrase)) for phrase in _giveaways(prediction)]
    searches += [(f"the reason's {run!r}", re.compile(re.escape(run))) for run in _reason_runs(prediction)]
    choices = [_plain(c) for c in prediction.choices]
    for phrase, pattern in searches:
        for where, text in texts:
            if phrase == prediction.answer and choices and all(c in text for c in choices):
                continue  # a prompt that lists every choice names the answer too, and gives nothing away
            if match := pattern.search(text):
                excerpt = text[max(0, match.start() - 50): match.end() + 30]
                lines.append(f"ask({name!r}): {phrase!r} in {where}: ...{excerpt}...")
    return lines


def _asked(cells) -> list[tuple[int, str]]:
    return [(i, m.group("name")) for i, c in enumerate(cells)
            if c.cell_type == "code" and (m := ASK.match(c.source))]


def test_the_check_finds_a_giveaway_a_gapped_one_an_answer_and_a_reason_wherever_they_were_read():
    from devicelab.predict import Prediction

    planted = Prediction(question="Is the copy done when the host refills the buffer?",
                         choices=("yes", "no"), answer="no",
                         giveaways=("must not overwrite", "refill ... after an event"),
                         reason="A copy from pinned memory only queues, and it waits for the kernel first.")
    texts = [("an earlier cell", _plain("A loader **must not\noverwrite** the buffer")),
             ("a lesson-map row", _plain("| [07](notebooks/07-x.ipynb) | refill it only after an event |")),
             ("an earlier reveal", _plain("Because a copy from pinned memory only queues, and it waits for")),
             ("a prompt listing the choices", _plain("Done: yes or no?")),
             ("an innocent cell", _plain("The host refills the buffer."))]
    found = [line.split(" in ")[1].split(":")[0] for line in _found("planted", planted, texts)]
    assert list(dict.fromkeys(found)) == ["an earlier cell", "a lesson-map row", "an earlier reveal"]


def test_the_check_reads_the_labels_of_a_diagram_a_lesson_shows(tmp_path):
    (tmp_path / "d.svg").write_text('<svg><text x="1">copies and kernels</text><g><text>overlap only on '
                                    '<tspan>two streams</tspan></text></g></svg>')
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("![a diagram of the machine](d.svg)")]
    nbformat.write(nb, tmp_path / "x.ipynb")
    read = _notebook_texts(tmp_path / "x.ipynb")
    shown = [text for where, text in read if where.startswith("d.svg's labels")]
    assert shown == ["copies and kernels overlap only on two streams"]


def test_the_check_reads_printed_outputs_and_a_recorded_answer_left_open_on_screen():
    from devicelab.predict import Prediction

    printed = nbformat.v4.new_code_cell("profile()")
    printed.outputs = [nbformat.v4.new_output("stream", name="stdout", text="launch queue depth 1024\n"),
                       nbformat.v4.new_output("display_data", data={
                           "text/html": "<p>fitted to the <b>measured</b> half-peak (~31-36&nbsp;KiB)</p>",
                           "text/plain": "<Figure>"})]
    shown = _plain(_output_text(printed))
    assert "launch queue depth 1024" in shown and "fitted to the measured half-peak (~31-36 kib)" in shown
    ask = nbformat.v4.new_code_cell('ask("launch")')
    answering = nbformat.v4.new_code_cell("%%requires_cuda\nrun()")
    note = nbformat.v4.new_markdown_cell("**Output recorded on a GPU** (H100, torch 2.11, 2026-11-27):\n\n"
                                         "```text\neager: 1474 us per step\n```")
    note.metadata["tags"] = ["gpu-output"]
    cells = [nbformat.v4.new_markdown_cell("> **Predict, then run:** how long?"), ask, answering, note]
    assert _recorded_answers(cells, 1) == [(3, note.source)], "open under the answering cell: on screen"
    folded = nbformat.v4.new_markdown_cell(f"<details><summary>Output</summary>\n\n{note.source}\n</details>")
    folded.metadata["tags"] = ["gpu-output"]
    assert _recorded_answers([*cells[:3], folded], 1) == [], "folded: open only once a guess is in"
    planted = Prediction(question="How long does a step take?", choices=("150 us", "500 us", "1500 us"),
                         answer="1500 us", reason="PyTorch's own launch overhead.",
                         giveaways=("1474 us", "queue depth"))
    texts = [("an output", shown), ("the open note", _plain(note.source))]
    assert {line.split(" in ")[1].split(":")[0] for line in _found("launch", planted, texts)} == {
        "an output", "the open note"}


def test_a_lesson_is_read_after_the_earlier_lessons_their_reveals_problem_sets_and_linked_pages():
    read = [where for where, _ in _read_before_lesson(next(p for p in LESSONS if p.stem.startswith("07")))]
    assert "lesson05 ask('stale-read')'s reveal" in read
    assert any(w.startswith("notebooks/06-pinned-memory-and-dataloader.ipynb cell") for w in read)
    assert any(w.startswith("ps05-pinned-memory/ps05-pinned-memory.ipynb cell") for w in read)
    assert not any(w.startswith("notebooks/07") or "ps06" in w for w in read)
    assert not any(w.startswith("docs/cheatsheet.md") for w in read), "nothing before 07 names it"
    map_rows = [text for _, text in _front_page_texts("README.md") if "notebooks/01-" in text]
    assert map_rows, "README.md's lesson map is read row by row"


CATCH_ALL = re.compile(r"^\s*(something else|none of (these|them|the above)|other|it depends)\b",
                       re.IGNORECASE)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_prediction_is_asked_once_and_says_what_would_give_it_away(path):
    cells = nbformat.read(path, as_version=4).cells
    predictions, asked = _lesson_predictions(cells), _asked(cells)
    assert [n for _, n in asked if n not in predictions] == [], f"{path.name} asks what its module lacks"
    assert sorted(n for _, n in asked) == sorted(predictions), f"{path.name}: every prediction is asked once"
    for name, prediction in predictions.items():
        assert len(prediction.giveaways) >= 2, (f"{path.name} ask({name!r}): list in `giveaways` the phrases "
                                                "that would answer it, so that the tests can look for them")
        wrong = " ".join(c for c in prediction.choices if c != prediction.answer)
        own = _plain(f"{prediction.question} {wrong}")
        assert not [g for g in prediction.giveaways if _pattern(g).search(own)], (
            f"{path.name} ask({name!r}): the question or a wrong choice holds one of its giveaways")
        assert not prediction.choices or len(prediction.choices) >= 3, (
            f"{path.name} ask({name!r}): two choices are a coin toss (and the question often names the "
            "right one); offer three or more plausible ones")
        assert not CATCH_ALL.search(prediction.answer), (
            f"{path.name} ask({name!r}): the answer {prediction.answer!r} is a catch-all, which no student "
            "can predict; make the right answer a definite one")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_nothing_read_before_an_ask_answers_it(path):
    """No giveaway of a prediction, nor its reason, is in the cells above its `ask`, the reveals before it, an
    earlier lesson or an earlier problem set (the front pages have a test of their own)."""
    cells = nbformat.read(path, as_version=4).cells
    predictions, before = _lesson_predictions(cells), _read_before_lesson(path)
    spoilers = [line for index, name in _asked(cells)
                for line in _found(name, predictions[name], before + _notebook_texts(path, upto=index))]
    assert not spoilers, (f"{path.name}: these predictions are answered before they are asked (move the "
                          "sentence after the answering cell, or ask something still open):\n"
                          + "\n".join(spoilers))


@pytest.mark.notebook
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_output_shown_before_an_ask_answers_it(path):
    """What the cells above an `ask` print when run, and what every earlier lesson printed, answer nothing
    either (a printed profile, a fitted figure, an environment report)."""
    cells = nbformat.read(path, as_version=4).cells
    predictions, before = _lesson_predictions(cells), _read_before_lesson(path, outputs=True)
    spoilers = [line for index, name in _asked(cells)
                for line in _found(name, predictions[name],
                                   before + _notebook_texts(path, index, outputs=True))
                if "'s output:" in line]
    assert not spoilers, (f"{path.name}: these predictions are answered by an output shown before they are "
                          "asked:\n" + "\n".join(spoilers))


def _front_page_texts(page: str) -> list[tuple[str, str]]:
    """Return (where, text) for a front page's paragraphs and table rows, or a docs page's lesson-map rows."""
    lines = (COURSE_ROOT / page).read_text().splitlines()
    if page not in FRONT_PAGES:
        return [(f"{page} line {n}", _plain(line)) for n, line in enumerate(lines, 1)
                if LESSON_MAP_ROW.match(line)]
    texts, block = [], []
    for number, line in enumerate([*lines, ""], start=1):
        if line.strip() and not line.lstrip().startswith("|"):
            block.append((number, line))
            continue
        if block:
            texts.append((f"{page} line {block[0][0]}", _plain("\n".join(text for _, text in block))))
            block = []
        if line.strip():
            texts.append((f"{page} line {number}", _plain(line)))
    return texts


def _pages() -> list[str]:
    docs = [f"docs/{p.name}" for p in sorted((COURSE_ROOT / "docs").glob("*.md"))]
    return [p for p in dict.fromkeys((*FRONT_PAGES, *docs))
            if (COURSE_ROOT / p).exists() and p not in READ_LAST]


@pytest.mark.parametrize("page", _pages())
def test_the_front_pages_and_the_lesson_map_answer_no_prediction(page):
    """README.md and docs/students.md are read before lesson 00, and so is a lesson map wherever it sits."""
    texts = _front_page_texts(page)
    spoilers = []
    for path in LESSONS:
        cells = nbformat.read(path, as_version=4).cells
        spoilers += [f"{path.stem} {line}" for name, prediction in _lesson_predictions(cells).items()
                     for line in _found(name, prediction, texts)]
    assert not spoilers, (f"{page} answers predictions before the lessons ask them; say what a lesson "
                          "teaches, not what it finds:\n" + "\n".join(spoilers))


SIMULATED_CALLS = {  # a call on the course's simulated GPU -> ways to write the PyTorch call it stands for
    r"\bgpu\.copy\(": (".to(device", "copy_(", ".to(\"cuda\""),
    r"\bgpu\.to_cpu\(": (".to(\"cpu\"", ".cpu()", "copy_("),
    r"\b(gpu|eager)\.launch\(": ("@ ", "torch.", "model(", ".add_(", "backward"),
    r"\bgpu\.event\(": ("torch.cuda.Event(",),
    r"\bgpu\.host_write\(": ("copy_(",),
    r"\bnew_stream\(": ("torch.cuda.Stream(",),
    r"\bgpu\.stream\(": ("torch.cuda.stream(",),
    r"\bgpu\.current_stream\.wait_stream\(": ("torch.cuda.current_stream().wait_stream(",),
    r"\b(gpu|fresh|eager|graph)\.synchronize\(": ("torch.cuda.synchronize()",),
    r"\bgpu\.item\(": (".item()",),
    r"\blaunch_graph\(": ("torch.cuda.CUDAGraph(", "torch.cuda.graph(", ".replay()"),
    r"\bSimProfiler\(": ("torch.profiler.profile(",),
    r"\bprofile_script\(": ("torch.profiler.profile(", "torch.cuda.synchronize()"),
    r"\bexample_step\(": ("torch.profiler.profile(",),
}
WITH_THEIR_CALLS = [p for p in LESSONS if p.stem[:2] in ("07", "08")]


@pytest.mark.parametrize("path", WITH_THEIR_CALLS, ids=lambda p: p.stem)
def test_every_simulated_figure_sits_next_to_the_pytorch_call_it_stands_for(path):
    """A cell that drives the simulated GPU shows, in itself or the markdown beside it, the real PyTorch call.
    """
    cells = nbformat.read(path, as_version=4).cells
    missing = []
    for index, cell in enumerate(cells):
        if cell.cell_type != "code" or REQUIRES_CUDA in cell.metadata.get("tags", []):
            continue
        before = next((c.source for c in reversed(cells[:index]) if c.cell_type == "markdown"), "")
        after = cells[index + 1].source if index + 1 < len(cells) and cells[
            index + 1].cell_type == "markdown" else ""
        beside = f"{before}\n{cell.source}\n{after}"
        missing += [f"cell {index} ({cell.get('id')}): `{simulated}` without one of {real}"
                    for simulated, real in SIMULATED_CALLS.items()
                    if re.search(simulated, cell.source) and not any(spelling in beside for spelling in real)]
    assert not missing, (f"{path.name}: these cells drive the simulated GPU, but neither the cell nor the "
                         "markdown beside it shows the PyTorch call each stands for:\n" + "\n".join(missing))


def _numpy_dtype() -> str:
    import numpy as np

    from_list, from_numpy = (str(t.dtype).removeprefix("torch.") for t in
                             (torch.tensor([1.0, 2.0]), torch.tensor(np.array([1.0, 2.0]))))
    if from_list == from_numpy:
        return f"yes, both {from_list}"
    return f"no: {from_list} from the list, {from_numpy} from NumPy"


def _slice_storage() -> str:
    small = torch.zeros(1_000_000)[:2]
    return f"{small.nbytes:,} and {small.untyped_storage().nbytes():,}"


def _current_accelerator() -> str:
    if torch.cuda.is_available() or torch.version.cuda is None:
        pytest.skip("shown only by a CUDA build of PyTorch on a machine without a usable GPU")
    assert torch.accelerator.current_accelerator(check_available=True) is None, "the reason says None"
    device = torch.accelerator.current_accelerator() or torch.device("cpu")
    try:
        torch.ones(2, device=device)
    except RuntimeError:
        return f"`device` is `{device.type}`, and making the tensor raises an error"
    return f"`device` is `{device.type}`, and the tensor is made there"


def _same_object() -> str:
    x = torch.arange(6.0).reshape(2, 3)
    same = [x.cpu() is x, x.to("cpu") is x, x.to(torch.float32) is x]
    return "all three" if all(same) else f"only {same}"


def _moved_grad() -> str:
    w = torch.randn(3, requires_grad=True)
    w64 = w.to(torch.float64)
    (w64 ** 2).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return "`None`" if w64.grad is None else repr(w64.grad)


def _numpy_shares() -> str:
    t = torch.zeros(3)
    t.detach().cpu().numpy()[1] = 7.0
    return "yes" if t[1].item() == 7.0 else "no"


def _half_peak() -> str:
    from devicelab.simgpu import T4_PCIE3

    # bytes at which latency and transfer take as long
    half = T4_PCIE3.h2d_pinned_Bps * T4_PCIE3.copy_latency_s
    sizes = {"4 KiB": 4 * 2**10, "32 KiB": 32 * 2**10, "1 MiB": 2**20, "16 MiB": 16 * 2**20}
    return min(sizes, key=lambda label: abs(math.log(sizes[label] / half)))


def _loader_device() -> str:
    from torch.utils.data import DataLoader, TensorDataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, _ = next(iter(DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4,
                                    pin_memory=True)))
    return "on the CPU" if x.device.type == "cpu" else f"on {x.device}"


def _one_stream_overlap() -> str:
    from devicelab.overlap import compare

    same_stream = next(r for r in compare(steps=4) if "same stream" in r.label)
    return "no" if same_stream.overlap_s() == 0 else f"{same_stream.overlap_s()} s"


def _eight_workers() -> str:
    from devicelab.exercises.lesson06 import batches_per_second

    # the model the lesson draws its measurement against: 2 cores, a batch of the measured cost
    two, eight = (batches_per_second(workers, cores=2, batch_s=0.035) for workers in (2, 8))
    return "about as many" if math.isclose(eight, two) else f"{eight / two:.1f} times as many"


def _refill() -> str:
    from devicelab.simgpu import SimulatedGPU

    gpu = SimulatedGPU(initialized=True)
    staging = gpu.host_buffer(64 * 2**20, pinned=True, data="batch 1")
    gpu.launch(0.004)
    on_gpu = gpu.copy(staging, non_blocking=True)
    gpu.host_write(staging, "batch 2")
    got = gpu.cpu(on_gpu).read()
    return "batch 2 (or part of it), and nothing raises" if got == "batch 2" else repr(got)


def _wait_stream() -> str:
    from devicelab.simgpu import SimulatedGPU

    gpu = SimulatedGPU(initialized=True)
    with gpu.stream(gpu.new_stream("copies")):
        gpu.copy(16 * 2**20, "h2d", pinned=True, non_blocking=True)
    kernel = gpu.launch(0.001)
    copy_end = next(r.end for r in gpu.timeline if r.engine == "copy")
    return ("right away, while the copy is still running" if kernel.ready_at - 0.001 < copy_end
            else "after the copy has landed")


def _pytorch_launch() -> str:
    cells = nbformat.read(next(p for p in LESSONS if p.stem.startswith("07")), as_version=4).cells
    note = next(c.source for c in cells if c.get("id") == "launch-bound-gpu-gpu-output")
    eager = float(re.search(r"eager: (\d+) us per step", note).group(1))
    return "about 1500 us" if 1000 <= eager <= 2200 else f"{eager:.0f} us"


ANSWERS_HERE = {  # each prediction of lessons 01-03, 06 and 07, answered by running it or by its recording
    "lesson01": {
        "numpy-dtype": _numpy_dtype,
        "slice-storage": _slice_storage,
    },
    "lesson02": {
        "cuda1-label": lambda: "yes" if torch.device("cuda:1").index == 1 else "no",
        "current-accelerator": _current_accelerator,
    },
    "lesson03": {"same-object": _same_object, "moved-grad": _moved_grad, "numpy-shares": _numpy_shares},
    "lesson06": {"half-peak": _half_peak, "loader-device": _loader_device,
                 "one-stream-overlap": _one_stream_overlap, "eight-workers": _eight_workers},
    "lesson07": {"refill": _refill, "wait-stream": _wait_stream, "pytorch-launch": _pytorch_launch},
}


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, names in ANSWERS_HERE.items() for n in names],
                         ids=lambda v: v)
def test_a_predictions_answer_is_what_running_it_shows(module, name):
    predictions = importlib.import_module(f"devicelab.exercises.{module}").PREDICTIONS
    assert set(predictions) == set(ANSWERS_HERE[module]), f"{module}: every prediction is checked here"
    assert ANSWERS_HERE[module][name]() == predictions[name].answer, (f"{module} {name}: the answer is not "
                                                                      "what runs")
