"""ps01-tensors-and-devices: the solutions and other correct answers earn full marks; mistakes lose points."""

import re
from functools import partial

import pytest

from autograder import COURSE_ROOT
from tests import assignment_support as support
from tests.harness import run_graded_cells

NOTEBOOK = COURSE_ROOT / "source" / "ps01-tensors-and-devices" / "ps01-tensors-and-devices.ipynb"
CELLS_OF = {
    "describe": ("describe-tests-basic", "describe-tests-edge", "describe-tests-views",
                 "describe-tests-meta"),
    "pick-device": ("pick-device-tests-default", "pick-device-tests-prefer", "pick-device-tests-unavailable"),
}
POINTS_OF = {"describe": 5, "pick-device": 5}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "describe": 'def describe(t: torch.Tensor) -> dict:\n    """Describe t."""\n',
    "pick-device": 'def pick_device(prefer: str | None = None) -> torch.device:\n    """Pick a device."""\n',
}
STUB_HEADS = {"describe": HEADS["describe"]}  # the stubs keep these signatures


results_for = partial(run_graded_cells, NOTEBOOK)  # results_for({grade_id: source}) grades with that answer


def describe_source(body: str) -> str:
    """Return a describe cell whose body is `body` (written flush left)."""
    return support.function_cell(HEADS["describe"], body)


def pick_source(body: str) -> str:
    """Return a pick_device cell whose body is `body` (written flush left)."""
    return support.function_cell(HEADS["pick-device"], body)


def describe_returning(shape="tuple(t.shape)", dtype="t.dtype", device="t.device",
                       nbytes="t.numel() * t.element_size()", first="") -> str:
    """Return a describe cell that is correct except for the expressions given."""
    return describe_source(f'{first}\nreturn {{"shape": {shape}, "dtype": {dtype}, "device": {device}, '
                           f'"nbytes": {nbytes}}}')


# The same checks as the reference solution, one flaw at a time.
PICK_DEFAULT = """
if prefer is None:
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
"""
PICK_PREFER = """
device = torch.device(prefer)
if device.type in ("cpu", "meta"):
    return device
if device.type == "cuda" and torch.cuda.is_available():
    if device.index is None or device.index < torch.cuda.device_count():
        return device
if device.type == "mps" and torch.backends.mps.is_available():
    return device
raise RuntimeError(f"{prefer} is not available here")
"""


def pick_with(default: str = PICK_DEFAULT, prefer: str = PICK_PREFER) -> str:
    """Return a pick_device cell built from a no-preference part and a preference part."""
    return pick_source(default.strip("\n") + "\n" + prefer.strip("\n"))


# ----------------------------------------------------------------------------------------------------------
# The notebook itself

class TestContract(support.AssignmentContract):
    NOTEBOOK, CELLS_OF, POINTS_OF, HEADS, STUB_HEADS = NOTEBOOK, CELLS_OF, POINTS_OF, HEADS, STUB_HEADS


# ----------------------------------------------------------------------------------------------------------
# Other correct answers get full marks

CORRECT_DESCRIBE = {
    "nbytes-attribute": describe_returning(nbytes="t.nbytes"),
    "size-method-and-dtype-itemsize": describe_returning(shape="tuple(t.size())",
                                                         nbytes="t.nelement() * t.dtype.itemsize"),
    "math-prod-and-dict-call": describe_source("""
import math
shape = tuple(int(n) for n in t.shape)
return dict(shape=shape, dtype=t.dtype, device=t.device, nbytes=math.prod(shape) * t.element_size())
"""),
    "int-of-numpy-prod": describe_returning(nbytes="int(np.prod(t.shape)) * t.element_size()",
                                            first="import numpy as np"),
    "dims-one-by-one": describe_source("""
info = {}
info["shape"] = tuple(t.size(i) for i in range(t.dim()))
info["dtype"] = t.dtype
info["device"] = torch.device(t.device)
count = 1
for n in info["shape"]:
    count *= n
info["nbytes"] = count * torch.empty((), dtype=t.dtype, device="meta").element_size()
return info
"""),
    "ordered-dict-from-pairs": describe_source("""
from collections import OrderedDict
pairs = [("shape", tuple(map(int, t.size()))), ("dtype", t.dtype), ("device", t.device),
         ("nbytes", t.nelement() * t.element_size())]
return OrderedDict(pairs)
"""),
    "untyped-storage-only-when-it-is-exactly-t": describe_returning(
        nbytes="(t.untyped_storage().nbytes() if t.is_contiguous() and t.storage_offset() == 0 and "
               "t.untyped_storage().nbytes() == t.numel() * t.element_size() else t.numel() * "
               "t.element_size())"),
    "isinstance-guard-for-any-tensor": describe_returning(
        first='if not isinstance(t, torch.Tensor):\n'
              '    raise TypeError(f"describe needs a tensor, not {type(t).__name__}")'),
}

