"""Lesson 02, devices: what the text says a GPU prints is what the recording shows."""

import re

import nbformat

from autograder import COURSE_ROOT

LESSON = COURSE_ROOT / "notebooks" / "02-devices.ipynb"


def test_the_gpu_matmul_text_matches_the_recorded_throughput():
    """The recorded H100 printed about 25,000 GFLOP/s: tens of thousands, not "in the thousands"."""
    cells = nbformat.read(LESSON, as_version=4).cells
    text = next(c.source for c in cells if c.get("id") == "16ce3661")
    recorded = next(c.source for c in cells if c.get("id") == "0221a034-gpu-output")
    gflops = int(re.search(r"about (\d+) GFLOP/s", recorded).group(1))
    assert "in the thousands of GFLOP/s" not in text
    assert f"about {round(gflops, -3):,}" in text
