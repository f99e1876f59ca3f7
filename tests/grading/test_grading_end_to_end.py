"""`python -m autograder grade` on a small class of hostile submissions, graded together with --jobs 2.

One run grades the whole class (a module fixture); each test then checks one promise of the issue:
every student gets the right row, good students get full marks, the gradebook and feedback are right,
nothing outside the scratch folders changes, no process is left behind, and a rerun changes nothing.
"""

import csv
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from autograder import COURSE_ROOT
from autograder.course import with_venv_on_path
from tests.factories import graded_cell_meta, solution_cell_meta, tiny_assignment
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook

TIMEOUT = 10  # the hostile class's time limit per notebook: its loops run until it ends
# The limit of a run in which no student may reach it: there a cell's start on a loaded machine (a cold
# `import torch`, a worker's first kernel) must never decide a row, and no one waits it out.
ROOMY = 120
MEMORY_MIB = 600
DAEMON = "4321.5"  # `sleep 4321.5`: a process a student's code detaches, which must not outlive grading
STORM = "4321.25"  # the fork storm's children, told apart from DAEMON (the two tests may run at once)


def assignment(double: str = "return 2 * x", square: str = "return x * x") -> nbformat.NotebookNode:
    """Return a two-exercise notebook: `double` (2 points, from tests.factories) and `square` (1 point)."""
    nb = tiny_assignment(double)
    v4 = nbformat.v4
    nb.cells += [
        v4.new_code_cell('def square(x):\n    """Return x squared."""\n    ### BEGIN SOLUTION\n'
                         f'    {square}\n'
                         "    ### END SOLUTION", metadata=solution_cell_meta("square")),
        v4.new_code_cell("assert square(3) == 9, 'square(3) should be 9'",
                         metadata=graded_cell_meta("square-tests", 1)),
    ]
    return nb


def with_cell(code: str, nb: nbformat.NotebookNode | None = None) -> nbformat.NotebookNode:
    """Return a correct notebook with one extra (ungraded) cell inserted after the first answer."""
    nb = nb or assignment()
    nb.cells.insert(2, nbformat.v4.new_code_cell(code))
    return nb


def _deleted_test() -> nbformat.NotebookNode:
    nb = assignment(double="return x + 2")
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "double-tests"]
    return nb


def _retyped_test() -> nbformat.NotebookNode:
    nb = assignment()
    cell = nb.cells[-1]
    nb.cells[-1] = nbformat.v4.new_markdown_cell(cell.source, metadata=cell.metadata)
    return nb


LOOP = "while True:\n        pass"
# Stuck, but not spinning: each spinning student burns a core for the whole time limit, taken from the rest
# of the suite (the hostile class's `loop` is the one that spins).
WAITING_LOOP = "import time\n    while True:\n        time.sleep(0.1)"
DEAF_LOOP = ("import signal, time\n    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    while True:\n"
             "        time.sleep(0.1)")

FORGED_FRAME = ("get_ipython().kernel.iopub_socket.send_multipart([b'x', b'<IDS|MSG>', "
                "b'<script>alert(1)</script>', b'{}', b'{}', b'{}', b'{}'])\nimport time\ntime.sleep(1)")

