"""ps03-device-mismatch: the solutions and other correct answers earn full marks; realistic mistakes lose
points.
"""

from functools import partial

import pytest
import torch

from autograder import COURSE_ROOT
from tests import assignment_support as support
from tests.harness import run_graded_cells

NOTEBOOK = COURSE_ROOT / "source" / "ps03-device-mismatch" / "ps03-device-mismatch.ipynb"
CELLS_OF = {
    "forward-on-model-device": ("forward-on-model-device-tests", "forward-on-model-device-tests-dtype",
                                "forward-on-model-device-tests-no-params"),
    "off-device": ("off-device-tests", "off-device-tests-buffers"),
    "check-same-device": ("check-same-device-tests", "check-same-device-tests-scalars",
                          "check-same-device-tests-errors"),
    "fixed-step": ("fixed-step-tests-same", "fixed-step-tests-any-device", "fixed-step-tests-no-copies"),
}
POINTS_OF = {"forward-on-model-device": 4, "off-device": 3, "check-same-device": 4, "fixed-step": 16}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "forward-on-model-device": "def forward_on_model_device(model: nn.Module, x: torch.Tensor) -> "
                               "torch.Tensor:\n"
                               '    """Call model on x where the model is."""\n',
    "off-device": 'def off_device(module: nn.Module, device) -> list[str]:\n'
                  '    """Name what is elsewhere."""\n',
    "check-same-device": "def check_same_device(*tensors: torch.Tensor) -> torch.device:\n"
                         '    """Return the shared device."""\n',
    "fixed-step": "def fixed_step(model: nn.Module, batch: tuple, optimizer: torch.optim.Optimizer, "
                  "device) -> torch.Tensor:\n"
                  '    """Train one step on any device."""\n',
}


def answer(grade_id: str, body: str) -> str:
    """Return a solution cell for `grade_id` whose body is `body` (written flush left)."""
    return support.function_cell(HEADS[grade_id], body)


results_for = partial(run_graded_cells, NOTEBOOK)  # results_for({grade_id: source}) grades with that answer


# ----------------------------------------------------------------------------------------------------------
# The notebook itself

class TestContract(support.AssignmentContract):
    NOTEBOOK, CELLS_OF, POINTS_OF, HEADS = NOTEBOOK, CELLS_OF, POINTS_OF, HEADS


# ----------------------------------------------------------------------------------------------------------
# Other correct answers get full marks

CORRECT = {
    "forward-on-model-device": {
        "loop-returns-on-first-parameter": """
for p in model.parameters():
    return model(x.to(device=p.device, dtype=p.dtype if x.is_floating_point() else None))
return model(x)
""",
        "list-and-two-moves": """
params = list(model.parameters())
if not params:
    return model(x)
x = x.to(params[0].device)
if torch.is_floating_point(x):
    x = x.to(params[0].dtype)
return model(x)
""",
        "try-stop-iteration": """
try:
    first = next(iter(model.parameters()))
except StopIteration:
    return model(x)
dtype = first.dtype if x.dtype.is_floating_point else x.dtype
return model(x.to(first.device, dtype))
""",
        "type-conversion-and-forward": """
first = next(model.parameters(), None)
if first is not None:
    x = (x.type(first.dtype) if x.is_floating_point() else x).to(first.device)
return model(x)
""",
        "to-other-tensor-for-floats": """
first = next(model.parameters(), None)
if first is None:
    return model(x)
return model(x.to(first) if x.is_floating_point() else x.to(first.device))
""",
    },
    "off-device": {
        "compare-as-strings": """
want = torch.device(device)
key = str if want.index is not None else (lambda d: d.type)
names = [n for n, p in module.named_parameters() if key(p.device) != key(want)]
names += [n for n, b in module.named_buffers() if key(b.device) != key(want)]
return sorted(names)
""",
        "chain-and-sort-in-place": """
import itertools
target = torch.device(device)
names = []
for name, tensor in itertools.chain(module.named_parameters(), module.named_buffers()):
    here = tensor.device if target.index is not None else torch.device(tensor.device.type)
    if here != target:
        names.append(name)
names.sort()
return names
""",
        "merged-dicts": """
tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
want = torch.device(device)
on = lambda d: d.type == want.type and (want.index is None or d.index == want.index)
return sorted(name for name, t in tensors.items() if not on(t.device))
""",
    },
    "check-same-device": {
        "loop-with-ordered-conflicts": """
if len(tensors) == 0:
    raise ValueError("no tensors given")
seen = []
for t in tensors:
    if t.ndim == 0 and t.device.type == "cpu":
        continue
    if t.device not in seen:
        seen.append(t.device)
if len(seen) > 1:
    raise RuntimeError("Expected all tensors to be on the same device, but found: " + " and ".join(map(repr, seen)))
return seen[0] if seen else torch.device("cpu")
""",  # noqa: E501 (an answer's source, kept as written)
        "dict-fromkeys-and-is-cpu": """
if not tensors:
    raise ValueError("check_same_device() needs at least one tensor")
devices = list(dict.fromkeys(t.device for t in tensors if t.dim() > 0 or not t.is_cpu))
if len(devices) > 1:
    raise RuntimeError(f"tensors on {len(devices)} devices: {devices}")
return devices[0] if devices else torch.device("cpu")
""",
        "counter-and-shape": """
from collections import Counter
if not tensors:
    raise ValueError("give at least one tensor")
counts = Counter(t.device for t in tensors if not (t.shape == torch.Size([]) and t.device == torch.device("cpu")))
if len(counts) > 1:
    raise RuntimeError("device mismatch: " + ", ".join(f"{d} ({n} tensors)" for d, n in counts.items()))
return next(iter(counts), torch.device("cpu"))
""",  # noqa: E501 (an answer's source, kept as written)
        "isinstance-guard-and-sorted-names": """
if not tensors:
    raise ValueError("no tensors")
if not all(isinstance(t, torch.Tensor) for t in tensors):
    raise TypeError("check_same_device takes tensors")
devices = sorted({t.device for t in tensors if t.ndim or t.device != torch.device("cpu")}, key=str)
if len(devices) > 1:
    raise RuntimeError("conflicting devices: " + ", ".join(str(d) for d in devices))
return devices[0] if devices else torch.device("cpu")
""",
    },
}
CORRECT_CASES = support.correct_cases(CORRECT, HEADS)


