"""Every lesson runs top to bottom on this machine; GPU-only cells are marked so they can be skipped."""

import importlib
import re

import nbformat
import pytest

from autograder.colab_cells import SETUP_TAG
from autograder.course import lessons
from tests.notebook_runner import REQUIRES_CUDA, cuda_present, execute_notebook

LESSONS = lessons()
EXPECTED = ["00-start-here", "01-tensors", "02-devices"]


def test_lessons_exist_in_reading_order():
    names = [p.stem for p in LESSONS]
    assert names[: len(EXPECTED)] == EXPECTED
    assert names == sorted(names)


@pytest.mark.notebook
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_top_to_bottom(path):
    result = execute_notebook(path, gpu=cuda_present())
    errors = [c for c in result.notebook.cells if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.get("outputs", []))
              and "raises-exception" not in c.metadata.get("tags", [])]
    assert not errors


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_gpu_cells_carry_both_the_tag_and_the_magic(path):
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        tagged = REQUIRES_CUDA in cell.metadata.get("tags", [])
        magic = cell.cell_type == "code" and cell.source.lstrip().startswith("%%requires_cuda")
        assert tagged == magic, f"{path.name} cell {index}: tag `requires-cuda` and `%%requires_cuda` go together"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_opens_with_imports_and_never_asserts_a_gpu(path):
    cells = nbformat.read(path, as_version=4).cells
    first_code = next(c for c in cells if c.cell_type == "code" and SETUP_TAG not in c.metadata.get("tags", []))
    assert "import" in first_code.source, "the first code cell after the Colab setup cell holds the imports"
    text = "\n".join(c.source for c in cells)
    assert "assert torch.cuda.is_available()" not in text



def markdown_headings(path) -> list[str]:
    """Return every `#`-heading of a lesson's markdown cells, in order (headings may sit inside a cell)."""
    cells = nbformat.read(path, as_version=4).cells
    return [line for c in cells if c.cell_type == "markdown" for line in c.source.splitlines() if line.startswith("#")]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_says_how_long_it_takes_and_ends_with_next(path):
    cells = nbformat.read(path, as_version=4).cells
    opening = next(c.source for c in cells if c.cell_type == "markdown" and c.source.startswith("# "))
    assert re.search(r"\*About \d+ minutes", opening), f"{path.name}: the title cell says how long the lesson takes"
    headings = markdown_headings(path)
    assert headings[-1] == "## Next", f"{path.name}: the last section is '## Next'"
    if "## Going further (optional)" in headings:
        assert headings.index("## Going further (optional)") < headings.index("## Next")
        assert "optional" in opening, f"{path.name}: the title cell says the Going further section is optional"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_numbered_sections_run_in_order_and_references_to_them_exist(path):
    numbers = [int(m.group(1)) for h in markdown_headings(path) if (m := re.match(r"## (\d+)\. ", h))]
    assert numbers == list(range(1, len(numbers) + 1)), f"{path.name}: sections numbered {numbers}"
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    cited = {int(n) for n in re.findall(r"\bsections? (\d+)\b", text)}
    assert cited <= set(numbers), f"{path.name}: refers to section(s) {sorted(cited - set(numbers))}, which it lacks"


PROMPT = "**Predict, then run:**"
ASK = re.compile(r'^\s*ask\("([^"]+)"\)\s*$')
GIVEAWAYS = {  # phrases that would answer a prediction if a student read them in the text before it
    "meta-matmul": ("trap", "uninitiali", "no error", "garbage"),
    "float64-matmul": ("what really goes wrong", "must have the same dtype", "mixing dtypes fails",
                       "mixing float64 and float32"),
    "queue-3000": ("limited depth", "queue is full", "free slot"),
    "default-h2d": ("stream sync", "the most common sync point"),
    "stale-read": ("dangerous direction", "stale", "last step's values", "not a sync point"),
}


def _lesson_predictions(cells) -> dict:
    """Return the PREDICTIONS of the lesson module the notebook imports `ask` from ({} when it asks none)."""
    source = "\n".join(c.source for c in cells if c.cell_type == "code")
    match = re.search(r"from (devicelab\.exercises\.lesson\d+) import [^\n]*\bask\b", source)
    return importlib.import_module(match.group(1)).PREDICTIONS if match else {}


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_prediction_is_asked_before_anything_answers_it(path):
    cells = nbformat.read(path, as_version=4).cells
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown" or PROMPT not in cell.source:
            continue
        after = cell.source.split(PROMPT, 1)[1].split("\n\n", 1)
        assert len(after) == 1 or not after[1].strip(), f"{path.name} cell {index}: text follows the prediction"
        following = cells[index + 1] if index + 1 < len(cells) else None
        assert following is not None and following.cell_type == "code", (
            f"{path.name} cell {index}: a prediction is followed by the code that answers it (or its ask cell), "
            "not by more markdown")
        if ASK.match(following.source):
            assert cells[index + 2].cell_type == "code", f"{path.name}: the answering cell follows ask() at once"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_cell_before_an_ask_gives_its_answer_away(path):
    cells = nbformat.read(path, as_version=4).cells
    predictions = _lesson_predictions(cells)
    asked = [(i, m.group(1)) for i, c in enumerate(cells) if c.cell_type == "code" and (m := ASK.match(c.source))]
    for index, name in asked:
        assert name in predictions, f"{path.name} asks {name!r}, which its lesson module lacks"
        before = "\n".join(c.source for c in cells[:index] if c.cell_type == "markdown")
        answer = predictions[name].answer
        phrases = (*GIVEAWAYS.get(name, ()), *((answer,) if len(answer) > 12 else ()))
        for phrase in phrases:
            assert phrase.lower() not in before.lower(), (
                f"{path.name}: {phrase!r} appears before ask({name!r}) and answers it")
    assert sorted(n for _, n in asked) == sorted(predictions), f"{path.name}: every prediction is asked once"