CORRECT_PICK_DEVICE = {
    "reference-shape": pick_with(),
    "elif-chain-on-strings": pick_source("""
if prefer is None:
    if torch.cuda.is_available():
        name = "cuda"
    elif torch.backends.mps.is_available():
        name = "mps"
    else:
        name = "cpu"
    return torch.device(name)
kind, _, index = prefer.partition(":")
if kind in ("cpu", "meta"):
    ok = True
elif kind == "cuda":
    ok = torch.cuda.is_available() and (index == "" or int(index) < torch.cuda.device_count())
elif kind == "mps":
    ok = torch.backends.mps.is_available()
else:
    ok = False
if not ok:
    raise RuntimeError("Requested device " + prefer + " does not exist on this machine")
return torch.device(prefer)
"""),
    "dict-of-checks": pick_source("""
exists = {
    "cpu": lambda d: True,
    "meta": lambda d: True,
    "cuda": lambda d: torch.cuda.is_available() and (d.index is None or d.index < torch.cuda.device_count()),
    "mps": lambda d: torch.backends.mps.is_available(),
}
if prefer is None:
    for name in ("cuda", "mps", "cpu"):
        if exists[name](torch.device(name)):
            return torch.device(name)
device = torch.device(prefer)
if not exists.get(device.type, lambda d: False)(device):
    raise RuntimeError(f"no {prefer} here")
return device
"""),
    "recursion-over-preferences": pick_source("""
if prefer is None:
    for name in ("cuda", "mps"):
        try:
            return pick_device(name)
        except RuntimeError:
            pass
    return torch.device("cpu")
device = torch.device(prefer)
missing = RuntimeError(f"{device!r} is not available")
if device.type == "cuda":
    if not torch.cuda.is_available() or (device.index is not None and device.index >= torch.cuda.device_count()):
        raise missing
elif device.type == "mps":
    if not torch.backends.mps.is_available():
        raise missing
elif device.type not in ("cpu", "meta"):
    raise missing
return device
"""),  # noqa: E501 (an answer's source, kept as written)
    "match-statement": pick_source("""
if prefer is None:
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("mps") if torch.backends.mps.is_available() else torch.device("cpu")
device = torch.device(prefer)
match device.type:
    case "cpu" | "meta":
        return device
    case "cuda" if torch.cuda.is_available():
        if device.index is None or 0 <= device.index < torch.cuda.device_count():
            return device
    case "mps" if torch.backends.mps.is_available():
        return device
raise RuntimeError(f"CUDA/MPS device '{prefer}' not found")
"""),
    "availability-table-then-index": pick_source("""
available = {"cpu": True, "meta": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
if prefer is None:
    return torch.device(next(name for name in ("cuda", "mps", "cpu") if available[name]))
device = torch.device(prefer)
if not available.get(device.type, False):
    raise RuntimeError(f"requested device {prefer} is not available")
if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
    raise RuntimeError(f"requested device {prefer} is not available")
return device
"""),  # noqa: E501 (an answer's source, kept as written)
}


@pytest.mark.parametrize("source", CORRECT_DESCRIBE.values(), ids=CORRECT_DESCRIBE.keys())
def test_other_correct_describe_gets_full_marks(source):
    support.assert_all_pass(results_for({"describe": source}))


@pytest.mark.parametrize("source", CORRECT_PICK_DEVICE.values(), ids=CORRECT_PICK_DEVICE.keys())
def test_other_correct_pick_device_gets_full_marks(source):
    support.assert_all_pass(results_for({"pick-device": source}))


# ----------------------------------------------------------------------------------------------------------
# Realistic mistakes lose points, and only in that exercise's cells

