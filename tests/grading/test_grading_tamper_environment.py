"""Students who go after the grader's own steps instead of the tests: its environment, its configuration and
the records it reads (issue 25, families 1 and 7).

- *Environment.* Student code sets Jupyter's and Python's environment variables (`os.environ`, `%env`) and
  writes configuration files, IPython startup files, nbconvert templates and `custom.css` into every folder
  it can write. Whatever loads them outside the sandbox (nbgrader's later steps, the feedback pages) would run
  the student's code as the grader; whatever loads them in the next notebook's kernel before its guard starts
  would install tampering the guard takes for pristine. The assignment has two notebooks, so a second kernel
  starts after the first one's student code has run.
- *Forged records.* Student code writes fake progress files, restore notes, autograded notebooks, results and
  gradebooks where the grader reads them, and fake records into the guard's channel.

Each earns nothing (both notebooks are unsolved) or is flagged; nothing the student wrote runs as the grader
or shows in a feedback page. Needs bubblewrap: with `unshare` or `none` student code can write what the
grader can (docs/instructors.md, Isolation).
"""

import json
import os
from pathlib import Path

import nbformat
import pytest

from autograder.grading.attempt import Job
from tests.factories import tiny_assignment
from tests.grading.test_grading_end_to_end import assignment, grade, make_course, rows, write_class
from tests.grading.test_grading_tamper import flags_of
from tests.grading.test_grading_worker import make_worker
from tests.once_per_run import once_per_run

UNSOLVED = "raise NotImplementedError()"
SECOND = "second.ipynb"  # the assignment's other notebook (nbgrader runs them in no fixed order)
MAX = 5.0  # tiny.ipynb 3 points, second.ipynb 2

# What a planted file runs when something loads it: write a marker where only the grader can write (the
# course is hidden from the sandbox), and, in a kernel, install what makes every later test pass.
PAYLOAD = '''
import os as _os
try:
    _os.makedirs("@COURSE@/escaped", exist_ok=True)
    open(_os.path.join("@COURSE@/escaped", "@WHERE@".replace("/", "_")), "w").write("ran as the grader")
except OSError:
    pass
_line = "getattr(get_ipython(), 'input_trans' + 'formers_post').append(lambda lines: ['pass\\\\n'])"
try:
    exec(_line)
except Exception:
    pass
try:
    c.InteractiveShellApp.exec_lines = [_line]
    c.IPKernelApp.exec_lines = [_line]
except Exception:
    pass
'''
# Rendered, these say PLANTED-BY-TEMPLATE and CSS-PLANTED; as the student's source shows them, they do not.
TEMPLATE = ("{{ 'PLANTED' ~ '-BY-TEMPLATE' }} {{ "
            "cycler.__init__.__globals__.os.makedirs('@COURSE@/escaped/t') }}")
CSS = "/* CSS-@PLANTED@ */ body { display: none }"

