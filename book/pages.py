"""Each page of the book, made from one file of the course: pure functions on text and notebooks.

A lesson page is its notebook with these changes, none of which runs anything (the book's build runs each
lesson on a CPU beforehand, `book.execution.executed_copy`, and hands the executed copy in):

- every cell that runs without a GPU gets its outputs from that copy, matched by cell id: what it printed
  (stdout; stderr holds PyTorch's C++ logs of the building machine, and the lessons print what they teach),
  its tables and figures, and an error's one-line message (cells tagged `raises-exception` fail on purpose).
  A widget has no state in a static page: it leaves a line saying the notebook shows one, and what its
  Output widgets displayed when it started (the chart it draws first);
- the note under a `requires-cuda` cell (written by `make gpu-record`) becomes a block titled with where the
  output was recorded: the GPU, the torch version and the date (those cells keep their code only: the copy,
  run without a GPU, lacks them);
- an `ask("name")` cell becomes the question, its choices, and the answer and reason folded under them, read
  from the lesson's `PREDICTIONS` (`devicelab/exercises/lessonNN.py`), read without importing it (that would
  import torch);
- a widget cell whose figure was recorded on a GPU (`book/recorded_figures.json`) gets that figure under it.

Every notebook page also loses its Colab setup cell and gets, under its title, links that open it on Colab and
download it, both pointing at the repository named in pyproject.toml. Markdown links to files that are not in
the book point at the repository too.
"""

import ast
import copy
import json
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.colab_cells import BADGE_TAG, SETUP_TAG, Repository
from benchmarks.gpu_smoke import FOLD_END, OUTPUT_TAG, recorded_in
from devicelab.predict import ASK_CELL

COLAB_BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE_FILE = "open-in-colab.svg"  # the book's own badge (book/_static/): the site loads nothing from outside
LESSON_MODULE = re.compile(r"^from devicelab\.exercises\.(?P<module>\w+) import [^\n]*\bask\b", re.MULTILINE)
LINK = re.compile(r"(?P<open>\]\()(?P<target>[^)\s]+)(?P<close>\))")
REQUIRES_CUDA = "requires-cuda"  # a cell that runs only with a GPU (the executed copy lacks it)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
OUTPUTS_NOTE = ("*This page shows the lesson as it ran on a CPU when the book was built. A cell that needs a "
                "GPU shows the output a GPU gave, where one was recorded, labelled with the GPU, the torch "
                "version and the date. Open the notebook to run every cell yourself.*")
UNRUN_NOTE = ("*This page shows the lesson as it is, without running it: a cell's output appears only "
              "where a GPU's output was recorded, labelled with the GPU, the torch version and the date. "
              "Open the notebook to run every cell.*")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# What a static page can show of a display (MyST-NB picks one): no scripts, no widget view without its state
SHOWN_DATA = ("text/html", "image/svg+xml", "image/png", "image/jpeg", "text/markdown", "text/latex",
              "text/plain")
WIDGET_NOTE = "*In the notebook, this cell shows an interactive widget: open the notebook to use it.*"
WIDGET_SHOWS_NOTE = ("*In the notebook, this cell shows an interactive widget: open the notebook to use it. "
                     "What it displays when it starts:*")
ASSIGNMENT_NOTE = ("*The student version: each exercise's tests show the visible part; the graded copy adds "
                   "hidden tests. Work in your own copy, then hand it in as your course says.*")


class PageError(ValueError):
    """A page cannot be made: the message names the file and what is missing."""


@dataclass(frozen=True)
class Recording:
    """Where an output or a figure was recorded."""

    device: str
    torch: str
    date: str

    def label(self) -> str:
        """Return the words that title a recorded output."""
        return f"Recorded on a GPU: {self.device}, torch {self.torch}, {self.date}"


def recording_of(note: str) -> Recording | None:
    """Return where the `gpu-output` note's output was recorded, or None for a note that holds no output."""
    held = recorded_in(note)
    return Recording(held[0].device, held[0].torch, held[0].date) if held else None


def recorded_block(note: str) -> str:
    """Return the note under a GPU cell as a labelled block; a note without a recording is kept as it is.

    A note folded in the notebook (it answers the prediction above it) keeps its output in a closed dropdown.
    """
    recording = recording_of(note)
    if recording is None:
        return note
    body = note.split("\n\n", 1)[1].strip().removesuffix(FOLD_END).strip()
    if note.startswith("<details>"):
        body = (":::{dropdown} The output: it answers the prediction above, so commit to a guess first\n"
                f":class-container: recorded-answer\n\n{body}\n:::")
    return f"::::{{admonition}} {recording.label()}\n:class: recorded-output\n\n{body}\n::::"


