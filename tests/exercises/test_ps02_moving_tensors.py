"""ps02-moving-tensors: the solutions and other correct answers earn full marks; realistic mistakes lose
points.
"""

import inspect
import textwrap
from functools import partial

import pytest

from autograder import COURSE_ROOT
from devicelab.exercises import ps02
from tests import assignment_support as support
from tests.harness import run_graded_cells

NOTEBOOK = COURSE_ROOT / "source" / "ps02-moving-tensors" / "ps02-moving-tensors.ipynb"
CELLS_OF = {
    "to-device": ("to-device-tests-basic", "to-device-tests-containers", "to-device-tests-copy",
                  "to-device-tests-non-blocking"),
    "to-is-noop": ("to-is-noop-tests",),
    "make-leaf": ("make-leaf-tests", "make-leaf-tests-values"),
    "as-numpy": ("as-numpy-tests", "as-numpy-tests-grad", "as-numpy-tests-devices"),
    "fixed-fit": ("fixed-fit-tests-trains", "fixed-fit-tests-leaves", "fixed-fit-tests-cpu"),
}
POINTS_OF = {"to-device": 5, "to-is-noop": 2, "make-leaf": 3, "as-numpy": 4, "fixed-fit": 16}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "to-device": 'def to_device(obj, device, non_blocking: bool = False):\n'
                 '    """Move every tensor in obj."""\n',
    "to-is-noop": "def to_is_noop(t: torch.Tensor, device, dtype: torch.dtype | None = None) -> bool:\n"
                  '    """Would t.to() return t?"""\n',
    "make-leaf": 'def make_leaf(shape, device) -> torch.Tensor:\n    """Make a leaf."""\n',
    "as-numpy": 'def as_numpy(t: torch.Tensor) -> np.ndarray:\n    """Copy t into NumPy."""\n',
    "fixed-fit": "def fixed_fit(x: torch.Tensor, y: torch.Tensor, device, steps: int = 100, "
                 'lr: float = 0.1):\n    """Fit on device."""\n',
}

# torch's own Tensor.__array__ makes NumPy 2 warn whenever np.array() is given a tensor; not the student's
# fault.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")


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
    "to-device": {
        "match-statement-and-make": """
match obj:
    case torch.Tensor():
        return obj.to(device=device, non_blocking=non_blocking)
    case dict():
        return type(obj)((k, to_device(v, device, non_blocking)) for k, v in obj.items())
    case tuple() if hasattr(obj, "_fields"):
        return type(obj)._make(to_device(v, device, non_blocking) for v in obj)
    case tuple():
        return tuple(to_device(v, device, non_blocking) for v in obj)
    case list():
        return [to_device(v, device, non_blocking) for v in obj]
    case _:
        return obj
""",
        "copy-then-assign-and-replace": """
import copy
if torch.is_tensor(obj):
    return obj.to(device, non_blocking=non_blocking)
if isinstance(obj, dict):
    out = copy.copy(obj)
    for key in out:
        out[key] = to_device(obj[key], device, non_blocking=non_blocking)
    return out
if isinstance(obj, list):
    out = list(obj)
    for i, item in enumerate(out):
        out[i] = to_device(item, device, non_blocking=non_blocking)
    return out
if isinstance(obj, tuple) and hasattr(obj, "_replace"):
    return obj._replace(**{f: to_device(getattr(obj, f), device, non_blocking) for f in obj._fields})
if isinstance(obj, tuple):
    return tuple(to_device(item, device, non_blocking) for item in obj)
return obj
""",
        "abc-mapping-and-sequence": """
from collections.abc import Mapping, Sequence
move = lambda o: to_device(o, device, non_blocking)
if isinstance(obj, torch.Tensor):
    return obj.to(device, non_blocking=non_blocking)
if isinstance(obj, Mapping):
    return type(obj)({k: move(v) for k, v in obj.items()})
if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
    items = [move(v) for v in obj]
    if isinstance(obj, tuple):
        return type(obj)(*items) if hasattr(type(obj), "_fields") else tuple(items)
    return type(obj)(items)
return obj
""",
        "shallow-copy-then-update": """
if isinstance(obj, torch.Tensor):
    return obj.to(device, non_blocking=non_blocking)
if isinstance(obj, dict):
    import copy
    out = copy.copy(obj)
    out.update((k, to_device(v, device, non_blocking)) for k, v in obj.items())
    return out
if isinstance(obj, tuple) and hasattr(obj, "_fields"):
    return obj.__class__(*[to_device(v, device, non_blocking) for v in obj])
if isinstance(obj, tuple):
    return tuple(to_device(v, device, non_blocking) for v in obj)
if isinstance(obj, list):
    return [to_device(v, device, non_blocking) for v in obj]
return obj
""",
    },
    "to-is-noop": {
        "ask-to-itself": """
moved = t.to(device) if dtype is None else t.to(device, dtype)
return moved is t
""",
        "to-with-keywords": """
return t.to(device=device, dtype=t.dtype if dtype is None else dtype) is t
""",
        "fill-in-dtype-and-the-current-gpu-first": """
if dtype is None:
    dtype = t.dtype
target = torch.device(device)
if target.type == "cuda" and target.index is None:
    target = torch.device("cuda", torch.cuda.current_device())
return bool(t.device == target and t.dtype == dtype)
""",
        "compare-as-strings-after-resolving": """
target = torch.device(device)
if str(target) == "cuda":
    target = torch.device(f"cuda:{torch.cuda.current_device()}")
return str(t.device) == str(target) and (dtype is None or t.dtype is dtype)
""",
        "type-then-index-or-the-current-one": """
target = torch.device(device)
if t.device.type != target.type or (dtype is not None and dtype != t.dtype):
    return False
index = target.index
if index is None and target.type == "cuda":
    index = torch.cuda.current_device()
return t.device.index == index
""",
        "accelerator-current-index": """
target = torch.device(device)
if target.type == "cuda" and target.index is None and t.is_cuda:
    target = torch.device("cuda", torch.accelerator.current_device_index())
return t.device == target and t.dtype == (dtype or t.dtype)
""",
    },
    "make-leaf": {
        "move-then-require-grad": "return torch.randn(shape).to(device).requires_grad_()",
        "parameter": "return torch.nn.Parameter(torch.randn(shape, device=device))",
        "fill-in-place-without-grad": """
w = torch.empty(shape, device=device, requires_grad=True)
with torch.no_grad():
    w.normal_()
return w
""",
        "size-keyword-and-attribute": """
w = torch.randn(size=tuple(shape), device=torch.device(device))
w.requires_grad = True
return w
""",
        "detach-after-moving": "return torch.randn(shape, "
                               "requires_grad=True).to(device).detach().requires_grad_()",
        "torch-normal": "return torch.normal(0.0, 1.0, size=tuple(shape), device=device)"
                        ".requires_grad_(True)",
    },
    "as-numpy": {
        "detach-cpu-numpy-copy": "return t.detach().cpu().numpy().copy()",
        "np-array-of-cpu-tensor": "return np.array(t.detach().cpu())",
        "clone-then-cpu": "return t.detach().clone().cpu().numpy()",
        "numpy-force-then-copy": "return t.numpy(force=True).copy()",
        "cpu-detach-np-array-copy": "return np.array(t.cpu().detach(), copy=True)",
        "np-copy": "return np.copy(t.detach().to('cpu').numpy())",
        "copy-into-a-preallocated-host-tensor": """
host = torch.empty(t.shape, dtype=t.dtype)
host.copy_(t.detach())
return host.numpy()
""",
        "empty-like-on-the-cpu-then-copy": """
host = torch.empty_like(t, device="cpu", requires_grad=False)
with torch.no_grad():
    host.copy_(t)
return host.numpy()
""",
        "zeros-copy-chained": "return torch.zeros(t.shape, dtype=t.dtype, "
                              "device='cpu').copy_(t.detach()).numpy()",
        "to-with-copy-keyword-then-contiguous": "return t.detach().to(device='cpu', "
                                                "copy=True).contiguous().numpy()",
    },
}
CORRECT_CASES = support.correct_cases(CORRECT, HEADS)


