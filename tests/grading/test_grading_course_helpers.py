"""A guarded test cell judges with the course's own helpers; a student who swaps them earns nothing.

ps08's `fixed-train-tests-*` cells run in the student's kernel (guarded: the DDP job runs there) and judge
with helpers the notebook's locked set-up cell imports (`shard_problems`, `weight_problems`,
`loss_problems`): `assert not shard_problems(run)`. A builtin that returns something falsy for any argument
(`callable`) is no student code for the tracer to see. Before the fix, an answer that left the sampler out
(22 of 32 points) earned all 32, unflagged, with any of these:

- the names rebound in the notebook's namespace, after the set-up cell (`shard_problems = callable`);
- the same, with a library function renamed to look like the helper (its code is the standard library's);
- the helpers replaced in the course's module by a cell *before* the set-up cell, so that the set-up cell
  itself imports the stand-ins;

and two independent reads found more (each below, graded beside the plain mistake it is added to).

Now the names a test reads that the instructor's set-up cells bound must still be what those cells bound,
and the course's modules (imported by the kernel before any student code, as the set-up cells name them) are
part of the path the guard restores. Each trick earns the plain wrong answer's points and is flagged; the
solved notebook, and one that imports a helper again, keep full marks unflagged.
"""


import nbformat
import pytest
from nbgrader import utils

from autograder import COURSE_ROOT
from autograder.cells import grade_id
from autograder.grading.demo import solved
from tests.exercises.test_ps08_several_devices import MISTAKES, train_with
from tests.grading.test_grading_out_of_process_ps01 import grade_class_once

pytestmark = pytest.mark.notebook

ASSIGNMENT = "ps08-several-devices"
HELPERS = ("shard_problems", "weight_problems", "loss_problems")
# A DDP job that runs and reports, but reads no shard of its own: the `-shards`, `-weights` and `-losses`
# cells fail it (10 of fixed_train's 12 points).
NO_SAMPLER = MISTAKES[("fixed-train", "no-sampler")]
REBOUND = "\n" + " = ".join(HELPERS) + " = callable\n"
RENAMED = ("\nimport inspect, types\n" + "".join(
    f"{name} = types.FunctionType(inspect.isclass.__code__, inspect.isclass.__globals__, '{name}')\n"
    for name in HELPERS))
BEFORE_IMPORTS = ("import devicelab.exercises.ps08 as helpers\n"
                  + " = ".join(f"helpers.{name}" for name in HELPERS) + " = callable\n")
# The course's module swapped for a copy in sys.modules before the set-up cell imports from it.
SWAPPED_MODULE = ("import sys, types\nimport devicelab.exercises.ps08 as real\n"
                  "fake = types.ModuleType(real.__name__)\nfake.__dict__.update(vars(real))\n"
                  + " = ".join(f"fake.{name}" for name in HELPERS) + " = callable\n"
                  "sys.modules[real.__name__] = fake\n")
# A copy of a set-up cell (the Colab set-up cell, which calls importlib.util.find_spec) run after a hook that
# rebinds the helpers while that copy runs: as if the set-up cells had bound the stand-ins.
FIND_SPEC_HOOK = (
    "\nimport importlib.util\n_real_find_spec = importlib.util.find_spec\n"
    "def _find_spec(name, package=None):\n"
    "    importlib.util.find_spec = _real_find_spec\n"
    "    ns = get_ipython().user_ns\n"
    "    " + " = ".join(f"ns[{name!r}]" for name in HELPERS) + " = callable\n"
    "    return _real_find_spec(name, package)\n"
    "importlib.util.find_spec = _find_spec\n")
# A thread that rebinds each helper once its test has started (after the guard's look at the names).
THREAD = (
    "\nimport threading, time\n"
    "def _watch(ns=get_ipython().user_ns):\n"
    "    seen = 0\n"
    "    while True:\n"
    "        cells = ns.get('_ih') or []\n"
    "        if len(cells) != seen:\n"
    "            seen = len(cells)\n"
    f"            for name in {HELPERS!r}:\n"
    "                if name + '(run)' in cells[-1]:\n"
    "                    ns[name] = callable\n"
    "        time.sleep(0.002)\n"
    "threading.Thread(target=_watch, daemon=True).start()\n")
