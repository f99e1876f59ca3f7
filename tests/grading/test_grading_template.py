"""The generated assignment is made once per version of what it is made of, and reused by later runs."""

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder.grading import template
from tests.grading.test_grading_end_to_end import make_course

pytestmark = pytest.mark.notebook  # runs nbgrader generate_assignment


def set_points(course, grade_id: str, points: float) -> None:
    path = course / "source" / "tiny" / "tiny.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            cell.metadata["nbgrader"]["points"] = points
    nbformat.write(nb, path)


def test_the_template_is_generated_once_then_copied_until_its_source_changes(tmp_path):
    (tmp_path / "course").mkdir()
    course = make_course(tmp_path / "course")
    cache = tmp_path / "out" / template.CACHE_FOLDER
    first, reused = template.cached_template(course, "tiny", cache, tmp_path / "run1" / "template")
    assert not reused and (first / "gradebook.db").is_file()
    assert (first / "release" / "tiny" / "tiny.ipynb").is_file()
    assert not (first / template.COMPLETE).exists()  # the marker stays in the cache
    _, reused = template.cached_template(course, "tiny", cache, tmp_path / "run2" / "template")
    assert reused
    set_points(course, "double-tests", 5)
    third, reused = template.cached_template(course, "tiny", cache, tmp_path / "run3" / "template")
    assert not reused and len(list(cache.iterdir())) == 1  # the old version is removed
    released = nbformat.read(third / "release" / "tiny" / "tiny.ipynb", as_version=4)
    assert json.dumps(released.dict()).count('"points": 5') == 1
    (cache / template.template_key(course, "tiny") / template.COMPLETE).unlink()  # as if interrupted
    _, reused = template.cached_template(course, "tiny", cache, tmp_path / "run4" / "template")
    assert not reused


def test_the_course_gradebook_is_generated_into_only_when_its_definition_differs(tmp_path):
    from autograder.grading import gradebook

    (tmp_path / "course").mkdir()
    course = make_course(tmp_path / "course")
    (course / "source" / "other").mkdir()
    shutil.copyfile(course / "source" / "tiny" / "tiny.ipynb", course / "source" / "other" / "tiny.ipynb")
    db_url, course_id = gradebook.course_db_url(course), gradebook.course_id(course)
    cache = tmp_path / "out" / template.CACHE_FOLDER
    made, _ = template.cached_template(course, "tiny", cache, tmp_path / "t1")
    assert template.register(course, "tiny", made, db_url, course_id, tmp_path / "r1")
    assert not template.register(course, "tiny", made, db_url, course_id, tmp_path / "r2")
    assert template.definition(db_url, course_id, "other") is None  # nothing else is touched
    set_points(course, "double-tests", 7)
    changed, _ = template.cached_template(course, "tiny", cache, tmp_path / "t2")
    assert template.register(course, "tiny", changed, db_url, course_id, tmp_path / "r3")
    grades = dict(template.definition(db_url, course_id, "tiny")["tiny"]["grade"][i][:2] for i in range(2))
    assert grades["double-tests"] == 7


def whole_definition(db_url: str, assignment: str) -> dict:
    """Return everything a gradebook records of an assignment's definition (ids left out: they are random)."""
    from nbgrader.api import Gradebook

    def plain(row) -> dict:
        return {k: v for k, v in row.to_dict().items() if k != "id"}

    with Gradebook(db_url) as gb:
        found = gb.find_assignment(assignment)
        return {"assignment": plain(found),
                "notebooks": {nb.name: {"notebook": plain(nb), "kernelspec": nb.kernelspec,
                                        **{kind: sorted((c.name, plain(c)) for c in getattr(nb, kind))
                                           for kind in ("grade_cells", "solution_cells", "task_cells",
                                                        "source_cells")}}
                              for nb in found.notebooks}}


def test_a_new_assignment_is_defined_by_copying_exactly_what_nbgrader_generate_writes(tmp_path, monkeypatch):
    """nbgrader's user-guide assignment (grade, solution, task and locked cells, two notebooks): the course
    gradebook gets the template's definition without a second nbgrader run, row for row what nbgrader's own
    generate_assignment writes into a gradebook."""
    import nbgrader
    from nbgrader.api import Gradebook

    from autograder.grading import gradebook

    course = tmp_path / "course"
    user_guide = Path(nbgrader.__file__).parent / "docs" / "source" / "user_guide"
    shutil.copytree(user_guide / "source" / "ps1", course / "source" / "ps1")
    (course / "nbgrader_config.py").write_text("c = get_config()\n", encoding="utf-8")
    made, _ = template.cached_template(course, "ps1", tmp_path / "cache", tmp_path / "template")
    by_nbgrader, copied = (f"sqlite:///{tmp_path / name}" for name in ("by-nbgrader.db", "copied.db"))
    for db_url in (by_nbgrader, copied):  # the assignment and due date known first (`nbgrader db` adds them)
        gradebook.ensure_schema(db_url)
        with Gradebook(db_url) as gb:
            gb.update_or_create_assignment("ps1", duedate="2026-12-01 17:00:00 UTC")
    gradebook.generate(course, "ps1", tmp_path / "generated", db_url=by_nbgrader)

    def no_second_run(*args, **kwargs):
        raise AssertionError("nbgrader ran again")

    monkeypatch.setattr(gradebook, "generate_apart", no_second_run)
    assert template.register(course, "ps1", made, copied, "", tmp_path / "register")
    expected = whole_definition(by_nbgrader, "ps1")
    assert expected["notebooks"]["problem1"]["task_cells"], "the scenario has a task cell"
    assert expected["assignment"]["duedate"] is not None
    assert whole_definition(copied, "ps1") == expected