@pytest.mark.parametrize(("grade_id", "source"), CORRECT_CASES)
def test_other_correct_answer_gets_full_marks(grade_id, source):
    support.assert_all_pass(results_for({grade_id: source}))


# ----------------------------------------------------------------------------------------------------------
# Realistic mistakes lose points, in the cell that checks them and only in that exercise's cells

TO_DEVICE_OK = """
if isinstance(obj, torch.Tensor):
    return obj.to(device, non_blocking=non_blocking)
if isinstance(obj, dict):
    return type(obj)((k, to_device(v, device, non_blocking)) for k, v in obj.items())
if isinstance(obj, tuple) and hasattr(obj, "_fields"):
    return type(obj)(*(to_device(v, device, non_blocking) for v in obj))
if isinstance(obj, (list, tuple)):
    return type(obj)(to_device(v, device, non_blocking) for v in obj)
return obj
"""

MISTAKES = {
    # to_device
    ("to-device", "tuple-becomes-list", "to-device-tests-containers"): """
if isinstance(obj, torch.Tensor):
    return obj.to(device, non_blocking=non_blocking)
if isinstance(obj, dict):
    return {k: to_device(v, device, non_blocking) for k, v in obj.items()}
if isinstance(obj, (list, tuple)):
    return [to_device(v, device, non_blocking) for v in obj]
return obj
""",
    ("to-device", "namedtuple-becomes-plain-tuple", "to-device-tests-containers"): TO_DEVICE_OK.replace(
        'type(obj)(*(to_device(v, device, non_blocking) for v in obj))',
        'tuple(to_device(v, device, non_blocking) for v in obj)'),
    ("to-device", "namedtuple-built-from-a-generator", "to-device-tests-containers"): TO_DEVICE_OK.replace(
        'if isinstance(obj, tuple) and hasattr(obj, "_fields"):\n'
        '    return type(obj)(*(to_device(v, device, non_blocking) for v in obj))\n', ""),
    ("to-device", "writes-into-the-input-dict", "to-device-tests-copy"): TO_DEVICE_OK.replace(
        "    return type(obj)((k, to_device(v, device, non_blocking)) for k, v in obj.items())",
        "    for k, v in obj.items():\n        obj[k] = to_device(v, device, non_blocking)\n    return obj"),
    ("to-device", "writes-into-the-input-list", "to-device-tests-copy"): TO_DEVICE_OK.replace(
        "if isinstance(obj, (list, tuple)):",
        "if isinstance(obj, list):\n"
        "    for i, v in enumerate(obj):\n        obj[i] = to_device(v, device, non_blocking)\n"
        "    return obj\n"
        "if isinstance(obj, tuple):"),
    ("to-device", "non-blocking-dropped", "to-device-tests-non-blocking"): TO_DEVICE_OK.replace(
        "obj.to(device, non_blocking=non_blocking)", "obj.to(device)"),
    ("to-device", "non-blocking-always-true", "to-device-tests-non-blocking"): TO_DEVICE_OK.replace(
        "obj.to(device, non_blocking=non_blocking)", "obj.to(device, non_blocking=True)"),
    ("to-device", "non-blocking-lost-in-recursion", "to-device-tests-non-blocking"): TO_DEVICE_OK.replace(
        "to_device(v, device, non_blocking)", "to_device(v, device)"),
    ("to-device", "top-level-dict-of-tensors-only", "to-device-tests-basic"): """
return {k: v.to(device, non_blocking=non_blocking) for k, v in obj.items() if isinstance(v, torch.Tensor)}
""",
    ("to-device", "one-level-only", "to-device-tests-containers"): """
move = lambda v: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v
if isinstance(obj, dict):
    return {k: move(v) for k, v in obj.items()}
if isinstance(obj, tuple) and hasattr(obj, "_fields"):
    return type(obj)(*map(move, obj))
if isinstance(obj, (list, tuple)):
    return type(obj)(map(move, obj))
return move(obj)
""",
    ("to-device", "drops-non-tensor-items", "to-device-tests-containers"): TO_DEVICE_OK.replace(
        "    return type(obj)(to_device(v, device, non_blocking) for v in obj)",
        "    return type(obj)(to_device(v, device, non_blocking) for v in obj\n"
        "                     if isinstance(v, (torch.Tensor, dict, list, tuple)))"),
    ("to-device", "deep-copies-everything", "to-device-tests-basic"): """
import copy

def move(o):
    if isinstance(o, torch.Tensor):
        return o.to(device, non_blocking=non_blocking)
    if isinstance(o, dict):
        for k in o:
            o[k] = move(o[k])
        return o
    if isinstance(o, list):
        o[:] = [move(v) for v in o]
        return o
    if isinstance(o, tuple) and hasattr(o, "_fields"):
        return type(o)(*map(move, o))
    if isinstance(o, tuple):
        return tuple(map(move, o))
    return o

return move(copy.deepcopy(obj))
""",
    ("to-device", "expects-to-move-in-place", "to-device-tests-basic"): TO_DEVICE_OK.replace(
        "    return obj.to(device, non_blocking=non_blocking)",
        "    obj.to(device, non_blocking=non_blocking)\n    return obj"),
    ("to-device", "uses-cuda", "to-device-tests-basic"): TO_DEVICE_OK.replace(
        "obj.to(device, non_blocking=non_blocking)", "obj.cuda(non_blocking=non_blocking)"),
    ("to-device", "ordered-dict-becomes-dict", "to-device-tests-containers"): TO_DEVICE_OK.replace(
        "type(obj)((k, to_device(v, device, non_blocking)) for k, v in obj.items())",
        "{k: to_device(v, device, non_blocking) for k, v in obj.items()}"),
    ("to-device", "exact-dict-type-skips-subclasses", "to-device-tests-containers"): TO_DEVICE_OK.replace(
        "if isinstance(obj, dict):", "if type(obj) is dict:"),
    ("to-device", "exact-tensor-type-skips-parameters", "to-device-tests-basic"): TO_DEVICE_OK.replace(
        "if isinstance(obj, torch.Tensor):", "if type(obj) is torch.Tensor:"),
    ("to-device", "match-statement-with-a-plain-dict", "to-device-tests-containers"): """
match obj:
    case torch.Tensor():
        return obj.to(device=device, non_blocking=non_blocking)
    case dict():
        return dict((k, to_device(v, device, non_blocking)) for k, v in obj.items())
    case tuple() if hasattr(obj, "_fields"):
        return type(obj)._make(to_device(v, device, non_blocking) for v in obj)
    case tuple():
        return tuple(to_device(v, device, non_blocking) for v in obj)
    case list():
        return [to_device(v, device, non_blocking) for v in obj]
    case _:
        return obj
""",
    ("to-device", "pytree-skips-an-unregistered-dict-subclass", "to-device-tests-containers"): """
from torch.utils import _pytree as pytree
return pytree.tree_map(
    lambda v: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v, obj)
""",
    ("to-device", "dict-copy-method-loses-the-subclass", "to-device-tests-containers"): """
if isinstance(obj, torch.Tensor):
    return obj.to(device, non_blocking=non_blocking)
if isinstance(obj, dict):
    out = obj.copy()
    out.update((k, to_device(v, device, non_blocking)) for k, v in obj.items())
    return out
if isinstance(obj, tuple) and hasattr(obj, "_fields"):
    return obj.__class__(*[to_device(v, device, non_blocking) for v in obj])
if isinstance(obj, tuple):
    return tuple(to_device(v, device, non_blocking) for v in obj)
if isinstance(obj, list):
    return [to_device(v, device, non_blocking) for v in obj]
return obj
""",
    ("to-device", "strings-as-sequences", "to-device-tests-basic"): """
from collections.abc import Mapping, Sequence
if isinstance(obj, torch.Tensor):
    return obj.to(device, non_blocking=non_blocking)
if isinstance(obj, Mapping):
    return {k: to_device(v, device, non_blocking) for k, v in obj.items()}
if isinstance(obj, Sequence):
    items = [to_device(v, device, non_blocking) for v in obj]
    return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
return obj
""",
    # to_is_noop
    ("to-is-noop", "ignores-dtype", "to-is-noop-tests"): "return t.device == torch.device(device)",
    ("to-is-noop", "ignores-device", "to-is-noop-tests"): "return dtype is None or t.dtype == dtype",
    ("to-is-noop", "compares-device-type-only", "to-is-noop-tests"):
        "return t.device.type == torch.device(device).type and (dtype is None or t.dtype == dtype)",
    ("to-is-noop", "compares-with-a-string", "to-is-noop-tests"):
        "return str(t.device) == device and (dtype is None or t.dtype == dtype)",
    ("to-is-noop", "compares-with-the-raw-argument", "to-is-noop-tests"):
        "return t.device == device and (dtype is None or t.dtype == dtype)",
    ("to-is-noop", "dtype-none-never-matches", "to-is-noop-tests"):
        "return t.device == torch.device(device) and t.dtype == dtype",
    ("to-is-noop", "believes-to-always-copies", "to-is-noop-tests"): "return False",
    ("to-is-noop", "plain-cuda-compared-as-a-string", "to-is-noop-tests"):
        "return str(t.device) == str(torch.device(device)) and (dtype is None or t.dtype is dtype)",
    ("to-is-noop", "plain-cuda-compared-as-an-object", "to-is-noop-tests"): """
if dtype is None:
    dtype = t.dtype
return bool(t.device == torch.device(device) and t.dtype == dtype)
""",
    ("to-is-noop", "plain-cuda-taken-for-cuda-0", "to-is-noop-tests"): """
target = torch.device(device)
if target.type == "cuda" and target.index is None:
    target = torch.device("cuda", 0)
return t.device == target and (dtype is None or t.dtype == dtype)
""",
    ("to-is-noop", "plain-cuda-matches-any-gpu", "to-is-noop-tests"): """
target = torch.device(device)
same_place = t.device.type == target.type if target.index is None else t.device == target
return same_place and (dtype is None or t.dtype == dtype)
""",
    # make_leaf
    ("make-leaf", "moves-after-requires-grad", "make-leaf-tests"):
        "return torch.randn(shape, requires_grad=True).to(device)",
    ("make-leaf", "forgets-requires-grad", "make-leaf-tests"): "return torch.randn(shape, device=device)",
    ("make-leaf", "ignores-device", "make-leaf-tests"): "return torch.randn(shape, requires_grad=True)",
    ("make-leaf", "scales-after-creating", "make-leaf-tests"):
        "return torch.randn(shape, device=device, requires_grad=True) * 0.01",
    ("make-leaf", "fills-a-leaf-in-place", "make-leaf-tests"):
        "return torch.empty(shape, device=device, requires_grad=True).normal_()",
    ("make-leaf", "unpacks-the-shape", "make-leaf-tests"): """
w = torch.randn(*shape, device=torch.device(device))
w.requires_grad = True
return w
""",
    ("make-leaf", "builds-from-the-first-dimension", "make-leaf-tests"):
        "return torch.randn(shape[0], *shape[1:], device=device, requires_grad=True)",
    ("make-leaf", "zeros", "make-leaf-tests-values"):
        "return torch.zeros(shape, device=device, requires_grad=True)",
    ("make-leaf", "uniform-rand", "make-leaf-tests-values"):
        "return torch.rand(shape, device=device, requires_grad=True)",
    ("make-leaf", "reseeds-every-call", "make-leaf-tests-values"):
        "torch.manual_seed(0)\nreturn torch.randn(shape, device=device, requires_grad=True)",
    ("make-leaf", "uninitialised-empty", "make-leaf-tests-values"):
        "return torch.empty(shape, device=device, requires_grad=True)",
    # as_numpy
    ("as-numpy", "shares-memory-through-cpu", "as-numpy-tests"): "return t.detach().cpu().numpy()",
    ("as-numpy", "plain-numpy", "as-numpy-tests"): "return t.numpy()",
    ("as-numpy", "np-asarray-shares-memory", "as-numpy-tests"): "return np.asarray(t.detach().cpu())",
    ("as-numpy", "numpy-force-without-copy", "as-numpy-tests"): "return t.numpy(force=True)",
    ("as-numpy", "through-tolist", "as-numpy-tests"): "return np.array(t.detach().cpu().tolist())",
    ("as-numpy", "python-number-for-0-dim", "as-numpy-tests"):
        "if t.dim() == 0:\n    return t.item()\nreturn t.detach().cpu().numpy().copy()",
    ("as-numpy", "casts-to-float32", "as-numpy-tests"):
        "return t.detach().cpu().numpy().astype(np.float32)",
    ("as-numpy", "forgets-detach", "as-numpy-tests-grad"): "return t.cpu().numpy().copy()",
    ("as-numpy", "switches-off-requires-grad", "as-numpy-tests-grad"):
        "t.requires_grad_(False)\nreturn t.cpu().numpy().copy()",
    ("as-numpy", "forgets-cpu", "as-numpy-tests-devices"): "return t.detach().numpy().copy()",
    ("as-numpy", "clone-without-cpu", "as-numpy-tests-devices"): "return t.detach().clone().numpy()",
    ("as-numpy", "np-array-without-cpu", "as-numpy-tests-devices"): "return np.array(t.detach())",
}
MISTAKE_CASES = support.mistake_cases(MISTAKES, HEADS)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("grade_id", "source", "cell"), MISTAKE_CASES)
def test_mistake_loses_points(grade_id, source, cell):
    support.assert_mistake_loses_points(NOTEBOOK, grade_id, source, CELLS_OF, TOTAL, caught_by=cell)