# student -> (files, expected status, expected score (of 3), pattern the detail must match)
CLASS = {
    "correct": ({"tiny.ipynb": assignment()}, "graded", 3, r"^$"),
    "wrong": ({"tiny.ipynb": assignment(double="return x + 2")}, "graded", 1,
              r"failed 1 of 2 tests: double-tests"),
    "loop": ({"tiny.ipynb": assignment(square=LOOP)}, "timeout", 2, r"cell 5 \(square-tests\).*time limit"),
    "deaf-loop": ({"tiny.ipynb": assignment(square=DEAF_LOOP)}, "timeout", 2,
                  r"square-tests.*ignored the interrupt.*graded again without running that cell"),
    "os-exit": ({"tiny.ipynb": with_cell("import os\nos._exit(1)")}, "crashed", 3,
                r"cell 3: the kernel exited"),
    "segfault": ({"tiny.ipynb": with_cell("import ctypes\nctypes.string_at(0)")}, "crashed", 3, r"SIGSEGV"),
    # the kernel signs its messages with a key the grader does not know: nothing it sends can be read
    "forged-signature": ({"tiny.ipynb": with_cell("get_ipython().kernel.session.key = b'not-the-key'")},
                         "crashed", 3, (r"cell 3: the kernel sent a message the grader could not read "
                                        r"\(ValueError: Invalid Signature.*graded again without running")),
    # a frame of the student's own making, its "signature" markup: it reaches the detail, read as text
    "forged-frame": ({"tiny.ipynb": with_cell(FORGED_FRAME)}, "crashed", 3,
                     (r"cell 3: the kernel sent a message the grader could not read \(ValueError: Invalid "
                     r"Signature: b'<script>alert\(1\)</script>'\); graded again without running")),
    "killpg": ({"tiny.ipynb": with_cell("import os, signal\nos.killpg(0, signal.SIGKILL)")}, "crashed", 3,
               r"cell 3: the kernel"),
    "memory-hog": ({"tiny.ipynb": with_cell("x = bytearray(64 * 2**30)")}, "memory", 3, r"MemoryError"),
    "memory-grow": (
        {"tiny.ipynb": with_cell("blocks = []\nwhile True:\n    blocks.append(b'x' * (50 * 2**20))")},
                    "memory", 3,
                    # the cap, or (a warm kernel's address space already holds torch) the address-space limit
                    r"cell 3: (used more than the 600 MiB memory cap|ran out of memory \(MemoryError\))"),
    # 30 000 prints (170,000 characters, past the cell's cap on their own): a flood of messages that ends far
    # inside the 10 s limit on a loaded 2-core machine (300 000 ran past it there once; 100 000 took 2 s in
    # the kernel alone beside other tests), then one output far over the cap
    "flood": ({"tiny.ipynb": with_cell("for i in range(30_000):\n    print(i)\nprint('x' * 5_000_000)")},
              "graded", 3, r"characters of output dropped"),
    "sys-exit": ({"tiny.ipynb": with_cell("import sys\nsys.exit(3)")}, "graded", 3, r"called sys.exit"),
    "deleted-test": ({"tiny.ipynb": _deleted_test()}, "graded", 1,
                     r"restored deleted test cell 'double-tests'"),
    "retyped-test": ({"tiny.ipynb": _retyped_test()}, "graded", 3, r"restored test cell 'square-tests'"),
    "misnamed": ({"tiny (1).ipynb": assignment()}, "graded", 3, r"graded 'tiny \(1\).ipynb' as tiny.ipynb"),
    "empty": ({"tiny.ipynb": ""}, "invalid", 0, r"tiny.ipynb: empty file"),
    "not-json": ({"tiny.ipynb": "{this is not json"}, "invalid", 0, r"not valid JSON"),
    "broken-cells": ({"tiny.ipynb": '{"cells": [42], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'},
                     "invalid", 0, r"tiny.ipynb: not a valid notebook"),
    "other-homework": ({"ps99.ipynb": nbformat.v4.new_notebook()}, "missing", 0,
                       r"no notebook of this assignment"),
    "no-notebook": ({"answers.txt": "see attached"}, "missing", 0, r"found answers.txt"),
    "daemon": ({"tiny.ipynb": with_cell(f"import subprocess\nsubprocess.Popen(['sleep', '{DAEMON}'], "
                                        "start_new_session=True)")}, "graded", 3, r"^$"),
    "file-flood": ({"tiny.ipynb": with_cell("import os\nos.makedirs('flood', exist_ok=True)\n"
                                            "for i in range(300_000):\n    open(f'flood/{i}', 'w').close()")},
                   "disk", 3,
                   r"cell 3: wrote more than 10,000 files; stopped; graded again without running that cell"),
    # it writes its last 100 MiB past a hole, so the cap stops real writes (a full GiB in the box's /tmp,
    # which counts against its memory, once took longer than the 10 s limit on a loaded machine: `timeout`)
    "huge-file": ({"tiny.ipynb": with_cell("with open('/tmp/big', 'wb') as f:\n    f.seek(960 * 2**20)\n"
                                           "    for _ in range(100):\n        f.write(b'x' * 2**20)")},
                  "disk", 3, r"cell 3: wrote a file larger than the 1024 MiB limit"),
}
# Only where student code is in its own PID namespace and sees a read-only file system:
PROTECTED = {
    "kill-parent": ({"tiny.ipynb": with_cell("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")},
                    "graded", 3, r"^$"),
    "tamper": ({"tiny.ipynb": with_cell(
        "for p in ['@COURSE@/source/tiny/tiny.ipynb', '@COURSE@/incoming/ok/x.txt', "
        "'@COURSE@/gradebook.db']:\n"
        "    try:\n        open(p, 'w').write('pwned')\n    except OSError as e:\n        print(e)")},
               "graded", 3, r"^$"),
}


