"""ps05-pinned-memory: the solutions and other correct answers earn full marks; realistic mistakes lose
points.
"""

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
    "eval-accuracy": ("eval-accuracy-tests-values", "eval-accuracy-tests-no-sync",
                      "eval-accuracy-tests-eval-mode"),
}
POINTS_OF = {"make-loader": 4, "train-epoch": 6, "eval-accuracy": 10}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "make-loader": "def make_loader(dataset, device, batch_size: int = 64, num_workers: int = 0)"
                   ' -> DataLoader:\n    """Make a loader."""\n',
    "train-epoch": 'def train_epoch(model, loader, loss_fn, optimizer, device) -> torch.Tensor:\n'
                   '    """Train one epoch."""\n',
    "eval-accuracy": 'def eval_accuracy(model, loader, device) -> torch.Tensor:\n    """Evaluate."""\n',
}
STUB_HEADS = {"train-epoch": "def train_epoch(model, loader, loss_fn, optimizer, device)",
              # the stubs keep these signatures
              "eval-accuracy": "def eval_accuracy(model, loader, device) -> torch.Tensor:"}


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
    assert [s.split(")")[0] for s in checks] == ['check("make_loader"', 'check("train_epoch"',
                                                 'check("eval_accuracy"']


class TestContract(support.AssignmentContract):
    NOTEBOOK, CELLS_OF, POINTS_OF, HEADS, STUB_HEADS = NOTEBOOK, CELLS_OF, POINTS_OF, HEADS, STUB_HEADS


def test_feedback_checks_say_correct_for_the_solution():
    from devicelab.exercises import ps05
    from devicelab.feedback import Outcome, evaluate

    namespace: dict = {}
    for cell in support.code_cells(NOTEBOOK):
        if utils.is_solution(cell) or grade_id(cell) == "imports":
            exec(cell.source, namespace)  # the course's own solution cells
    for name in ("make_loader", "train_epoch", "eval_accuracy"):
        feedback = evaluate(ps05._exercises.exercises[name], namespace)
        assert feedback.outcome is Outcome.CORRECT, str(feedback)
    stub = {"make_loader": _raiser, "train_epoch": _raiser, "eval_accuracy": _raiser}
    for name in ("make_loader", "train_epoch", "eval_accuracy"):
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
    assert len(ps05._exercises.exercises["eval_accuracy"].hints) >= 3
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
        step="model.zero_grad(set_to_none=True)\nloss = loss_fn(model(x), y)\nloss.backward()\n"
             "optimizer.step()"),
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
        'return DataLoader(dataset, batch_size, num_workers, '
        'pin_memory=torch.device(device).type == "cuda")'),
    "returns-the-batches": loader_source(
        'return list(DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, '
        'pin_memory=torch.device(device).type == "cuda"))'),
}