@dataclass(frozen=True)
class Question:
    """A lesson's prediction, as the book shows it (the fields of `devicelab.predict.Prediction` it needs)."""

    question: str
    answer: str
    reason: str
    choices: tuple[str, ...] = ()


def predictions_in(module_source: str, where: str = "the lesson module") -> dict[str, Question]:
    """Return the `PREDICTIONS` of a lesson module's source, read as literals (nothing is imported or run)."""
    for node in ast.parse(module_source).body:
        names = [getattr(target, "id", None) for target in getattr(node, "targets", ())]
        if isinstance(node, ast.Assign) and "PREDICTIONS" in names:
            break
    else:
        raise PageError(f"{where} has no PREDICTIONS")
    if not isinstance(node.value, ast.Dict):
        raise PageError(f"{where}: PREDICTIONS is not a dict literal")
    found: dict[str, Question] = {}
    for key, value in zip(node.value.keys, node.value.values, strict=True):
        try:
            name = ast.literal_eval(key)
            if not (isinstance(value, ast.Call) and getattr(value.func, "id", "") == "Prediction"
                    and not value.args):
                raise ValueError("not Prediction(keyword=...)")
            fields = {kw.arg: ast.literal_eval(kw.value) for kw in value.keywords}
        except ValueError as error:
            raise PageError(f"{where}: a prediction the book cannot read as literals ({error})") from error
        found[name] = Question(fields["question"], fields["answer"], fields["reason"],
                               tuple(fields.get("choices", ())))
    return found


def question_block(question: Question) -> str:
    """Return a prediction as MyST: the question, its choices, and the answer folded until opened."""
    if question.choices:
        offered = "\n".join(f"- ({chr(97 + i)}) {choice}" for i, choice in enumerate(question.choices))
    else:
        offered = "*Write your guess down first.*"
    return (f"::::{{admonition}} Predict, then read on\n:class: prediction\n\n{question.question}\n\n"
            f"{offered}\n\n:::{{dropdown}} Reveal the answer (commit to a guess first)\n"
            f":class-container: prediction-answer\n\nThe answer: **{question.answer}**. {question.reason}\n"
            f":::\n::::")


def asked(cell) -> str | None:
    """Return the prediction a code cell shows (`ask("name")`), or None."""
    match = ASK_CELL.match(cell.source.strip()) if cell.cell_type == "code" else None
    return match.group("name") if match else None


def lesson_module(nb) -> str | None:
    """Return the module whose `ask` the notebook imports (`lesson05`), or None."""
    for cell in nb.cells:
        if cell.cell_type == "code" and (match := LESSON_MODULE.search(cell.source)):
            return match.group("module")
    return None


@dataclass(frozen=True)
class RecordedFigure:
    """A widget's figure recorded on a GPU, shown under the widget's cell in its lesson."""

    lesson: str  # the notebook's name without .ipynb
    after_cell: str  # the id of the widget's cell
    image: str  # path from the repository root
    alt: str
    caption: str
    device: str
    torch: str
    date: str

    def block(self, page: str) -> str:
        """Return the figure as MyST, with its image path relative to the page at `page`."""
        image = posixpath.relpath(self.image, posixpath.dirname(page) or ".")
        label = Recording(self.device, self.torch, self.date).label()
        return (f":::{{figure}} {image}\n:alt: {self.alt}\n:class: recorded-figure\n\n"
                f"**{label}.** {self.caption}\n:::")


def load_figures(path: Path) -> list[RecordedFigure]:
    """Read the recorded figures' list (a JSON list of objects with RecordedFigure's fields)."""
    return [RecordedFigure(**entry) for entry in json.loads(path.read_text(encoding="utf-8"))]


def static_prefix(page: str) -> str:
    """Return the path from the page at `page` to the site's `_static/` folder."""
    return "../" * page.count("/") + "_static"


def badge_html(page: str) -> str:
    """Return the book's Open-in-Colab badge as an image tag for the page at `page`."""
    return f'<img src="{static_prefix(page)}/{BADGE_FILE}" alt="Open In Colab" class="colab-badge">'


