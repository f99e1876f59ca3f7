"""`python -m autograder build` turns source/ into release/ reproducibly, and refuses malformed sources."""

import json

import nbformat
import pytest

from autograder.__main__ import main
from autograder.build import BuildError, build_release
from autograder.checks import source_problems
from tests.factories import graded_cell_meta, tiny_assignment


def _release_bytes(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted((root / "release").rglob("*")) if p.is_file()}


def test_build_writes_a_student_version(scratch_course):
    written = build_release(scratch_course)
    assert [p.name for p in written] == ["tiny.ipynb"]
    text = written[0].read_text()
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "return 2 * x" not in text, "the solution leaked into release/"
    assert "double(-3)" not in text, "hidden test code leaked into release/"
    assert "raise NotImplementedError(" in text and "Not done yet" in text, "students get the friendly stub"
    assert "double(2) == 4" in text, "visible tests stay"


def test_build_twice_gives_identical_bytes(scratch_course):
    build_release(scratch_course)
    first = _release_bytes(scratch_course)
    build_release(scratch_course)
    assert _release_bytes(scratch_course) == first


def test_build_leaves_no_gradebook_or_log_in_the_course(scratch_course):
    build_release(scratch_course)
    leftovers = {p.name for p in scratch_course.iterdir()} - {"nbgrader_config.py", "pyproject.toml",
                                                              "source", "release"}
    assert leftovers == set()


def test_instructor_files_stay_out_of_release(scratch_course):
    folder = scratch_course / "source" / "tiny"
    (folder / "solutions.py").write_text("SECRET = 1\n")
    (folder / "instructor-notes.md").write_text("grading notes\n")
    (folder / "data.csv").write_text("a,b\n1,2\n")
    build_release(scratch_course)
    shipped = {p.name for p in (scratch_course / "release" / "tiny").iterdir()}
    assert shipped == {"tiny.ipynb", "data.csv"}


def test_build_removes_stale_release_folders(scratch_course):
    stale = scratch_course / "release" / "gone"
    stale.mkdir(parents=True)
    (stale / "gone.ipynb").write_text("{}")
    build_release(scratch_course)
    assert not stale.exists()


def _break(scratch_course, mutate) -> None:
    path = scratch_course / "source" / "tiny" / "tiny.ipynb"
    nb = nbformat.read(path, as_version=4)
    mutate(nb)
    nbformat.write(nb, path)


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _unpair_solution(nb):
    cell = _cell(nb, "double")
    cell.source = cell.source.replace("### END SOLUTION", "")


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_unpair_solution, "(grade_id 'double'): '### BEGIN SOLUTION' and '### END SOLUTION' do not pair up"),
        (lambda nb: _cell(nb, "double-tests").metadata.nbgrader.update(grade_id="double"),
         "grade_id also used by cell"),
        (lambda nb: _cell(nb, "double-tests").metadata.nbgrader.pop("points"), "needs 'points'"),
        (lambda nb: nb.cells.append(nbformat.v4.new_code_cell("x = 1", metadata=graded_cell_meta("Bad Id"))),
         "(grade_id 'Bad Id'): grade_id must be kebab-case"),
    ],
    ids=["unpaired-solution-marker", "duplicate-grade-id", "missing-points", "bad-grade-id"],
)
def test_malformed_source_fails_naming_file_and_cell_and_keeps_release(scratch_course, mutate, expected):
    build_release(scratch_course)
    before = _release_bytes(scratch_course)
    _break(scratch_course, mutate)
    with pytest.raises(BuildError) as caught:
        build_release(scratch_course)
    assert "tiny.ipynb" in str(caught.value) and expected in str(caught.value)
    assert _release_bytes(scratch_course) == before, "a failed build must leave release/ untouched"


def test_unreadable_source_is_reported(scratch_course):
    (scratch_course / "source" / "tiny" / "tiny.ipynb").write_text("{ not json")
    with pytest.raises(BuildError, match=r"tiny\.ipynb: not a valid notebook"):
        build_release(scratch_course)


def test_unknown_assignment_is_a_clear_error(scratch_course):
    with pytest.raises(BuildError, match="no such assignment in source/: nope"):
        build_release(scratch_course, ["nope"])