@pytest.mark.parametrize(("grade_id", "source"), CORRECT_CASES)
def test_other_correct_answer_gets_full_marks(grade_id, source):
    support.assert_all_pass(results_for({grade_id: source}))


# ----------------------------------------------------------------------------------------------------------
# Realistic mistakes lose points, in the cell that checks them and only in that exercise's cells

FORWARD_OK = """
first = next(model.parameters(), None)
if first is None:
    return model(x)
return model(x.to(first.device, first.dtype if x.is_floating_point() else x.dtype))
"""
OFF_OK = """
target = torch.device(device)
named = [*module.named_parameters(), *module.named_buffers()]
return sorted(name for name, tensor in named
              if tensor.device != target and (target.index is not None or tensor.device.type != target.type))
"""
SAME_OK = """
if not tensors:
    raise ValueError("check_same_device needs at least one tensor")
devices = {t.device for t in tensors if not (t.dim() == 0 and t.device.type == "cpu")}
if not devices:
    return torch.device("cpu")
if len(devices) > 1:
    names = ", ".join(sorted(str(d) for d in devices))
    raise RuntimeError(f"tensors are on different devices: {names}")
return devices.pop()
"""

MISTAKES = {
    # forward_on_model_device
    ("forward-on-model-device", "moves-the-model", "forward-on-model-device-tests"): FORWARD_OK.replace(
        "return model(x.to(first.device, first.dtype if x.is_floating_point() else x.dtype))",
        "model.to(x.device)\nreturn model(x)"),
    ("forward-on-model-device", "converts-the-model-to-the-input-dtype",
     "forward-on-model-device-tests-dtype"):
        FORWARD_OK.replace("return model(x.to(first.device, first.dtype if x.is_floating_point() else "
                           "x.dtype))",
                           "model.to(x.dtype)\nreturn model(x.to(first.device))"),
    ("forward-on-model-device", "device-only", "forward-on-model-device-tests-dtype"): FORWARD_OK.replace(
        "x.to(first.device, first.dtype if x.is_floating_point() else x.dtype)", "x.to(first.device)"),
    ("forward-on-model-device", "dtype-only", "forward-on-model-device-tests"): FORWARD_OK.replace(
        "x.to(first.device, first.dtype if x.is_floating_point() else x.dtype)", "x.to(first.dtype)"),
    ("forward-on-model-device", "converts-only-when-the-device-differs",
     "forward-on-model-device-tests-dtype"):
        FORWARD_OK.replace("return model(x.to(first.device, first.dtype if x.is_floating_point() else "
                           "x.dtype))",
                           "if x.device != first.device:\n    x = x.to(first.device, first.dtype)\n"
                           "return model(x)"),
    ("forward-on-model-device", "next-without-a-default", "forward-on-model-device-tests-no-params"): """
first = next(model.parameters())
return model(x.to(first.device, first.dtype))
""",
    ("forward-on-model-device", "uses-model-weight", "forward-on-model-device-tests"):
        "return model(x.to(model.weight.device, model.weight.dtype))",
    ("forward-on-model-device", "falls-back-to-buffers", "forward-on-model-device-tests-no-params"): """
import itertools
first = next(itertools.chain(model.parameters(), model.buffers()), None)
if first is None:
    return model(x)
return model(x.to(first.device, first.dtype))
""",
    ("forward-on-model-device", "returns-x-without-calling-the-model",
     "forward-on-model-device-tests-no-params"):
        FORWARD_OK.replace("if first is None:\n    return model(x)", "if first is None:\n    return x"),
    ("forward-on-model-device", "hard-codes-cuda", "forward-on-model-device-tests"): "return model(x.cuda())",
    ("forward-on-model-device", "casts-every-input", "forward-on-model-device-tests-dtype"): """
first = next(model.parameters(), None)
if first is None:
    return model(x)
return model(x.to(first.device, first.dtype))
""",
    ("forward-on-model-device", "to-the-first-parameter-itself", "forward-on-model-device-tests-dtype"):
        FORWARD_OK.replace("x.to(first.device, first.dtype if x.is_floating_point() else x.dtype)",
                           "x.to(first)"),
    ("forward-on-model-device", "casts-only-float32",
     "forward-on-model-device-tests-dtype"): FORWARD_OK.replace(
        "x.is_floating_point()", "x.dtype == torch.float32"),
    ("forward-on-model-device", "asks-the-parameter-if-it-is-floating",
     "forward-on-model-device-tests-dtype"):
        FORWARD_OK.replace("x.is_floating_point()", "first.is_floating_point()"),
    ("forward-on-model-device", "runs-under-no-grad", "forward-on-model-device-tests"): FORWARD_OK.replace(
        "return model(x.to(", "with torch.no_grad():\n    return model(x.to("),
    ("forward-on-model-device", "runs-in-inference-mode",
     "forward-on-model-device-tests"): FORWARD_OK.replace(
        "return model(x.to(", "with torch.inference_mode():\n    return model(x.to("),
    ("forward-on-model-device", "switches-to-eval", "forward-on-model-device-tests"): FORWARD_OK.replace(
        "first = next(", "model.eval()\nfirst = next("),
    ("forward-on-model-device", "detaches-the-input", "forward-on-model-device-tests"): FORWARD_OK.replace(
        "x.to(first.device,", "x.detach().to(first.device,"),
    ("forward-on-model-device", "calls-forward-directly",
     "forward-on-model-device-tests"): FORWARD_OK.replace(
        "return model(x.to(", "return model.forward(x.to("),
    ("forward-on-model-device", "zeroes-the-gradients-first",
     "forward-on-model-device-tests"): FORWARD_OK.replace(
        "first = next(", "model.zero_grad()\nfirst = next("),
    ("forward-on-model-device", "freezes-the-model", "forward-on-model-device-tests"): FORWARD_OK.replace(
        "first = next(", "model.requires_grad_(False)\nfirst = next("),
    ("off-device", "exact-comparison-lists-cuda-0-off-cuda", "off-device-tests-buffers"): """
target = torch.device(device)
named = [*module.named_parameters(), *module.named_buffers()]
return sorted(name for name, tensor in named if tensor.device != target)
""",
    ("off-device", "compares-strings-exactly", "off-device-tests-buffers"): """
names = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if str(t.device) != str(device)]
return sorted(names)
""",
    ("off-device", "index-compared-even-when-none-is-asked", "off-device-tests-buffers"): OFF_OK.replace(
        "(target.index is not None or tensor.device.type != target.type)",
        "(tensor.device.type != target.type or tensor.device.index != (target.index or 0))"),
    ("off-device", "own-recursion-trips-on-a-missing-bias", "off-device-tests"): """
target = torch.device(device)
def walk(m, prefix):
    found = []
    for name, t in [*m._parameters.items(), *m._buffers.items()]:
        if t.device.type != target.type or (target.index is not None and t.device != target):
            found.append(prefix + name)
    for child_name, child in m._modules.items():
        found += walk(child, f"{prefix}{child_name}.")
    return found
return sorted(set(walk(module, "")))
""",
    # check_same_device
    ("check-same-device", "rejects-tensor-subclasses", "check-same-device-tests"): SAME_OK.replace(
        "devices = {", 'if any(type(t) is not torch.Tensor for t in tensors):\n'
        '    raise TypeError("check_same_device takes plain tensors")\ndevices = {'),
    ("check-same-device", "empty-tensors-never-conflict", "check-same-device-tests-scalars"): SAME_OK.replace(
        'if not (t.dim() == 0 and t.device.type == "cpu")',
        'if t.numel() and not (t.dim() == 0 and t.device.type == "cpu")'),
    ("check-same-device", "shape-unpacked-to-find-scalars",
     "check-same-device-tests-scalars"): SAME_OK.replace(
        't.dim() == 0', 'len(t.shape) == 0 or t.shape[0] == 0'),
    # off_device
    ("off-device", "forgets-buffers", "off-device-tests-buffers"): OFF_OK.replace(
        ", *module.named_buffers()", ""),
    ("off-device", "not-sorted", "off-device-tests"): OFF_OK.replace(
        "return sorted(name for name, tensor in named\n",
        "return list(name for name, tensor in named\n"),
    ("off-device", "names-without-prefixes", "off-device-tests"): """
target = torch.device(device)
names = []
for m in module.modules():
    for name, t in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]:
        if t.device != target:
            names.append(name)
return sorted(names)
""",
    ("off-device", "duplicates-from-named-modules", "off-device-tests"): """
target = torch.device(device)
names = []
for prefix, m in module.named_modules():
    for name, t in [*m.named_parameters(prefix=prefix), *m.named_buffers(prefix=prefix)]:
        if t.device != target:
            names.append(name)
return sorted(names)
""",
    ("off-device", "uses-state-dict", "off-device-tests"):
        "return sorted(k for k, v in module.state_dict().items() if v.device != torch.device(device))",
    ("off-device", "compares-device-type-only", "off-device-tests-buffers"): OFF_OK.replace(
        "tensor.device != target and (target.index is not None or tensor.device.type != target.type)",
        "tensor.device.type != target.type"),
    ("off-device", "treats-cuda-as-cuda-0", "off-device-tests-buffers"): OFF_OK.replace(
        "target = torch.device(device)",
        'target = torch.device(device)\nif target.type == "cuda" and target.index is None:\n'
        '    target = torch.device("cuda", 0)'),
    ("off-device", "compares-with-the-raw-argument", "off-device-tests"): OFF_OK.replace(
        "tensor.device != target and (target.index is not None or tensor.device.type != target.type)",
        "tensor.device != device"),
    ("off-device", "lists-what-is-on-the-device", "off-device-tests"): OFF_OK.replace(
        "tensor.device != target and (target.index is not None or tensor.device.type != target.type)",
        "tensor.device == target"),
    ("off-device", "returns-a-set", "off-device-tests"): OFF_OK.replace(
        "return sorted(name for name, tensor in named\n",
        "return set(name for name, tensor in named\n"),
    ("off-device", "string-prefix-match", "off-device-tests-buffers"): """
want = str(torch.device(device))
named = [*module.named_parameters(), *module.named_buffers()]
return sorted(name for name, tensor in named if not str(tensor.device).startswith(want))
""",
    ("off-device", "index-from-the-last-character", "off-device-tests-buffers"): """
target = torch.device(device)
named = [*module.named_parameters(), *module.named_buffers()]
def on(d):
    return d.type == target.type and (target.index is None or str(d).endswith(str(target.index)))
return sorted(name for name, tensor in named if not on(tensor.device))
""",
    # check_same_device
    ("check-same-device", "ignores-the-scalar-rule", "check-same-device-tests-scalars"): SAME_OK.replace(
        'if not (t.dim() == 0 and t.device.type == "cpu")', ""),
    ("check-same-device", "exempts-every-0-dim-tensor", "check-same-device-tests-scalars"): SAME_OK.replace(
        'not (t.dim() == 0 and t.device.type == "cpu")', "t.dim() > 0"),
    ("check-same-device", "one-element-counts-as-a-scalar",
     "check-same-device-tests-scalars"): SAME_OK.replace(
        "t.dim() == 0", "t.numel() == 1"),
    ("check-same-device", "only-scalars-crash", "check-same-device-tests-scalars"): SAME_OK.replace(
        'if not devices:\n    return torch.device("cpu")\n', ""),
    ("check-same-device", "only-scalars-return-none", "check-same-device-tests-scalars"): SAME_OK.replace(
        'return torch.device("cpu")', "return None"),
    ("check-same-device", "first-tensor-decides", "check-same-device-tests-scalars"): """
if not tensors:
    raise ValueError("check_same_device needs at least one tensor")
device = tensors[0].device
for t in tensors[1:]:
    if t.device != device and not (t.dim() == 0 and t.device.type == "cpu"):
        raise RuntimeError(f"found {device} and {t.device}")
return device
""",
    ("check-same-device", "no-tensors-gives-cpu", "check-same-device-tests-errors"): SAME_OK.replace(
        'if not tensors:\n    raise ValueError("check_same_device needs at least one tensor")\n', ""),
    ("check-same-device", "no-tensors-index-error", "check-same-device-tests-errors"): """
first = tensors[0]
devices = {t.device for t in tensors if not (t.dim() == 0 and t.device.type == "cpu")}
if len(devices) > 1:
    raise RuntimeError(f"tensors are on different devices: {sorted(map(str, devices))}")
return devices.pop() if devices else first.device
""",
    ("check-same-device", "raises-value-error-on-conflict", "check-same-device-tests"): SAME_OK.replace(
        "raise RuntimeError(f", "raise ValueError(f"),
    ("check-same-device", "asserts-instead-of-raising", "check-same-device-tests"): """
if not tensors:
    raise ValueError("check_same_device needs at least one tensor")
devices = {t.device for t in tensors if not (t.dim() == 0 and t.device.type == "cpu")}
assert len(devices) <= 1, f"tensors are on different devices: {devices}"
return devices.pop() if devices else torch.device("cpu")
""",
    ("check-same-device", "returns-a-string", "check-same-device-tests"): SAME_OK.replace(
        "return devices.pop()", "return str(devices.pop())"),
    ("check-same-device", "names-only-the-first-conflict", "check-same-device-tests-errors"): """
if not tensors:
    raise ValueError("check_same_device needs at least one tensor")
found = None
for t in tensors:
    if t.dim() == 0 and t.device.type == "cpu":
        continue
    if found is None:
        found = t.device
    elif t.device != found:
        raise RuntimeError(f"found at least two devices, {found} and {t.device}")
return found if found is not None else torch.device("cpu")
""",
    ("check-same-device", "message-without-the-devices", "check-same-device-tests-errors"): SAME_OK.replace(
        'f"tensors are on different devices: {names}"', '"tensors are on different devices"'),
    ("check-same-device", "compares-device-types", "check-same-device-tests-errors"): SAME_OK.replace(
        "devices = {t.device for t", "devices = {torch.device(t.device.type) for t"),
    ("check-same-device", "string-prefixes-merge-devices", "check-same-device-tests-errors"): """
if not tensors:
    raise ValueError("check_same_device needs at least one tensor")
names = []
for t in tensors:
    if t.dim() == 0 and t.device.type == "cpu":
        continue
    name = str(t.device)
    if not any(name.startswith(n) or n.startswith(name) for n in names):
        names.append(name)
if len(names) > 1:
    raise RuntimeError("tensors are on different devices: " + ", ".join(sorted(names)))
return torch.device(names[0]) if names else torch.device("cpu")
""",
}
MISTAKE_CASES = support.mistake_cases(MISTAKES, HEADS)


