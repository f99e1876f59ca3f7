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


def _facts_section(heading: str) -> str:
    """Return one `### ` section of docs/facts.md, up to the next heading."""
    facts = (COURSE_ROOT / "docs" / "facts.md").read_text()
    return facts.split(heading, 1)[1].split("\n#", 1)[0]


def test_the_lesson_says_where_copies_its_cpu_scalars_and_cites_the_source():
    """`where_self_out` (aten/src/ATen/native/TensorCompare.cpp) moves each 0-dim CPU operand with
    `.to(device)`: a blocking copy, not the number-passing of `gpu_kernel_with_scalars`. The lesson says so
    and links to docs/facts.md, which names the source."""
    text = _cell("where-copies")
    assert "moves each 0-dim CPU operand" in text and "torch.where(cond, 1.0, 0.0)" in text
    assert "../docs/facts.md#lesson-04-details" in text
    assert "works\nfor the same reason" not in text and "for the same reason" not in _cell("671a0d20")
    details = _facts_section("### Lesson 04 details")
    assert "where_self_out" in details and "self_.to(device)" in details and "TensorCompare.cpp" in details
    assert "gpu_kernel_with_scalars" in details
    assert "`torch.where`" not in _cell("exceptions-intro"), "where does not take a CPU scalar as it is"
    assert "copies each one to the device first" in _cell("1096a3bd")
    assert "`torch.where` copies its 0-dim CPU operands" in _cell("myths")


def test_each_error_text_is_credited_to_the_torch_that_showed_it():
    """The GPU texts were recorded on an H100 with torch 2.11; the CPU checks run on the installed torch."""
    credit = " ".join(_cell("7a691c8d").split())
    assert "H100 printed with torch 2.11" in credit and "torch 2.14.1 holds the same texts" in credit
    details = " ".join(_facts_section("### Lesson 04: where the error texts were seen").split())
    assert "H100 with torch 2.11" in details and "2.14.1" in details
    assert "2.15" not in _cell("28378c42")
    facts = (COURSE_ROOT / "docs" / "facts.md").read_text()
    assert "2.15" not in details and "2.15" not in _facts_section("### Lesson 04 details")
    assert "torch 2.11" in facts


def test_a_convolution_with_meta_weights_and_a_cpu_input_raises_nothing():
    """Section 4's trap, which the lesson credits to torch 2.14.1: a CPU result, no error."""
    from torch import nn

    conv = nn.Conv2d(1, 1, 3).to("meta")
    assert conv(torch.ones(1, 1, 4, 4)).device.type == "cpu"
    assert "in torch 2.14.1 so does `nn.Conv2d`" in " ".join(_cell("28378c42").split()), "the version checked"


def test_float64_throughput_is_1_32_on_pascal_and_turing_geforce_and_1_64_after():
    text = _cell("f47f3af6")
    assert "1/32 on a T4\n(Colab's GPU) and on Pascal and Turing GeForce" in text and "1/64 on L4" in text
