"""ps07-devices-in-real-code: the solutions and other correct answers earn full marks; realistic mistakes
lose points.

The mistakes came first, written down from how people plan memory and resume training (the table below,
one row per entry of MISTAKES; "caught by" names the test cell), then the hidden tests that catch them, then
the other correct answers that must still get full marks.

| exercise | mistake | on a GPU | caught by |
| --- | --- | --- | --- |
| largest_batch | weights only | plans a batch that runs out of memory at the first step | `-basic` |
| largest_batch | gradients but no Adam state, or one average (SGD momentum's count) | the same | `-basic` |
| largest_batch | every parameter trains | refuses batches that fit a frozen backbone | `-frozen-and-dtypes` |
| largest_batch | 4 bytes per element | wrong by 2x for bfloat16 and float16 models | `-frozen-and-dtypes` |
| largest_batch | no buffers | forgets masks and BatchNorm statistics | `-shared-and-buffers` |
| largest_batch | sums `state_dict()` | counts tied weights twice | `-shared-and-buffers` |
| largest_batch | negative, float, rounded up | no batch, a fraction, one sample too many | `-basic` |
| largest_batch | `<` for `<=` (refuses a total equal to the capacity) | one sample short | `-basic` |
| resume | loads the optimizer, then moves the model | Adam's averages stay on the CPU | `-device` |
| resume | `map_location=device`, never `model.to(device)` | the model stays on the CPU | `-device` |
| resume | no `map_location` | a GPU checkpoint does not load on a CPU machine | `-gpu-checkpoint` |
| resume | `weights_only=False` | a hostile checkpoint runs code | `-safe` |
| resume | returns the saved epoch | trains that epoch twice | `-values` |
| resume | loads the model only, or into a new optimizer | Adam restarts from zero averages | `-values` |
| resume | `load_state_dict(..., assign=True)` | the optimizer updates tensors the model dropped | `-values` |
| fit_batch | `except RuntimeError` or `except Exception` | retries a device mismatch | `-other-errors` |
| fit_batch | retries inside `except`, or keeps the error | the failed step's tensors stay | `-references` |
| fit_batch | halves to 0, or returns when 1 fails | calls `step(0)`, or trains on nothing | `-halving` |
| fit_batch | `batch_size - 1`, or returns what `step` returned | too many tries, a wrong size | `-halving` |
| fit_batch | a new `RuntimeError("nothing fits")` | `except OutOfMemoryError` misses it | `-halving` |
"""

from functools import partial

import pytest

from autograder import COURSE_ROOT
from tests import assignment_support as support
from tests.harness import run_graded_cells

NOTEBOOK = COURSE_ROOT / "source" / "ps07-devices-in-real-code" / "ps07-devices-in-real-code.ipynb"
CELLS_OF = {
    "largest-batch": ("largest-batch-tests-basic", "largest-batch-tests-frozen-and-dtypes",
                      "largest-batch-tests-shared-and-buffers"),
    "resume": ("resume-tests-values", "resume-tests-gpu-checkpoint", "resume-tests-device",
               "resume-tests-safe"),
    "fit-batch": ("fit-batch-tests-halving", "fit-batch-tests-other-errors", "fit-batch-tests-references"),
}
POINTS_OF = {"largest-batch": 10, "resume": 12, "fit-batch": 8}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "largest-batch": ("def largest_batch(model: nn.Module, activation_bytes_per_sample: int, "
                      "capacity_bytes: int) -> int:\n    \"\"\"Largest batch.\"\"\"\n"),
    "resume": ("def resume(path, model: nn.Module, optimizer: torch.optim.Optimizer, device) -> int:\n"
               "    \"\"\"Resume.\"\"\"\n"),
    "fit-batch": "def fit_batch(step, batch_size: int) -> int:\n    \"\"\"Back off.\"\"\"\n",
}

results_for = partial(run_graded_cells, NOTEBOOK)


def cell(exercise: str, body: str) -> str:
    """Return a solution cell for `exercise` whose body is `body` (written flush left)."""
    return support.function_cell(HEADS[exercise], body)


