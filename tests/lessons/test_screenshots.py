"""The README's screenshots are made by `make screenshots` (docs/images/screenshots.py) from a student's
JupyterLab, cropped to what they show and drawn at twice the pixels: each is a PNG the README shows, wide
enough to read once the page shrinks it, and cropped (no whole window)."""

import re
import struct

import pytest

from autograder import COURSE_ROOT

IMAGES = COURSE_ROOT / "docs" / "images"
SHOTS = ("transfer-lab.png", "assignment-check.png")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("name", SHOTS)
def test_each_screenshot_is_a_readable_crop_the_readme_shows(name):
    width, height = png_size((IMAGES / name).read_bytes())
    assert width >= 1200, f"{name} is {width} px wide: take it at twice the pixels (`make screenshots`)"
    assert height <= 1.2 * width, f"{name} is {width}x{height}: crop it to what it shows, not the window"
    readme = (COURSE_ROOT / "README.md").read_text(encoding="utf-8")
    shown = rf"!\[[^\]]+\]\(docs/images/{re.escape(name)}\)"
    assert re.search(shown, readme), f"the README does not show {name}"


def test_the_command_that_takes_them_names_each_and_turns_nbgraders_menus_off():
    script = (IMAGES / "screenshots.py").read_text(encoding="utf-8")
    assert all(f'"{name}"' in script for name in SHOTS)
    assert '"@jupyter/nbgrader": true' in script, "a student's JupyterLab has no nbgrader menus"
    assert "screenshots:" in (COURSE_ROOT / "Makefile").read_text(encoding="utf-8")


def test_png_size_reads_the_header():
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + struct.pack(">II", 640, 480)
    assert png_size(header) == (640, 480)
    with pytest.raises(AssertionError):
        png_size(b"GIF89a" + bytes(20))
