"""ps02-moving-tensors: the solutions and other correct answers earn full marks; realistic mistakes lose
points.
"""

from functools import partial

import pytest

from autograder import COURSE_ROOT
from tests import assignment_support as support
from tests.harness import run_graded_cells

NOTEBOOK = COURSE_ROOT / "source" / "ps02-moving-tensors" / "ps02-moving-tensors.ipynb"
CELLS_OF = {
    "to-device": ("to-device-tests-basic", "to-device-tests-containers", "to-device-tests-copy",
                  "to-device-tests-non-blocking"),
    "to-is-noop": ("to-is-noop-tests",),
    "make-leaf": ("make-leaf-tests", "make-leaf-tests-values"),
    "as-numpy": ("as-numpy-tests", "as-numpy-tests-grad", "as-numpy-tests-devices"),
}
POINTS_OF = {"to-device": 5, "to-is-noop": 2, "make-leaf": 3, "as-numpy": 4}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "to-device": 'def to_device(obj, device, non_blocking: bool = False):\n'
                 '    """Move every tensor in obj."""\n',
    "to-is-noop": "def to_is_noop(t: torch.Tensor, device, dtype: torch.dtype | None = None) -> bool:\n"
                  '    """Would t.to() return t?"""\n',
    "make-leaf": 'def make_leaf(shape, device) -> torch.Tensor:\n    """Make a leaf."""\n',
    "as-numpy": 'def as_numpy(t: torch.Tensor) -> np.ndarray:\n    """Copy t into NumPy."""\n',
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
