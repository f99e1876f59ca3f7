"""The notebook runner drops GPU-only cells without a GPU and honours raises-exception."""

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from tests.notebook_runner import execute_notebook, without_gpu_cells

pytestmark = pytest.mark.notebook


def _notebook(tmp_path, *cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    return path


def test_requires_cuda_cells_are_dropped_without_a_gpu(tmp_path):
    gpu_cell = nbformat.v4.new_code_cell("raise SystemError('must not run')",
                                         metadata={"tags": ["requires-cuda"]})
    path = _notebook(tmp_path, nbformat.v4.new_code_cell("x = 1"), gpu_cell)
    result = execute_notebook(path, gpu=False)
    assert result.skipped_cells == 1 and len(result.notebook.cells) == 1
    with pytest.raises(CellExecutionError, match="must not run"):
        execute_notebook(path, gpu=True)


def test_raises_exception_tag_allows_a_deliberate_error(tmp_path):
    ok = nbformat.v4.new_code_cell("1 / 0", metadata={"tags": ["raises-exception"]})
    path = _notebook(tmp_path, ok, nbformat.v4.new_code_cell("y = 2"))
    assert execute_notebook(path, gpu=False).seconds > 0
    path = _notebook(tmp_path, nbformat.v4.new_code_cell("1 / 0"))
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        execute_notebook(path, gpu=False)


def test_without_gpu_cells_leaves_the_original_alone():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("a", metadata={"tags": ["requires-cuda"]}),
                nbformat.v4.new_code_cell("b")]
    copy, dropped = without_gpu_cells(nb)
    assert dropped == 1 and [c.source for c in copy.cells] == ["b"] and len(nb.cells) == 2