@pytest.mark.parametrize(("grade_id", "source", "cell"), MISTAKE_CASES)
def test_mistake_loses_points(grade_id, source, cell):
    support.assert_mistake_loses_points(NOTEBOOK, grade_id, source, CELLS_OF, TOTAL, caught_by=cell)


def test_failures_say_what_to_fix():
    results = results_for({
        "forward-on-model-device": answer("forward-on-model-device", FORWARD_OK.replace(
            "return model(x.to(first.device, first.dtype if x.is_floating_point() else x.dtype))",
            "model.to(x.device)\nreturn model(x)")),
        "off-device": answer("off-device", OFF_OK.replace(", *module.named_buffers()", "")),
        "check-same-device": answer("check-same-device", SAME_OK.replace(
            'if not (t.dim() == 0 and t.device.type == "cpu")', "")),
    })
    assert "never the model" in results["forward-on-model-device-tests"].error
    assert "buffers too" in results["off-device-tests-buffers"].error
    assert "0-dim CPU tensor" in results["check-same-device-tests-scalars"].error


def test_the_prompt_says_a_gpu_operation_takes_at_most_one_cpu_scalar():
    """TensorIterator's compute_types: max_cpu_scalars_on_non_cpu is 1 (where it allows CPU scalars at all);
    check_same_device's contract asks about devices only, which the prompt says."""
    import nbformat

    prompt = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                  if c.get("id") == "check-same-device-prompt")
    assert "at most one such scalar" in prompt and "devices only" in prompt