TRAIN_EPOCH_MISTAKES = {
    "item-per-step": epoch_with(start="total = 0.0\nbatches = 0", add="total += loss.item()\nbatches += 1",
                                result="return torch.tensor(total / batches, device=device)"),
    "float-per-step": epoch_with(start="total = 0.0\nbatches = 0", add="total += float(loss)\nbatches += 1",
                                 result="return torch.tensor(total / batches, device=device)"),
    "prints-the-loss-each-step": epoch_with(
        add='print(f"loss {loss}")\ntotal += loss.detach()\nbatches += 1'),
    "prints-item-each-step": epoch_with(add="print(loss.item())\ntotal += loss.detach()\nbatches += 1"),
    "logs-with-format-spec": epoch_with(add='print(f"{loss:.4f}")\ntotal += loss.detach()\nbatches += 1'),
    "collects-losses-on-the-cpu": epoch_with(start="losses = []", add="losses.append(loss.detach().cpu())",
                                             result="return torch.stack(losses).mean().to(device)"),
    "tolist-of-predictions": epoch_with(add="preds = model(x).detach().tolist()\ntotal += loss.detach()\n"
                                            "batches += 1"),
    "early-stop-check-in-loop": epoch_with(add="if loss < 1e-9:\n    break\ntotal += loss.detach()\n"
                                               "batches += 1"),
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


# ----------------------------------------------------------------------------------------------------------
# eval_accuracy: find the syncs in a slow evaluation loop and remove them.
#
# The mistakes come first, from how people fix a loop they were told is "full of syncs" (what they believed in
# brackets); the graded cells that catch each one follow in EVAL_ACCURACY_MISTAKES.
#
# | mistake | what the student believed | caught by |
# | --- | --- | --- |
# | keeps `.item()` on the count | the mask was the only sync | no-sync (SyncSpy) |
# | `int(...)` / `float(...)` instead of `.item()` | only `.item()` syncs | no-sync |
# | keeps `pred[keep]`, counts as tensors | indexing is a GPU op, so asynchronous | no-sync (boolean index) |
# | `masked_select`, `nonzero`, `torch.where(keep)` | another function avoids the mask's sync | no-sync |
# | `len(y[keep])` for the denominator | `len` reads a shape, not a value | no-sync |
# | `if not keep.any(): continue` | a test on a tensor is free | no-sync (`__bool__`) |
# | prints the running accuracy | printing is host work only | no-sync (`__format__`) |
# | `.cpu()` of each batch's count for a log | a small copy does not matter | no-sync |
# | `torch.tensor(list_of_counts)` at the end | building a tensor is not a read | no-sync |
# | blocking `.to(device)` | the copy is not a sync | no-sync |
# | counts started on the CPU | a 0-dim CPU tensor works with any device | no-sync (result not on meta) |
# | moves only x | labels never need to move | no-sync (meta raises) |
# | returns `.item()` of the result | the function should give a number | values, no-sync |
# | mean of per-batch accuracies | batches are the same size | values (uneven batches, an all-padding batch) |
# | padding in the denominator (`len(y)`) | padding is part of the data | values |
# | `correct // labelled` | division of counts | values (not floating) |
# | a percentage | accuracy is in % | values |
# | forgets `model.eval()` | `no_grad` switches off dropout too | eval-mode |
# | forgets `torch.no_grad()` | `model.eval()` switches off autograd | eval-mode |


def accuracy_source(body: str) -> str:
    """Return an eval_accuracy cell whose body is `body` (written flush left)."""
    return support.function_cell(HEADS["eval-accuracy"], body)


def accuracy_with(start: str = "correct = torch.zeros((), dtype=torch.long, device=device)\n"
                               "labelled = torch.zeros((), dtype=torch.long, device=device)",
                  move: str = "x = x.to(device, non_blocking=True)\ny = y.to(device, non_blocking=True)",
                  count: str = "keep = y != -100\ncorrect += ((model(x).argmax(dim=1) == y) & keep).sum()\n"
                               "labelled += keep.sum()",
                  result: str = "return correct / labelled", mode: str = "model.eval()",
                  grad: str = "with torch.no_grad():") -> str:
    """Return an eval_accuracy cell built from the reference with some pieces replaced."""
    inner = "\n".join(f"        {line}" for piece in (move, count) for line in piece.split("\n") if line)
    if grad:
        body = f"{grad}\n    for x, y in loader:\n{inner}"
    else:
        body = "for x, y in loader:\n" + "\n".join(line[4:] for line in inner.split("\n"))
    return accuracy_source("\n".join(p for p in (mode, start, body, result) if p))


CORRECT_EVAL_ACCURACY = {
    "python-zero-start-and-inference-mode": accuracy_with(
        start="correct, labelled = 0, 0", grad="with torch.inference_mode():",
        count="keep = y != -100\ncorrect = correct + (model(x).argmax(1).eq(y) & keep).sum()\n"
              "labelled = labelled + keep.sum()"),
    "unmasked-equality-and-float-totals": accuracy_with(
        start="correct = torch.zeros((), device=device)\nlabelled = torch.zeros((), device=device)",
        count="pred = model(x).argmax(dim=1)\ncorrect += (pred == y).sum()  # -100 never equals an argmax\n"
              "labelled += (y != -100).sum()"),
    "three-argument-where-and-double": accuracy_with(
        count="keep = y >= 0\nhits = torch.where(keep, model(x).argmax(dim=1) == y, torch.zeros_like(keep))\n"
              "correct += hits.sum()\nlabelled += keep.sum()",
        result="return correct.double() / labelled"),
    "collect-then-cat-with-keyword-moves": accuracy_with(
        start="hits, masks = [], []",
        move="x = x.to(device=device, non_blocking=True)\ny = y.to(device=device, non_blocking=True)",
        count="keep = y.ne(-100)\nhits.append((model(x).argmax(dim=1) == y) & keep)\nmasks.append(keep)",
        result="return torch.cat(hits).sum().float() / torch.cat(masks).sum()"),
    "stack-of-counts-and-progress-print": accuracy_source("""
model.eval()
rights, counts = [], []
with torch.no_grad():
    for step, (x, y) in enumerate(loader):
        x, y = (t.to(device, non_blocking=True) for t in (x, y))
        keep = (y != -100).long()
        rights.append(((model(x).argmax(dim=1) == y).long() * keep).sum())
        counts.append(keep.sum())
        print(f"batch {step} queued")  # Python values only: no sync
return torch.stack(rights).sum() / torch.stack(counts).sum()
"""),
}


@pytest.mark.parametrize("source", CORRECT_EVAL_ACCURACY.values(), ids=CORRECT_EVAL_ACCURACY.keys())
def test_other_correct_eval_accuracy_gets_full_marks(source):
    support.assert_all_pass(results_for({"eval-accuracy": source}))


SLOW = "pred = model(x).argmax(dim=1)\nkeep = y != -100\npred, y = pred[keep], y[keep]\n"
EVAL_ACCURACY_MISTAKES = {
    "item-per-step": accuracy_with(start="correct, labelled = 0, 0",
                                   count=SLOW + "correct += (pred == y).sum().item()\nlabelled += len(y)",
                                   result="return torch.tensor(correct / labelled, device=device)"),
    "int-instead-of-item": accuracy_with(
        count="keep = y != -100\ncorrect += ((model(x).argmax(dim=1) == y) & keep).sum()\n"
              "labelled += int(keep.sum())"),
    "float-of-the-count": accuracy_with(
        start="correct, labelled = 0.0, 0.0",
        count="keep = y != -100\ncorrect += float(((model(x).argmax(dim=1) == y) & keep).sum())\n"
              "labelled += float(keep.sum())",
        result="return torch.tensor(correct / labelled, device=device)"),
    "mask-index-kept": accuracy_with(count=SLOW + "correct += (pred == y).sum()\nlabelled += keep.sum()"),
    "masked-select": accuracy_with(
        count="keep = y != -100\npred = torch.masked_select(model(x).argmax(dim=1), keep)\n"
              "correct += (pred == torch.masked_select(y, keep)).sum()\nlabelled += keep.sum()"),
    "nonzero-indices": accuracy_with(
        count="index = (y != -100).nonzero().squeeze(1)\n"
              "correct += (model(x).argmax(dim=1)[index] == y[index]).sum()\n"
              "labelled += index.numel()"),
    "one-argument-where": accuracy_with(
        count="(index,) = torch.where(y != -100)\n"
              "correct += (model(x).argmax(dim=1)[index] == y[index]).sum()\n"
              "labelled += index.numel()"),
    "len-of-the-masked-labels": accuracy_with(
        count="keep = y != -100\ncorrect += ((model(x).argmax(dim=1) == y) & keep).sum()\n"
              "labelled += len(y[keep])"),
    "skips-batches-without-labels": accuracy_with(
        count="keep = y != -100\nif not keep.any():\n    continue\n"
              "correct += ((model(x).argmax(dim=1) == y) & keep).sum()\nlabelled += keep.sum()"),
    "prints-the-running-accuracy": accuracy_with(
        count="keep = y != -100\ncorrect += ((model(x).argmax(dim=1) == y) & keep).sum()\n"
              "labelled += keep.sum()\n"
              'print(f"running accuracy {correct / labelled:.3f}")'),
    "cpu-copy-for-a-log": accuracy_with(
        start="history = []\ncorrect = torch.zeros((), dtype=torch.long, device=device)\n"
              "labelled = torch.zeros((), dtype=torch.long, device=device)",
        count="keep = y != -100\nright = ((model(x).argmax(dim=1) == y) & keep).sum()\n"
              "history.append(right.cpu())\ncorrect += right\nlabelled += keep.sum()"),
    "tensor-of-a-list-of-counts": accuracy_with(
        start="rights, counts = [], []",
        count="keep = y != -100\nrights.append(((model(x).argmax(dim=1) == y) & keep).sum())\n"
              "counts.append(keep.sum())",
        result="return torch.tensor(rights, device=device).sum() / "
               "torch.tensor(counts, device=device).sum()"),
    "blocking-moves": accuracy_with(move="x, y = x.to(device), y.to(device)"),
    "counts-on-the-cpu": accuracy_with(start="correct = torch.zeros((), dtype=torch.long)\n"
                                             "labelled = torch.zeros((), dtype=torch.long)"),
    "moves-only-x": accuracy_with(move="x = x.to(device, non_blocking=True)"),
    "returns-a-python-float": accuracy_with(result="return (correct / labelled).item()"),
    "mean-of-batch-accuracies": accuracy_with(
        start="accuracies = []",
        count="keep = y != -100\n"
              "accuracies.append(((model(x).argmax(dim=1) == y) & keep).sum() / keep.sum())",
        result="return torch.stack(accuracies).mean()"),
    "padding-in-the-denominator": accuracy_with(
        start="correct = torch.zeros((), dtype=torch.long, device=device)\nlabelled = 0",
        count="keep = y != -100\ncorrect += ((model(x).argmax(dim=1) == y) & keep).sum()\n"
              "labelled += len(y)"),
    "integer-division": accuracy_with(result="return correct // labelled"),
    "percentage": accuracy_with(result="return 100 * correct / labelled"),
    "forgets-eval-mode": accuracy_with(mode=""),
    "forgets-no-grad": accuracy_with(grad=""),
}


@pytest.mark.parametrize("source", EVAL_ACCURACY_MISTAKES.values(), ids=EVAL_ACCURACY_MISTAKES.keys())
def test_eval_accuracy_mistake_loses_points(source):
    support.assert_mistake_loses_points(NOTEBOOK, "eval-accuracy", source, CELLS_OF, TOTAL)


@pytest.mark.parametrize(("mistake", "cell", "words"), [
    ("item-per-step", "eval-accuracy-tests-no-sync", "boolean-mask indexing"),
    ("int-instead-of-item", "eval-accuracy-tests-no-sync", "int(tensor)"),
    ("masked-select", "eval-accuracy-tests-no-sync", "masked_select"),
    ("one-argument-where", "eval-accuracy-tests-no-sync", "torch.where(condition)"),
    ("skips-batches-without-labels", "eval-accuracy-tests-no-sync", "bool(tensor)"),
    ("blocking-moves", "eval-accuracy-tests-no-sync", "non_blocking=True"),
    ("counts-on-the-cpu", "eval-accuracy-tests-no-sync", "stay on meta"),
    ("mean-of-batch-accuracies", "eval-accuracy-tests-values", "divide once at the end"),
    ("padding-in-the-denominator", "eval-accuracy-tests-values", "label != -100"),
    ("percentage", "eval-accuracy-tests-values", "not a percentage"),
    ("forgets-eval-mode", "eval-accuracy-tests-eval-mode", "model.eval()"),
    ("forgets-no-grad", "eval-accuracy-tests-eval-mode", "torch.no_grad()"),
])
def test_eval_accuracy_failures_say_what_to_fix(mistake, cell, words):
    results = results_for({"eval-accuracy": EVAL_ACCURACY_MISTAKES[mistake]})
    assert not results[cell].passed and words in results[cell].error, support.report(results)


def test_the_sync_spy_names_each_kind_of_sync_and_leaves_torch_as_it_was():
    from devicelab.exercises.ps05 import SyncSpy

    x, mask = torch.randn(6), torch.tensor([True, False] * 3)
    calls = {
        "item": lambda: x.sum().item(), "float": lambda: float(x.sum()),
        "if": lambda: 1 if x.sum() > 0 else 0,
        "print": lambda: repr(x), "format": lambda: f"{x.sum():.2f}", "cpu": lambda: x.cpu(),
        "tolist": lambda: x.tolist(), "numpy": lambda: x.numpy(), "equal": lambda: torch.equal(x, x),
        "mask": lambda: x[mask], "mask-in-tuple": lambda: x.reshape(2, 3)[mask[:2], :],
        "nonzero": lambda: mask.nonzero(), "where1": lambda: torch.where(mask),
        "unique": lambda: torch.unique(x),
        "masked_select": lambda: x.masked_select(mask), "blocking-copy": lambda: x.to("meta"),
        "repeat": lambda: torch.repeat_interleave(x, torch.ones(6, dtype=torch.long)),
        "tensor-of-tensors": lambda: torch.tensor([x[0], x[1]]),
    }
    for name, call in calls.items():
        with SyncSpy() as spy:
            call()
        assert len(spy.syncs) == 1, (name, spy.syncs)
    quiet = {
        "where3": lambda: torch.where(mask, x, 0.0), "sum": lambda: (x * mask).sum(),
        "shape": lambda: len(x[:3]), "non-blocking": lambda: x.to("meta", non_blocking=True),
        "long-index": lambda: x[torch.tensor([0, 2])],
        "repeat-sized": lambda: torch.repeat_interleave(x, torch.ones(6, dtype=torch.long), output_size=6),
        "dtype": lambda: x.to(torch.float64), "same-device": lambda: x.to("cpu"),
    }
    for name, call in quiet.items():
        with SyncSpy() as spy:
            call()
        assert spy.syncs == [], (name, spy.syncs)
    assert not torch.overrides._is_torch_function_mode_enabled()


def test_the_prompt_does_not_call_numpy_on_a_gpu_tensor_a_wait():
    """`.numpy()` on a CUDA tensor raises TypeError (lesson 03's H100 recording); `.cpu().numpy()` waits in
    `.cpu()`."""
    import nbformat

    prompt = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                  if c.get("id") == "train-epoch-prompt")
    assert "`.numpy()`: on a GPU tensor it raises `TypeError`" in prompt
    assert "`float(...)`,\n`.numpy()`" not in prompt
