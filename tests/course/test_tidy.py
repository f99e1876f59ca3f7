"""Notebooks are committed clean, and `tidy` makes them so without losing nbgrader metadata."""

import json

import nbformat
import pytest

from autograder import COURSE_ROOT
from autograder.course import course_notebooks
from autograder.tidy import is_tidy, tidy_file, tidy_text

NOTEBOOKS = course_notebooks()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(COURSE_ROOT)))
def test_committed_notebook_is_tidy(path):
    assert is_tidy(path), f"{path.relative_to(COURSE_ROOT)} is not tidy: run `make tidy` and commit"


def test_there_are_notebooks_to_check():
    assert any(p.parts[-3] == "source" for p in NOTEBOOKS)
    assert any(p.parent.name == "notebooks" for p in NOTEBOOKS)


def _messy_notebook() -> str:
    v4 = nbformat.v4
    nb = v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "myenv", "display_name": "My env", "language": "python"},
                   "language_info": {"name": "python", "version": "3.11.7"}, "widgets": {"state": {}},
                   "colab": {"provenance": []}}
    code = v4.new_code_cell("print(1)\n\n", execution_count=7,
                            outputs=[v4.new_output("stream", name="stdout", text="1\n")],
                            metadata={"collapsed": True, "scrolled": False,
                                      "tags": ["raises-exception", ""][:1],
                                      "nbgrader": {"grade": True, "grade_id": "x-tests", "points": 1,
                                                   "locked": True, "schema_version": 3, "solution": False,
                                                   "task": False}})
    twin = v4.new_code_cell("print(2)", metadata={"ExecuteTime": {"end_time": "2024"}})
    nb.cells = [v4.new_markdown_cell("# Title"), code, twin]
    raw = json.loads(nbformat.writes(nb))
    raw["cells"][2]["id"] = raw["cells"][1]["id"]  # a duplicated id, as copy-pasting between notebooks makes
    return json.dumps(raw)


def test_tidy_strips_outputs_counts_and_stray_metadata():
    tidy = json.loads(tidy_text(_messy_notebook()))
    code = tidy["cells"][1]
    assert code["outputs"] == [] and code["execution_count"] is None
    assert set(code["metadata"]) == {"nbgrader", "tags"}, "nbgrader metadata and tags must survive tidy"
    assert code["metadata"]["nbgrader"]["grade_id"] == "x-tests"
    assert "".join(code["source"]) == "print(1)", "trailing blank lines are trimmed"
    assert tidy["cells"][2]["metadata"] == {}
    assert tidy["metadata"]["kernelspec"]["name"] == "python3"
    assert "widgets" not in tidy["metadata"] and tidy["metadata"]["colab"] == {"provenance": []}


def test_tidy_gives_unique_valid_ids_and_is_idempotent():
    once = tidy_text(_messy_notebook())
    ids = [c["id"] for c in json.loads(once)["cells"]]
    assert len(set(ids)) == len(ids)
    assert tidy_text(once) == once


def test_tidy_file_reports_changes(tmp_path):
    path = tmp_path / "messy.ipynb"
    path.write_text(_messy_notebook(), encoding="utf-8")
    assert not is_tidy(path)
    assert tidy_file(path) is True
    assert is_tidy(path)
    assert tidy_file(path) is False
    nbformat.validate(nbformat.read(path, as_version=4))