# ----------------------------------------------------------------------------------------------------------
# fixed_step, a training step that crashes on a GPU. The mistakes came first, from how people fix a step that
# crashes with "Expected all tensors to be on the same device" (caught by: the fixed-step-tests-... cell):
#
# | mistake | what the student believed | caught by |
# | --- | --- | --- |
# | only the traceback's line fixed (the arange) | the traceback names the only culprit | any-device |
# | weights fixed, `CLASS_FREQ` left on the CPU | a tensor made once, outside the step, is fine | any-device |
# | every constant moved with `.to(device)` each call | moving a tensor where it is used is free | no-copies |
# | weights by `torch.tensor(..., device=)` each call | made with device=, it skips the host | no-copies |
# | the arange moved with `.to(device)` each call | a small tensor is free to move | no-copies |
# | one-hot made on the CPU (`eye(3)[y.cpu()]`), moved | one copy of the whole target is cheap | no-copies |
# | one-hot scattered with a CPU `arange(len(y))` index | PyTorch moves a CPU index for free | no-copies |
# | loss computed on the CPU, returned `.to(device)` | where the loss is computed is free | no-copies |
# | a cache made inside the call (`{}` in the body) | a dict in the function outlives the call | no-copies |
# | one cache, filled on the first call, any device | a program trains on one device only | any-device |
# | the device hard-coded as `"cuda"` | the step only ever runs on a GPU | same |
# | the smoothing made uniform (`0.1 / 3`) | `CLASS_FREQ` was the crash, so it can go | same |
# | `label_smoothing=0.1` on the class labels | the built-in smoothing computes the same | same |
# | the class weights dropped | the weights were a crash, not the maths | same |
# | the loss returned with its graph (`return loss`) | detaching does not matter | same |
# | the loss returned as a number (`loss.item()`) | the caller wants a number to log | same |

