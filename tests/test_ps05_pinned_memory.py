"""ps05-pinned-memory: the solutions and other correct answers earn full marks; realistic mistakes lose points."""

from functools import partial

import pytest
import torch
from nbgrader import utils

from autograder import COURSE_ROOT
from autograder.cells import grade_id
from tests import assignment_support as support
from tests.harness import run_graded_cells

NOTEBOOK = COURSE_ROOT / "source" / "ps05-pinned-memory" / "ps05-pinned-memory.ipynb"
CELLS_OF = {
    "make-loader": ("make-loader-tests-basic", "make-loader-tests-pinning"),
    "train-epoch": ("train-epoch-tests-result", "train-epoch-tests-training", "train-epoch-tests-device",
                    "train-epoch-tests-no-sync"),
}
POINTS_OF = {"make-loader": 4, "train-epoch": 6}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "make-loader": "def make_loader(dataset, device, batch_size: int = 64, num_workers: int = 0)"
                   ' -> DataLoader:\n    """Make a loader."""\n',
    "train-epoch": 'def train_epoch(model, loader, loss_fn, optimizer, device) -> torch.Tensor:\n'
                   '    """Train one epoch."""\n',
}
STUB_HEADS = {"train-epoch": "def train_epoch(model, loader, loss_fn, optimizer, device)"}  # the stubs keep these signatures


results_for = partial(run_graded_cells, NOTEBOOK)  # results_for({grade_id: source}) grades with that answer


def loader_source(body: str) -> str:
    """Return a make_loader cell whose body is `body` (written flush left)."""
    return support.function_cell(HEADS["make-loader"], body)


def epoch_source(body: str) -> str:
    """Return a train_epoch cell whose body is `body` (written flush left)."""
    return support.function_cell(HEADS["train-epoch"], body)


def loader_with(pin: str = 'torch.device(device).type == "cuda"', extra: str = "shuffle=False",
                batch: str = "batch_size", workers: str = "num_workers") -> str:
    """Return a make_loader cell that is correct except for the expressions given."""
    return loader_source(f"return DataLoader(dataset, batch_size={batch}, {extra}, num_workers={workers}, "
                         f"pin_memory={pin})")


# The reference loop, one piece at a time, so that each mistake changes one thing.
START = "total = torch.zeros((), device=device)\nbatches = 0"
MOVE = "x = x.to(device, non_blocking=True)\ny = y.to(device, non_blocking=True)"
STEP = "optimizer.zero_grad()\nloss = loss_fn(model(x), y)\nloss.backward()\noptimizer.step()"
ADD = "total += loss.detach()\nbatches += 1"
RETURN = "return total / batches"


def epoch_with(start: str = START, move: str = MOVE, step: str = STEP, add: str = ADD, result: str = RETURN,
               loop: str = "for x, y in loader:") -> str:
    """Return a train_epoch cell built from the reference loop with some pieces replaced."""
    body = "\n".join(f"    {line}" for piece in (move, step, add) for line in piece.split("\n") if line)
    return epoch_source(f"{start}\n{loop}\n{body}\n{result}")


# ----------------------------------------------------------------------------------------------------------
# The notebook itself


def test_imports_and_check_calls():
    code = support.code_cells(NOTEBOOK)
    assert "from devicelab.exercises.ps05 import check, hint" in support.imports_cell(code).source
    checks = [c.source for c in code if c.source.startswith("check(")]
    assert [s.split(")")[0] for s in checks] == ['check("make_loader"', 'check("train_epoch"']


class TestContract(support.AssignmentContract):
    NOTEBOOK, CELLS_OF, POINTS_OF, HEADS, STUB_HEADS = NOTEBOOK, CELLS_OF, POINTS_OF, HEADS, STUB_HEADS


def test_feedback_checks_say_correct_for_the_solution():
    from devicelab.exercises import ps05
    from devicelab.feedback import Outcome, evaluate

    namespace: dict = {}
    for cell in support.code_cells(NOTEBOOK):
        if utils.is_solution(cell) or grade_id(cell) == "imports":
            exec(cell.source, namespace)  # the course's own solution cells
    for name in ("make_loader", "train_epoch"):
        feedback = evaluate(ps05._exercises.exercises[name], namespace)
        assert feedback.outcome is Outcome.CORRECT, str(feedback)
    stub = {"make_loader": _raiser, "train_epoch": _raiser}
    for name in ("make_loader", "train_epoch"):
        assert evaluate(ps05._exercises.exercises[name], stub).outcome is Outcome.NOT_ATTEMPTED