class TestContract(support.AssignmentContract):
    NOTEBOOK, CELLS_OF, POINTS_OF, HEADS = NOTEBOOK, CELLS_OF, POINTS_OF, HEADS


def test_imports_and_check_calls():
    code = support.code_cells(NOTEBOOK)
    assert "from devicelab.exercises.ps07 import" in support.imports_cell(code).source
    checks = [c.source.split(")")[0] for c in code if c.source.startswith("check(")]
    assert checks == ['check("largest_batch"', 'check("resume"', 'check("fit_batch"']


# ----------------------------------------------------------------------------------------------------------
# The reference answers, one piece at a time, so that each mistake changes one thing.

def budget_with(size="tensor.numel() * tensor.element_size()",
                weights="sum(nbytes(p) for p in model.parameters())",
                buffers="sum(nbytes(b) for b in model.buffers())",
                per_trainable="3", trainable="p.requires_grad",
                result="max(0, (capacity_bytes - fixed) // activation_bytes_per_sample)") -> str:
    return cell("largest-batch", f"""
def nbytes(tensor):
    return {size}

fixed = {weights} + {buffers}
fixed += sum({per_trainable} * nbytes(p) for p in model.parameters() if {trainable})
return {result}
""")


def resume_with(load='torch.load(path, map_location=device, weights_only=True)',
                steps=("move", "model", "optimizer"), result='saved["epoch"] + 1',
                model='model.load_state_dict(saved["model"])',
                optimizer='optimizer.load_state_dict(saved["optimizer"])', move="model.to(device)") -> str:
    lines = {"move": move, "model": model, "optimizer": optimizer}
    body = "\n".join([f"saved = {load}", *(lines[s] for s in steps), f"return {result}"])
    return cell("resume", body + "\n")


def backoff_with(catch="torch.OutOfMemoryError", last="batch_size <= 1", give_up="raise",
                 smaller="batch_size // 2", ran="return batch_size") -> str:
    return cell("fit-batch", f"""
while True:
    try:
        result = step(batch_size)
    except {catch}:
        if {last}:
            {give_up}
    else:
        {ran}
    batch_size = {smaller}
""")


# ----------------------------------------------------------------------------------------------------------
# Other correct answers get full marks

CORRECT = {
    "largest-batch": {
        "nbytes": budget_with(size="tensor.nbytes"),
        "four-times-trainable": budget_with(
            weights="sum(nbytes(p) for p in model.parameters() if not p.requires_grad)", per_trainable="4"),
        "counts-step-counters": budget_with(per_trainable="3", result=(
            "max(0, (capacity_bytes - fixed - 4 * sum(1 for p in model.parameters() if p.requires_grad)) "
            "// activation_bytes_per_sample)")),
        "by-storage": cell("largest-batch", """
seen, fixed = set(), 0
for p in model.parameters():
    key = (p.data_ptr(), p.shape) if p.device.type != "meta" else id(p)
    if key in seen:
        continue
    seen.add(key)
    fixed += p.nelement() * p.element_size() * (4 if p.requires_grad else 1)
fixed += sum(b.nelement() * b.element_size() for b in model.buffers())
free = capacity_bytes - fixed
return free // activation_bytes_per_sample if free > 0 else 0
"""),
        "search": cell("largest-batch", """
fixed = 0
for p in model.parameters():
    fixed += p.numel() * p.element_size() * (4 if p.requires_grad else 1)
for b in model.buffers():
    fixed += b.numel() * b.element_size()
low, high = 0, max(0, capacity_bytes // activation_bytes_per_sample) + 1
while high - low > 1:
    middle = (low + high) // 2
    if fixed + middle * activation_bytes_per_sample <= capacity_bytes:
        low = middle
    else:
        high = middle
return low
"""),
    },
    "resume": {
        "load-on-cpu-then-move": resume_with(load='torch.load(path, map_location="cpu", weights_only=True)',
                                             steps=("model", "move", "optimizer")),
        "map-location-function": resume_with(
            load="torch.load(path, map_location=lambda storage, location: storage, weights_only=True)"),
        "state-moved-by-hand": resume_with(
            load='torch.load(path, map_location="cpu", weights_only=True)',
            steps=("model", "optimizer", "move"),
            move=("model.to(device)\n"
                  "for state in optimizer.state.values():\n"
                  "    for key, value in state.items():\n"
                  "        if torch.is_tensor(value) and key != 'step':\n"
                  "            state[key] = value.to(device)")),
        "torch-device-first": resume_with(
            load="torch.load(path, map_location=torch.device(device), weights_only=True)",
            move="model.to(torch.device(device))"),
        "default-weights-only": cell("resume", """
device = torch.device(device)
checkpoint = torch.load(path, map_location=device)   # weights_only is True by default since torch 2.6
model.to(device)
model.load_state_dict(checkpoint["model"], strict=True)
optimizer.load_state_dict(checkpoint["optimizer"])
return int(checkpoint["epoch"]) + 1
"""),
    },
    "fit-batch": {
        "for-loop-with-flag": cell("fit-batch", """
while batch_size >= 1:
    failed = False
    try:
        step(batch_size)
    except torch.OutOfMemoryError:
        failed = True
        if batch_size == 1:
            raise
    if not failed:
        return batch_size
    torch.cuda.empty_cache()
    batch_size = batch_size // 2
"""),
        "message-free-check": cell("fit-batch", """
size = batch_size
while True:
    ran = False
    try:
        step(size)
        ran = True
    except torch.OutOfMemoryError:
        if size == 1:
            raise
    if ran:
        return size
    size //= 2
"""),
    },
}