# Appended to the unsolved first answer of both notebooks: plant everything everywhere, then change the env.
PLANT = '''
import json, os, sys
PAYLOAD = @PAYLOAD@
CONFIGS = ["jupyter_config.py", "jupyter_nbconvert_config.py", "nbgrader_config.py", "ipython_config.py",
           "ipython_kernel_config.py", "jupyter_server_config.py", "jupyter_notebook_config.py",
           "sitecustomize.py", "usercustomize.py"]
TEMPLATES = ["feedback", "lab", "classic", "base", "html"]

def plant(base):
    planted = 0
    for sub in ["", ".jupyter", "jupyter", ".jupyter-data", ".local/etc/jupyter", "etc/jupyter",
                ".ipython/profile_default", "profile_default", ".ipython/profile_default/startup",
                "profile_default/startup"]:
        folder = os.path.join(base, sub)
        for name in CONFIGS + (["00-planted.py"] if sub.endswith("startup") else []):
            try:
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, name), "w") as f:
                    f.write(PAYLOAD.replace("@WHERE@", os.path.join(folder, name)))
                planted += 1
            except OSError:
                pass
    for data in ["", "share/jupyter", ".local/share/jupyter", ".jupyter-data"]:
        for template in TEMPLATES:
            for path in [os.path.join(base, data, "nbconvert", "templates", template),
                         os.path.join(base, template)]:
                try:
                    os.makedirs(path, exist_ok=True)
                    with open(os.path.join(path, "index.html.j2"), "w") as f:
                        f.write(@TEMPLATE@)
                    with open(os.path.join(path, "conf.json"), "w") as f:
                        json.dump({"base_template": "base"}, f)
                except OSError:
                    pass
    for css in ["custom/custom.css", ".jupyter/custom/custom.css", "custom.css"]:
        try:
            os.makedirs(os.path.dirname(os.path.join(base, css)), exist_ok=True)
            with open(os.path.join(base, css), "w") as f:
                f.write(@CSS@.replace("@" + "PLANTED@", "PLANTED"))
        except OSError:
            pass
    return planted

bases = {os.getcwd(), os.path.expanduser("~"), "/tmp", "/var/tmp", "/dev/shm", sys.prefix,
         os.path.dirname(os.__file__), "@COURSE@", "/etc", "/usr/local/etc", "/usr/local/share", "/usr/share"}
for key in ["JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR",
            "TMPDIR", "HOME"]:
    if os.environ.get(key):
        bases.add(os.environ[key])
for entry in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) + sys.path[:3]:
    if entry:
        bases.add(entry)
here = os.getcwd()
while here != "/":  # the scratch course and every folder above it
    here = os.path.dirname(here)
    bases.add(here)
    for name in ["grader", "rt", "jupyter", "kernel", "kernel/home", "kernel/rt", "kernel/channel"]:
        bases.add(os.path.join(here, name))
PLANTED = sum(plant(b) for b in sorted(bases))
for name in ["sqlite3", "jedi", "pydoc", "webbrowser", "comm", "matplotlib_inline", "debugpy"]:
    try:  # modules a starting kernel may import, shadowed in the working folder the next kernel shares
        with open(name + ".py", "w") as f:
            f.write(PAYLOAD.replace("@WHERE@", "module-" + name))
    except OSError:
        pass
evil = os.path.join(os.path.expanduser("~"), ".jupyter")
for key in ["JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "IPYTHONDIR",
            "HOME", "PYTHONPATH", "PYTHONSTARTUP"]:
    os.environ[key] = evil
get_ipython().run_line_magic("env", "JUPYTER_CONFIG_DIR=" + evil)
get_ipython().run_line_magic("env", "PYTHONPATH=" + evil)
'''

# Appended to the unsolved first answer: forge every record the grader reads after student code has run.
FORGE = '''
import glob, json, os, sqlite3
scratch = os.path.dirname(os.path.dirname(os.getcwd()))  # the scratch course: kernel/<assignment> is cwd
student = "forger"
full = {"state": "finished", "notebook": "tiny", "cell": None, "grade_id": None, "events": []}
forged = {
    "progress.json": json.dumps(full),
    "restored.jsonl": json.dumps({"note": "all tests passed"}) + "\\n",
    "gradebook.db": "not a database",
}
nb = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
targets = [scratch, os.getcwd(), os.path.expanduser("~"), "/tmp", "@COURSE@", "@COURSE@/graded/tiny"]
for base in targets:
    for name, text in forged.items():
        try:
            with open(os.path.join(base, name), "w") as f:
                f.write(text)
        except OSError:
            pass
for folder in [f"{scratch}/autograded/{student}/tiny", f"{scratch}/feedback/{student}/tiny",
               f"@COURSE@/autograded/{student}/tiny", "@COURSE@/graded/tiny/results"]:
    try:
        os.makedirs(folder, exist_ok=True)
        for name in ["tiny.ipynb", "second.ipynb"]:
            with open(os.path.join(folder, name), "w") as f:
                json.dump(nb, f)
        with open(os.path.join(folder, f"{student}.json"), "w") as f:
            json.dump({"student": student, "assignment": "tiny", "status": "graded", "cells": []}, f)
    except OSError:
        pass
for db in glob.glob(scratch + "/*.db") + glob.glob("@COURSE@/*.db"):
    try:
        con = sqlite3.connect(db)
        con.execute("UPDATE grade SET auto_score = 100")
        con.commit()
    except Exception:
        pass
# The guard's channel: records with nothing changed for the next requests, written to every descriptor.
header = get_ipython().kernel.get_parent()["header"]
session, pid, count = header["msg_id"].rsplit("_", 2)
for fd in range(3, 1024):
    try:
        if os.fstat(fd).st_mode & 0o170000 != 0o010000:  # FIFOs only
            continue
        for n in range(int(count) + 1, int(count) + 12):
            for phase in ["before", "after"]:
                os.write(fd, (json.dumps({"msg_id": f"{session}_{pid}_{n}", "phase": phase, "changes": [],
                                          "findings": []}) + "\\n").encode())
    except OSError:
        pass
'''


def unsolved_pair(code: str) -> dict[str, nbformat.NotebookNode]:
    """Return both notebooks unsolved, with `code` appended to the first answer of each."""
    first, second = assignment(double=UNSOLVED, square=UNSOLVED), tiny_assignment(UNSOLVED)
    for nb in (first, second):
        nb.cells[1].source += "\n\n" + code
    return {"tiny.ipynb": first, SECOND: second}


