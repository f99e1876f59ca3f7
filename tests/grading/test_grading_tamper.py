"""Students who change how later cells run, through `python -m autograder grade`: they earn nothing for it.

Each tampering case below is a few lines that a student who read IPython's documentation for an evening could
append to an *unsolved* answer cell so that every later test cell passes: full marks with no answer under
plain `nbgrader autograde`. Graded by the grader, each earns what its answers earn (nothing) and is flagged.
The honest cases are correct answers written in unusual ways; none may be flagged or lose a point.
"""

import csv
import re
from pathlib import Path

import nbformat
import pytest

from tests.grading.test_grading_end_to_end import ROOMY, assignment, grade, make_course, rows, write_class
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook

UNSOLVED = "raise NotImplementedError()"


def tampered(code: str, solved: bool = False) -> nbformat.NotebookNode:
    """Return the assignment (unsolved unless `solved`) with `code` appended to its first answer cell."""
    nb = assignment() if solved else assignment(double=UNSOLVED, square=UNSOLVED)
    nb.cells[1].source += "\n\n" + code
    return nb


def extra_cell(code: str) -> nbformat.NotebookNode:
    """Return the solved assignment with one more (student) cell after the first answer."""
    nb = assignment()
    nb.cells.insert(2, nbformat.v4.new_code_cell(code))
    return nb


# student -> (code appended to the first answer cell, pattern that one of the row's flags must match)
TAMPERING = {
    "cleanup-transformer": ("get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])",
                            r"answer cell 'double' installs an IPython input transformer"),
    "post-transformer": ("ip = get_ipython()\nip.input_transformers_post.append(lambda lines: ['pass\\n'])",
                         r"answer cell 'double' installs an IPython input transformer"),
    "ast-transformer": (("import ast\n\nclass NoAsserts(ast.NodeTransformer):\n"
                        "    def visit_Assert(self, node):\n        return ast.Pass()\n\n"
                        "get_ipython().ast_transformers.append(NoAsserts())"),
                        r"installs an IPython AST transformer"),
    "custom-exc": ("get_ipython().set_custom_exc((BaseException,), lambda *args, **kwargs: None)",
                   r"installs a custom exception handler"),
    "showtraceback": (("ip = get_ipython()\nip.showtraceback = lambda *a, **k: None\n"
                      "ip._showtraceback = lambda *a, **k: None"),
                      r"replaces how errors are reported"),
    "excepthook": ("import sys\nsys.excepthook = lambda *args: None", r"replaces sys.excepthook"),
    "run-cell": (("ip = get_ipython()\n_run = ip.run_cell\n"
                 "ip.run_cell = lambda cell, *a, **k: _run('pass', *a, **k)"),
                 r"replaces the IPython shell's run_cell"),
    "run-cell-async-class": (("from IPython.core.interactiveshell import InteractiveShell\n"
                             "_original = InteractiveShell.run_cell_async\n\n"
                             "async def run_cell_async(self, cell, *args, **kwargs):\n"
                             "    return await _original(self, 'pass', *args, **kwargs)\n\n"
                             "InteractiveShell.run_cell_async = run_cell_async"),
                             r"replaces the IPython shell's run_cell_async"),
    "transform-cell-setattr": (("ip = get_ipython()\n"
                                "setattr(type(ip), 'transform_cell', lambda self, cell: 'pass\\n')"),
                               r"replaces the IPython shell's transform_cell"),
    "do-execute": (("kernel = get_ipython().kernel\n_execute = kernel.do_execute\n\n"
                   "async def do_execute(code, *args, **kwargs):\n"
                   "    return await _execute('pass', *args, **kwargs)\n\n"
                   "kernel.do_execute = do_execute"),
                   r"replaces the kernel's do_execute"),
    "do-execute-class": (("import ipykernel.ipkernel\n"
                          "_execute = ipykernel.ipkernel.IPythonKernel.do_execute\n\n"
                         "async def do_execute(self, code, *args, **kwargs):\n"
                         "    return await _execute(self, 'pass', *args, **kwargs)\n\n"
                         "ipykernel.ipkernel.IPythonKernel.do_execute = do_execute"),
                         r"replaces the kernel's do_execute"),
    "settrace-skip-asserts": (("import linecache, sys\n\n"
                              "def skip_asserts(frame, event, arg):\n"
                              "    if event == 'line':\n"
                              "        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)\n"
                              "        if line.lstrip().startswith('assert'):\n"
                              "            try:\n                frame.f_lineno += 1\n"
                              "            except ValueError:\n                pass\n"
                              "    return skip_asserts\n\n"
                              "sys.settrace(skip_asserts)"),
                              r"sets a tracing hook"),
    "setprofile": ("import sys\nsys.setprofile(lambda frame, event, arg: None)",
                   r"sets a tracing hook \(sys.setprofile\)"),
    "threading-settrace": ("import threading\nthreading.settrace(lambda frame, event, arg: None)",
                           r"threading\._trace_hook"),
    "event-callback": (("def _before(*args):\n"
                       "    get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])\n\n"
                       "get_ipython().events.register('pre_run_cell', _before)"),
                       r"registers an IPython event callback \('pre_run_cell'\)"),
    "obfuscated": (("_m = __import__('IP' + 'ython')\n_ip = getattr(_m, 'get_' + 'ipython')()\n"
                   "getattr(_ip, '_'.join(['input', 'transformers', 'post'])).append(lambda lines: "
                    "['pass\\n'])"),
                   r"installs an IPython input transformer"),
    "obfuscated-method": (("_ip = __builtins__.__dict__['get_ipy' + 'thon']() if hasattr(__builtins__, "
                           "'__dict__') "
                          "else __builtins__['get_ipy' + 'thon']()\n"
                          "setattr(_ip, ''.join(['run', '_', 'cell']), lambda *a, **k: None)"),
                          r"replaces the IPython shell's run_cell"),
    "code-swap": (("from IPython.core.interactiveshell import InteractiveShell\n\n"
                  "def _nothing(self, *args, **kwargs):\n    pass\n\n"
                  "try:\n    InteractiveShell.run_cell.__code__ = _nothing.__code__\nexcept Exception:\n"
                   "    pass"),
                  r"changes a function's code in place"),
    "builtins-exec": ("import builtins\nbuiltins.exec = lambda *args, **kwargs: None",
                      r"replaces builtins\.exec"),
    "shadow-compile": (("import IPython.core.compilerop as _c\n"
                       "_c.compile = lambda source, name, *a, **k: compile('pass', name, *a, **k)"),
                       r"IPython\.core\.compilerop\.compile"),
    "background-thread": (("import threading, time\n\n"
                          "def _keep():\n    ip = get_ipython()\n    while True:\n"
                          "        if not ip.input_transformers_post:\n"
                          "            ip.input_transformers_post.append(lambda lines: ['pass\\n'])\n"
                          "        time.sleep(0.0005)\n\n"
                          "threading.Thread(target=_keep, daemon=True).start()"),
                          r"background"),
}
# Tampering inside the answer itself: `double`, when the test calls it, hides the failures of later tests.
IN_CALL = ("def double(x):\n    get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])\n"
           "    return 0")


