"""The `%%requires_cuda` cell magic: run a cell only where a CUDA GPU is usable."""

import torch

SKIP_MESSAGE = (
    "Skipped: this cell needs a CUDA GPU and none is usable here. "
    "The text around it says what it shows; on Colab choose Runtime > Change runtime type > GPU."
)


def requires_cuda(line: str, cell: str, shell=None) -> None:
    """Run `cell` when CUDA is available, otherwise print why it was skipped."""
    if not torch.cuda.is_available():
        print(SKIP_MESSAGE)
        return
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    result = shell.run_cell(cell)
    result.raise_error()


def register(ipython) -> None:
    """Register the course's cell magics with an IPython shell."""

    def _magic(line: str, cell: str) -> None:
        requires_cuda(line, cell, shell=ipython)

    ipython.register_magic_function(_magic, magic_kind="cell", magic_name="requires_cuda")
