"""Student code in the bubblewrap sandbox swaps files of its folder for links; the grader must not follow
them.

Hole 2 of issue 24: the kernel's working folder was nbgrader's autograded folder, where nbgrader (outside the
sandbox, as the grader) then wrote the executed notebook, set permissions and from which the course's copy and
the feedback were read. One class with `--sandbox bwrap` is graded once; every hostile student answers
`double` wrongly (1 of 3 points earned) and replaces files with links to two stand-ins outside the scratch:
one for the gradebook or the instructor's source, one for another student's file.
"""

import os
import stat
from pathlib import Path

import pytest

from tests.grading.test_grading_end_to_end import assignment, grade, make_course, rows, with_cell, write_class
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook

# in both stand-ins: must appear in no feedback page and no course file of theirs
SECRET = "TARGET-SECRET-7f3a"
PLANT = '''import os
def plant(link, target):
    """Replace `link` (a file or folder of the sandbox) with a symlink to `target`."""
    try:
        if os.path.islink(link) or os.path.isfile(link):
            os.remove(link)
        os.makedirs(os.path.dirname(link) or ".", exist_ok=True)
        os.symlink(target, link)
    except OSError as e:
        print("refused", link, e)
'''


def hostile(code: str) -> dict:
    """Return the files of a student who answers `double` wrongly (1 of 3) and runs `code` after plant()."""
    return {"tiny.ipynb": with_cell(PLANT + code, assignment(double="return x + 2")), "data.csv": "my data"}


STUDENTS = {
    "honest": {"tiny.ipynb": with_cell("print(open('data.csv').read().upper(), "
                                       "open('helper.csv').read().upper())"),
               "data.csv": "my data"},
    "link-notebook": hostile("plant('tiny.ipynb', '@GRADEBOOK@')"),
    "link-notebook-other": hostile("plant('tiny.ipynb', '@OTHER@')"),
    "link-extras": hostile("plant('data.csv', '@GRADEBOOK@')\nplant('leak.txt', '@OTHER@')\n"
                           "plant('sub/deep.txt', '@GRADEBOOK@')\nplant('outside', '@OUTSIDE@')"),
    "link-home": hostile(
        "home = os.path.expanduser('~')\n"
        "for name in os.listdir(home):\n    plant(os.path.join(home, name), '@OUTSIDE@')\n"
        "for var in ('IPYTHONDIR', 'JUPYTER_CONFIG_DIR', 'JUPYTER_DATA_DIR', 'MPLCONFIGDIR'):\n"
        "    plant(os.environ[var], '@OUTSIDE@')\n"
        "plant(os.path.join(home, 'tmp', 'x'), '@GRADEBOOK@')\n"),
    "template": hostile(
        "for base in (os.environ['JUPYTER_DATA_DIR'], os.path.expanduser('~/.local/share/jupyter')):\n"
        "    for name in ('classic', 'lab', 'base', 'feedback'):\n"
        "        folder = os.path.join(base, 'nbconvert', 'templates', name)\n"
        "        os.makedirs(folder, exist_ok=True)\n"
        "        open(os.path.join(folder, 'index.html.j2'), 'w').write(\n"
        "            \"{{ cycler.__init__.__globals__.os.system('echo pwned > @OUTSIDE@/pwned') }}\")\n"
        "        open(os.path.join(folder, 'conf.json'), 'w').write('{}')\n"
        "for var in ('JUPYTER_CONFIG_DIR',):\n"
        "    os.makedirs(os.environ[var], exist_ok=True)\n"
        "    for app in ('jupyter_nbconvert_config.py', 'nbgrader_config.py', 'jupyter_config.py'):\n"
        "        open(os.path.join(os.environ[var], app), 'w').write(\n"
        "            \"open('@OUTSIDE@/pwned', 'w').write('pwned')\\n\")\n"),
    "link-runtime": hostile(
        "rt = os.environ['JUPYTER_RUNTIME_DIR']\n"
        "for name in os.listdir(rt):\n    plant(os.path.join(rt, name), '@GRADEBOOK@')\n"),
}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """Grade the class once with bubblewrap; return (course, outside folder, record)."""
    from autograder.grading.sandbox import IsolationUnavailable, detect_isolation

    try:
        detect_isolation("bwrap")
    except IsolationUnavailable as exc:
        pytest.skip(str(exc))

    def grade_it(folder: Path) -> dict:
        course = folder / "course"
        course.mkdir()
        make_course(course)
        (course / "source" / "tiny" / "helper.csv").write_text("the instructor's data")
        outside = folder / "outside"
        outside.mkdir()
        (outside / "gradebook-standin.db").write_text(f"{SECRET} the gradebook\n")
        (outside / "other-student.txt").write_text(f"{SECRET} another student's feedback\n")
        marks = {"@GRADEBOOK@": str(outside / "gradebook-standin.db"),
                 "@OTHER@": str(outside / "other-student.txt"), "@OUTSIDE@": str(outside)}
        students = {}
        for student, files in STUDENTS.items():
            students[student] = ({name: _replace(content, marks) for name, content in files.items()},)
        write_class(course / "incoming", students, course)
        modes = {p.name: p.stat().st_mode for p in outside.iterdir()}
        done = grade(course, course / "incoming", "--sandbox", "bwrap")
        return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-5000:],
                "modes": modes}

    folder, record = once_per_run(tmp_path_factory, "grading-writethrough", grade_it)
    return folder / "course", folder / "outside", record


def _replace(content, marks: dict[str, str]):
    import json

    import nbformat

    text = content if isinstance(content, str) else nbformat.writes(content)
    for mark, value in marks.items():
        text = text.replace(mark, json.dumps(value)[1:-1] if not isinstance(content, str) else value)
    return text if isinstance(content, str) else nbformat.reads(text, as_version=4)


def test_the_run_finishes_and_the_honest_student_reads_their_files_and_gets_full_marks(attacked):
    course, _, record = attacked
    assert record["returncode"] == 0, record["stderr"]
    assert rows(course)["honest"]["status"] == "graded" and float(rows(course)["honest"]["score"]) == 3
    assert (course / "graded" / "tiny" / "feedback" / "honest" / "tiny.html").is_file()
    graded = (course / "autograded" / "honest" / "tiny" / "tiny.ipynb").read_text(encoding="utf-8")
    assert "MY DATA THE INSTRUCTOR'S DATA" in graded  # what their cell printed, read from their own files


def test_files_outside_the_scratch_are_unchanged_and_nothing_ran_as_the_grader(attacked):
    _, outside, record = attacked
    assert sorted(p.name for p in outside.iterdir()) == ["gradebook-standin.db", "other-student.txt"]
    assert (outside / "gradebook-standin.db").read_text() == f"{SECRET} the gradebook\n"
    assert (outside / "other-student.txt").read_text() == f"{SECRET} another student's feedback\n"
    for path in outside.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(record["modes"][path.name]), path.name


@pytest.mark.parametrize("student", sorted(set(STUDENTS) - {"honest"}))
def test_a_student_who_plants_links_earns_only_their_marks_and_sees_no_target(attacked, student):
    course, _, _ = attacked
    row = rows(course)[student]
    assert float(row["score"]) <= 1, row
    feedback = course / "graded" / "tiny" / "feedback" / student
    for page in feedback.glob("*"):
        assert SECRET not in page.read_text(encoding="utf-8", errors="replace"), page
    for folder in (course / "autograded" / student, feedback):
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                assert not path.is_symlink(), path
                if path.is_file():
                    assert SECRET.encode() not in path.read_bytes(), path