def plant_code() -> str:
    """Return the planting cell code, with its payload, template and CSS inlined."""
    return (PLANT.replace("@PAYLOAD@", repr(PAYLOAD)).replace("@TEMPLATE@", repr(TEMPLATE))
            .replace("@CSS@", repr(CSS)))


# Forged "nothing changed" records for the coming requests, then a transformer that makes every test pass.
TRANSFORMER = "getattr(get_ipython(), 'input_trans' + 'formers_post').append(lambda lines: ['pass\\n'])"
STUDENTS = {
    "planter": unsolved_pair(plant_code()),
    "forger": unsolved_pair(FORGE),
    "channel-forger": unsolved_pair(FORGE + "\n" + TRANSFORMER),
    "correct": {"tiny.ipynb": assignment(), SECOND: tiny_assignment()},
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the planting, the forging and an honest student in one run (once per test run)."""
    from autograder.grading.sandbox import detect_isolation

    if detect_isolation("auto").mode != "bwrap":
        pytest.skip("needs bubblewrap: without it student code can write what the grader can")

    def grade_the_class(course: Path) -> dict:
        make_course(course)
        nbformat.write(tiny_assignment(), course / "source" / "tiny" / SECOND)
        write_class(course / "incoming", {name: (files,) for name, files in STUDENTS.items()}, course)
        done = grade(course, course / "incoming", "--memory", "3000", "--sandbox", "bwrap", "--timeout", "60")
        return {"returncode": done.returncode, "stderr": done.stderr}

    course, record = once_per_run(tmp_path_factory, "tamper-environment-class", grade_the_class)
    assert record["returncode"] == 0, record["stderr"][-3000:]
    return course, rows(course)


pytestmark = pytest.mark.notebook


def test_the_honest_student_of_the_run_gets_full_marks(graded):
    _, table = graded
    assert (table["correct"]["status"], float(table["correct"]["score"]), table["correct"]["flags"]) == (
        "graded", MAX, ""), table["correct"]


@pytest.mark.parametrize("student", ["planter", "forger", "channel-forger"])
def test_tampering_with_the_graders_environment_or_records_earns_nothing(graded, student):
    _, table = graded
    row = table[student]
    assert row["status"] == "graded" and float(row["max_score"]) == MAX, row
    assert float(row["score"]) == 0 or flags_of(row), row


def test_forging_the_guards_records_is_flagged(graded):
    _, table = graded
    for student in ("forger", "channel-forger"):
        assert any("wrote to the grader's channel" in f for f in flags_of(table[student])), table[student]


def test_nothing_the_student_planted_ran_as_the_grader(graded):
    course, _ = graded
    assert not (course / "escaped").exists(), sorted(p.name for p in (course / "escaped").rglob("*"))


def test_no_planted_template_or_css_reaches_a_feedback_page(graded):
    course, _ = graded
    pages = sorted((course / "graded" / "tiny" / "feedback").rglob("*.html"))
    assert {p.parent.name for p in pages} == set(STUDENTS)
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "PLANTED-BY-TEMPLATE" not in text and "CSS-PLANTED" not in text, page


def test_forged_records_leave_the_course_and_the_results_as_the_grader_wrote_them(graded):
    course, table = graded
    result = json.loads((course / "graded" / "tiny" / "results" / "forger.json").read_text(encoding="utf-8"))
    assert result["status"] == "graded" and len(result["cells"]) == 3
    assert sum(c["score"] for c in result["cells"]) == float(table["forger"]["score"])
    assert not any((folder / "progress.json").exists() for folder in (course, course / "graded" / "tiny"))
    autograded = course / "autograded" / "forger" / "tiny"
    assert sorted(p.name for p in autograded.glob("*.ipynb")) == [SECOND, "tiny.ipynb"]
    # what the notebook wrote in its own folder lies beside it, as under plain nbgrader (side effects); the
    # grader reads its records from the scratch course, never from there
    assert {p.name for p in autograded.iterdir()} - {SECOND, "tiny.ipynb"} <= {
        "progress.json", "restored.jsonl", "gradebook.db"}
    nb = nbformat.read(autograded / "tiny.ipynb", as_version=4)
    assert any(c.get("outputs") for c in nb.cells)  # nbgrader's run, not the forged empty notebook


# --- the grader's own environment, without a run -----------------------------------------------------------

def test_the_graders_own_steps_read_config_data_and_templates_from_its_own_folders(tmp_path, monkeypatch):
    """Every config, data and template path nbgrader and nbconvert search is out of the kernel's reach."""
    from jupyter_core.paths import jupyter_config_path, jupyter_path
    from nbconvert.exporters import HTMLExporter

    from autograder.grading.worker import KernelFolders

    worker = make_worker(tmp_path)
    scratch = tmp_path / "scratch"
    kernel = KernelFolders.of(scratch, "tiny")
    env = worker.grader_environment(scratch)
    monkeypatch.setattr(os, "environ", dict(env))
    monkeypatch.chdir(tmp_path)
    searched = [*jupyter_config_path(), *jupyter_path(), *env.values(), *HTMLExporter().template_paths]
    for path in searched:
        for part in str(path).split(os.pathsep):
            assert not Path(part).is_relative_to(kernel.root), (part, path)
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "IPYTHONDIR", "MPLCONFIGDIR", "MPLBACKEND", "JUPYTER_PATH",
                        "JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "PYTHONNOUSERSITE",
                        "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                        "OPENBLAS_NUM_THREADS", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "TZ"}


def test_the_grader_takes_nothing_of_its_callers_environment_into_its_own_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "/somewhere/else")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "1")
    env = make_worker(tmp_path).grader_environment(tmp_path / "scratch")
    assert not {"JUPYTER_CONFIG_PATH", "PYTHONPATH", "JUPYTER_PREFER_ENV_PATH"} & set(env)
    assert not any("/somewhere/else" in value for value in env.values())