STEP_CONSTANTS = """
on_device = fixed_step.__dict__.setdefault("constants", {})
key = torch.device(device)
if key not in on_device:
    on_device[key] = (CLASS_FREQ.to(key), torch.tensor([1.0, 2.0, 5.0]).to(key))
class_freq, weight = on_device[key]
"""
STEP_ONE_HOT = "one_hot = (y[:, None] == torch.arange(3, device=device)).float()"


STEP_LOSS = "F.cross_entropy(logits, target, weight=weight)"


def step_with(constants: str = STEP_CONSTANTS, one_hot: str = STEP_ONE_HOT,
              target: str = "0.9 * one_hot + 0.1 * class_freq", loss: str = STEP_LOSS,
              result: str = "loss.detach()") -> str:
    """Return a fixed_step cell: the reference fix, one piece changed."""
    return answer("fixed-step", f"""
x, y = batch
{constants.strip()}
logits = model(x)
{one_hot.strip()}
target = {target}
loss = {loss}
optimizer.zero_grad()
loss.backward()
optimizer.step()
return {result}
""")


CORRECT_STEP = {
    "buffers-registered-on-the-model": step_with(constants="""
if not hasattr(model, "class_weight"):
    model.register_buffer("class_weight", torch.tensor([1.0, 2.0, 5.0]).to(device))
    model.register_buffer("class_freq", CLASS_FREQ.to(device))
class_freq, weight = model.class_freq, model.class_weight
""", one_hot="one_hot = F.one_hot(y, 3).float()"),
    "everything-made-on-the-device": step_with(constants="""
weight = torch.ones(3, device=device)
weight[1], weight[2] = 2.0, 5.0
class_freq = torch.full((3,), 0.1, device=device)  # CLASS_FREQ, made where it is used
class_freq[0], class_freq[1] = 0.6, 0.3
""", one_hot="one_hot = torch.eye(3, device=device)[y]"),
    "a-cached-helper-after-the-function": step_with(
        constants="class_freq, weight = _constants(torch.device(device))") + """

import functools


@functools.cache
def _constants(device):
    return CLASS_FREQ.to(device), torch.tensor([1.0, 2.0, 5.0], device=device)
""",
    "own-cross-entropy-on-the-inputs-device": answer("fixed-step", """
x, y = batch
kept = globals().setdefault("_STEP_CONSTANTS", {})
if x.device not in kept:
    kept[x.device] = torch.stack([CLASS_FREQ, torch.tensor([1.0, 2.0, 5.0])]).to(x.device)
class_freq, weight = kept[x.device]
target = 0.9 * F.one_hot(y, num_classes=3).to(x.dtype) + 0.1 * class_freq
log_p = model(x).log_softmax(dim=1)
loss = -(target * weight * log_p).sum() / len(y)
optimizer.zero_grad()
loss.backward()
optimizer.step()
return loss.detach()
"""),
    "logs-the-loss": step_with(result='loss.detach()\nprint(f"loss {loss.item():.4f}")').replace(
        '    return loss.detach()\n    print(f"loss {loss.item():.4f}")',
        '    print(f"loss {loss.item():.4f}", float(loss.detach()), loss.detach().cpu().tolist())\n'
        '    return loss.detach()'),
}
STEP_MISTAKES = {
    ("only-the-tracebacks-line", "fixed-step-tests-any-device"): step_with(
        constants="class_freq, weight = CLASS_FREQ, torch.tensor([1.0, 2.0, 5.0])"),
    ("class-freq-left-on-the-cpu", "fixed-step-tests-any-device"): step_with(constants="""
weights = fixed_step.__dict__.setdefault("weights", {})
if device not in weights:
    weights[device] = torch.tensor([1.0, 2.0, 5.0]).to(device)
class_freq, weight = CLASS_FREQ, weights[device]
"""),
    ("moved-on-every-call", "fixed-step-tests-no-copies"): step_with(
        constants="class_freq, weight = CLASS_FREQ.to(device), torch.tensor([1.0, 2.0, 5.0]).to(device)"),
    ("weights-made-on-the-device-on-every-call", "fixed-step-tests-no-copies"): step_with(
        constants=STEP_CONSTANTS + "weight = torch.tensor([1.0, 2.0, 5.0], device=device)"),
    ("arange-moved-on-every-call", "fixed-step-tests-no-copies"): step_with(
        one_hot="one_hot = (y[:, None] == torch.arange(3).to(device)).float()"),
    ("one-hot-built-on-the-cpu-then-moved", "fixed-step-tests-no-copies"): step_with(
        one_hot="one_hot = torch.eye(3)[y.cpu()].to(device)"),
    ("one-hot-scattered-with-a-cpu-index", "fixed-step-tests-no-copies"): step_with(one_hot="""
one_hot = torch.zeros(len(y), 3, device=device)
one_hot[torch.arange(len(y)), y] = 1.0
"""),
    ("loss-computed-on-the-cpu", "fixed-step-tests-no-copies"): step_with(
        constants="class_freq, weight = CLASS_FREQ, torch.tensor([1.0, 2.0, 5.0])",
        one_hot="one_hot = F.one_hot(y.cpu(), 3).float()",
        loss="F.cross_entropy(logits.cpu(), target, weight=weight)", result="loss.detach().to(device)"),
    ("cache-made-inside-the-call", "fixed-step-tests-no-copies"): step_with(
        constants=STEP_CONSTANTS.replace('fixed_step.__dict__.setdefault("constants", {})', "{}")),
    ("one-cache-for-the-first-device", "fixed-step-tests-any-device"): step_with(constants="""
if not hasattr(fixed_step, "constants"):
    fixed_step.constants = (CLASS_FREQ.to(device), torch.tensor([1.0, 2.0, 5.0]).to(device))
class_freq, weight = fixed_step.constants
"""),
    ("device-hard-coded", "fixed-step-tests-same"): step_with(
        one_hot='one_hot = (y[:, None] == torch.arange(3, device="cuda")).float()'),
    ("smoothing-made-uniform", "fixed-step-tests-same"): step_with(target="0.9 * one_hot + 0.1 / 3"),
    ("built-in-label-smoothing", "fixed-step-tests-same"): step_with(
        loss="F.cross_entropy(logits, y, weight=weight, label_smoothing=0.1)"),
    ("class-weights-dropped", "fixed-step-tests-same"): step_with(loss="F.cross_entropy(logits, target)"),
    ("loss-returned-with-its-graph", "fixed-step-tests-same"): step_with(result="loss"),
    ("loss-returned-as-a-number", "fixed-step-tests-same"): step_with(result="loss.item()"),
}