def links_html(repo: Repository, relpath: str, what: str) -> str:
    """Return the links under a notebook page's title: open it on Colab, download it, both from `repo`."""
    return (f'<p class="book-links"><a class="colab-link" href="{repo.colab_url(relpath)}">'
            f'{badge_html(relpath)}</a> <a class="download-link" href="{repo.raw_url(relpath)}">'
            f"Download {what}</a></p>")


def rewrite_links(text: str, page: str, repo: Repository, in_book: Callable[[str], bool],
                  in_repository: Callable[[str], bool], renamed: Mapping[str, str] | None = None) -> str:
    """Return markdown with relative links to repository files outside the book pointed at the repository,
    links to a file the book shows under another name (`renamed`: README.md is its index) pointed there, and
    the Colab badge image replaced by the book's own."""
    text = text.replace(f"![Open In Colab]({COLAB_BADGE_IMAGE})", badge_html(page))

    def target(match: re.Match) -> str:
        link = match.group("target")
        if SCHEME.match(link) or link.startswith("#"):
            return match.group(0)
        path, hash_, fragment = link.partition("#")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page), path))
        if resolved in (renamed or {}):
            moved = posixpath.relpath(renamed[resolved], posixpath.dirname(page) or ".")
            return f"{match.group('open')}{moved}{hash_}{fragment}{match.group('close')}"
        if in_book(resolved) or not in_repository(resolved):
            return match.group(0)  # a page or image of the book; or a link Sphinx reports as broken
        return f"{match.group('open')}{repo.file_url(resolved)}{hash_}{fragment}{match.group('close')}"

    return LINK.sub(target, text)


def _title_split(cells: list) -> int:
    """Split the first markdown cell that starts with a title after its title; return the index after it."""
    for index, cell in enumerate(cells):
        if cell.cell_type == "markdown" and cell.source.startswith("# "):
            title, _, rest = cell.source.partition("\n")
            if rest.strip():
                cells.insert(index + 1, nbformat.v4.new_markdown_cell(rest.strip(), id=f"{cell.id}-rest"))
                cell.source = title
            return index + 1
    raise PageError("the notebook has no title (a markdown cell starting with '# ')")