@pytest.mark.parametrize(("exercise", "source"), [pytest.param(gid, src, id=f"{gid}-{name}")
                                                   for gid, answers in CORRECT.items()
                                                   for name, src in answers.items()])
def test_other_correct_answers_get_full_marks(exercise, source):
    support.assert_all_pass(results_for({exercise: source}))


# ----------------------------------------------------------------------------------------------------------
# Realistic mistakes lose points

MISTAKES = {
    ("largest-batch", "weights-only"): budget_with(per_trainable="0"),
    ("largest-batch", "no-adam-state"): budget_with(per_trainable="1"),
    ("largest-batch", "one-adam-average"): budget_with(per_trainable="2"),
    ("largest-batch", "every-parameter-trains"): budget_with(trainable="True"),
    ("largest-batch", "four-bytes-each"): budget_with(size="tensor.numel() * 4"),
    ("largest-batch", "no-buffers"): budget_with(buffers="0"),
    ("largest-batch", "sums-state-dict"): budget_with(
        weights="sum(nbytes(t) for t in model.state_dict().values())", buffers="0"),
    ("largest-batch", "negative"): budget_with(
        result="(capacity_bytes - fixed) // activation_bytes_per_sample"),
    ("largest-batch", "float"): budget_with(
        result="max(0, (capacity_bytes - fixed) / activation_bytes_per_sample)"),
    ("largest-batch", "rounds-up"): budget_with(
        result="max(0, -(-(capacity_bytes - fixed) // activation_bytes_per_sample))"),
    ("largest-batch", "strictly-below"): budget_with(
        result="max(0, (capacity_bytes - fixed - 1) // activation_bytes_per_sample)"),
    ("largest-batch", "rounds"): budget_with(
        result="max(0, round((capacity_bytes - fixed) / activation_bytes_per_sample))"),
    ("resume", "optimizer-then-move"): resume_with(
        steps=("model", "optimizer", "move"), load='torch.load(path, map_location="cpu", weights_only=True)'),
    ("resume", "never-moves-the-model"): resume_with(steps=("model", "optimizer")),
    ("resume", "no-map-location"): resume_with(load="torch.load(path, weights_only=True)"),
    ("resume", "weights-only-false"): resume_with(
        load="torch.load(path, map_location=device, weights_only=False)"),
    ("resume", "returns-the-saved-epoch"): resume_with(result='saved["epoch"]'),
    ("resume", "model-only"): resume_with(steps=("move", "model")),
    ("resume", "new-optimizer"): resume_with(
        optimizer=('optimizer = torch.optim.Adam(model.parameters())\n'
                   'optimizer.load_state_dict(saved["optimizer"])')),
    ("resume", "assign-true"): resume_with(model='model.load_state_dict(saved["model"], assign=True)'),
    ("fit-batch", "catches-runtime-error"): backoff_with(catch="RuntimeError"),
    ("fit-batch", "catches-everything"): backoff_with(catch="Exception"),
    ("fit-batch", "retries-inside-except"): cell("fit-batch", """
try:
    step(batch_size)
    return batch_size
except torch.OutOfMemoryError:
    if batch_size == 1:
        raise
    return fit_batch(step, batch_size // 2)
"""),
    ("fit-batch", "keeps-the-last-error"): cell("fit-batch", """
last = None
while batch_size >= 1:
    try:
        step(batch_size)
        return batch_size
    except torch.OutOfMemoryError as error:
        last = error
    batch_size //= 2
raise last
"""),
    ("fit-batch", "halves-to-zero"): backoff_with(last="False"),
    ("fit-batch", "returns-zero"): backoff_with(give_up="return 0"),
    ("fit-batch", "minus-one"): backoff_with(smaller="batch_size - 1"),
    ("fit-batch", "returns-the-result"): backoff_with(ran="return result"),
    ("fit-batch", "new-error"): backoff_with(give_up='raise RuntimeError("no batch size fits")'),
    ("fit-batch", "ceil-half"): backoff_with(smaller="(batch_size + 1) // 2"),
}


