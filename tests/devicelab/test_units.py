"""One unit convention everywhere: sizes in KiB / MiB / GiB (powers of 1024), bandwidth in GB/s (10**9 B/s).
"""

import json
import re
from pathlib import Path

import pytest

from devicelab.units import GB, GiB, KiB, MiB, TiB, format_bandwidth, format_bytes

ROOT = Path(__file__).resolve().parents[2]


def test_the_constants():
    assert (KiB, MiB, GiB, TiB) == (2**10, 2**20, 2**30, 2**40)
    assert GB == 10**9


@pytest.mark.parametrize(("nbytes", "text"), [
    (0, "0 B"), (1, "1 B"), (1023, "1023 B"), (KiB, "1 KiB"), (1536, "1.5 KiB"), (4 * KiB, "4 KiB"),
    (999_999, "976.6 KiB"), (MiB - 1, "1.0 MiB"), (MiB, "1 MiB"), (3 * MiB // 2, "1.5 MiB"),
    (256 * MiB, "256 MiB"), (GiB, "1 GiB"), (2 * GiB, "2 GiB"), (10**9, "953.7 MiB"), (4 * 10**12, "3.6 TiB"),
    (2048 * TiB, "2048 TiB"),
])
def test_format_bytes_uses_binary_units(nbytes, text):
    assert format_bytes(nbytes) == text


def test_format_bytes_refuses_what_is_not_a_count():
    with pytest.raises(TypeError):
        format_bytes("4096")
    with pytest.raises(TypeError):
        format_bytes(True)


@pytest.mark.parametrize(("rate", "digits", "text"), [
    (10**9, 1, "1.0 GB/s"), (12.4e9, 1, "12.4 GB/s"), (2**30, 3, "1.074 GB/s"), (15.75e9, 2, "15.75 GB/s"),
    (0, 1, "0.0 GB/s"),
])
def test_format_bandwidth_uses_gigabytes_of_ten_to_the_nine(rate, digits, text):
    assert format_bandwidth(rate, digits) == text


# ----- the course's text never labels a size with a decimal unit -------------------------------------------

# A number followed by KB, kB, MB or TB, or by GB that is not GB/s (the only decimal unit the course uses).
DECIMAL_SIZE = re.compile(r"\d ?(?:KB|kB|MB|TB)\b|\d ?GB\b(?!/s)")

# A GPU's name as torch.cuda.get_device_name() prints it ("NVIDIA H100 80GB HBM3"): a product name quoted in
# recorded outputs, not a size the course writes.
DEVICE_NAME = re.compile(r"NVIDIA [A-Z][\w-]* \d+GB\b")

# (file, text on the line, why it may stay). Keep this short; each entry needs a reason.
ALLOWED: list[tuple[str, str, str]] = []  # (file, text, why): a decimal size label that must stay


def course_text() -> list[tuple[str, list[str]]]:
    """Return (where, lines) for each piece of course text: Python modules, notebook cells, the guides."""
    pieces = []
    for path in sorted([*ROOT.glob("devicelab/**/*.py"), *ROOT.glob("autograder/**/*.py"),
                        *ROOT.glob("benchmarks/*.py")]):
        pieces.append((str(path.relative_to(ROOT)), path.read_text().splitlines()))
    for path in sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("source/*/*.ipynb")]):
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            pieces.append((f"{path.relative_to(ROOT)} cell {index}", source.splitlines()))
    # the guides the README links to (docs/facts.md quotes its sources as they wrote them)
    guides = [f"docs/{name}.md"
              for name in ("students", "instructors", "hub", "lms", "security", "measurements")]
    for name in ("README.md", "CONTRIBUTING.md", *guides):
        pieces.append((name, (ROOT / name).read_text().splitlines()))
    return pieces


def test_the_course_text_writes_sizes_in_binary_units():
    found = []
    for where, lines in course_text():
        for number, line in enumerate(lines, 1):
            if not DECIMAL_SIZE.search(DEVICE_NAME.sub("", line)):
                continue
            if any(where == name and text in line for name, text, _why in ALLOWED):
                continue
            found.append(f"{where} line {number}: {line.strip()}")
    assert not found, ("sizes must be written in KiB / MiB / GiB (powers of 1024) and bandwidth in GB/s "
                       "(see CONTRIBUTING.md, Units):\n" + "\n".join(found))


def test_every_allowed_line_still_exists():
    text = {name: "\n".join(lines) for name, lines in course_text()}
    stale = [entry for entry in ALLOWED if entry[1] not in text.get(entry[0], "")]
    assert not stale, f"remove these from ALLOWED, the text is gone: {stale}"


@pytest.mark.parametrize(("line", "flagged"), [
    ("a 4 MB buffer", True), ("4KB,1MB", True), ("1.5 kB", True), ("2 GB of RAM", True), ("4 TB", True),
    ("12.4 GB/s", False), ("256 MiB", False), ("4KiB", False), ("GB/s = 10**9 bytes per second", False),
    ("x16 MB/s", True), ("recorded on NVIDIA H100 80GB HBM3", False), ("an 80GB card", True),
    ("NVIDIA H100 80GB HBM3 with 2 GB free", True),
])
def test_the_pattern(line, flagged):
    assert bool(DECIMAL_SIZE.search(DEVICE_NAME.sub("", line))) is flagged
