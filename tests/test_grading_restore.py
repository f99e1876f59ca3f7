"""Deleted, retyped and tampered graded cells are put back from the instructor's version."""

import copy

import nbformat

from autograder.grading.restore import grade_id, restore_cells
from tests.factories import graded_cell_meta, tiny_assignment


def instructor() -> nbformat.NotebookNode:
    """A locked imports cell, the tiny exercise, and a second test cell."""
    nb = tiny_assignment()
    imports = nbformat.v4.new_code_cell("import math", metadata={"nbgrader": {
        "grade": False, "grade_id": "imports", "locked": True, "schema_version": 3, "solution": False,
        "task": False}})
    nb.cells.insert(1, imports)
    nb.cells.append(nbformat.v4.new_code_cell("assert double(0) == 0", metadata=graded_cell_meta("zero-tests", 1)))
    return nb


def ids(nb) -> list:
    return [grade_id(c) for c in nb.cells]


def test_an_untouched_notebook_comes_back_unchanged():
    nb = instructor()
    restored, notes = restore_cells(nb, instructor())
    assert notes == [] and ids(restored) == ids(nb)
    assert [c.source for c in restored.cells] == [c.source for c in nb.cells]


def test_a_deleted_test_cell_is_restored_after_its_answer():
    nb = instructor()
    del nb.cells[3]  # double-tests
    restored, notes = restore_cells(nb, instructor())
    assert ids(restored) == ids(instructor())
    assert notes == ["restored deleted test cell 'double-tests'"]


def test_a_test_cell_turned_into_markdown_becomes_the_instructors_code_cell_again():
    nb = instructor()
    cell = nb.cells[3]
    nb.cells[3] = nbformat.v4.new_markdown_cell(cell.source, metadata=cell.metadata)
    restored, notes = restore_cells(nb, instructor())
    assert restored.cells[3].cell_type == "code" and restored.cells[3].source == instructor().cells[3].source
    assert notes == ["restored test cell 'double-tests' (it had been changed to markdown)"]


def test_a_test_cell_whose_grading_flags_were_edited_is_restored():
    nb = instructor()
    nb.cells[3].metadata["nbgrader"]["grade"] = False
    restored, notes = restore_cells(nb, instructor())
    assert restored.cells[3].metadata["nbgrader"]["grade"] is True
    assert "grading metadata had been edited" in notes[0]


def test_a_retyped_answer_cell_keeps_the_students_code():
    nb = instructor()
    nb.cells[2] = nbformat.v4.new_raw_cell("def double(x):\n    return x * 2", metadata=nb.cells[2].metadata)
    restored, notes = restore_cells(nb, instructor())
    assert restored.cells[2].cell_type == "code" and "return x * 2" in restored.cells[2].source
    assert notes == ["answer cell 'double': changed back from raw to code"]


def test_a_deleted_answer_is_not_invented():
    nb = instructor()
    del nb.cells[2]
    restored, notes = restore_cells(nb, instructor())
    assert "double" not in ids(restored) and notes == []


def test_a_deleted_locked_cell_at_the_top_is_restored_first():
    nb = instructor()
    del nb.cells[1]
    restored, notes = restore_cells(nb, instructor())
    assert ids(restored)[:3] == [None, "imports", "double"]
    assert notes == ["restored deleted read-only cell 'imports'"]


def test_copies_and_foreign_cells_lose_their_grading_metadata_but_still_run():
    nb = instructor()
    nb.cells.append(copy.deepcopy(nb.cells[3]))
    nb.cells.append(nbformat.v4.new_code_cell("x = 1", metadata=graded_cell_meta("from-another-course", 5)))
    restored, _ = restore_cells(nb, instructor())
    assert ids(restored).count("double-tests") == 1
    assert restored.cells[-1].source == "x = 1" and "nbgrader" not in restored.cells[-1].metadata


def test_restored_cells_get_unique_ids_and_the_notebook_stays_valid():
    nb = instructor()
    nb.cells[2]["id"] = nb.cells[3]["id"]
    del nb.cells[3]
    restored, _ = restore_cells(nb, instructor())
    cell_ids = [c["id"] for c in restored.cells]
    assert len(cell_ids) == len(set(cell_ids))
    nbformat.validate(restored)


def test_the_students_notebook_object_is_not_modified():
    nb = instructor()
    del nb.cells[3]
    before = nbformat.writes(nb)
    restore_cells(nb, instructor())
    assert nbformat.writes(nb) == before
