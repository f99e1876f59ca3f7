"""Students' own copies are made once and never overwritten by a course command."""

import pytest

from autograder import COURSE_ROOT
from devicelab.workspace import make_workspace


def test_workspace_copies_lessons_and_assignments(tmp_path):
    report = make_workspace(COURSE_ROOT, tmp_path / "mywork")
    names = {p.relative_to(tmp_path / "mywork").as_posix() for p in report.copied}
    assert "notebooks/00-start-here.ipynb" in names
    assert "release/ps01-tensors-and-devices/ps01-tensors-and-devices.ipynb" in names
    assert "notebooks/traces/simulated-timed-step.json" in names  # lesson 07 opens it beside itself
    assert report.kept == []


def test_every_relative_link_of_a_lesson_leads_to_a_copy_in_the_workspace(tmp_path):
    """The lessons link to their problem sets (../release/), pictures and guides (../docs/): in mywork/ those
    are the student's copies (JupyterLab opened on mywork/ serves nothing outside it)."""
    import re

    import nbformat

    make_workspace(COURSE_ROOT, tmp_path / "mywork")
    missing = []
    for lesson in sorted((tmp_path / "mywork" / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(lesson, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", cell.source):
                if "://" not in target and not (lesson.parent / target).exists():
                    missing.append(f"{lesson.name}: {target}")
    assert not missing, missing


def test_a_course_update_adds_only_what_is_new(tmp_path):
    course = tmp_path / "course"
    (course / "notebooks" / ".ipynb_checkpoints").mkdir(parents=True)
    (course / "release").mkdir()
    (course / "notebooks" / "00-start-here.ipynb").write_text("{}")
    (course / "notebooks" / ".ipynb_checkpoints" / "00-start-here-checkpoint.ipynb").write_text("{}")
    make_workspace(course, tmp_path / "mywork")
    (tmp_path / "mywork" / "notebooks" / "00-start-here.ipynb").write_text('{"mine": 1}')
    (course / "notebooks" / "01-tensors.ipynb").write_text("{}")  # the update: a new lesson
    report = make_workspace(course, tmp_path / "mywork")
    assert [p.name for p in report.copied] == ["01-tensors.ipynb"]
    assert (tmp_path / "mywork" / "notebooks" / "00-start-here.ipynb").read_text() == '{"mine": 1}'
    assert not (tmp_path / "mywork" / "notebooks" / ".ipynb_checkpoints").exists()


def test_rerunning_keeps_edited_copies(tmp_path):
    target = tmp_path / "mywork"
    make_workspace(COURSE_ROOT, target)
    mine = target / "release" / "ps01-tensors-and-devices" / "ps01-tensors-and-devices.ipynb"
    mine.write_text('{"my": "work"}')
    report = make_workspace(COURSE_ROOT, target)
    assert mine.read_text() == '{"my": "work"}'
    assert mine in report.kept and report.copied == []


def test_refuses_to_copy_onto_the_course_itself():
    with pytest.raises(ValueError, match="course folder"):
        make_workspace(COURSE_ROOT, COURSE_ROOT / "release")


def test_cli_copies_then_keeps(tmp_path, capsys):
    from devicelab.__main__ import main

    target = tmp_path / "mine"
    assert main(["workspace", str(target), "--course", str(COURSE_ROOT)]) == 0
    first = capsys.readouterr().out
    assert main(["workspace", str(target), "--course", str(COURSE_ROOT)]) == 0
    second = capsys.readouterr().out
    assert "0 of your copies left" in first and "0 new files copied" in second


def test_cli_refuses_a_folder_that_is_not_the_course(tmp_path, capsys):
    from devicelab.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["workspace", str(tmp_path / "mine"), "--course", str(tmp_path)])
    assert exit_info.value.code == 2 and "not the course folder" in capsys.readouterr().err
