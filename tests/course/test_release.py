"""release/ is exactly what the build makes of source/, and leaks nothing of the instructor version."""

import re
import shutil

import nbformat
import pytest

from autograder import COURSE_ROOT
from autograder.build import build_release
from autograder.course import assignment_notebooks, assignments

ASSIGNMENTS = assignments()
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN MARK SCHEME")


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_assignment_has_a_release_and_nothing_else_does():
    assert ASSIGNMENTS, "no assignments in source/"
    assert assignments(folder="release") == ASSIGNMENTS, ("run `make build`: release/ and source/ list "
                                                          "different ids")


def test_release_equals_a_fresh_build(tmp_path):
    for name in ("nbgrader_config.py", "pyproject.toml"):
        shutil.copy(COURSE_ROOT / name, tmp_path)
    shutil.copytree(COURSE_ROOT / "source", tmp_path / "source")
    shutil.copytree(COURSE_ROOT / "notebooks", tmp_path / "notebooks")
    build_release(tmp_path)
    fresh, committed = _files(tmp_path / "release"), _files(COURSE_ROOT / "release")
    assert sorted(map(str, fresh)) == sorted(map(str,
                                                 committed)), "run `make build`: release/ has other files"
    stale = [str(name) for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"release/ is out of date for {stale}: run `make build` and commit"
    for folder in ("source", "notebooks"):
        changed = [str(n) for n, data in _files(tmp_path / folder).items()
                   if data != (COURSE_ROOT / folder / n).read_bytes()]
        assert not changed, (f"the build changes {folder}/{changed} (Colab badge or setup cell): run `make "
                             "build`")


def _blocks(source: str, begin: str, end: str) -> list[str]:
    return re.findall(rf"### {begin}\n(.*?)### {end}", source, flags=re.DOTALL)


def _secret_lines(path) -> set[str]:
    """Lines that appear only inside solution or hidden-test blocks of a source notebook."""
    nb = nbformat.read(path, as_version=4)
    secret, visible = set(), set()
    for cell in nb.cells:
        for begin, end in (("BEGIN SOLUTION", "END SOLUTION"), ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")):
            secret |= {line.strip() for block in _blocks(cell.source, begin, end)
                       for line in block.splitlines()}
        outside = re.sub(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n.*?### END \1", "", cell.source,
                         flags=re.DOTALL)
        visible |= {line.strip() for line in outside.splitlines()}
    return {line for line in secret - visible if len(line) > 12 and not line.startswith("#")}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_leaks_no_solution_and_no_hidden_test(assignment):
    for source in assignment_notebooks(assignment):
        release = COURSE_ROOT / "release" / assignment / source.name
        assert release.exists(), f"{release} is missing: run `make build`"
        cells = nbformat.read(release, as_version=4).cells
        text = "\n".join(c.source for c in cells)
        for marker in MARKERS:
            assert marker not in text, f"{release.name} still holds '{marker}'"
        shown = {line.strip() for c in cells if c.cell_type == "code" for line in c.source.splitlines()}
        leaked = sorted(_secret_lines(source) & shown)
        assert not leaked, f"{release.name} shows instructor-only lines: {leaked[:3]}"
