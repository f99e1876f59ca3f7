"""The course's drawn diagrams (docs/images/diagrams.py): each committed SVG is what its script draws now,
every one is shown by a lesson, and every picture a lesson links to exists. Matplotlib only: no notebook
runs."""

import importlib
import re
import sys
from pathlib import Path

import matplotlib
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
# ![alt](target) in markdown, and <img ... src="target"> in the HTML a cell may hold
MARKDOWN_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
HTML_IMAGE = re.compile(r"<img\b[^>]*\bsrc=[\"'](?P<target>[^\"']+)[\"']", re.IGNORECASE)
DRAWN_BY = re.compile(r"Matplotlib v(?P<version>[^,<]+),")
TEXT = re.compile(r"<text\b[^>]*>(?P<text>[^<]*)</text>")


def _diagrams():
    if str(IMAGES) not in sys.path:
        sys.path.insert(0, str(IMAGES))  # the scripts import each other by name, as when run from there
    return importlib.import_module("diagrams")


DIAGRAMS = sorted(_diagrams().DIAGRAMS)


def _images_shown(path: Path) -> list[tuple[int, str, str]]:
    """(cell index, alt text or None for an <img>, target) of every picture the lesson's markdown shows."""
    found = []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type != "markdown":
            continue
        found += [(index, m["alt"], m["target"]) for m in MARKDOWN_IMAGE.finditer(cell.source)]
        found += [(index, None, m["target"]) for m in HTML_IMAGE.finditer(cell.source)]
    return found


def _texts(svg: bytes) -> list[str]:
    """The labels of a diagram, in the order it draws them."""
    return TEXT.findall(svg.decode())


def _local(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)  # not https:, data: ...


@pytest.mark.parametrize("name", DIAGRAMS)
def test_each_committed_diagram_is_what_its_script_draws(name, tmp_path):
    """A drawing changed without `make diagrams` (or an SVG edited by hand) fails here."""
    committed = (IMAGES / name).read_bytes()
    drawn = _diagrams().write(name, tmp_path).read_bytes()
    assert drawn == _diagrams().write(name, tmp_path).read_bytes(), f"{name} differs from one run to the next"
    by = DRAWN_BY.search(committed.decode())
    if by and by["version"] == matplotlib.__version__:
        assert drawn == committed, f"docs/images/{name} is not what diagrams.py draws: run `make diagrams`"
    else:
        # Another matplotlib lays the same drawing out a little differently: compare what it says.
        assert _texts(drawn) == _texts(committed), (
            f"docs/images/{name} does not say what diagrams.py draws: run `make diagrams`")


def test_the_diagrams_are_deterministic_svgs_with_their_labels_as_text():
    for name in DIAGRAMS:
        svg = (IMAGES / name).read_text(encoding="utf-8")
        assert svg.startswith("<?xml") and "<svg" in svg, name
        assert "<dc:date>" not in svg, f"{name} carries a date: it would change on every run"
        assert TEXT.search(svg), f"{name} has no text elements: draw it with drawing.STYLE (svg.fonttype)"


@pytest.mark.parametrize("name", DIAGRAMS)
def test_every_diagram_is_shown_by_a_lesson_with_an_alt_text(name):
    shown = [(path.name, alt) for path in LESSONS for _, alt, target in _images_shown(path)
             if _local(target) and (path.parent / target).resolve() == (IMAGES / name).resolve()]
    assert shown, f"no lesson shows docs/images/{name}"
    short = [(lesson, alt) for lesson, alt in shown if alt is None or len(alt.split()) < 4]
    assert not short, f"{name} needs an alt text that describes the picture: {short}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_picture_a_lesson_links_to_exists(path):
    missing = [f"cell {index}: {target}" for index, _, target in _images_shown(path)
               if _local(target) and not (path.parent / target.split("#")[0]).is_file()]
    assert not missing, f"{path.name} links to pictures that are not there: {missing}"


def test_make_diagrams_redraws_them_all():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    target = re.search(r"^diagrams:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert target and "docs/images/diagrams.py" in target.group(1)
    assert re.search(r"^\.PHONY:.*\bdiagrams\b", makefile, re.MULTILINE)