def test_step_builder_gives_the_reference_fix():
    solution = support.solution_sources(support.code_cells(NOTEBOOK))["fixed-step"]
    code = [line for line in solution.split("### BEGIN SOLUTION")[1].splitlines()
            if line.strip() and not line.strip().startswith("#") and "END SOLUTION" not in line]
    built = [line for line in step_with().splitlines()[2:] if line.strip()]
    assert [line.split("  #")[0].rstrip() for line in code] == built


@pytest.mark.parametrize("source", CORRECT_STEP.values(), ids=CORRECT_STEP.keys())
def test_other_correct_steps_get_full_marks(source):
    support.assert_all_pass(results_for({"fixed-step": source}))


@pytest.mark.parametrize(("source", "cell"), [pytest.param(source, cell, id=name)
                                              for (name, cell), source in STEP_MISTAKES.items()])
def test_step_mistake_loses_points(source, cell):
    support.assert_mistake_loses_points(NOTEBOOK, "fixed-step", source, CELLS_OF, TOTAL, caught_by=cell)


@pytest.mark.parametrize(("mistake", "cell", "words"), [
    ("only-the-tracebacks-line", "fixed-step-tests-any-device", "the step uses is on another device"),
    ("one-cache-for-the-first-device", "fixed-step-tests-any-device", "whichever device an earlier call"),
    ("moved-on-every-call", "fixed-step-tests-no-copies", "copied 2 tensors from the host"),
    ("weights-made-on-the-device-on-every-call", "fixed-step-tests-no-copies", "(3,) torch.float32"),
    ("one-hot-scattered-with-a-cpu-index", "fixed-step-tests-no-copies", "torch.int64"),
    ("smoothing-made-uniform", "fixed-step-tests-same", "not the maths"),
    ("loss-returned-with-its-graph", "fixed-step-tests-same", "loss.detach()"),
    ("loss-returned-as-a-number", "fixed-step-tests-same", "return the loss as train_step does"),
])
def test_step_failures_say_what_to_fix(mistake, cell, words):
    source = next(s for (name, _), s in STEP_MISTAKES.items() if name == mistake)
    results = results_for({"fixed-step": source})
    assert not results[cell].passed and words in results[cell].error, support.report(results)