def _raiser(*args, **kwargs):
    raise NotImplementedError("Not done yet")


def test_feedback_checks_catch_a_sync_and_a_pinning_mistake():
    from devicelab.exercises import ps05
    from devicelab.feedback import Outcome, evaluate

    namespace: dict = {}
    exec("import torch\nfrom torch.utils.data import DataLoader\n"
         + loader_with(pin="torch.cuda.is_available()") + "\n"
         + epoch_with(add="total += loss.item()\nbatches += 1"), namespace)
    loader = evaluate(ps05._exercises.exercises["make_loader"], namespace)
    epoch = evaluate(ps05._exercises.exercises["train_epoch"], namespace)
    assert loader.outcome is Outcome.INCORRECT and "pin memory" in loader.message
    assert epoch.outcome is Outcome.INCORRECT and "item" in epoch.message


def test_hints_come_in_levels():
    from devicelab.exercises import ps05

    assert len(ps05._exercises.exercises["make_loader"].hints) >= 2
    assert len(ps05._exercises.exercises["train_epoch"].hints) >= 3
    assert all(e.solution is None for e in ps05._exercises.exercises.values()), "graded: no solutions shipped"


# ----------------------------------------------------------------------------------------------------------
# Other correct answers get full marks

CORRECT_MAKE_LOADER = {
    "str-startswith": loader_with(pin='str(device).startswith("cuda")', extra="drop_last=False"),
    "sequential-sampler-and-in": loader_source("""
from torch.utils.data import SequentialSampler
pin = "cuda" in str(device)
return DataLoader(dataset, batch_size=batch_size, sampler=SequentialSampler(dataset),
                  num_workers=num_workers, pin_memory=pin)
"""),
    "normalise-then-kwargs": loader_source("""
target = device if isinstance(device, torch.device) else torch.device(device)
settings = {"batch_size": batch_size, "num_workers": num_workers, "pin_memory": target.type == "cuda"}
return DataLoader(dataset, **settings)
"""),
    "if-else": loader_source("""
if torch.device(device).type == "cuda":
    return DataLoader(dataset, batch_size, False, num_workers=num_workers, pin_memory=True)
return DataLoader(dataset, batch_size, False, num_workers=num_workers)
"""),
}

CORRECT_TRAIN_EPOCH = {
    "python-sum-over-len": epoch_with(start="losses = []", add="losses.append(loss.detach())",
                                      result="return sum(losses) / len(losses)"),
    "keyword-loss-call-and-set-to-none": epoch_with(
        step="optimizer.zero_grad(set_to_none=True)\nprediction = model(x)\nloss = loss_fn(prediction, y)\n"
             "loss.backward()\noptimizer.step()"),
    "list-then-stack": epoch_with(start="losses = []", add="losses.append(loss.detach())",
                                  result="return torch.stack(losses).mean()"),
    "python-zero-start-and-enumerate": epoch_with(
        start="total = 0.0", loop="for i, (x, y) in enumerate(loader):",
        add="total = total + loss.detach()", result="return total / (i + 1)"),
    "module-zero-grad-and-keyword-to": epoch_with(
        move="x = x.to(device=device, non_blocking=True)\ny = y.to(device=device, non_blocking=True)",
        step="model.zero_grad(set_to_none=True)\nloss = loss_fn(model(x), y)\nloss.backward()\noptimizer.step()"),
    "zero-grad-after-step-and-len-loader": epoch_with(
        step="loss = loss_fn(model(x), y)\nloss.backward()\noptimizer.step()\noptimizer.zero_grad()",
        add="total += loss.detach()", result="return total / len(loader)"),
    "generator-move-and-train-mode": epoch_with(
        start="model.train()\nmodel.to(device)\ntotal = torch.zeros((), device=device)\nbatches = 0",
        loop="for batch in loader:",
        move="x, y = (t.to(device, non_blocking=True) for t in batch)"),
    "detached-loss-variable": epoch_with(
        add="batch_loss = loss.detach()\ntotal = total + batch_loss\nbatches += 1",
        result="mean = total / batches\nreturn mean"),
}


@pytest.mark.parametrize("source", CORRECT_MAKE_LOADER.values(), ids=CORRECT_MAKE_LOADER.keys())
def test_other_correct_make_loader_gets_full_marks(source):
    support.assert_all_pass(results_for({"make-loader": source}))


@pytest.mark.parametrize("source", CORRECT_TRAIN_EPOCH.values(), ids=CORRECT_TRAIN_EPOCH.keys())
def test_other_correct_train_epoch_gets_full_marks(source):
    support.assert_all_pass(results_for({"train-epoch": source}))