def _page(nb, relpath: str, repo: Repository, what: str, note: str, in_book, in_repository,
          convert: Callable) -> nbformat.NotebookNode:
    page = copy.deepcopy(nb)
    cells = []
    for cell in page.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if BADGE_TAG in tags or SETUP_TAG in tags:
            continue
        cells += convert(cell)
    for cell in cells:
        if cell.cell_type == "markdown":
            cell.source = rewrite_links(cell.source, relpath, repo, in_book, in_repository)
    after_title = _title_split(cells)
    header = nbformat.v4.new_markdown_cell(f"{links_html(repo, relpath, what)}\n\n{note}", id="book-links")
    cells.insert(after_title, header)
    page.cells = cells
    page.metadata = nbformat.from_dict({
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python", "pygments_lexer": "ipython3"}})  # `%%magics` highlight cleanly
    return page


def widget_models(nb) -> dict:
    """Return the widget models an executed notebook saved with its outputs (model id -> model), or {}."""
    return nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def _widget_outputs(model_id: str, models: Mapping, seen: set | None = None) -> list:
    """Return what the Output widgets inside the widget `model_id` held, in the order they are laid out."""
    seen = set() if seen is None else seen
    model = models.get(model_id)
    if model is None or model_id in seen:
        return []
    seen.add(model_id)
    state = model.get("state", {})
    held = list(state.get("outputs", [])) if model.get("model_name") == "OutputModel" else []
    for child in state.get("children", []):
        if isinstance(child, str) and child.startswith("IPY_MODEL_"):
            held += _widget_outputs(child.removeprefix("IPY_MODEL_"), models, seen)
    return held


def static_outputs(outputs: list, models: Mapping) -> list:
    """Return the outputs of an executed cell as a static page can show them (the module's docstring says
    which): stdout, displays without scripts, an error's message, a widget's note and its Output contents."""
    shown = []
    for at, output in enumerate(outputs):
        kind = output.get("output_type")
        if kind == "stream":
            if output.get("name") == "stdout" and output.get("text"):
                if at and _is_stdout(outputs[at - 1]) and shown and shown[-1].get("output_type") == "stream":
                    shown[-1]["text"] += output["text"]  # one stream, as Jupyter shows it
                else:
                    shown.append(nbformat.v4.new_output("stream", name="stdout", text=output["text"]))
        elif kind == "error":
            ename, evalue = output.get("ename", "Error"), output.get("evalue", "")
            shown.append(nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                                traceback=[f"{ename}: {evalue}" if evalue else ename]))
        elif kind in ("display_data", "execute_result"):
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                inner = static_outputs(_widget_outputs(data[WIDGET_VIEW].get("model_id", ""), models), models)
                note = WIDGET_SHOWS_NOTE if inner else WIDGET_NOTE
                shown += [nbformat.v4.new_output("display_data", data={"text/markdown": note}), *inner]
                continue
            kept = {mime: value for mime, value in data.items() if mime in SHOWN_DATA}
            if kept:
                shown.append(nbformat.v4.new_output("display_data", data=kept,
                                                    metadata=copy.deepcopy(output.get("metadata", {}))))
    for output in shown:
        if output.get("output_type") == "stream":
            output["text"] = as_terminal_shows(output["text"])
    return shown


def _is_stdout(output) -> bool:
    return output.get("output_type") == "stream" and output.get("name") == "stdout"


def as_terminal_shows(text: str) -> str:
    """Return printed text as Jupyter shows it: a carriage return (a progress bar's) rewrites its line."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n"))


def _outputs_by_cell(executed, relpath: str) -> dict[str, tuple[str, list]]:
    """Return each executed code cell's source and static outputs, by cell id."""
    models = widget_models(executed)
    found = {}
    for cell in executed.cells:
        if cell.cell_type == "code":
            if not cell.get("id"):
                raise PageError(f"{relpath}: the executed copy has a code cell without an id")
            found[cell.id] = (cell.source, static_outputs(cell.get("outputs", []), models))
    return found


def lesson_page(nb, relpath: str, repo: Repository, predictions: Mapping[str, Question],
                figures: list[RecordedFigure], in_book: Callable[[str], bool] = lambda _p: False,
                in_repository: Callable[[str], bool] = lambda _p: False,
                executed=None) -> nbformat.NotebookNode:
    """Return the book's page of a lesson notebook at `relpath` (see the module's docstring). `executed` is
    the notebook as it ran on a CPU (its `requires-cuda` cells left out), whose outputs the page shows;
    without it the page shows the code alone, and says so."""
    unplaced = {f.after_cell: f for f in figures}
    ran = _outputs_by_cell(executed, relpath) if executed is not None else None

    def convert(cell) -> list:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown" and OUTPUT_TAG in tags:
            cell.source = recorded_block(cell.source)
        elif (name := asked(cell)) is not None:
            if name not in predictions:
                raise PageError(f"{relpath}: ask({name!r}) has no prediction of that name")
            cell = nbformat.v4.new_markdown_cell(question_block(predictions[name]), id=cell.get("id"))
        elif (cell.cell_type == "code" and ran is not None and REQUIRES_CUDA not in tags
              and SETUP_TAG not in tags):
            source, outputs = ran.get(cell.get("id"), (None, []))
            if source != cell.source:
                raise PageError(f"{relpath}: cell {cell.get('id')!r} is not in its executed copy as it is in "
                                "the lesson (the lesson changed while the book was built: build it again)")
            cell.outputs = outputs
        figure = unplaced.pop(cell.get("id"), None)
        return [cell] + ([nbformat.v4.new_markdown_cell(figure.block(relpath), id=f"{cell.id}-figure")]
                         if figure else [])

    note = OUTPUTS_NOTE if executed is not None else UNRUN_NOTE
    page = _page(nb, relpath, repo, "the notebook", note, in_book, in_repository, convert)
    if unplaced:
        raise PageError(f"{relpath}: no cell {sorted(unplaced)} for the recorded figures "
                        "(book/recorded_figures.json is out of date)")
    return page


def assignment_page(nb, relpath: str, repo: Repository, in_book: Callable[[str], bool] = lambda _p: False,
                    in_repository: Callable[[str], bool] = lambda _p: False) -> nbformat.NotebookNode:
    """Return the book's page of a released (student) assignment notebook at `relpath`."""
    return _page(nb, relpath, repo, "the student version", ASSIGNMENT_NOTE, in_book, in_repository,
                 lambda cell: [cell])