def test_failures_say_what_to_fix():
    results = results_for({
        "to-device": answer("to-device", MISTAKES["to-device", "namedtuple-built-from-a-generator",
                                                  "to-device-tests-containers"]),
        "as-numpy": answer("as-numpy", "return t.detach().cpu().numpy()"),
        "make-leaf": answer("make-leaf", "return torch.randn(shape, requires_grad=True).to(device)"),
    })
    assert "type(obj)(*items)" in results["to-device-tests-containers"].error
    assert "return a copy" in results["as-numpy-tests"].error
    assert "instead of moving" in results["make-leaf-tests"].error
    results = results_for({"to-device": answer("to-device", TO_DEVICE_OK.replace(
        "obj.to(device, non_blocking=non_blocking)", "obj.to(device)"))})
    assert "pass non_blocking=non_blocking" in results["to-device-tests-non-blocking"].error


def test_patches_do_not_leak_out_of_the_notebook():
    import torch

    before = torch.Tensor.to
    crashes_on_dicts = 'if isinstance(obj, dict):\n    raise RuntimeError("boom")\n' + TO_DEVICE_OK
    results = results_for({"to-device": answer("to-device", crashes_on_dicts)})
    assert "boom" in results["to-device-tests-non-blocking"].error  # raised while Tensor.to was patched
    assert torch.Tensor.to is before and "to" not in vars(torch.Tensor), "the Tensor.to spy was left in place"


