"""Lesson 04, device mismatch: what its text says about the exceptions to the rule runs as it says, and what
only PyTorch's source can show (no GPU here) is cited in the text."""

import nbformat
import torch

from autograder import COURSE_ROOT

LESSON = COURSE_ROOT / "notebooks" / "04-device-mismatch.ipynb"


def _cell(cell_id: str) -> str:
    return next(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.get("id") == cell_id)


def test_a_0_dim_cpu_tensor_joins_a_meta_tensor_and_where_takes_python_numbers_on_the_condition_s_device():
    on_meta = torch.arange(4.0, device="meta")
    assert (torch.tensor(2.0) * on_meta).device.type == "meta"
    assert torch.where(on_meta > 1, 1.0, 0.0).device.type == "meta"
    assert torch.where(on_meta > 1, 1.0, 0.0).dtype == torch.float32


def test_the_lesson_says_where_copies_its_cpu_scalars_and_cites_the_source():
    """`where_self_out` (aten/src/ATen/native/TensorCompare.cpp) moves each 0-dim CPU operand with
    `.to(device)`: a blocking copy, not the number-passing of `gpu_kernel_with_scalars`."""
    text = _cell("671a0d20")
    assert "where_self_out" in text and "self_.to(device)" in text and "torch.where(cond, 1.0, 0.0)" in text
    assert "works\nfor the same reason" not in text
    assert "`torch.where`" not in _cell("exceptions-intro"), "where does not take a CPU scalar as it is"
    assert "copies each one to the device first" in _cell("1096a3bd")
    assert "`torch.where` copies its 0-dim CPU operands" in _cell("myths")