# What the helpers read from the course's modules, rebound: the learning rate the reference replays, and the
# list ps07's payload (a hostile checkpoint, which ps08 re-exports) notes it ran in.
LEARNING_RATE = "\nimport devicelab.exercises.ps08 as helpers\nhelpers.LR = 0.1\n"
PAYLOAD_LIST = "\nimport devicelab.exercises.ps07 as payloads\npayloads.payload_ran = []\n"
UNSAFE_LOAD = MISTAKES[("load-for-one", "weights-only-false")]
# A builtin in torch's place (torch is not recorded): the helpers compare with functions of their module.
TORCH_BUILTIN = '\ntorch.allclose = torch.equal = "1".format\n'
# The helpers' code swapped in place (the function objects stay the ones the set-up cell bound).
CODE_SWAP = "\n" + " = ".join(f"{name}.__code__" for name in HELPERS) + " = (lambda run: []).__code__\n"
# The model's own methods hidden on the instance, so that a judge reading them sees nothing to compare.
UNTOUCHED = "def load_for_one(path, model, device):\n    return model\n"
HIDDEN_METHODS = ("def load_for_one(path, model, device):\n"
                  "    model.state_dict = lambda *a, **k: {}\n"
                  "    model.named_parameters = lambda *a, **k: iter(())\n"
                  "    model.named_buffers = lambda *a, **k: iter(())\n"
                  "    return model\n")
# A thread that puts a stand-in in a helper's place only while a test calls it, and the helper back before
# the test ends (the tracer follows the main thread only): a thread of the student's still running when a
# graded test starts fails that test.
SWAP_AND_PUT_BACK = (
    "\nimport functools, sys, threading, time\nsys.setswitchinterval(1e-5)\n"
    f"_REAL = {{n: globals()[n] for n in {HELPERS!r}}}\n"
    "def _watch(ns=get_ipython().user_ns):\n"
    "    seen = 0\n"
    "    while True:\n"
    "        cells = ns.get('_ih') or []\n"
    "        if len(cells) != seen:\n"
    "            seen, source = len(cells), cells[-1]\n"
    "            for n in _REAL:\n"
    "                calls = source.count(n + '(run)')\n"
    "                if calls:\n"
    "                    before, changes = ns.get('problems'), 0\n"
    "                    ns[n] = functools.partial(dict.fromkeys, ())\n"
    "                    while changes < calls:\n"
    "                        if ns.get('problems') is not before:\n"
    "                            changes, before = changes + 1, ns.get('problems')\n"
    "                        time.sleep(0)\n"
    "                    ns[n] = _REAL[n]\n"
    "        time.sleep(0.001)\n"
    "threading.Thread(target=_watch, daemon=True).start()\n")
# trick -> (the plain mistake it is added to, whether the guard flags it); none earns a point the mistake does
# not (torch's `equal` replaced costs the tests that call it themselves)
TRICKS = {"rebound": ("no-sampler", True), "renamed-library-function": ("no-sampler", True),
          "patched-before-the-set-up-cell": ("no-sampler", True), "swapped-module": ("no-sampler", True),
          "set-up-cell-copied-under-a-hook": ("no-sampler", True),
          "rebound-by-a-thread": ("no-sampler", True), "code-swapped-in-place": ("no-sampler", True),
          "learning-rate-rebound": ("lr-0.1", True), "payload-list-rebound": ("unsafe-load", True),
          "rebound-and-put-back-by-a-thread": ("no-sampler", True),
          "builtin-in-torch-s-place": ("no-sampler", False), "model-methods-hidden": ("untouched", False)}


