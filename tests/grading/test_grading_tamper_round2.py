"""Round two of tampering (issue 25): tricks by a student who has read the grader's own source.

Each student below hands in an assignment whose answers are wrong (or missing) plus a few lines that try to
make the tests pass anyway: by reaching the guard (family 3), forging or bypassing its channel (4), patches
that undo themselves before the guard looks (5), names built from pieces (6), and answers that lie to the
tests (8). Graded by the real grader in one class run, each must earn nothing or be flagged with what it did.
"""

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder import COURSE_ROOT
from tests.factories import graded_cell_meta, solution_cell_meta
from tests.grading.test_grading_end_to_end import assignment, grade, rows, write_class
from tests.once_per_run import once_per_run

pytestmark = pytest.mark.notebook

UNSOLVED = "raise NotImplementedError()"
ONES_TESTS = ("t = ones(3)\nassert isinstance(t, torch.Tensor), 'ones should return a tensor'\n"
              "assert len(t) == 3, 'three of them'\nassert all(x == 1 for x in t.tolist()), 'all ones'\n"
              "### BEGIN HIDDEN TESTS\nassert torch.equal(t, torch.ones(3)), 'exactly torch.ones(3)'\n"
              "### END HIDDEN TESTS")
FULL = 4.0


def round2(double: str = UNSOLVED, square: str = UNSOLVED, ones: str = UNSOLVED) -> nbformat.NotebookNode:
    """Return the assignment: imports, `double` (2 points), `square` (1) and `ones` (1, tested with torch)."""
    nb = assignment(double, square)
    v4 = nbformat.v4
    nb.cells.insert(1, v4.new_code_cell("import torch"))
    nb.cells += [
        v4.new_code_cell('def ones(n):\n    """Return a tensor of n ones."""\n    ### BEGIN SOLUTION\n'
                         f'    {ones}\n'
                         "    ### END SOLUTION", metadata=solution_cell_meta("ones")),
        v4.new_code_cell(ONES_TESTS, metadata=graded_cell_meta("ones-tests", 1)),
    ]
    return nb


def solved() -> nbformat.NotebookNode:
    """Return the assignment with every answer right."""
    return round2("return 2 * x", "return x * x", "return torch.ones(n)")


def appended(code: str, nb: nbformat.NotebookNode | None = None) -> nbformat.NotebookNode:
    """Return the (unsolved) assignment with `code` appended to its first answer cell."""
    nb = nb or round2()
    nb.cells[2].source += "\n\n" + code
    return nb


TRANSFORMER = ("_ip = get_ipython()\n"
               "getattr(_ip, 'input_' + 'transformers_post').append(lambda lines: ['pass\\n'])\n")

# Family 3: reach the guard's state and switch it off, then install a transformer (names built from pieces).
GUARD_CLOSURES = ("def _walk(obj, seen, depth=0):\n"
                  "    if id(obj) in seen or depth > 4:\n        return\n    seen.add(id(obj))\n"
                  "    if hasattr(type(obj), 'restore') and hasattr(obj, 'snapshot'):\n"
                  "        obj.snapshot = None\n"
                  "    for name in ('__closure__', '__wrapped__', '__self__', '__func__'):\n"
                  "        inner = getattr(obj, name, None)\n"
                  "        for item in (inner if isinstance(inner, tuple) else [inner]):\n"
                  "            if item is not None:\n"
                  "                _walk(getattr(item, 'cell_contents', item), seen, depth + 1)\n\n"
                  "_k = get_ipython().kernel\n_seen = set()\n"
                  "for _h in [_k.shell_main, *_k.shell_handlers.values()]:\n    _walk(_h, _seen)\n"
                  + TRANSFORMER)
GUARD_GC = ("import gc\n"
            "for _o in gc.get_objects():\n"
            "    try:\n"
            "        if type(_o).__name__ == 'Guard':\n"
            "            _o.snapshot = None\n            _o.findings.clear()\n"
            "    except Exception:\n        pass\n" + TRANSFORMER)
GUARD_FRAMES = ("import sys\n_f = sys._getframe(0)\n"
                "while _f is not None:\n"
                "    for _v in list(_f.f_locals.values()):\n"
                "        if type(_v).__name__ == 'Guard':\n"
                "            _v.snapshot = None\n            _v.findings.clear()\n"
                "    _f = _f.f_back\n" + TRANSFORMER)
GUARD_EVENT_LOOP = ("import asyncio, gc, itertools\n_found = []\n\n"
                    "def _reset():\n"
                    "    for _o in (_found[0] if _found else []):\n"
                    "        try:\n"
                    "            if type(_o).__name__ == 'Guard':\n"
                    "                _o.snapshot = None\n                _o.findings.clear()\n"
                    "        except Exception:\n            pass\n"
                    "    getattr(get_ipython(), 'input_' + 'transformers_post').append(lambda lines: "
                    "['pass\\n'])\n\n"
                    "_loop = asyncio.get_event_loop()\n"
                    "_loop.call_soon(_found.extend, itertools.starmap(gc.get_objects, [()]))\n"
                    "_loop.call_soon(_reset)\n")
