"""The tests' helper that runs several grading command lines in one Python reports each one as its own."""

from pathlib import Path

from tests.grade_commands import in_one_python


def test_each_command_gets_its_own_exit_status_and_stderr(tmp_path: Path):
    (tmp_path / "course" / "source").mkdir(parents=True)
    course = tmp_path / "course"
    unknown, refused = in_one_python(course, ["grade", "nope", str(course), "--course", str(course)],
                                     ["grade", "nope", str(course), "--jobs", "0"])
    assert unknown[0] == 2 and "no assignment 'nope'" in unknown[1] and "--jobs" not in unknown[1]
    assert refused[0] == 2 and "must be more than 0" in refused[1] and "no assignment" not in refused[1]