def _prompt(cell_id: str) -> str:
    import nbformat

    return next(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.get("id") == cell_id)


def test_the_prompts_claim_no_overlap_from_non_blocking_alone_and_no_tensor_that_never_moves():
    """non_blocking from pinned memory frees the host; overlap with GPU work also needs a second stream
    (lesson 06), and PyTorch itself copies a CPU index tensor (lesson 04)."""
    assert "overlap" not in _prompt("to-device-prompt")
    title = _prompt("title")
    assert "only when you move it" not in title and "lesson 04" in title



# ----------------------------------------------------------------------------------------------------------
# fixed_fit, the fit that trains nothing on a GPU. The mistakes came first, from how people "fix" a
# script whose loss never moves after `.to(device)`. Graded under `ps02.like_a_gpu()`, where `.to("cuda")`
# copies as on a GPU. "Caught by" names every cell that fails (trains, leaves, cpu; "all": the three), as
# `test_fit_mistake_loses_points` checks; "after it" is after the optimizer was built.
#
# | mistake | what the student believed | caught by |
# | --- | --- | --- |
# | the script unchanged (`w, b = w.to(device), ...` after it) | `.to` moves in place | trains, leaves |
# | `w = w.to(device).requires_grad_()` after it | a copy that requires grad gets trained | trains, leaves |
# | `w = w.detach().to(device).requires_grad_()` after it | a leaf on the device is all it takes | all |
# | `with torch.no_grad(): w = w.to(device)` after it | the move stays out of the graph | trains, leaves |
# | `w = w.data.to(device)` after it | `.data` moves the values and keeps the parameter | all |
# | the optimizer built again over the moved copies | the optimizer must follow the move | trains, leaves |
# | `torch.zeros(n, requires_grad=True).to(device)` | where a tensor is made is no matter | trains, leaves |
# | the copies' grads retained, an optimizer over them | retain_grad fixes "a non-leaf Tensor" | leaves |
# | the optimizer's own tensors returned after the loop | they are what was learned | trains, leaves |
# | the device ignored: all made and left on the CPU | the data may stay where it is | trains, leaves |
# | x and y not moved | only the parameters move | trains, leaves |
# | the fit made on the CPU, the result moved at the end | only where it ends counts | trains, leaves |
# | the fit made on the CPU, fresh leaves on the device at the end | a leaf there is what is asked | trains |
# | a 0-dim bias made on the CPU | a 0-dim tensor may live anywhere (read there: yes; trained: no) | leaves |
# | the device hard-coded as "cuda" | the script only ever runs on a GPU | cpu |
# | `.cuda()` instead of `.to(device)` | `.cuda()` is how a tensor moves | cpu |
# | an `nn.Linear`'s `nn.Parameter(p.to(device))` after it | a new Parameter there is the same one | all |
# | an `nn.Linear`'s (m, 1) output against y of m values | the shapes line up | trains, cpu |
# | a random start (`torch.randn`) | the start does not matter | trains, cpu |
# | Adam instead of SGD | any optimizer will do | trains, cpu |
# | no `zero_grad` | gradients start afresh every step | trains, cpu |
# | steps and lr hard-coded | the defaults are the only values | trains, cpu |
#
# Not mistakes, and traps: an optimizer built before `model.to(device)` trains, since `Module.to` keeps each
# parameter (it sets `param.data`, as between CPU and CUDA, both dense tensors); so does `w.data =
# w.data.to(device)` after the optimizer. Neither needs "fixing" (CORRECT_FIT).