def write_class(folder: Path, students: dict, course: Path) -> None:
    """Write each student's files into folder/<student>/ (@COURSE@ in a cell becomes the course path)."""
    for student, (files, *_rest) in students.items():
        (folder / student).mkdir(parents=True)
        for name, content in files.items():
            if isinstance(content, str):
                (folder / student / name).write_text(content, encoding="utf-8")
            else:
                nb = nbformat.from_dict(json.loads(nbformat.writes(content).replace("@COURSE@", str(course))))
                nbformat.write(nb, folder / student / name)


def grade(course: Path, submissions: Path, *extra: str) -> subprocess.CompletedProcess:
    """Run `python -m autograder grade tiny SUBMISSIONS` on a scratch course."""
    cmd = [sys.executable, "-m", "autograder", "grade", "tiny", str(submissions), "--course", str(course),
           "--jobs", "2", "--timeout", str(TIMEOUT), "--memory", str(MEMORY_MIB), "--quiet", *extra]
    proc = subprocess.Popen(cmd, cwd=COURSE_ROOT, env=with_venv_on_path(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=600)
    done = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    done.pid = proc.pid  # its process caps are named after it
    return done


def caps_left(pid: int) -> list[Path]:
    """Return the process caps (cgroups) a finished grading run left behind."""
    return list(Path("/sys/fs/cgroup/pids").glob(f"devicelab-grade-{pid}-*"))


def rows(course: Path) -> dict[str, dict]:
    """Return grades.csv as student -> row."""
    with (course / "graded" / "tiny" / "grades.csv").open(encoding="utf-8") as handle:
        return {r["student"]: r for r in csv.DictReader(handle)}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_course(folder: Path) -> Path:
    """Return a scratch course holding the two-exercise assignment `tiny`."""
    shutil.copyfile(COURSE_ROOT / "nbgrader_config.py", folder / "nbgrader_config.py")
    (folder / "source" / "tiny").mkdir(parents=True)
    nbformat.write(assignment(), folder / "source" / "tiny" / "tiny.ipynb")
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the whole hostile class once (once per test run, even across xdist workers).

    Returns (course, submissions, run record, expected rows, hash of the instructor's notebook).
    """

    def grade_the_class(course: Path) -> dict:
        from autograder.grading.sandbox import detect_isolation

        make_course(course)
        students = dict(CLASS)
        if detect_isolation("auto").mode == "bwrap":
            students.update(PROTECTED)
        write_class(course / "incoming", students, course)
        (course / "incoming" / "ok").mkdir()
        record = {"source_hash": digest(course / "source" / "tiny" / "tiny.ipynb"),
                  "students": sorted(students)}
        started = time.monotonic()
        done = grade(course, course / "incoming")
        return {**record, "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-5000:],
                "seconds": round(time.monotonic() - started, 1), "pid": done.pid}

    course, record = once_per_run(tmp_path_factory, "grading-class", grade_the_class)
    print(f"\ngraded {len(record['students'])} students in {record['seconds']} s\n{record['stdout']}")
    students = {k: v for k, v in {**CLASS, **PROTECTED}.items() if k in record["students"]}
    return course, course / "incoming", record, students, record["source_hash"]


def test_every_student_folder_gets_exactly_one_row(graded):
    course, _, record, students, _ = graded
    assert record["returncode"] == 0, record["stderr"]
    header = (course / "graded" / "tiny" / "grades.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == '"student","assignment","score","max_score","late_penalty","status","detail","flags"'
    assert set(rows(course)) == set(students) | {"ok"}
    assert rows(course)["ok"]["status"] == "missing"


@pytest.mark.parametrize("student", sorted({**CLASS, **PROTECTED}))
def test_each_case_gets_its_status_score_and_detail(graded, student):
    course, _, _, students, _ = graded
    if student not in students:
        pytest.skip("needs bubblewrap isolation")
    _, status, score, pattern = students[student]
    row = rows(course)[student]
    assert (row["status"], float(row["score"]), row["max_score"]) == (status, score, "3"), row
    assert re.search(pattern, row["detail"]), row["detail"]


def test_gradebook_has_every_result_and_nothing_waits_for_a_human(graded):
    from nbgrader.api import Gradebook

    course, _, _, students, _ = graded
    table = rows(course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "device-lab") as gb:
        assert {s.id for s in gb.students} >= set(students)
        for student, row in table.items():
            if row["status"] == "missing":
                assert not gb.find_student(student).submissions, student
                continue
            submission = gb.find_submission("tiny", student)
            assert submission.score == float(row["score"]), student
            assert not submission.needs_manual_grade, student


def test_feedback_is_written_and_output_floods_are_cut(graded):
    course, _, _, _, _ = graded
    feedback = course / "graded" / "tiny" / "feedback"
    for student, row in rows(course).items():
        page = feedback / student / "tiny.html"
        assert page.exists() == (row["status"] not in ("invalid", "missing")), student
    assert (feedback / "flood" / "tiny.html").stat().st_size < 1_500_000
    # the flood is cut where the instructor reads it (a student's page rebuilds outputs from the tests)
    flood = (course / "autograded" / "flood" / "tiny" / "tiny.ipynb").read_text(encoding="utf-8")
    assert "more characters of output were dropped" in flood and len(flood) < 1_500_000
    assert (course / "autograded" / "correct" / "tiny" / "tiny.ipynb").exists()


def test_summary_page_shows_distribution_and_pass_rates(graded):
    course, _, _, _, _ = graded
    page = (course / "graded" / "tiny" / "summary.html").read_text(encoding="utf-8")
    assert "<svg" in page and "double-tests" in page and "square-tests" in page
    # a student's markup in a detail (forged-frame's) is text on the staff's page, never markup
    assert "&lt;script&gt;alert(1)" in page and "<script>alert" not in page


def test_nothing_outside_the_scratch_folders_changed(graded):
    course, submissions, _, _, source_hash = graded
    assert digest(course / "source" / "tiny" / "tiny.ipynb") == source_hash
    assert not (submissions / "ok" / "x.txt").exists()
    assert (course / "gradebook.db").read_bytes()[:15] == b"SQLite format 3"


def test_no_student_process_outlives_grading(graded):
    left = [p for p in psutil.process_iter(["cmdline"]) if DAEMON in " ".join(p.info["cmdline"] or [])]
    assert not left
    assert not caps_left(graded[2]["pid"])  # the process caps are removed


def test_rerun_changes_nothing_and_an_interrupted_run_finishes_the_rest(graded, tmp_path):
    from nbgrader.api import Gradebook

    original, _, _, students, _ = graded
    course = tmp_path / "course"
    shutil.copytree(original, course, ignore=shutil.ignore_patterns("*.lock"))
    before = (course / "graded" / "tiny" / "grades.csv").read_text(encoding="utf-8")
    again = grade(course, course / "incoming")
    assert again.returncode == 0, again.stderr
    assert "to grade" not in again.stdout and "unchanged" in again.stdout
    assert (course / "graded" / "tiny" / "grades.csv").read_text(encoding="utf-8") == before
    for student in ("correct", "wrong"):  # as if the run had stopped before these two were saved
        (course / "graded" / "tiny" / "results" / f"{student}.json").unlink()
    resumed = grade(course, course / "incoming")
    assert resumed.returncode == 0, resumed.stderr
    assert "2 to grade" in resumed.stdout
    assert (course / "graded" / "tiny" / "grades.csv").read_text(encoding="utf-8") == before
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "device-lab") as gb:
        assert len(gb.find_assignment("tiny").submissions) == sum(
            1 for r in rows(course).values() if r["status"] != "missing")
    saved = json.loads((course / "graded" / "tiny" / "results" / "correct.json").read_text())
    assert saved["status"] == "graded" and len(students) > 10
    # results graded elsewhere (another machine) are recorded, not regraded
    (course / "gradebook.db").unlink()
    merged = grade(course, course / "incoming")
    assert merged.returncode == 0 and "to grade" not in merged.stdout, merged.stderr
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "device-lab") as gb:
        assert gb.find_submission("tiny", "wrong").score == 1


def grading_in_background(tmp_path: Path, correct: int, saved: int) -> tuple[Path, dict, subprocess.Popen]:
    """Start grading `correct` right students and one who never finishes; return once `saved` results are
    saved."""
    course = make_course(tmp_path)
    students = {f"s{k}": CLASS["correct"] for k in range(correct)} | {
        "loop": ({"tiny.ipynb": assignment(square=WAITING_LOOP)},)}
    write_class(course / "incoming", students, course)
    cmd = [sys.executable, "-m", "autograder", "grade", "tiny", str(course / "incoming"), "--course",
           str(course), "--jobs", "2", "--timeout", str(TIMEOUT), "--memory", str(MEMORY_MIB), "--quiet"]
    run = subprocess.Popen(cmd, cwd=COURSE_ROOT, env=with_venv_on_path(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    results = course / "graded" / "tiny" / "results"
    deadline = time.monotonic() + 120
    while len(list(results.glob("*.json"))) < saved and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
    return course, students, run


def test_a_stopped_run_exits_130_leaves_nothing_running_and_the_next_run_finishes(tmp_path):
    course, students, run = grading_in_background(tmp_path, correct=5, saved=2)
    results = course / "graded" / "tiny" / "results"
    run.terminate()  # what Ctrl-C does too
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130 and "run the same command again" in err
    saved = len(list(results.glob("*.json")))
    assert 2 <= saved < len(students)
    leftovers = [p for p in psutil.process_iter(["cmdline"])
                 if str(course) in " ".join(p.info["cmdline"] or [])]
    assert not leftovers
    again = grade(course, course / "incoming")
    assert again.returncode == 0 and f"({saved} unchanged since the last run)" in again.stdout
    assert sorted(rows(course)) == sorted(students)


def test_a_killed_run_leaves_no_process_and_the_next_run_removes_its_scratch(tmp_path):
    """SIGKILL (an out-of-memory kill, a crashed service) cannot tidy up: the next run does, and only that."""
    course, students, run = grading_in_background(tmp_path, correct=4, saved=1)
    left = [p for p in Path("/tmp").glob("dlg-*") if f'"pid": {run.pid},' in _read(p / "owner.json")]
    run.kill()
    run.communicate(timeout=60)
    assert len(left) == 1 and left[0].is_dir()
    deadline = time.monotonic() + 30  # the workers notice their parent is gone and stop their kernels
    while time.monotonic() < deadline and _processes_of(course):
        time.sleep(0.5)
    assert not _processes_of(course)
    again = grade(course, course / "incoming")
    assert again.returncode == 0, again.stderr
    # Removed by this run (its output then says so) or, while it ran, by another grading run of this user
    # (the tests run in parallel): either way by the next run, never left behind.
    assert not left[0].exists()
    assert sorted(rows(course)) == sorted(students)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _processes_of(course: Path) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if str(course) in " ".join(p.info["cmdline"] or [])]


def test_without_a_sandbox_a_student_who_kills_the_grading_process_costs_only_that_cell(tmp_path):
    course = make_course(tmp_path)
    daemon = "4321.75"
    students = {
        "correct": CLASS["correct"],
        "kill-parent": (
            {"tiny.ipynb": with_cell("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")},),
        "daemon": ({"tiny.ipynb": with_cell(f"import subprocess\nsubprocess.Popen(['sleep', '{daemon}'], "
                                            "start_new_session=True)")},),
    }
    write_class(course / "incoming", students, course)
    done = grade(course, course / "incoming", "--sandbox", "none", "--timeout", str(ROOMY))
    assert done.returncode == 0, done.stderr
    table = rows(course)
    assert [(table[s]["status"], table[s]["score"]) for s in students] == [
        ("graded", "3"), ("crashed", "3"), ("graded", "3")]
    assert "the grading process was killed (SIGKILL)" in table["kill-parent"]["detail"]
    assert not [p for p in psutil.process_iter(["cmdline"]) if daemon in " ".join(p.info["cmdline"] or [])]


def test_a_fork_storm_is_stopped_at_the_process_cap_and_other_students_are_graded(tmp_path):
    """A few thousand children: refused past the cap (a cgroup), or, where none can be made, the tree is
    stopped.
    """
    course = make_course(tmp_path)
    storm = with_cell(f"import subprocess\nfor _ in range(3000):\n    subprocess.Popen(['sleep', '{STORM}'])")
    write_class(course / "incoming", {"correct": CLASS["correct"], "fork-storm": ({"tiny.ipynb": storm},)},
                course)
    # 512 sleeping processes hold about 1 GB; starting them on a loaded machine must not reach the limit
    done = grade(course, course / "incoming", "--memory", "4000", "--timeout", str(ROOMY))
    assert done.returncode == 0, done.stderr
    table = rows(course)
    assert (table["correct"]["status"], table["correct"]["score"]) == ("graded", "3")
    assert (table["fork-storm"]["status"], table["fork-storm"]["score"]) == ("processes",
                                                                             "3"), table["fork-storm"]
    assert re.search(r"cell 3: (tried to start|started) more than 512 processes",
                     table["fork-storm"]["detail"])
    assert not [p for p in psutil.process_iter(["cmdline"]) if STORM in " ".join(p.info["cmdline"] or [])]
    assert not caps_left(done.pid)


def test_unknown_assignment_or_unreadable_submissions_exit_2(tmp_path):
    shutil.copyfile(COURSE_ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    (tmp_path / "source" / "tiny").mkdir(parents=True)
    nbformat.write(assignment(), tmp_path / "source" / "tiny" / "tiny.ipynb")
    missing = grade(tmp_path, tmp_path / "nowhere")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    (tmp_path / "broken.zip").write_text("not a zip")
    assert grade(tmp_path, tmp_path / "broken.zip").returncode == 2
    cmd = [sys.executable, "-m", "autograder", "grade", "nope", str(tmp_path), "--course", str(tmp_path)]
    unknown = subprocess.run(cmd, cwd=COURSE_ROOT, env=with_venv_on_path(), capture_output=True, text=True,
                             check=False)
    assert unknown.returncode == 2 and "no assignment 'nope'" in unknown.stderr


def test_a_course_the_grader_cannot_handle_is_refused_before_anyone_is_graded(tmp_path):
    course = make_course(tmp_path)
    write_class(course / "incoming", {"correct": CLASS["correct"]}, course)
    r_notebook = assignment()
    r_notebook.metadata["kernelspec"] = {"name": "ir", "language": "R", "display_name": "R"}
    nbformat.write(r_notebook, course / "source" / "tiny" / "tiny.ipynb")
    refused = grade(course, course / "incoming")
    assert refused.returncode == 2 and "tiny.ipynb is a R notebook" in refused.stderr, refused.stderr
    nbformat.write(assignment(), course / "source" / "tiny" / "tiny.ipynb")
    with (course / "nbgrader_config.py").open("a") as handle:
        handle.write("\nc.CourseDirectory.submitted_directory = 'handed-in'\n")
    refused = grade(course, course / "incoming")
    assert refused.returncode == 2 and "submitted_directory is 'handed-in'" in refused.stderr, refused.stderr
    assert not (course / "graded").exists() and not (course / "gradebook.db").exists()


ANNOUNCE = """
import json, sys
from pathlib import Path
from autograder.grading.session import GradeOptions, grade_class

course, subs = Path(sys.argv[1]), Path(sys.argv[2])
late = Path(sys.argv[3]) if len(sys.argv) > 3 else None  # students who join the run once it has begun
out = course / "graded" / "tiny"
seen = []
asked = []

def joining():
    asked.append(len(seen))
    if late is None or len(asked) > 1:
        return []
    names = sorted(p.name for p in late.iterdir())
    for name in names:
        (late / name).rename(subs / name)
    (subs / "eve").symlink_to(subs / "ada")  # a link is no student folder
    (subs / "__MACOSX" / "ada").mkdir(parents=True)  # a system folder, skipped by the first scan too
    # named twice; ada is graded already; a path, not a name (ada's folder again); the parent, and folders the
    # first scan skips; nobody has no folder
    return [*names, *names, "ada", f"../{subs.name}/ada", "..", ".", "__MACOSX", "eve", "nobody"]

def on_result(result):
    seen.append({"student": result.student, "status": result.status, "score": result.final_score,
                 "saved": (out / "results" / f"{result.student}.json").is_file(),
                 "feedback": sorted(p.name for p in (out / "feedback" / result.student).glob("*.html"))})

summary = grade_class(course, "tiny", subs, GradeOptions(jobs=2, timeout=120, memory_mib=600, progress=False),
                      echo=lambda line: None, on_result=on_result, joining=joining if late else None)
if late:
    (subs / "eve").unlink()
    (subs / "__MACOSX" / "ada").rmdir()
    (subs / "__MACOSX").rmdir()
print(json.dumps({"seen": seen, "graded": summary.graded, "reused": summary.reused, "asked": asked,
                  "rows": [r.student for r in summary.results]}))
"""


def test_each_graded_student_is_announced_once_when_recorded_and_reused_ones_are_not(tmp_path):
    """Students who join the run once it has begun (as the hub's late submissions do) are graded and announced
    like the others; a name already graded, a path, the parent, a system folder, a link and a name without a
    folder do not join."""
    course = make_course(tmp_path)
    with (course / "nbgrader_config.py").open("a", encoding="utf-8") as config:  # counts its own executions
        config.write("\nimport os as _os\n"
                     "with open(_os.path.join(_os.path.dirname(__file__), 'config-runs'), 'a') "
                     "as _f:\n    _f.write('x')\n")
    students = {"ada": ({"tiny.ipynb": assignment()},),
                "bob": ({"tiny.ipynb": assignment(double="return x")},),
                "cat": ({"notes.txt": "no notebook here"},)}
    write_class(course / "incoming", students, course)
    write_class(tmp_path / "late", {"dan": ({"tiny.ipynb": assignment(square="return x")},)}, course)

    def run(*late: Path) -> dict:
        done = subprocess.run([sys.executable, "-c", ANNOUNCE, str(course), str(course / "incoming"),
                               *map(str, late)],
                              cwd=COURSE_ROOT, env=with_venv_on_path(), capture_output=True, text=True,
                              timeout=600, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run(tmp_path / "late")
    assert (course / "config-runs").read_text() == "x"  # the course's config was executed once for the run
    by_student = {s["student"]: s for s in first["seen"]}
    assert sorted(s["student"] for s in first["seen"]) == ["ada", "bob", "cat", "dan"]  # each exactly once
    assert by_student["ada"]["status"] == "graded" and by_student["ada"]["score"] == 3
    assert by_student["bob"]["score"] == 1 and by_student["cat"]["status"] == "missing"
    assert by_student["dan"]["status"] == "graded" and by_student["dan"]["score"] == 2  # joined, and graded
    assert all(s["saved"] for s in first["seen"])  # announced only once their result is saved...
    assert by_student["ada"]["feedback"] == by_student["dan"]["feedback"] == ["tiny.html"]  # ...feedback too
    assert first["graded"] == 3 and len(first["asked"]) >= 2  # dan counted; asked again once he had joined
    assert first["rows"] == ["ada", "bob", "cat", "dan"]  # the reports have everyone, the joiner last
    second = run()
    assert second["seen"] == [] and second["reused"] == 4  # unchanged students are not announced again