def _step_namespace(source: str) -> dict:
    namespace: dict = {"__name__": "__main__"}
    exec(support.imports_cell(support.code_cells(NOTEBOOK)).source, namespace)
    exec(compile(source, "<fixed_step>", "exec"), namespace)
    return namespace


def test_the_fixed_step_check_agrees_with_the_grading(monkeypatch):
    from devicelab.exercises import ps03
    from devicelab.feedback import Outcome, evaluate

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    exercise = ps03._exercises.exercises["fixed_step"]
    solution = support.solution_sources(support.code_cells(NOTEBOOK))["fixed-step"]
    assert evaluate(exercise, _step_namespace(solution)).outcome is Outcome.CORRECT
    stub = support.student_stubs(NOTEBOOK)["fixed-step"]
    assert evaluate(exercise, _step_namespace(stub)).outcome is Outcome.NOT_ATTEMPTED
    for mistake, words in (("only-the-tracebacks-line", "the step uses is on another device"),
                           ("moved-on-every-call", "copied 2 tensors from the host"),
                           ("built-in-label-smoothing", "not the maths")):
        source = next(s for (name, _), s in STEP_MISTAKES.items() if name == mistake)
        feedback = evaluate(exercise, _step_namespace(source))
        assert feedback.outcome is Outcome.INCORRECT, (mistake, feedback.message)
        assert words in feedback.message, (mistake, feedback.message)