# The script of the prompt, ps02.fit, as a body: each mistake below is that script with one line changed.
SCRIPT = "\n" + textwrap.dedent(inspect.getsource(ps02.fit).split('"""\n', 1)[1])
MOVE = "w, b = w.to(device), b.to(device)"
FIXED = """
w = torch.zeros(x.shape[1], device=device, requires_grad=True)
b = torch.zeros(1, device=device, requires_grad=True)
optimizer = torch.optim.SGD([w, b], lr=lr)
x, y = x.to(device), y.to(device)
for _ in range(steps):
    loss = ((x @ w + b - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
return w, b
"""
LAYER = """
model = torch.nn.Linear(x.shape[1], 1)
torch.nn.init.zeros_(model.weight)
torch.nn.init.zeros_(model.bias)
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
model.to(device)
x, y = x.to(device), y.to(device)
for _ in range(steps):
    loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
return model.weight, model.bias
"""
ON_THE_CPU = FIXED.replace(", device=device", "").replace("x, y = x.to(device), y.to(device)",
                                                         "x, y = x.cpu(), y.cpu()")


def fit_cell(body: str) -> str:
    """Return a fixed_fit cell whose body is `body` (written flush left)."""
    return answer("fixed-fit", body)


TRAINS, LEAVES, CPU = "trains", "leaves", "cpu"
FIT_MISTAKES = {  # (name, the cells that fail): body
    ("script-unchanged", (TRAINS, LEAVES)): SCRIPT,
    ("requires-grad-after-the-move", (TRAINS, LEAVES)): SCRIPT.replace(
        MOVE, "w, b = w.to(device).requires_grad_(), b.to(device).requires_grad_()"),
    ("new-leaves-after-the-optimizer", "all"): SCRIPT.replace(
        MOVE, "w, b = w.detach().to(device).requires_grad_(), b.detach().to(device).requires_grad_()"),
    ("moved-under-no-grad", (TRAINS, LEAVES)): SCRIPT.replace(MOVE, f"with torch.no_grad():\n    {MOVE}"),
    ("moves-the-data-attribute", "all"): SCRIPT.replace(
        MOVE, "w, b = w.data.to(device), b.data.to(device)"),
    ("optimizer-rebuilt-over-the-copies", (TRAINS, LEAVES)): SCRIPT.replace(
        MOVE, f"{MOVE}\noptimizer = torch.optim.SGD([w, b], lr=lr)"),
    ("made-with-grad-then-moved", (TRAINS, LEAVES)): FIXED.replace(
        "torch.zeros(x.shape[1], device=device, requires_grad=True)",
        "torch.zeros(x.shape[1], requires_grad=True).to(device)").replace(
        "torch.zeros(1, device=device, requires_grad=True)", "torch.zeros(1, requires_grad=True).to(device)"),
    ("copies-retain-grad", (LEAVES,)): SCRIPT.replace(
        MOVE, f"{MOVE}\nw.retain_grad()\nb.retain_grad()\noptimizer = torch.optim.SGD([w, b], lr=lr)"),
    ("returns-the-optimizers-tensors", (TRAINS, LEAVES)): SCRIPT.replace(
        "return w, b", 'return tuple(optimizer.param_groups[0]["params"])'),
    ("ignores-the-device", (TRAINS, LEAVES)): FIXED.replace(", device=device", "").replace(
        "x, y = x.to(device), y.to(device)\n", ""),
    ("data-left-behind", (TRAINS, LEAVES)): FIXED.replace("x, y = x.to(device), y.to(device)\n", ""),
    ("fit-on-the-cpu-result-moved", (TRAINS, LEAVES)): ON_THE_CPU.replace(
        "return w, b", "return w.to(device), b.to(device)"),
    ("fit-on-the-cpu-fresh-leaves-at-the-end", (TRAINS,)): ON_THE_CPU.replace(
        "return w, b",
        "return w.detach().to(device).requires_grad_(), b.detach().to(device).requires_grad_()"),
    ("bias-a-0-dim-cpu-tensor", (LEAVES,)): FIXED.replace(
        "torch.zeros(1, device=device, requires_grad=True)", "torch.zeros((), requires_grad=True)"),
    ("device-hard-coded", (CPU,)): FIXED.replace("device=device", 'device="cuda"').replace(
        "x.to(device), y.to(device)", 'x.to("cuda"), y.to("cuda")'),
    ("cuda-method", (CPU,)): FIXED.replace(
        "torch.zeros(x.shape[1], device=device, requires_grad=True)",
        "torch.zeros(x.shape[1]).cuda().requires_grad_()").replace(
        "torch.zeros(1, device=device, requires_grad=True)",
        "torch.zeros(1).cuda().requires_grad_()").replace("x.to(device), y.to(device)", "x.cuda(), y.cuda()"),
    ("layer-parameters-rewrapped", "all"): LAYER.replace(
        "model.to(device)", "model.weight = torch.nn.Parameter(model.weight.to(device))\n"
        "model.bias = torch.nn.Parameter(model.bias.to(device))"),
    ("layer-output-broadcast", (TRAINS, CPU)): LAYER.replace("model(x).squeeze(1)", "model(x)"),
    ("random-start", (TRAINS, CPU)): FIXED.replace("torch.zeros(x.shape[1]", "torch.randn(x.shape[1]"),
    ("adam", (TRAINS, CPU)): FIXED.replace("torch.optim.SGD", "torch.optim.Adam"),
    ("no-zero-grad", (TRAINS, CPU)): FIXED.replace("    optimizer.zero_grad()\n", ""),
    ("steps-and-lr-hard-coded", (TRAINS, CPU)): FIXED.replace("lr=lr", "lr=0.1").replace(
        "range(steps)", "range(100)"),
}
CORRECT_FIT = {
    "moved-then-made-a-leaf": FIXED.replace(
        "torch.zeros(x.shape[1], device=device, requires_grad=True)",
        "torch.zeros(x.shape[1]).to(device).requires_grad_()").replace(
        "torch.zeros(1, device=device, requires_grad=True)", "torch.zeros(1).to(device).requires_grad_()"),
    "layer-moved-after-its-optimizer": LAYER,
    "layer-made-on-the-device": """
model = torch.nn.Linear(x.shape[1], 1, device=device)
with torch.no_grad():
    model.weight.zero_()
    model.bias.zero_()
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
for _ in range(steps):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x.to(device)).flatten(), y.to(device))
    loss.backward()
    optimizer.step()
return model.weight, model.bias
""",
    "data-moved-under-the-optimizer": SCRIPT.replace(
        MOVE, "w.data = w.data.to(device)\nb.data = b.data.to(device)"),
    "leaves-moved-before-the-optimizer": SCRIPT.replace(f"{MOVE}\n", "").replace(
        "optimizer = torch.optim.SGD([w, b], lr=lr)",
        "w, b = w.detach().to(device).requires_grad_(), b.detach().to(device).requires_grad_()\n"
        "optimizer = torch.optim.SGD([w, b], lr=lr)"),
    "gradient-descent-by-hand": """
x, y = x.to(device), y.to(device)
w = torch.zeros(x.shape[1], device=x.device, requires_grad=True)
b = torch.zeros((), device=x.device, requires_grad=True)
for _ in range(steps):
    loss = (x @ w + b - y).pow(2).mean()
    gw, gb = torch.autograd.grad(loss, [w, b])
    with torch.no_grad():
        w -= lr * gw
        b -= lr * gb
return w, b
""",
    "parameters-a-column-and-step-before-zero-grad": """
device = torch.device(device)
w = torch.nn.Parameter(torch.zeros(x.shape[1], 1, device=device))
b = torch.nn.Parameter(torch.zeros(1, device=device))
optimizer = torch.optim.SGD([w, b], lr=lr, momentum=0.0)
x, y = x.to(device), y.to(device).unsqueeze(1)
for _ in range(steps):
    torch.nn.functional.mse_loss(x @ w + b, y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
return w, b
""",
}