def test_checks_accept_a_good_notebook(tmp_path):
    path = tmp_path / "good.ipynb"
    nbformat.write(tiny_assignment(), path)
    assert source_problems(path) == []


def test_cli_build_exit_codes(course_root, monkeypatch, capsys, scratch_course):
    monkeypatch.setattr("autograder.__main__.COURSE_ROOT", scratch_course)
    assert main(["build"]) == 0
    assert "release/ rebuilt: 1 notebooks" in capsys.readouterr().out
    (scratch_course / "source" / "tiny" / "tiny.ipynb").write_text(json.dumps({"cells": 3}))
    assert main(["build"]) == 1
    assert "tiny.ipynb" in capsys.readouterr().err


def test_rebuilding_rescues_a_students_work_in_release(scratch_course):
    build_release(scratch_course)
    worked = scratch_course / "release" / "tiny" / "tiny.ipynb"
    nb = nbformat.read(worked, as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = 'def double(x):\n    """Return 2x."""\n    return x * 2  # my answer'
    nbformat.write(nb, worked)
    build_release(scratch_course)
    rescued = list((scratch_course / "mywork" / "rescued" / "tiny").glob("tiny-*.ipynb"))
    assert len(rescued) == 1 and "my answer" in rescued[0].read_text()
    assert "my answer" not in worked.read_text(), "release/ itself is regenerated"


def test_an_untouched_release_is_not_rescued(scratch_course):
    build_release(scratch_course)
    build_release(scratch_course)
    assert not (scratch_course / "mywork").exists()


def test_build_points_every_hand_written_install_line_at_the_courses_repository(scratch_course):
    """A course that publishes its own fork sets [tool.devicelab] repository (README): `make build` rewrites
    the badges and setup cells, and also every `devicelab @ git+https://github.com/...` line in the guides."""
    pyproject = scratch_course / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('repository = "devicelab-course/device-lab"',
                                                       'repository = "my-uni/gpu-course"')
                         .replace('branch = "main"', 'branch = "fall-2027"'))
    (scratch_course / "docs" / "hub").mkdir(parents=True)
    (scratch_course / "docs" / "students.md").write_text(
        '!pip install --no-deps "devicelab @ git+https://github.com/devicelab-course/device-lab@main"\n'
        "<!-- colab-badges:start (generated by make build) -->\n<!-- colab-badges:end -->\n")
    (scratch_course / "docs" / "hub" / "singleuser.Dockerfile").write_text(
        'RUN pip install "devicelab[instructor] @ git+https://github.com/devicelab-course/device-lab@main"\n')
    build_release(scratch_course)
    guide = (scratch_course / "docs" / "students.md").read_text()
    assert '"devicelab @ git+https://github.com/my-uni/gpu-course@fall-2027"' in guide
    assert "devicelab-course" not in guide
    image = (scratch_course / "docs" / "hub" / "singleuser.Dockerfile").read_text()
    assert '"devicelab[instructor] @ git+https://github.com/my-uni/gpu-course@fall-2027"' in image


def test_the_courses_repository_setting_reinstalls_nothing(tmp_path):
    """The Makefile reinstalls when etc/install_inputs.py's file changes: [project] alone, so a course that
    changes [tool.devicelab] (or the test settings) keeps its environment."""
    import subprocess
    import sys

    from autograder import COURSE_ROOT

    script, inputs = COURSE_ROOT / "etc" / "install_inputs.py", tmp_path / "inputs.toml"
    pyproject = tmp_path / "pyproject.toml"
    original = (COURSE_ROOT / "pyproject.toml").read_text()

    def written(text: str) -> tuple[str, int]:
        pyproject.write_text(text)
        subprocess.run([sys.executable, str(script), str(pyproject), str(inputs)], check=True)
        return inputs.read_text(), inputs.stat().st_mtime_ns

    first, when = written(original)
    assert "[project.optional-dependencies]" in first and "[tool.devicelab]" not in first
    assert written(original.replace('repository = "devicelab-course/device-lab"',
                                    'repository = "my-uni/gpu-course"')) == (first, when)  # left as it was
    changed, _ = written(original.replace('"tqdm>=4.64"', '"tqdm>=4.66"'))
    assert changed != first and '"tqdm>=4.66"' in changed
