"""Every lesson runs top to bottom on this machine; GPU-only cells are marked so they can be skipped."""

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