@pytest.mark.parametrize("body", CORRECT_FIT.values(), ids=CORRECT_FIT.keys())
def test_other_correct_fits_get_full_marks(body):
    support.assert_all_pass(results_for({"fixed-fit": fit_cell(body)}))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("body", "cells"), [(body, cells) for (_, cells), body in FIT_MISTAKES.items()],
                         ids=[name for name, _ in FIT_MISTAKES])
def test_fit_mistake_loses_points(body, cells):
    source = fit_cell(body)
    results = results_for({"fixed-fit": source})
    support.assert_runs(source, results)
    failed = tuple(g.removeprefix("fixed-fit-tests-") for g in CELLS_OF["fixed-fit"] if not results[g].passed)
    assert failed == (cells if cells != "all" else (TRAINS, LEAVES, CPU)), support.report(results)
    others = support.cells_outside(CELLS_OF, "fixed-fit")
    assert all(results[g].passed for g in others), support.report(results)


def _fit_mistake(name: str) -> str:
    return next(body for (mistake, _), body in FIT_MISTAKES.items() if mistake == name)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("mistake", "cell", "words"), [
    ("script-unchanged", "trains", "it learned nothing; check what the optimizer updates"),
    ("script-unchanged", "leaves", "leaves that require grad (w: is_leaf=False"),
    ("ignores-the-device", "trains", "no backward pass ran on the stand-in GPU"),
    ("data-left-behind", "trains", "Expected all tensors to be on the same device"),
    ("bias-a-0-dim-cpu-tensor", "leaves", "should be on the device given (cuda), not on cuda:0 and cpu"),
    ("device-hard-coded", "cpu", "use the device you are given, not a fixed GPU"),
    ("steps-and-lr-hard-coded", "trains", "`steps` plain SGD steps of rate `lr`"),
    ("adam", "trains", "keep the script's maths"),
])
def test_fit_failures_say_what_to_fix(mistake, cell, words):
    results = results_for({"fixed-fit": fit_cell(_fit_mistake(mistake))})
    result = results[f"fixed-fit-tests-{cell}"]
    assert not result.passed and words in result.error, support.report(results)