GUARD_GLOBALS = ("_k = get_ipython().kernel\n"
                 "_g = getattr(_k.shell_main, '__glo' + 'bals__')\n"
                 "if 'Snapshot' in _g:\n"
                 "    _g['Snapshot'].restore = lambda self: []\n" + TRANSFORMER)

# Family 4: forge what the grader reads.
ZMQ_PATCH = ("import json\n_zmq = __import__('z' + 'mq')\n_S = getattr(_zmq, 'Soc' + 'ket')\n"
             "_send = _S.send_multipart\n_session = get_ipython().kernel.session\n\n"
             "def _lying_send(self, parts, *args, **kwargs):\n"
             "    parts = list(parts)\n"
             "    if b'<IDS|MSG>' in parts:\n"
             "        i = parts.index(b'<IDS|MSG>')\n"
             "        header = json.loads(parts[i + 2])\n"
             "        if header.get('msg_type') == 'error':\n            return None\n"
             "        if header.get('msg_type') == 'execute_reply':\n"
             "            content = json.loads(parts[i + 5])\n"
             "            if content.get('status') == 'error':\n"
             "                content = {'status': 'ok', 'execution_count': content.get('execution_count'),\n"
             "                           'user_expressions': {}, 'payload': []}\n"
             "                parts[i + 5] = json.dumps(content).encode()\n"
             "                signature = _session.sign(parts[i + 2:i + 6])\n"
             "                parts[i + 1] = signature if isinstance(signature, bytes) else "
             "signature.encode()\n"
             "    return _send(self, parts, *args, **kwargs)\n\n"
             "setattr(_S, 'send_multi' + 'part', _lying_send)\n")
CTYPES_CODE_SWAP = ("import ctypes\nfrom IPython.core.interactiveshell import InteractiveShell\n\n"
                    "def _t(self, raw_cell):\n    return 'pass\\n'\n\n"
                    "_f = getattr(InteractiveShell, 'transform' + '_cell')\n_c = _t.__code__\n"
                    "ctypes.pythonapi.Py_IncRef(ctypes.py_object(_c))\n"
                    "ctypes.memmove(id(_f) + 48, ctypes.byref(ctypes.c_void_p(id(_c))), 8)\n")
CHANNEL_FORGE = ("import json, os, sys, threading, time\n"
                 "_ip = get_ipython()\n_k = _ip.kernel\n"
                 "_fake = os.dup(700)\n_null = os.open(os.devnull, os.O_WRONLY)\nos.dup2(_null, 700)\n"
                 "sys.setswitchinterval(1e-6)\n\n"
                 "def _forge():\n    seen = set()\n    while True:\n"
                 "        _post = getattr(_ip, 'input_' + 'transformers_post')\n"
                 "        if not _post:\n            _post.append(lambda lines: ['pass\\n'])\n"
                 "        msg = (_k.get_parent() or {}).get('header', {}).get('msg_id')\n"
                 "        if msg and msg not in seen:\n            seen.add(msg)\n"
                 "            for phase in ('before', 'after'):\n"
                 "                line = {'msg_id': msg, 'phase': phase, 'changes': [], 'findings': []}\n"
                 "                os.write(_fake, (json.dumps(line) + '\\n').encode())\n"
                 "        time.sleep(0.0002)\n\n"
                 "threading.Thread(target=_forge, daemon=True).start()\n")

# Family 5b: a thread that waits for each test cell to be under way (IPython has stored its input, so the
# guard has already looked), swaps `exec` for a C callable that takes its three arguments and runs nothing
# (no Python frame for the tracer), and puts it back once IPython counts the cell done, before the guard
# looks again.
EXEC_SWAP = ("import builtins, sys, threading\n"
             "_ip = get_ipython()\n_real = builtins.exec\n_stored = _ip.history_manager.input_hist_raw\n"
             "sys.setswitchinterval(1e-6)\n\n"
             "def _swap():\n    seen = len(_stored)\n    while True:\n"
             "        if len(_stored) == seen:\n            continue\n"
             "        seen, count = len(_stored), _ip.execution_count\n"
             "        if 'assert' in _stored[-1]:\n"
             "            setattr(builtins, 'ex' + 'ec', slice)\n"
             "            while _ip.execution_count == count:\n                pass\n"
             "            setattr(builtins, 'ex' + 'ec', _real)\n\n"
             "threading.Thread(target=_swap, daemon=True).start()\n")