def notebooks() -> dict[str, nbformat.NotebookNode]:
    """Return student -> notebook: every answer solved but fixed_train (no sampler), with or without a trick;
    the solved notebook; and the solved one importing a helper again in its answer (an honest habit)."""
    name = f"{ASSIGNMENT}.ipynb"
    release = nbformat.read(COURSE_ROOT / "release" / ASSIGNMENT / name, as_version=4)
    source = nbformat.read(COURSE_ROOT / "source" / ASSIGNMENT / name, as_version=4)
    right = solved(release, source)

    colab = next(c for c in source.cells if "colab-setup" in c.metadata.get("tags", []))

    def variant(answer: str | None = None, appended: str = "", first_cell: str | None = None,
                after: str | None = None, exercise: str = "fixed-train"):
        nb = nbformat.reads(nbformat.writes(right), as_version=4)
        at, cell = next((i, c) for i, c in enumerate(nb.cells)
                        if utils.is_solution(c) and grade_id(c) == exercise)
        cell.source = (cell.source if answer is None else answer) + appended
        if after is not None:
            nb.cells.insert(at + 1, nbformat.v4.new_code_cell(after))
        if first_cell is not None:
            imports = next(i for i, c in enumerate(nb.cells) if grade_id(c) == "imports")
            nb.cells.insert(imports, nbformat.v4.new_code_cell(first_cell))
        return nb

    fast = train_with().replace("lr=0.05", "lr=0.1")
    return {"no-sampler": variant(NO_SAMPLER), "rebound": variant(NO_SAMPLER, REBOUND),
            "renamed-library-function": variant(NO_SAMPLER, RENAMED),
            "patched-before-the-set-up-cell": variant(NO_SAMPLER, first_cell=BEFORE_IMPORTS),
            "swapped-module": variant(NO_SAMPLER, first_cell=SWAPPED_MODULE),
            "set-up-cell-copied-under-a-hook": variant(NO_SAMPLER, FIND_SPEC_HOOK, after=colab.source),
            "rebound-by-a-thread": variant(NO_SAMPLER, THREAD),
            "lr-0.1": variant(fast), "learning-rate-rebound": variant(fast, LEARNING_RATE),
            "unsafe-load": variant(UNSAFE_LOAD, exercise="load-for-one"),
            "payload-list-rebound": variant(UNSAFE_LOAD, PAYLOAD_LIST, exercise="load-for-one"),
            "builtin-in-torch-s-place": variant(NO_SAMPLER, TORCH_BUILTIN),
            "code-swapped-in-place": variant(NO_SAMPLER, CODE_SWAP),
            "untouched": variant(UNTOUCHED, exercise="load-for-one"),
            "model-methods-hidden": variant(HIDDEN_METHODS, exercise="load-for-one"),
            "rebound-and-put-back-by-a-thread": variant(NO_SAMPLER, SWAP_AND_PUT_BACK),
            "solved": variant(), "solved-importing-again": variant(
                appended="\nfrom devicelab.exercises.ps08 import shard_problems, weight_problems\n")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the class once per test run; return (student -> grades.csv row, student -> cell scores)."""
    return grade_class_once(tmp_path_factory, "course-helpers-ps08", ASSIGNMENT, notebooks,
                            "--timeout", "240", "--memory", "3000")


def fixed_train(cells: dict[str, float]) -> dict[str, float]:
    return {gid: score for gid, score in cells.items() if gid.startswith("fixed-train")}


def test_the_wrong_answer_alone_loses_the_shards_weights_and_losses(graded):
    table, cells = graded
    assert fixed_train(cells["no-sampler"]) == {
        "fixed-train-tests-runs": 2.0, "fixed-train-tests-shards": 0.0, "fixed-train-tests-weights": 0.0,
        "fixed-train-tests-losses": 0.0}, table["no-sampler"]
    assert table["no-sampler"]["flags"] == "", table["no-sampler"]


def test_the_other_plain_mistakes_lose_their_points_unflagged(graded):
    table, cells = graded
    assert (float(table["lr-0.1"]["score"]), table["lr-0.1"]["flags"]) == (26.0, ""), table["lr-0.1"]
    assert cells["lr-0.1"]["fixed-train-tests-weights"] == cells["lr-0.1"]["fixed-train-tests-losses"] == 0
    assert (float(table["unsafe-load"]["score"]), table["unsafe-load"]["flags"]) == (30.0, "")
    assert cells["unsafe-load"]["load-for-one-tests-safe"] == 0


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_swapping_the_course_s_helpers_earns_nothing_and_is_flagged(graded, trick):
    table, cells = graded
    mistake, flagged = TRICKS[trick]
    row = table[trick]
    assert row["status"] == "graded", row
    gained = {gid: score for gid, score in cells[trick].items() if score > cells[mistake][gid]}
    assert gained == {} and float(row["score"]) <= float(table[mistake]["score"]), (row, gained)
    assert bool(row["flags"]) == flagged, f"{trick}: {row}"


@pytest.mark.parametrize("student", ["solved", "solved-importing-again"])
def test_honest_notebooks_keep_full_marks_unflagged(graded, student):
    table, _ = graded
    row = table[student]
    assert (row["status"], row["score"], row["flags"]) == ("graded", row["max_score"], ""), row
