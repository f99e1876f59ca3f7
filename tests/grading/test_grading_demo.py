"""The demo class is built from the instructor's notebook: right answers pass, undone ones fail."""

import nbformat

from autograder.grading import gradebook
from autograder.grading.demo import PLAN, build_class, class_notebooks, solved
from tests.harness import run_graded_cells, score


def release_and_source(course):
    generated = gradebook.generate(course, "tiny", course / "generated")
    release = nbformat.read(generated / "release" / "tiny" / "tiny.ipynb", as_version=4)
    return release, nbformat.read(course / "source" / "tiny" / "tiny.ipynb", as_version=4)


def test_solved_fills_every_answer_without_the_solution_markers(scratch_course, tmp_path):
    release, source = release_and_source(scratch_course)
    right = solved(release, source)
    assert "### BEGIN SOLUTION" not in nbformat.writes(right) and "return 2 * x" in nbformat.writes(right)
    nbformat.write(right, tmp_path / "right.ipynb")
    nbformat.write(release, tmp_path / "stub.ipynb")
    assert score(run_graded_cells(tmp_path / "right.ipynb")) == (2, 2)
    assert score(run_graded_cells(tmp_path / "stub.ipynb")) == (0, 2)


def test_the_class_has_every_planned_kind_of_student(scratch_course):
    release, source = release_and_source(scratch_course)
    made = class_notebooks(release, source, "tiny.ipynb")
    assert set(made) == set(PLAN)
    assert list(made["dia"]) == ["Copy of tiny.ipynb"] and made["gus"] == {"tiny.ipynb": ""}
    assert "os._exit" in nbformat.writes(made["fay"]["tiny.ipynb"])
    assert not [c for c in made["eli"]["tiny.ipynb"].cells if c.metadata.get("nbgrader", {}).get("grade")]


def test_build_class_writes_one_folder_per_student(scratch_course, tmp_path):
    students = build_class(scratch_course, "tiny", tmp_path / "class")
    assert sorted(p.name for p in (tmp_path / "class").iterdir()) == students == sorted(PLAN)
    assert (tmp_path / "class" / "hal" / "answers.txt").exists()