DESCRIBE_MISTAKES = {
    "shape-as-torch-size": describe_returning(shape="t.shape"),
    "shape-as-size-call": describe_returning(shape="t.size()"),
    "shape-as-list": describe_returning(shape="list(t.shape)"),
    "dtype-as-string": describe_returning(dtype="str(t.dtype)"),
    "dtype-as-tensor-type-string": describe_returning(dtype="t.type()"),
    "device-as-string": describe_returning(device="str(t.device)"),
    "device-as-type-name": describe_returning(device="t.device.type"),
    "device-as-get-device-int": describe_returning(device="t.get_device()"),
    "nbytes-as-numel": describe_returning(nbytes="t.numel()"),
    "nbytes-assumes-4-bytes": describe_returning(nbytes="t.numel() * 4"),
    "nbytes-sys-getsizeof": describe_returning(nbytes="sys.getsizeof(t)", first="import sys"),
    "nbytes-storage-size": describe_returning(nbytes="t.storage().size()"),
    "nbytes-typed-storage-times-element-size": describe_returning(
        nbytes="t.storage().size() * t.element_size()"),
    "nbytes-whole-untyped-storage": describe_returning(nbytes="t.untyped_storage().nbytes()"),
    "nbytes-len-times-element-size": describe_returning(nbytes="len(t) * t.element_size()"),
    "nbytes-reduce-without-start": describe_returning(
        nbytes="functools.reduce(operator.mul, t.shape) * t.element_size()",
        first="import functools, operator"),
    "nbytes-numpy-integer": describe_returning(nbytes="np.prod(t.shape) * t.element_size()",
                                               first="import numpy as np"),
    "nbytes-finfo-bits": describe_returning(nbytes="t.numel() * torch.finfo(t.dtype).bits // 8"),
    "nbytes-through-numpy": describe_returning(nbytes="t.numpy().nbytes"),
    "nbytes-through-detached-cpu-numpy": describe_returning(nbytes="t.detach().cpu().numpy().nbytes"),
    "nbytes-from-strides": describe_returning(
        nbytes="(t.stride(0) * t.shape[0] if t.dim() else 1) * t.element_size()"),
    "moves-tensor-to-cpu-first": describe_returning(first="t = t.cpu()"),
    "extra-key": describe_source("""
return {"shape": tuple(t.shape), "dtype": t.dtype, "device": t.device,
        "nbytes": t.numel() * t.element_size(), "numel": t.numel()}
"""),
    "missing-key": describe_source("""
return {"shape": tuple(t.shape), "dtype": t.dtype, "device": t.device}
"""),
    "device-drops-the-index": describe_returning(device="torch.device(t.device.type)"),
    "device-rebuilt-from-the-type-string": describe_returning(
        device='torch.device(str(t.device).split(":")[0])'),
    "rejects-tensor-subclasses": describe_returning(
        first='if type(t) is not torch.Tensor:\n    raise TypeError("describe needs a torch.Tensor")'),
    "parameter-described-through-data-of-a-copy": describe_returning(
        first="if isinstance(t, torch.nn.Parameter):\n    t = t.detach().clone().cpu()"),
    "flattens-with-view": describe_returning(nbytes="t.view(-1).shape[0] * t.element_size()"),
    "shape-as-numpy-ints": describe_returning(shape="tuple(np.array(t.shape, dtype=np.int64))",
                                              first="import numpy as np"),
    "renamed-key": describe_source("""
return {"size": tuple(t.shape), "dtype": t.dtype, "device": t.device, "nbytes": t.numel() * t.element_size()}
"""),
}