# ----- the stand-in GPU, and what the prompt says the script prints


def test_under_the_stand_in_a_move_is_a_copy_that_autograd_records():
    import torch

    from devicelab.exercises.ps02 import like_a_gpu

    t = torch.randn(3, requires_grad=True)
    assert t.to("cpu") is t and t.to(torch.device("cpu")) is t  # on the CPU the bug hides: no copy at all
    with like_a_gpu() as gpu:
        for moved in (t.to("cuda"), t.to(torch.device("cuda", 0)), t.cuda()):
            assert moved is not t and not moved.is_leaf and type(moved.grad_fn).__name__ == "ToCopyBackward0"
            assert gpu.on_gpu(moved) and moved.device == torch.device("cuda", 0) and moved.is_cuda
            assert moved.to("cuda") is moved and not gpu.on_gpu(t) and t.device.type == "cpu"
        back = moved.cpu()
        assert back is not moved and not gpu.on_gpu(back) and back.device.type == "cpu"
        made = torch.zeros(2, device="cuda", requires_grad=True)
        assert gpu.on_gpu(made) and made.is_leaf and gpu.on_gpu(made * 2) and gpu.on_gpu(made.detach())
        with pytest.raises(RuntimeError, match="same device"):
            made + torch.ones(2)
        assert gpu.on_gpu(made + torch.tensor(1.0))  # a 0-dim CPU tensor is read as a number, as on a GPU
        with pytest.raises(TypeError, match="cuda:0"):
            made.detach().numpy()
        layer = torch.nn.Linear(3, 1)
        weight = layer.weight
        layer.to("cuda")  # as from CPU to CUDA, Module.to keeps each parameter and moves its data
        assert layer.weight is weight and weight.is_leaf and gpu.on_gpu(weight)
        model = torch.nn.Linear(3, 1)
        model.weight = torch.nn.Parameter(model.weight.to("cuda"))
        assert model.weight is not weight and gpu.on_gpu(model.weight)
    assert torch.overrides._get_current_function_mode_stack() == []  # nothing left on after the block