def tamper_class() -> dict[str, nbformat.NotebookNode]:
    """Return every tampering student's notebook."""
    students = {name: tampered(code) for name, (code, _) in TAMPERING.items()}
    students["in-call"] = tampered(IN_CALL)
    students["solved-and-tampering"] = tampered(TAMPERING["post-transformer"][0], solved=True)
    return students


# Correct answers written in unusual ways: code appended to the first answer cell, or a cell of its own.
HONEST = {
    "display": "from IPython.display import display\ndisplay({'double': double(2)})",
    "timeit": "%timeit -n 3 -r 1 double(2)",
    "helper-class": ("class Doubler:\n    factor = 2\n\n    def __call__(self, x):\n"
                     "        return self.factor * x\n\n"
                     "_d = Doubler()\nsetattr(_d, 'factor', 2)\nassert _d(3) == 6"),
    "seeded": "import random\nimport numpy as np\nrandom.seed(0)\nnp.random.seed(0)\n"
    "rng = np.random.default_rng(0)",
    "namedtuple": "from collections import namedtuple\nPoint = namedtuple('Point', 'x y', defaults=[0])\n"
    "p = Point(1)",
    "decorated": "import functools\n\n@functools.lru_cache(maxsize=None)\ndef cached_double(x):\n"
    "    return 2 * x", "traceback-handled": ("import traceback\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n"
                          "    note = traceback.format_exc()"),
    "warnings-and-stderr": "import sys, warnings\nwarnings.warn('just a note')\n"
    "print('to stderr', file=sys.stderr)",
    "reimport": "import sys\nimport sys as system\nfrom os import path",
}
HONEST_CELLS = {
    "cell-magic": "%%time\nvalue = double(21)",
    "matplotlib-inline": "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2], [2, 4])\n"
    "plt.show()", "torch-seeded": "import torch\ntorch.manual_seed(0)\nt = torch.ones(3)",
}