PICK_DEVICE_MISTAKES = {
    "hard-coded-cuda": pick_with(default='if prefer is None:\n    return torch.device("cuda")'),
    "cuda-or-cpu-forgets-mps": pick_with(default="""
if prefer is None:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
"""),
    "returns-strings": pick_source("""
if prefer is None:
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"
device = torch.device(prefer)
if device.type in ("cpu", "meta"):
    return prefer
if device.type == "cuda" and torch.cuda.is_available():
    if device.index is None or device.index < torch.cuda.device_count():
        return prefer
if device.type == "mps" and torch.backends.mps.is_available():
    return prefer
raise RuntimeError(f"{prefer} is not available here")
"""),
    "default-cuda-with-index-0": pick_with(default=PICK_DEFAULT.replace('torch.device("cuda")',
                                                                        'torch.device("cuda", 0)')),
    "mps-checked-before-cuda": pick_with(default="""
if prefer is None:
    if torch.backends.mps.is_available():
        return torch.device("mps")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")
"""),
    "ignores-prefer": pick_source(PICK_DEFAULT.replace("if prefer is None:\n", "").replace("\n    ", "\n")),
    "trusts-prefer-without-checking": pick_with(prefer="return torch.device(prefer)"),
    "falls-back-to-best-device": pick_with(prefer=PICK_PREFER.replace(
        'raise RuntimeError(f"{prefer} is not available here")', "return pick_device()")),
    "falls-back-to-cpu": pick_with(prefer=PICK_PREFER.replace(
        'raise RuntimeError(f"{prefer} is not available here")', 'return torch.device("cpu")')),
    "raises-value-error": pick_with(prefer=PICK_PREFER.replace("RuntimeError", "ValueError")),
    "asserts-instead-of-raising": pick_source(PICK_DEFAULT + """
device = torch.device(prefer)
ok = device.type in ("cpu", "meta")
ok = ok or (device.type == "cuda" and torch.cuda.is_available()
            and (device.index is None or device.index < torch.cuda.device_count()))
ok = ok or (device.type == "mps" and torch.backends.mps.is_available())
assert ok, f"{prefer} is not available here"
return device
"""),
    "message-without-the-device": pick_with(prefer=PICK_PREFER.replace(
        'raise RuntimeError(f"{prefer} is not available here")',
        'raise RuntimeError("device not available")')),
    "message-names-only-the-type": pick_with(prefer=PICK_PREFER.replace(
        'raise RuntimeError(f"{prefer} is not available here")',
        'raise RuntimeError(f"{device.type} is not available here")')),
    "index-off-by-one": pick_with(
        prefer=PICK_PREFER.replace("device.index < torch", "device.index <= torch")),
    "ignores-cuda-index": pick_with(prefer=PICK_PREFER.replace(
        "device.index is None or device.index < torch.cuda.device_count()", "True")),
    "drops-the-index": pick_with(prefer=PICK_PREFER.replace(
        "if device.index is None or device.index < torch.cuda.device_count():\n        return device",
        "if device.index is None or device.index < torch.cuda.device_count():\n"
        '        return torch.device("cuda")')),
    "exact-string-match-misses-cuda-index": pick_with(prefer="""
if prefer in ("cpu", "meta"):
    return torch.device(prefer)
if prefer == "cuda" and torch.cuda.is_available():
    return torch.device("cuda")
if prefer == "mps" and torch.backends.mps.is_available():
    return torch.device("mps")
raise RuntimeError(f"{prefer} is not available here")
"""),
    # Device indexes compared as text: "cuda:10" starts with "cuda:1", and "2" > "11" as strings.
    "index-by-string-prefix": pick_with(prefer=PICK_PREFER.replace(
        "if device.index is None or device.index < torch.cuda.device_count():",
        'if device.index is None or any(prefer.startswith(f"cuda:{i}") '
        "for i in range(torch.cuda.device_count())):")),
    "index-compared-as-text": pick_with(prefer=PICK_PREFER.replace(
        "if device.index is None or device.index < torch.cuda.device_count():",
        'if device.index is None or prefer.split(":")[1] < str(torch.cuda.device_count()):')),
    "index-read-from-one-character": pick_with(prefer=PICK_PREFER.replace(
        "if device.index is None or device.index < torch.cuda.device_count():",
        "if device.index is None or int(prefer[5]) < torch.cuda.device_count():")),
    "rejects-meta": pick_with(prefer=PICK_PREFER.replace('("cpu", "meta")', '("cpu",)')),
    "lookup-without-cpu-and-meta": pick_with(prefer="""
available = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
device = torch.device(prefer)
if not available.get(device.type, False):
    raise RuntimeError(f"{prefer} is not available here")
if device.index is not None and device.index >= torch.cuda.device_count():
    raise RuntimeError(f"{prefer} is not available here")
return device
"""),
    "lookup-crashes-on-mps": pick_with(prefer="""
device = torch.device(prefer)
available = {"cpu": True, "meta": True, "cuda": torch.cuda.is_available()}[device.type]
if not available or (device.index is not None and device.index >= torch.cuda.device_count()):
    raise RuntimeError(f"{prefer} is not available here")
return device
"""),
    "mps-is-built-instead-of-available": pick_source(
        (PICK_DEFAULT + PICK_PREFER).replace("torch.backends.mps.is_available()",
                                             "torch.backends.mps.is_built()")),
    "adds-index-0-to-cuda": pick_with(prefer=PICK_PREFER.replace(
        "if device.index is None or device.index < torch.cuda.device_count():\n        return device",
        "if device.index is None or device.index < torch.cuda.device_count():\n"
        '        return torch.device("cuda", device.index or 0)')),
    "uses-torch-mps-is-available": pick_source(
        (PICK_DEFAULT + PICK_PREFER).replace("torch.backends.mps.is_available()",
                                             "torch.mps.is_available()")),
    "probes-by-allocating": pick_with(prefer="""
device = torch.device(prefer)
try:
    torch.empty(1, device=device)
except Exception as exc:
    raise RuntimeError(f"{prefer} is not available here") from exc
return device
"""),
    "default-cuda-by-device-count": pick_with(default=PICK_DEFAULT.replace(
        "if torch.cuda.is_available():", "if torch.cuda.device_count() > 0:")),
    "cuda-preference-needs-a-counted-gpu": pick_with(prefer=PICK_PREFER.replace(
        "device.index is None or device.index < torch.cuda.device_count()",
        "(device.index or 0) < torch.cuda.device_count()")),
    "cuda-preference-by-device-count-alone": pick_with(prefer=PICK_PREFER.replace(
        'if device.type == "cuda" and torch.cuda.is_available():', 'if device.type == "cuda":')),
    "recursion-counts-plain-cuda-as-cuda-0": CORRECT_PICK_DEVICE["recursion-over-preferences"].replace(
        "(device.index is not None and device.index >= torch.cuda.device_count())",
        "(device.index or 0) >= torch.cuda.device_count()"),
    "match-statement-and-device-count": CORRECT_PICK_DEVICE["match-statement"].replace(
        "if torch.cuda.is_available():", "if torch.cuda.device_count() > 0:"),
    "uses-torch-accelerator": pick_source("""
accelerator = torch.accelerator.current_accelerator(check_available=True)
if prefer is None:
    return torch.device(accelerator.type) if accelerator is not None else torch.device("cpu")
device = torch.device(prefer)
if device.type in ("cpu", "meta"):
    return device
if accelerator is None or accelerator.type != device.type:
    raise RuntimeError(f"{prefer} is not available here")
if device.index is not None and device.index >= torch.accelerator.device_count():
    raise RuntimeError(f"{prefer} is not available here")
return device
"""),
    "uses-torch-accelerator-without-check": pick_source("""
if prefer is None:
    accelerator = torch.accelerator.current_accelerator()
    return torch.device(accelerator.type) if accelerator is not None else torch.device("cpu")
""" + PICK_PREFER),
}


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated:UserWarning")
@pytest.mark.parametrize("source", DESCRIBE_MISTAKES.values(), ids=DESCRIBE_MISTAKES.keys())
def test_describe_mistake_loses_points(source):
    support.assert_mistake_loses_points(NOTEBOOK, "describe", source, CELLS_OF, TOTAL)


