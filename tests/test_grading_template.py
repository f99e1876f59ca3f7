"""The generated assignment is made once per version of what it is made of, and reused by later runs."""

import json
import shutil

import nbformat
import pytest

from autograder.grading import template
from tests.test_grading_end_to_end import make_course

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