def honest_class() -> dict[str, nbformat.NotebookNode]:
    """Return every honest student's notebook."""
    students = {name: tampered(code, solved=True) for name, code in HONEST.items()}
    students.update({name: extra_cell(code) for name, code in HONEST_CELLS.items()})
    return students


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the tampering and the honest students in one run (once per test run, even across xdist)."""

    def grade_the_class(course: Path) -> dict:
        make_course(course)
        students = {name: ({"tiny.ipynb": nb},) for name, nb in {**tamper_class(), **honest_class()}.items()}
        write_class(course / "incoming", students, course)
        # torch alone can pass 600 MiB; honest cells import it and matplotlib cold: no limit a student reaches
        done = grade(course, course / "incoming", "--memory", "3000", "--timeout", str(ROOMY))
        return {"returncode": done.returncode, "stderr": done.stderr}

    course, record = once_per_run(tmp_path_factory, "tamper-class", grade_the_class)
    assert record["returncode"] == 0, record["stderr"][-3000:]
    return course, rows(course)


def flags_of(row: dict) -> list[str]:
    """Return a grades.csv row's flags."""
    return [f for f in row["flags"].split("; ") if f]


@pytest.mark.parametrize("student", [*sorted(TAMPERING), "in-call"])
def test_tampering_earns_nothing_and_is_flagged(graded, student):
    _, table = graded
    row = table[student]
    assert (row["status"], float(row["score"])) == ("graded", 0.0), row
    pattern = TAMPERING[student][1] if student in TAMPERING else r"test cell 'double-tests'"
    assert any(re.search(pattern, f) for f in flags_of(row)), row["flags"]


def test_tampering_on_top_of_right_answers_keeps_the_points_and_is_flagged(graded):
    _, table = graded
    row = table["solved-and-tampering"]
    assert (row["status"], float(row["score"])) == ("graded", 3.0), row
    assert any("input transformer" in f for f in flags_of(row)), row["flags"]


@pytest.mark.parametrize("student", sorted(HONEST) + sorted(HONEST_CELLS))
def test_honest_unusual_answers_get_full_marks_and_no_flag(graded, student):
    _, table = graded
    row = table[student]
    assert (row["status"], float(row["score"]), row["flags"]) == ("graded", 3.0, ""), row


def test_flags_column_and_summary_list_flagged_students_first(graded):
    course, table = graded
    with (course / "graded" / "tiny" / "grades.csv").open(encoding="utf-8") as handle:
        assert csv.DictReader(handle).fieldnames[-1] == "flags"
    page = (course / "graded" / "tiny" / "summary.html").read_text(encoding="utf-8")
    students = re.findall(r'<tr class="[a-z ]+"><td>([^<]+)</td>', page)
    flagged = {s for s, r in table.items() if r["flags"]}
    assert flagged and set(students[:len(flagged)]) == flagged
    assert "input transformer" in page


def test_feedback_does_not_describe_the_detection(graded):
    course, _ = graded
    page = (course / "graded" / "tiny" / "feedback" / "post-transformer" / "tiny.html").read_text(
        encoding="utf-8")
    for words in ("installs an IPython", "tamper", "flagged", "left running", "the grading kernel"):
        assert words not in page, words
    unconfirmed = (course / "graded" / "tiny" / "feedback" / "background-thread" / "tiny.html").read_text()
    assert "could not run this test as written" in unconfirmed  # (the student-safe page's own words)


@pytest.mark.parametrize("student", ["post-transformer", "ast-transformer", "run-cell", "do-execute-class"])
def test_without_the_guard_plain_nbgrader_gives_these_full_marks(tmp_path, student):
    """The tampering cases are real: plain `nbgrader autograde` gives each of them full marks."""
    from nbgrader.api import Gradebook

    from autograder.grading.gradebook import ensure_schema
    from tests.nbgrader_commands import in_one_python

    course = make_course(tmp_path)
    submitted = course / "submitted" / student / "tiny"
    submitted.mkdir(parents=True)
    nbformat.write(tamper_class()[student], submitted / "tiny.ipynb")
    ensure_schema(f"sqlite:///{course / 'gradebook.db'}")  # nbgrader's, without `alembic heads`
    steps = [["generate_assignment", "tiny", "--force"], ["autograde", "tiny", "--force"]]
    for step, (code, log) in zip(steps, in_one_python(course, *steps), strict=True):  # nbgrader's apps
        assert code == 0, f"nbgrader {' '.join(step)}: {log[-2000:]}"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "device-lab") as gb:
        assert gb.find_submission("tiny", student).score == 3