# Family 5: patches that undo themselves before the guard looks again (installed by the answer the test
# calls).
TRANSIENT_CUSTOM_EXC = ("import types\n\n"
                        "def double(x):\n    ip = get_ipython()\n"
                        "    saved = (ip.custom_exceptions, ip.CustomTB)\n\n"
                        "    def swallow(self, etype, value, tb, tb_offset=None):\n"
                        "        ip.custom_exceptions, ip.CustomTB = saved\n\n"
                        "    ip.custom_exceptions = (AssertionError,)\n"
                        "    ip.CustomTB = types.MethodType(swallow, ip)\n    return 0\n")
TRANSIENT_SHOWTRACEBACK = ("def double(x):\n    ip = get_ipython()\n    name = '_show' + 'traceback'\n"
                           "    real = getattr(ip, name)\n\n"
                           "    def quiet(*args, **kwargs):\n        setattr(ip, name, real)\n"
                           "        ip.__dict__.pop(name, None)\n\n"
                           "    setattr(ip, name, quiet)\n    return 0\n")

# Family 8: answers that lie to the tests.
LIAR = ("class Yes:\n    __class__ = property(lambda self: __import__('torch').Tensor)\n\n"
        "    def __eq__(self, other):\n        return True\n\n"
        "    def __len__(self):\n        return 3\n\n"
        "    def tolist(self):\n        return [1, 1, 1]\n\n"
        "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        return True\n")
STAND_IN_TORCH = ("class _FakeTorch:\n    Tensor = list\n    equal = staticmethod(lambda a, b: True)\n"
                  "    ones = staticmethod(lambda n: [1] * n)\n\n"
                  "class _Ones(list):\n    def tolist(self):\n        return list(self)\n\n"
                  "torch = _FakeTorch()\n")
PATCHED_EQUAL = "torch.equal = lambda a, b: True\n"


def _students() -> dict[str, nbformat.NotebookNode]:
    liar = appended(LIAR, round2("return Yes()", "return Yes()", "return Yes()"))
    stand_in = appended(STAND_IN_TORCH, round2(ones="return _Ones([1] * n)"))
    patched = appended(PATCHED_EQUAL, round2(ones="return torch.ones(n, dtype=torch.float64) * 1"))
    return {
        "guard-closures": appended(GUARD_CLOSURES), "guard-gc": appended(GUARD_GC),
        "guard-frames": appended(GUARD_FRAMES), "guard-globals": appended(GUARD_GLOBALS),
        "guard-gc-event-loop": appended(GUARD_EVENT_LOOP),
        "zmq-class-patch": appended(ZMQ_PATCH), "ctypes-code-swap": appended(CTYPES_CODE_SWAP),
        "channel-forge": appended(CHANNEL_FORGE), "exec-swap": appended(EXEC_SWAP),
        "transient-custom-exc": appended(TRANSIENT_CUSTOM_EXC),
        "transient-showtraceback": appended(TRANSIENT_SHOWTRACEBACK),
        "lying-objects": liar, "stand-in-torch": stand_in, "patched-torch-equal": patched,
        "honest-solved": solved(),
    }


# student -> pattern one of its flags must match when it keeps any point
FLAGS = {
    "guard-closures": r"input transformer|grader's own|record", "guard-gc": r"garbage collector",
    "guard-frames": r"frames", "guard-gc-event-loop": r"garbage collector|input transformer|IPython ran",
    "guard-globals": r"input transformer|grader's own|record",
    "zmq-class-patch": r"Socket\.send_multipart", "ctypes-code-swap": r"ctypes|raw memory",
    "channel-forge": r"channel|record|background",
    "exec-swap": r"without IPython running its code|exec|background|changed while it ran",
    "transient-custom-exc": r"test called|ran code the test",
    "transient-showtraceback": r"test called|ran code",
    "lying-objects": r"__eq__|__torch_function__|__len__|test called", "stand-in-torch": r"torch",
    "patched-torch-equal": r"torch\.equal|test called",
}
# What the honest parts of each trick's notebook earn (the stand-in's ones() is wrong, the patched one's too).
HONEST_SCORE = {name: 0.0 for name in FLAGS}


def make_round2_course(folder: Path) -> Path:
    """Return a scratch course whose assignment `tiny` is round2's."""
    shutil.copyfile(COURSE_ROOT / "nbgrader_config.py", folder / "nbgrader_config.py")
    (folder / "source" / "tiny").mkdir(parents=True)
    nbformat.write(solved(), folder / "source" / "tiny" / "tiny.ipynb")
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every round-two student in one run (once per test run, even across xdist)."""

    def grade_the_class(course: Path) -> dict:
        make_round2_course(course)
        write_class(course / "incoming", {name: ({"tiny.ipynb": nb},) for name, nb in _students().items()},
                    course)
        done = grade(course, course / "incoming", "--memory", "3000", "--timeout", "90")
        return {"returncode": done.returncode, "stderr": done.stderr}

    course, record = once_per_run(tmp_path_factory, "tamper-round2", grade_the_class)
    assert record["returncode"] == 0, record["stderr"][-3000:]
    return course, rows(course)


def flags_of(row: dict) -> list[str]:
    """Return a grades.csv row's flags."""
    return [f for f in row["flags"].split("; ") if f]


