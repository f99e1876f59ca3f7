"""`%%requires_cuda` skips a cell politely without a GPU and runs it (errors included) with one."""

from unittest import mock

import pytest
from IPython.core.interactiveshell import InteractiveShell

from devicelab.magics import SKIP_MESSAGE, requires_cuda


@pytest.fixture(scope="module")
def shell():
    """An IPython shell of this process with the extension loaded (dropped afterwards if this made it: another
    module of the same worker may need a shell of its own)."""
    made = not InteractiveShell.initialized()
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "devicelab")
    yield ip
    if made:
        InteractiveShell.clear_instance()


def test_cell_is_skipped_without_cuda(shell, capsys):
    with mock.patch("torch.cuda.is_available", return_value=False):
        shell.run_cell_magic("requires_cuda", "", "ran = True")
    assert "ran" not in shell.user_ns
    assert SKIP_MESSAGE in capsys.readouterr().out


def test_cell_runs_with_cuda(shell):
    with mock.patch("torch.cuda.is_available", return_value=True):
        shell.run_cell_magic("requires_cuda", "", "ran_with_gpu = 21 * 2")
    assert shell.user_ns["ran_with_gpu"] == 42


def test_errors_inside_a_gpu_cell_are_not_swallowed():
    fake_shell = mock.Mock()
    fake_shell.run_cell.return_value.raise_error.side_effect = RuntimeError("CUDA error")
    with mock.patch("torch.cuda.is_available", return_value=True), pytest.raises(RuntimeError,
                                                                                 match="CUDA error"):
        requires_cuda("", "x = 1", shell=fake_shell)
    fake_shell.run_cell.assert_called_once_with("x = 1")