@pytest.mark.parametrize(("exercise", "source"), [pytest.param(gid, src, id=f"{gid}-{name}")
                                                   for (gid, name), src in MISTAKES.items()])
def test_mistake_loses_points(exercise, source):
    support.assert_mistake_loses_points(NOTEBOOK, exercise, source, CELLS_OF, TOTAL)


@pytest.mark.parametrize(("mistake", "cell_id", "words"), [
    (("largest-batch", "weights-only"), "largest-batch-tests-basic", "only the weights"),
    (("largest-batch", "every-parameter-trains"), "largest-batch-tests-frozen-and-dtypes", "frozen"),
    (("largest-batch", "sums-state-dict"), "largest-batch-tests-shared-and-buffers",
     "stored, and trained, once"),
    (("resume", "optimizer-then-move"), "resume-tests-device", "exp_avg is on cpu"),
    (("resume", "no-map-location"), "resume-tests-gpu-checkpoint", "did not load"),
    (("resume", "weights-only-false"), "resume-tests-safe", "weights_only=True"),
    (("resume", "returns-the-saved-epoch"), "resume-tests-values", "resume from epoch 5"),
    (("fit-batch", "catches-runtime-error"), "fit-batch-tests-other-errors", "device mismatch"),
    (("fit-batch", "retries-inside-except"), "fit-batch-tests-references", "still alive"),
    (("fit-batch", "keeps-the-last-error"), "fit-batch-tests-references", "still alive"),
])
def test_failures_say_what_to_fix(mistake, cell_id, words):
    results = results_for({mistake[0]: MISTAKES[mistake]})
    assert not results[cell_id].passed and words in results[cell_id].error, support.report(results)


# ----------------------------------------------------------------------------------------------------------
# Instant feedback and the stand-ins


def _namespace(sources: list[str]) -> dict:
    namespace: dict = {}
    exec("import torch\nfrom torch import nn\n", namespace)
    for source in sources:
        exec(source, namespace)
    return namespace


def test_feedback_checks_say_correct_for_the_solution_and_not_attempted_for_stubs():
    from nbgrader import utils

    from devicelab.exercises import ps07
    from devicelab.feedback import Outcome, evaluate

    namespace = _namespace([c.source for c in support.code_cells(NOTEBOOK) if utils.is_solution(c)])
    for exercise in ps07._exercises.exercises.values():
        assert evaluate(exercise, namespace).outcome is Outcome.CORRECT
    stubs = _namespace(list(support.student_stubs(NOTEBOOK).values()))
    for exercise in ps07._exercises.exercises.values():
        assert evaluate(exercise, stubs).outcome is Outcome.NOT_ATTEMPTED


