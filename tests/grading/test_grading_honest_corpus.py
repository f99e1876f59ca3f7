"""Honest but unusual submissions, graded by the real grader with the guard of issue 25: full marks, no flag.

Each student solves the round-two assignment (tests/grading/test_grading_tamper_round2.py: `double`, `square`
and `ones`, tested with torch) correctly, and also uses something the guard watches for in tricks:
introspection, threads, the garbage collector, decorators, classes with their own `__eq__`, warnings, timers,
plots, ...
"""

import nbformat
import pytest

from tests.grading.test_grading_end_to_end import grade, rows, write_class
from tests.grading.test_grading_tamper_round2 import FULL, make_round2_course, round2, solved
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook

# student -> code appended to the first answer cell (after a correct `double`)
APPENDED = {
    "timers": ("import time\nstart = time.perf_counter()\nfor _ in range(1000):\n    double(3)\n"
               "elapsed = time.perf_counter() - start\nprint(f'{elapsed:.6f} s')"),
    "warnings": ("import warnings\nimport torch\nwarnings.warn('a note for myself')\n"
                 "copy = torch.tensor(torch.ones(2))  # torch warns: copy construct"),
    "display": ("from IPython.display import HTML, Markdown, display\ndisplay(Markdown('**double**'))\n"
                "display(HTML('<b>2</b>'), {'double': double(2)})"),
    "seeded-rngs": ("import random\nimport numpy as np\nimport torch\nrandom.seed(0)\nnp.random.seed(0)\n"
                    "torch.manual_seed(0)\ng = torch.Generator().manual_seed(1)\n"
                    "noise = torch.rand(3, generator=g)"),
    "helper-class-with-eq": ("class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n\n"
                             "    def __eq__(self, other):\n"
                             "        return (self.a, self.b) == (other.a, other.b)\n\n"
                             "    def __hash__(self):\n        return hash((self.a, self.b))\n\n"
                             "assert Pair(1, 2) == Pair(1, 2) and len({Pair(1, 2), Pair(1, 2)}) == 1"),
    "dataclass-typing": ("from dataclasses import dataclass, field\nfrom typing import NamedTuple, Optional\n"
                         "\n"
                         "@dataclass(order=True)\nclass Result:\n    value: int\n"
                         "    note: Optional[str] = None\n"
                         "    tags: list = field(default_factory=list)\n\n"
                         "class Span(NamedTuple):\n    lo: int\n    hi: int\n\n"
                         "assert Result(1) < Result(2) and Span(1, 2).hi == 2"),
    "inspect-and-stack": ("import inspect\nimport traceback\nsig = inspect.signature(double)\n"
                          "assert list(sig.parameters) == ['x']\nsource = inspect.getsource(double)\n"
                          "here = inspect.currentframe()\nnames = [f.function for f in inspect.stack()[:2]]\n"
                          "stack = traceback.format_stack(limit=3)"),
    "functools-decorated-answer": ("import functools\n\ndef logged(fn):\n    @functools.wraps(fn)\n"
                                   "    def wrapper(*args, **kwargs):\n        return fn(*args, **kwargs)\n"
                                   "    return wrapper\n\ndouble = logged(double)\n"
                                   "triple = functools.partial(lambda k, x: k * x, 3)\n"
                                   "cached = functools.lru_cache(maxsize=None)(lambda x: x + 1)"),
    "copy-pickle": ("import copy\nimport pickle\nstate = {'w': [1, 2], 'b': (3,)}\n"
                    "assert copy.deepcopy(state) == state\n"
                    "assert pickle.loads(pickle.dumps(state)) == state\n"
                    "import torch\nt = pickle.loads(pickle.dumps(torch.ones(2)))"),
    "threads-that-finish": ("import threading\nfrom concurrent.futures import ThreadPoolExecutor\n"
                            "results = []\n"
                            "worker = threading.Thread(target=lambda: results.append(double(5)))\n"
                            "worker.start()\nworker.join()\nwith ThreadPoolExecutor(2) as pool:\n"
                            "    doubled = list(pool.map(double, range(4)))\nassert results == [10]"),
    "gc-and-weakref": ("import gc\nimport weakref\n\nclass Node:\n    pass\n\nn = Node()\n"
                       "ref = weakref.ref(n)\n"
                       "del n\ngc.collect()\nassert ref() is None"),
    "logging": ("import logging\nlog = logging.getLogger('mine')\nlogging.basicConfig(level=logging.INFO)\n"
                "log.info('double(2) is %s', double(2))"),
}
# student -> a cell of its own, after the last test
CELLS = {
    "plots": ("%matplotlib inline\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
              "ax.plot([1, 2, 3], [double(1), double(2), double(3)])\nplt.show()"),
    "timeit-magic": "%timeit -n 3 -r 1 ones(100)",
    "torch-compile-eager": ("import torch\ncompiled = torch.compile(lambda t: t * 2, backend='eager')\n"
                            "assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 2.0))"),
}


def corpus() -> dict[str, nbformat.NotebookNode]:
    """Return every honest student's notebook."""
    students = {}
    for name, code in APPENDED.items():
        nb = solved()
        nb.cells[2].source += "\n\n" + code
        students[name] = nb
    for name, code in CELLS.items():
        nb = solved()
        nb.cells.append(nbformat.v4.new_code_cell(code))
        students[name] = nb
    ones_helper = round2("return 2 * x", "return x * x", "return Ones.make(n)")
    ones_helper.cells[2].source += ("\n\nclass Ones:\n    @staticmethod\n    def make(n):\n"
                                    "        return torch.ones(n)\n")
    students["helper-class-answer"] = ones_helper
    return students


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the honest corpus in one run (once per test run, even across xdist)."""

    def grade_the_class(course):
        make_round2_course(course)
        write_class(course / "incoming", {name: ({"tiny.ipynb": nb},) for name, nb in corpus().items()},
                    course)
        done = grade(course, course / "incoming", "--memory", "3000", "--timeout", "120")
        return {"returncode": done.returncode, "stderr": done.stderr}

    course, record = once_per_run(tmp_path_factory, "honest-corpus", grade_the_class)
    assert record["returncode"] == 0, record["stderr"][-3000:]
    return rows(course)


@pytest.mark.parametrize("student", sorted([*APPENDED, *CELLS, "helper-class-answer"]))
def test_honest_unusual_code_gets_full_marks_and_no_flag(graded, student):
    row = graded[student]
    assert (row["status"], float(row["score"]), row["flags"]) == ("graded", FULL, ""), row