# ----------------------------------------------------------------------------------------------------------
# Realistic mistakes lose points, and only in that exercise's cells

MAKE_LOADER_MISTAKES = {
    "always-pins": loader_with(pin="True"),
    "never-pins": loader_with(pin="False"),
    "pins-when-this-machine-has-cuda": loader_with(pin="torch.cuda.is_available()"),
    "compares-device-with-a-string": loader_with(pin='device == "cuda"'),
    "str-equality-misses-the-index": loader_with(pin='str(device) == "cuda"'),
    "reads-type-of-a-string": loader_with(pin='device.type == "cuda"'),
    "pins-for-every-non-cpu-device": loader_with(pin='torch.device(device).type != "cpu"'),
    "shuffles": loader_with(extra="shuffle=True"),
    "ignores-batch-size": loader_with(batch="64"),
    "ignores-num-workers": loader_with(workers="0"),
    "drops-the-last-batch": loader_with(extra="drop_last=True"),
    "positional-num-workers-lands-in-shuffle": loader_source(
        'return DataLoader(dataset, batch_size, num_workers, pin_memory=torch.device(device).type == "cuda")'),
    "returns-the-batches": loader_source(
        'return list(DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, '
        'pin_memory=torch.device(device).type == "cuda"))'),
}

TRAIN_EPOCH_MISTAKES = {
    "item-per-step": epoch_with(start="total = 0.0\nbatches = 0", add="total += loss.item()\nbatches += 1",
                                result="return torch.tensor(total / batches, device=device)"),
    "float-per-step": epoch_with(start="total = 0.0\nbatches = 0", add="total += float(loss)\nbatches += 1",
                                 result="return torch.tensor(total / batches, device=device)"),
    "prints-the-loss-each-step": epoch_with(add='print(f"loss {loss}")\ntotal += loss.detach()\nbatches += 1'),
    "prints-item-each-step": epoch_with(add="print(loss.item())\ntotal += loss.detach()\nbatches += 1"),
    "logs-with-format-spec": epoch_with(add='print(f"{loss:.4f}")\ntotal += loss.detach()\nbatches += 1'),
    "collects-losses-on-the-cpu": epoch_with(start="losses = []", add="losses.append(loss.detach().cpu())",
                                             result="return torch.stack(losses).mean().to(device)"),
    "tolist-of-predictions": epoch_with(add="preds = model(x).detach().tolist()\ntotal += loss.detach()\n"
                                            "batches += 1"),
    "early-stop-check-in-loop": epoch_with(add="if loss < 1e-9:\n    break\ntotal += loss.detach()\nbatches += 1"),
    "returns-a-python-float": epoch_with(result="return (total / batches).item()"),
    "loss-still-requires-grad": epoch_with(add="total += loss\nbatches += 1"),
    "stack-without-detach": epoch_with(start="losses = []", add="losses.append(loss)",
                                       result="return torch.stack(losses).mean()"),
    "sum-instead-of-mean": epoch_with(result="return total"),
    "divides-by-the-number-of-samples": epoch_with(result="return total / len(loader.dataset)"),
    "weights-batches-by-size": epoch_with(start="total = torch.zeros((), device=device)\nseen = 0",
                                          add="total += loss.detach() * len(x)\nseen += len(x)",
                                          result="return total / seen"),
    "returns-the-last-loss": epoch_with(result="return loss.detach()"),
    "no-zero-grad": epoch_with(step="loss = loss_fn(model(x), y)\nloss.backward()\noptimizer.step()"),
    "no-step": epoch_with(step="optimizer.zero_grad()\nloss = loss_fn(model(x), y)\nloss.backward()"),
    "no-backward": epoch_with(step="optimizer.zero_grad()\nloss = loss_fn(model(x), y)\noptimizer.step()"),
    "zero-grad-between-backward-and-step": epoch_with(
        step="loss = loss_fn(model(x), y)\nloss.backward()\noptimizer.zero_grad()\noptimizer.step()"),
    "step-before-backward": epoch_with(
        step="optimizer.zero_grad()\nloss = loss_fn(model(x), y)\noptimizer.step()\nloss.backward()"),
    "blocking-moves": epoch_with(move="x = x.to(device)\ny = y.to(device)"),
    "explicit-non-blocking-false": epoch_with(
        move="x = x.to(device, non_blocking=False)\ny = y.to(device, non_blocking=False)"),
    "moves-only-x": epoch_with(move="x = x.to(device, non_blocking=True)"),
    "hard-coded-cuda": epoch_with(move="x = x.cuda(non_blocking=True)\ny = y.cuda(non_blocking=True)"),
    "running-total-on-the-cpu": epoch_with(start="total = torch.zeros(())\nbatches = 0"),
    "loss-arguments-swapped": epoch_with(
        step="optimizer.zero_grad()\nloss = loss_fn(y, model(x))\nloss.backward()\noptimizer.step()"),
    "switches-the-model-to-eval": epoch_with(start="model.eval()\n" + START),
    "torch-tensor-of-losses": epoch_with(start="losses = []", add="losses.append(loss.detach())",
                                         result="return torch.tensor(losses).mean()"),
}


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning")
@pytest.mark.parametrize("source", MAKE_LOADER_MISTAKES.values(), ids=MAKE_LOADER_MISTAKES.keys())
def test_make_loader_mistake_loses_points(source):
    support.assert_mistake_loses_points(NOTEBOOK, "make-loader", source, CELLS_OF, TOTAL)


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True:UserWarning")
@pytest.mark.parametrize("source", TRAIN_EPOCH_MISTAKES.values(), ids=TRAIN_EPOCH_MISTAKES.keys())
def test_train_epoch_mistake_loses_points(source):
    support.assert_mistake_loses_points(NOTEBOOK, "train-epoch", source, CELLS_OF, TOTAL)