def test_the_scripts_bug_reproduces_under_the_stand_in_and_the_prompt_prints_what_it_prints(capsys):
    import inspect

    import torch

    from devicelab.exercises import ps02
    from devicelab.exercises.ps02 import fit, fit_loss, like_a_gpu, points, reference_loss

    x, y = points()
    w, b = fit(x, y, "cpu")
    on_cpu = capsys.readouterr().out
    assert abs(fit_loss(x, y, (w, b)) - reference_loss(x, y)) < 1e-9 and w.is_leaf  # it trains on the CPU
    with like_a_gpu() as gpu:
        w, b = fit(x, y, "cuda")
        assert gpu.on_gpu(w) and not w.is_leaf
    on_gpu = capsys.readouterr().out
    losses = [line.split("loss ")[1] for line in on_gpu.splitlines()]
    assert losses == ["11.7055"] * 5, on_gpu  # the same number every step: the loss never moves
    assert fit_loss(x, y, (w, b)) == fit_loss(x, y, (torch.zeros(3), torch.zeros(1)))
    prompt = _prompt("fixed-fit-prompt")
    cpu_losses = [line.split("loss ")[1] for line in on_cpu.splitlines()]
    assert f"falls from {cpu_losses[0]} to {cpu_losses[-1]} by step 80" in prompt
    assert "`loss 11.7055` five times" in prompt
    script = prompt.split("```python\n")[1].split("```")[0]
    body = inspect.getsource(ps02.fit).split('"""\n', 1)[1]
    assert script == "def fit(x, y, device, steps=100, lr=0.1):\n" + body  # the prompt shows the script


# ----- instant feedback for fixed_fit


def _namespace(source: str) -> dict:
    namespace: dict = {"__name__": "__main__"}
    exec("import torch\n" + source, namespace)
    return namespace


def test_fixed_fit_feedback_agrees_with_the_grading(monkeypatch):
    from devicelab.exercises import ps02
    from devicelab.feedback import Outcome, evaluate

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    exercise = ps02._exercises.exercises["fixed_fit"]
    solution = support.solution_sources(support.code_cells(NOTEBOOK))["fixed-fit"]
    assert evaluate(exercise, _namespace(solution)).outcome is Outcome.CORRECT
    assert evaluate(exercise, _namespace(support.student_stubs(NOTEBOOK)["fixed-fit"])).outcome is (
        Outcome.NOT_ATTEMPTED)
    for body in CORRECT_FIT.values():
        assert evaluate(exercise, _namespace(fit_cell(body))).outcome is Outcome.CORRECT, body
    for mistake, words in [("script-unchanged", "ends where it started"),
                           ("copies-retain-grad", "leaves that require grad"),
                           ("fit-on-the-cpu-fresh-leaves-at-the-end", "No backward pass ran on the stand-in"),
                           ("bias-a-0-dim-cpu-tensor", "on the device you were given"),
                           ("device-hard-coded", "NVIDIA"), ("adam", "Keep the script's maths")]:
        feedback = evaluate(exercise, _namespace(fit_cell(_fit_mistake(mistake))))
        assert feedback.outcome is Outcome.INCORRECT, (mistake, feedback.message)
        assert words in feedback.message, (mistake, feedback.message)


def test_fixed_fit_hints_come_in_levels(capsys, monkeypatch):
    from devicelab.exercises import ps02

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(ps02._exercises, "hints_given", {})
    for _ in range(3):
        ps02.hint("fixed_fit")
    out = capsys.readouterr().out
    assert "Hint 1 of 3 for fixed_fit" in out and "Hint 3 of 3 for fixed_fit" in out and "like_a_gpu" in out