@pytest.mark.parametrize(("mistake", "words"), [
    (("largest-batch", "weights-only"), "only the weights"),
    (("largest-batch", "every-parameter-trains"), "frozen"),
    (("resume", "returns-the-saved-epoch"), "epoch 5"),
    (("resume", "no-map-location"), "map_location"),
    (("resume", "optimizer-then-move"), "move the model first"),
    (("fit-batch", "catches-runtime-error"), "torch.OutOfMemoryError"),
    (("fit-batch", "retries-inside-except"), "still alive"),
])
def test_feedback_checks_catch_the_common_mistakes(mistake, words):
    from devicelab.exercises import ps07
    from devicelab.feedback import Outcome, evaluate

    name = mistake[0].replace("-", "_")
    feedback = evaluate(ps07._exercises.exercises[name], _namespace([MISTAKES[mistake]]))
    assert feedback.outcome is Outcome.INCORRECT and words in feedback.message, str(feedback)


def test_hints_come_in_levels_and_no_solutions_ship():
    from devicelab.exercises import ps07

    assert all(len(e.hints) >= 3 for e in ps07._exercises.exercises.values())
    assert all(e.solution is None for e in ps07._exercises.exercises.values())


def test_like_a_gpu_restores_torch_load_and_the_module_flag():
    import torch

    from devicelab.exercises.ps07 import like_a_gpu

    load, swap = torch.load, torch.__future__.get_swap_module_params_on_conversion()
    with pytest.raises(KeyError), like_a_gpu():
        raise KeyError("a failing resume")
    assert torch.load is load and torch.__future__.get_swap_module_params_on_conversion() == swap


def test_on_meta_a_moved_module_keeps_its_parameters_only_inside_like_a_gpu():
    """Between CPU and CUDA, Module.to keeps each Parameter object (it sets `.data`); to meta it makes new
    ones, which an optimizer built before the move would not know: like_a_gpu keeps them, as a GPU does."""
    from torch import nn

    from devicelab.exercises.ps07 import like_a_gpu

    model = nn.Linear(2, 2)
    weight = model.weight
    model.to("meta")
    assert model.weight is not weight
    model = nn.Linear(2, 2)
    weight = model.weight
    with like_a_gpu():
        model.to("meta")
    assert model.weight is weight and weight.device.type == "meta"


def test_a_checkpoint_saved_as_if_from_a_gpu_needs_map_location_here(tmp_path):
    import torch

    from devicelab.exercises.ps07 import save_as_if_from_gpu

    if torch.cuda.is_available():
        pytest.skip("a machine with a GPU loads it without map_location")
    save_as_if_from_gpu({"w": torch.ones(2)}, tmp_path / "gpu.pt")
    with pytest.raises(RuntimeError, match="CUDA"):
        torch.load(tmp_path / "gpu.pt", weights_only=True)
    assert torch.load(tmp_path / "gpu.pt", weights_only=True, map_location="cpu")["w"].tolist() == [1.0, 1.0]


def test_the_prompt_counts_activations_as_lesson_09_does_each_saved_storage_once():
    """`saved_tensors_hooks` packs once per save, and a ReLU's output is saved twice (by the ReLU and by the
    next Linear): the per-sample figure the prompt asks for counts each storage once, as lesson 09 does."""
    import nbformat

    prompt = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                  if c.get("id") == "largest-batch-prompt")
    assert "once per save" in prompt and "each saved storage once" in prompt
    lesson = nbformat.read(COURSE_ROOT / "notebooks" / "09-devices-in-real-code.ipynb", as_version=4)
    assert "return sum(dict(saves(run)).values())" in next(c.source for c in lesson.cells
                                                           if c.get("id") == "saved-bytes")


def test_the_wrap_up_says_mem_get_info_already_leaves_out_the_cuda_context():
    """torch.cuda.mem_get_info asks cudaMemGetInfo after current_device() has initialised CUDA
    (torch/cuda/memory.py): the context is made, and `free` no longer counts it."""
    import nbformat

    text = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.get("id") == "wrap-up")
    assert "leave room for\nthe CUDA context" not in text and "already leaves the context out" in text

