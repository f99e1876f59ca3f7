"""Finding each student's notebooks: layouts, zips, misnamed files, and what counts as missing or invalid."""

import json
import zipfile

import nbformat
import pytest

from autograder.grading import submissions as subs
from autograder.grading.submissions import (
    SubmissionsError,
    match_submission,
    open_submissions,
    read_notebook_json,
    student_folders,
)
from tests.factories import tiny_assignment

EXPECTED = {"tiny.ipynb": {"double", "double-tests"}}


def write_nb(path, nb=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb or tiny_assignment(), path)
    return path


def test_student_folders_skip_system_and_hidden_entries_and_report_loose_files(tmp_path):
    for name in ("bob", "ada", "__MACOSX", ".ipynb_checkpoints", ".git"):
        (tmp_path / name).mkdir()
    (tmp_path / "readme.txt").write_text("x")
    folders, ignored = student_folders(tmp_path)
    assert [f.name for f in folders] == ["ada", "bob"]
    assert ignored == ["readme.txt"]


def test_a_plain_folder_per_student_is_matched_by_file_name(tmp_path):
    path = write_nb(tmp_path / "ada" / "tiny.ipynb")
    sub = match_submission("ada", tmp_path / "ada", EXPECTED, "tiny")
    assert sub.status is None and sub.notebooks == {"tiny.ipynb": path} and not sub.notes


def test_nbgrader_submitted_layout_is_accepted_with_its_timestamp(tmp_path):
    path = write_nb(tmp_path / "ada" / "tiny" / "tiny.ipynb")
    (tmp_path / "ada" / "tiny" / "timestamp.txt").write_text("2025-01-02 10:00:00.000000 UTC\n")
    sub = match_submission("ada", tmp_path / "ada", EXPECTED, "tiny")
    assert sub.notebooks == {"tiny.ipynb": path}
    assert sub.timestamp == "2025-01-02 10:00:00.000000 UTC"


def test_a_misnamed_notebook_is_recognised_by_its_cells(tmp_path):
    path = write_nb(tmp_path / "ada" / "nested" / "Copy of tiny (2).ipynb")
    sub = match_submission("ada", tmp_path / "ada", EXPECTED, "tiny")
    assert sub.notebooks == {"tiny.ipynb": path}
    assert sub.notes == ["graded 'nested/Copy of tiny (2).ipynb' as tiny.ipynb"]


def test_another_assignments_notebook_is_missing_and_named(tmp_path):
    write_nb(tmp_path / "ada" / "ps02.ipynb", nbformat.v4.new_notebook())
    sub = match_submission("ada", tmp_path / "ada", EXPECTED, "tiny")
    assert sub.status == "missing"
    assert sub.detail == "no notebook of this assignment; found ps02.ipynb (none of its cells belong to tiny)"


def test_a_folder_without_notebooks_is_missing_and_says_what_it_holds(tmp_path):
    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / "answers.pdf").write_bytes(b"%PDF")
    assert match_submission("ada", tmp_path / "ada", EXPECTED, "tiny").detail == \
        "no notebook in the folder; found answers.pdf"
    (tmp_path / "bob").mkdir()
    assert match_submission("bob", tmp_path / "bob", EXPECTED, "tiny").detail == "the folder is empty"


@pytest.mark.parametrize(("content", "problem"), [
    ("", "empty file"),
    ("{not json", "not valid JSON"),
    ('{"hello": 1}', "JSON without a list of cells"),
    (b"\xff\xfe\x00", "not UTF-8"),
])
def test_unreadable_notebooks_are_invalid_with_the_reason(tmp_path, content, problem):
    path = tmp_path / "ada" / "tiny.ipynb"
    path.parent.mkdir()
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    sub = match_submission("ada", tmp_path / "ada", EXPECTED, "tiny")
    assert sub.status == "invalid" and sub.detail.startswith("tiny.ipynb: ") and problem in sub.detail


def test_an_unreadable_notebook_under_another_name_is_still_invalid(tmp_path):
    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / "Copy of tiny.ipynb").write_text("")
    sub = match_submission("ada", tmp_path / "ada", EXPECTED, "tiny")
    assert (sub.status, sub.detail) == ("invalid", "Copy of tiny.ipynb: empty file")


def test_too_large_files_are_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(subs, "MAX_NOTEBOOK_BYTES", 10)
    path = write_nb(tmp_path / "tiny.ipynb")
    raw, problem = read_notebook_json(path)
    assert raw is None and problem.startswith("too large")


def test_an_assignment_with_two_notebooks_grades_what_is_there(tmp_path):
    expected = {**EXPECTED, "extra.ipynb": {"extra-tests"}}
    write_nb(tmp_path / "ada" / "tiny.ipynb")
    sub = match_submission("ada", tmp_path / "ada", expected, "tiny")
    assert sub.status is None and list(sub.notebooks) == ["tiny.ipynb"]
    assert sub.notes == ["extra.ipynb not found; scored 0"]


def test_open_submissions_unpacks_a_zip_through_its_wrapper_folder(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("export/ada/tiny.ipynb", nbformat.writes(tiny_assignment()))
        zf.writestr("export/bob/tiny.ipynb", nbformat.writes(tiny_assignment()))
        zf.writestr("../../escape.txt", "outside")
        zf.writestr("/etc/absolute.txt", "outside")
    root = open_submissions(archive, tmp_path / "scratch", "tiny")
    assert sorted(p.name for p in root.iterdir()) == ["ada", "bob"]
    assert not (tmp_path / "escape.txt").exists()
    assert [p.name for p in (tmp_path / "scratch" / "unzipped").iterdir()] == ["export"]


def test_a_zipped_class_of_one_is_not_mistaken_for_a_wrapper(tmp_path):
    archive = tmp_path / "one.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ada/tiny/tiny.ipynb", json.dumps(nbformat.v4.new_notebook()))
    root = open_submissions(archive, tmp_path / "scratch", "tiny")
    assert [p.name for p in root.iterdir()] == ["ada"]


@pytest.mark.parametrize("make",
                         [lambda p: p / "nowhere", lambda p: (p / "f.txt", (p / "f.txt").write_text("x"))[0]])
def test_submissions_that_cannot_be_read_raise_a_clear_error(tmp_path, make):
    with pytest.raises(SubmissionsError):
        open_submissions(make(tmp_path), tmp_path / "scratch", "tiny")


def test_in_nbgrader_layout_a_student_with_only_other_assignments_has_nothing_of_this_one(tmp_path):
    nb = nbformat.v4.new_notebook()
    (tmp_path / "baz" / "ps2").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "baz" / "ps2" / "p1.ipynb")
    sub = match_submission("baz", tmp_path / "baz", {"p1.ipynb": set()}, "ps1", frozenset({"ps2"}))
    assert (sub.status, sub.detail) == ("missing", "no submission of ps1; found ps2/")