def test_the_prompt_shows_the_step_the_traceback_and_the_gpu_message():
    """The prompt's code is train_step's; its traceback ends with TensorIterator's message as a GPU prints it
    (aten/src/ATen/TensorIterator.cpp, compute_types: the common device is the first non-CPU one)."""
    import inspect

    import nbformat

    from devicelab.exercises import ps03

    prompt = next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
                  if c.get("id") == "fixed-step-prompt")
    body = inspect.getsource(ps03.train_step).split('"""')[2].strip("\n")
    assert body in prompt
    assert ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
            "cuda:0 and cpu!") in prompt
    with pytest.raises(RuntimeError, match="Tensor on device cpu is not on the expected device meta!"):
        ps03.train_step(ps03.classifier().to("meta"), ps03.meta_batch(2), torch.optim.SGD([torch.ones(1)]))
    assert "Tensor on device cpu is not on the expected device meta!" in prompt


# ----------------------------------------------------------------------------------------------------------
# HostCopySpy (ps04's, shared with fixed_step) sees every way a tensor comes from the host, and nothing else


def _copies(fn) -> list[str]:
    from devicelab.exercises.ps04 import HostCopySpy

    with HostCopySpy() as spy:
        fn()
    return spy.copies


def test_host_copy_spy_sees_every_way_a_tensor_comes_from_the_host():
    import numpy as np

    meta = torch.zeros(4, 3, device="meta")
    y = torch.tensor([0, 2, 1, 0], device="meta")
    on_meta = {"device": "meta"}
    for what, fn, seen in [
        (".to", lambda: torch.ones(3).to("meta"), "(3,) torch.float32"),
        ("copy_", lambda: meta.copy_(torch.ones(4, 3)), "(4, 3) torch.float32"),
        ("torch.tensor(device=)", lambda: torch.tensor([1.0, 2.0, 5.0], **on_meta), "(3,) torch.float32"),
        ("a 0-dim torch.tensor(..., device=)", lambda: torch.tensor(0.5, **on_meta), "() torch.float32"),
        ("of a CPU tensor", lambda: torch.as_tensor(torch.ones(2), **on_meta), "(2,) torch.float32"),
        ("torch.as_tensor", lambda: torch.as_tensor([1, 2], **on_meta), "(2,) torch.int64"),
        ("torch.as_tensor of NumPy", lambda: torch.as_tensor(np.ones(2), **on_meta), "(2,) torch.float64"),
        ("torch.asarray", lambda: torch.asarray([1.0], **on_meta), "(1,) torch.float32"),
        ("new_tensor", lambda: meta.new_tensor([1.0, 2.0]), "(2,) torch.float32"),
        ("a CPU index", lambda: meta[torch.arange(4), y], "(4,) torch.int64"),
        ("a CPU mask", lambda: meta[torch.ones(4, dtype=torch.bool)], "(4,) torch.bool"),
        ("setting at a CPU index", lambda: meta.__setitem__((torch.arange(4), y), 1.0), "(4,) torch.int64"),
        ("CPU values", lambda: meta.__setitem__(slice(None), torch.ones(4, 3)), "(4, 3) torch.float32"),
        ("index_put_", lambda: meta.index_put_((torch.tensor([1]),), torch.ones(3)), "(1,) torch.int64"),
    ]:
        assert seen in _copies(fn), what


def test_host_copy_spy_leaves_out_what_is_made_on_the_device():
    meta = torch.zeros(4, 3, device="meta")
    y = torch.tensor([0, 2, 1, 0], device="meta")
    for what, fn in [
        ("arange on the device", lambda: torch.arange(3, device="meta")),
        ("full, eye, one_hot", lambda: (torch.full((3,), 2.0, device="meta"), torch.eye(3, device="meta")[y],
                                        torch.nn.functional.one_hot(y, 3))),
        ("a 0-dim CPU scalar in arithmetic", lambda: meta * torch.tensor(0.5)),
        ("as_tensor of a device tensor", lambda: torch.as_tensor(meta, device="meta")),
        ("asarray of a device tensor", lambda: torch.asarray(meta, device="meta")),
        ("a Python number set", lambda: meta.__setitem__((1, 2), 5.0)),
        ("a device index", lambda: meta[y]),
        ("a 0-dim CPU index", lambda: meta[torch.tensor(1)]),
        ("made on the CPU", lambda: (torch.tensor([1.0]), torch.ones(3).to("cpu"), torch.ones(2)[[0]])),
        ("a dtype change on the device", lambda: meta.to(torch.float64)),
    ]:
        assert _copies(fn) == [], what