@pytest.mark.parametrize(("mistake", "cell", "words"), [
    ("item-per-step", "train-epoch-tests-no-sync", "item"),
    ("prints-the-loss-each-step", "train-epoch-tests-no-sync", "__format__"),
    ("blocking-moves", "train-epoch-tests-no-sync", "non_blocking=True"),
    ("sum-instead-of-mean", "train-epoch-tests-result", "sum of the batch losses"),
    ("loss-still-requires-grad", "train-epoch-tests-result", "loss.detach()"),
    ("no-zero-grad", "train-epoch-tests-training", "zero the gradients"),
    ("no-step", "train-epoch-tests-training", "did not change"),
    ("running-total-on-the-cpu", "train-epoch-tests-device", "stay on meta"),
    ("returns-a-python-float", "train-epoch-tests-result", "not float"),
])
def test_train_epoch_failures_say_what_to_fix(mistake, cell, words):
    results = results_for({"train-epoch": TRAIN_EPOCH_MISTAKES[mistake]})
    assert not results[cell].passed and words in results[cell].error, support.report(results)


@pytest.mark.parametrize(("mistake", "cell", "words"), [
    ("pins-when-this-machine-has-cuda", "make-loader-tests-pinning", "not from torch.cuda.is_available()"),
    ("shuffles", "make-loader-tests-basic", "no shuffling"),
    ("drops-the-last-batch", "make-loader-tests-basic", "don't drop it"),
    ("str-equality-misses-the-index", "make-loader-tests-pinning", "with or without an index"),
])
def test_make_loader_failures_say_what_to_fix(mistake, cell, words):
    results = results_for({"make-loader": MAKE_LOADER_MISTAKES[mistake]})
    assert not results[cell].passed and words in results[cell].error, support.report(results)


def test_spies_and_fakes_do_not_leak_out_of_the_notebook():
    before = {name: torch.Tensor.__dict__.get(name) for name in
              ("item", "cpu", "tolist", "numpy", "to", "__float__", "__format__", "__repr__", "__bool__")}
    available = torch.cuda.is_available
    results_for({"train-epoch": TRAIN_EPOCH_MISTAKES["prints-the-loss-each-step"],
                 "make-loader": MAKE_LOADER_MISTAKES["pins-when-this-machine-has-cuda"]})
    after = {name: torch.Tensor.__dict__.get(name) for name in before}
    assert after == before
    assert torch.cuda.is_available is available


def test_check_and_the_graded_test_watch_the_same_syncs():
    """A loop that compares the loss with `if loss < best:` reads it (Tensor.__bool__): both say so."""
    from devicelab.exercises import ps05
    from devicelab.feedback import Outcome, evaluate

    source = epoch_with(start="total = torch.zeros((), device=device)\nbatches = 0\nbest = float('inf')",
                        add="total += loss.detach()\nbatches += 1\nif loss < best:\n    best = loss.detach()")
    namespace: dict = {}
    exec("import torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader\n" + source, namespace)
    feedback = evaluate(ps05._exercises.exercises["train_epoch"], namespace)
    assert feedback.outcome is Outcome.INCORRECT and "__bool__" in feedback.message, feedback
    assert not results_for({"train-epoch": source})["train-epoch-tests-no-sync"].passed