def test_each_kernel_starts_with_fresh_config_and_startup_folders(tmp_path):
    """What one notebook's student code left in the kernel's HOME is gone before the next kernel starts."""
    from autograder.grading.execution import reset_kernel_home

    home = tmp_path / "home"
    for rel in [".ipython/profile_default/startup/00.py", ".jupyter/jupyter_config.py",
                ".jupyter-data/nbconvert/templates/x/index.html.j2", "tmp/keep.txt", "notes.txt"]:
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("planted")
    (home / ".config").symlink_to(tmp_path)
    reset_kernel_home(home)
    left = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert left == ["notes.txt", "tmp", "tmp/keep.txt"], left
    assert (tmp_path / "home" / "tmp" / "keep.txt").read_text() == "planted"  # the link was not followed


def test_the_graders_environment_while_it_drives_nbgrader_is_its_own(tmp_path, monkeypatch):
    """os.environ is the grader's fixed environment while nbgrader runs, and the caller's again after."""
    import nbgrader.apps

    seen = {}

    class Recorder:
        def __init__(self, config):
            seen["config"] = config

        def autograde(self, *args, **kwargs):
            seen["env"] = dict(os.environ)
            os.environ["JUPYTER_CONFIG_DIR"] = "/planted"  # as if something in the step had changed it
            return {"success": False, "error": "stopped by the test", "log": ""}

    monkeypatch.setattr(nbgrader.apps, "NbGraderAPI", Recorder)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", "/callers/own")
    worker = make_worker(tmp_path)
    student = tmp_path / "ada"
    student.mkdir()
    nbformat.write(tiny_assignment(), student / "tiny.ipynb")
    job = Job(0, "ada", {"tiny.ipynb": str(student / "tiny.ipynb")}, str(student))
    worker.attempt(job)
    assert seen["env"] == worker.grader_environment(worker.scratch_for(job))
    assert os.environ["JUPYTER_CONFIG_DIR"] == "/callers/own"


def test_extra_files_are_copied_safely_links_fifos_and_clutter_left_behind_with_a_note(tmp_path):
    """The worker copies a submission's other files with autograder.safe_copy (no link followed, no FIFO
    waited on), leaving notebooks, timestamp.txt, dot-files and __MACOSX/__pycache__ to the grader."""
    secret = tmp_path / "gradebook.db"
    secret.write_text("the course's own")
    student = tmp_path / "ada"
    (student / "data" / "__pycache__").mkdir(parents=True)
    (student / "data" / "x.csv").write_text("1,2")
    (student / "data" / "__pycache__" / "m.pyc").write_bytes(b"\0")
    (student / ".env").write_text("TOKEN=1")
    (student / "timestamp.txt").write_text("2026-11-01 10:00:00 UTC")
    (student / "link.db").symlink_to(secret)
    os.mkfifo(student / "pipe")
    nbformat.write(tiny_assignment(), student / "tiny.ipynb")
    worker = make_worker(tmp_path)
    job = Job(0, "ada", {"tiny.ipynb": str(student / "tiny.ipynb")}, str(student))
    scratch = worker.scratch_for(job)
    notes, _ = worker.prepare(job, scratch)
    submitted = scratch / "submitted" / "ada" / "tiny"
    assert sorted(str(p.relative_to(submitted)) for p in submitted.rglob("*")) == ["data", "data/x.csv",
                                                                                   "tiny.ipynb"]
    assert "link.db not copied (a symbolic link)" in notes and "pipe not copied (a FIFO)" in notes, notes
