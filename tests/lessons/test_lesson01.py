"""Lesson 01, tensors: where float64 comes from is what runs."""

import nbformat
import torch

from autograder import COURSE_ROOT

LESSON = COURSE_ROOT / "notebooks" / "01-tensors.ipynb"


def _cell(cell_id: str) -> str:
    return next(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.get("id") == cell_id)


def test_float64_comes_from_numpy_from_asking_and_from_an_elementwise_operation_with_float64():
    assert torch.zeros(2, dtype=torch.float64).dtype == torch.zeros(2).double().dtype == torch.float64
    assert (torch.zeros(2) + torch.zeros(2, dtype=torch.float64)).dtype == torch.float64
    assert "float32 + float64" in _cell("other-float64")
    myths = _cell("myths")
    assert "only NumPy arrays bring float64" not in myths and "from asking for it" in myths