@pytest.mark.parametrize("student", sorted(FLAGS))
def test_trick_earns_nothing_or_is_flagged_with_what_it_did(graded, student):
    _, table = graded
    row = table[student]
    assert row["status"] == "graded", row
    if float(row["score"]) > HONEST_SCORE[student]:
        assert any(re.search(FLAGS[student], f) for f in flags_of(row)), (row["score"], row["flags"])


def test_the_honest_solution_of_this_assignment_gets_full_marks_unflagged(graded):
    _, table = graded
    row = table["honest-solved"]
    assert (row["status"], float(row["score"]), row["flags"]) == ("graded", FULL, ""), row


# --- several notebooks: what the first one's code leaves behind cannot reach the second one's guard
# ----------

# Appended to the first notebook's unsolved answer: try to replace the guard's program, its kernelspec and
# connection file, and leave a process behind that takes the next kernel's channel first, with a key of its
# own.
LAYOUT = '''
import os, subprocess, sys
targets = {"guard program": sys.argv[0], "connection file": sys.argv[sys.argv.index("-f") + 1]}
for what, path in targets.items():
    try:
        with open(path, "a") as handle:
            handle.write("# replaced")
        print(what, "WRITABLE")
    except OSError as exc:
        print(what, "refused:", type(exc).__name__)
channel = sys.argv[sys.argv.index("--channel") + 1]
squatter = (
    "import os, time\\n"
    f"path = {channel!r}\\n"
    "seen = set()\\n"
    "end = time.time() + 120\\n"
    "while time.time() < end:\\n"
    "    try:\\n"
    "        key = os.stat(path).st_ino\\n"
    "        if key not in seen:\\n"
    "            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)\\n"
    "            os.write(fd, b'key ' + b'00' * 32 + b'\\\\n')\\n"
    "            seen.add(key)\\n"
    "    except OSError:\\n"
    "        pass\\n"
    "    time.sleep(0.0005)\\n")
subprocess.Popen([sys.executable, "-c", squatter], start_new_session=True)
''' + TRANSFORMER


def two_notebooks() -> dict[str, nbformat.NotebookNode]:
    """Return the two-notebook assignment (first.ipynb, second.ipynb), both the tiny one, solved."""
    return {"first.ipynb": assignment(), "second.ipynb": assignment()}


@pytest.fixture(scope="module")
def graded_layout(tmp_path_factory):
    """Grade a student of a two-notebook assignment whose first notebook goes after the guard's files."""

    def grade_the_class(course: Path) -> dict:
        shutil.copyfile(COURSE_ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
        (course / "source" / "tiny").mkdir(parents=True)
        for name, nb in two_notebooks().items():
            nbformat.write(nb, course / "source" / "tiny" / name)
        unsolved = assignment(UNSOLVED, UNSOLVED)
        planter = assignment(UNSOLVED, UNSOLVED)
        planter.cells[1].source += "\n\n" + LAYOUT
        students = {"layout-planter": ({"first.ipynb": planter, "second.ipynb": unsolved},),
                    "layout-honest": (two_notebooks(),)}
        write_class(course / "incoming", students, course)
        done = grade(course, course / "incoming", "--timeout", "60")
        return {"returncode": done.returncode, "stderr": done.stderr}

    course, record = once_per_run(tmp_path_factory, "tamper-round2-layout", grade_the_class)
    assert record["returncode"] == 0, record["stderr"][-3000:]
    return course, rows(course)


def test_a_notebook_cannot_replace_the_guard_or_take_the_next_kernels_channel(graded_layout):
    from autograder.grading.sandbox import detect_isolation

    if detect_isolation("auto").mode != "bwrap":
        pytest.skip("needs bubblewrap isolation (elsewhere student code can write what the grader can)")
    course, table = graded_layout
    row = table["layout-planter"]
    assert row["status"] == "graded" and float(row["score"]) == 0.0, row
    assert any("something other than the grading kernel" in f or "input transformer" in f
               for f in flags_of(row)), row["flags"]
    first = nbformat.read(course / "autograded" / "layout-planter" / "tiny" / "first.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for o in first.cells[1].outputs)
    assert "WRITABLE" not in printed and printed.count("refused") == 2, printed
    honest = table["layout-honest"]
    assert (honest["status"], float(honest["score"]), honest["flags"]) == ("graded", 6.0, ""), honest