@pytest.mark.parametrize("source", PICK_DEVICE_MISTAKES.values(), ids=PICK_DEVICE_MISTAKES.keys())
def test_pick_device_mistake_loses_points(source):
    support.assert_mistake_loses_points(NOTEBOOK, "pick-device", source, CELLS_OF, TOTAL)


def test_failures_say_what_to_fix():
    results = results_for({"describe": DESCRIBE_MISTAKES["shape-as-torch-size"],
                           "pick-device": PICK_DEVICE_MISTAKES["raises-value-error"]})
    assert re.search(r"plain tuple", results["describe-tests-basic"].error)
    assert "raise RuntimeError instead" in results["pick-device-tests-unavailable"].error


def test_fakes_do_not_leak_out_of_the_notebook():
    import torch

    def patched():
        return (torch.cuda.is_available, torch.cuda.device_count, torch.cuda.current_device,
                torch.backends.mps.is_available, torch.accelerator.current_device_index)

    before = patched()
    results_for({"pick-device": PICK_DEVICE_MISTAKES["lookup-crashes-on-mps"]})
    assert patched() == before


def test_ps01_to_ps03_state_one_cuda_rule_in_the_same_words():
    import nbformat

    rules = []
    for name in ("ps01-tensors-and-devices", "ps02-moving-tensors", "ps03-device-mismatch"):
        intro = nbformat.read(COURSE_ROOT / "source" / name / f"{name}.ipynb", as_version=4).cells[2].source
        start = intro.index("**`cuda`, `cuda:0` and the current GPU**")
        rules.append(intro[start:intro.index("**How this is graded.**")].strip())
    assert rules[0] == rules[1] == rules[2]
    rule = " ".join(rules[0].split())
    for claim in ('torch.device("cuda") != torch.device("cuda:0")', "`torch.cuda.is_available()`",
                  "`N < torch.cuda.device_count()`", "puts it on the current GPU",
                  '`t.device.type == "cuda"`'):
        assert claim in rule, claim
