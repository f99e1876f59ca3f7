"""Explain device and dtype errors from PyTorch in plain language, with the fix."""

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape
from typing import TextIO

DEVICE_MISMATCH = "device-mismatch"
DTYPE_MISMATCH = "dtype-mismatch"
NUMPY_NEEDS_CPU = "numpy-needs-cpu"
NUMPY_REQUIRES_GRAD = "numpy-requires-grad"
META_HAS_NO_DATA = "meta-has-no-data"
CHECKPOINT_DEVICE = "checkpoint-device"
NO_GPU = "no-gpu"

_NOT_RECOGNISED = "This is not a device or dtype problem I recognise."
_KNOWN = (
    "explain() knows: tensors on different devices in one operation, mixed dtypes, .numpy() on a GPU, meta "
    "or requires-grad tensor, reading values out of a meta tensor, asking for a GPU where there is none, and "
    "loading a GPU checkpoint without that GPU."
)
# PyTorch's C++ type names for dtypes, as they appear in error messages.
_DTYPE_NAMES = {
    "double": "float64", "float": "float32", "half": "float16", "bfloat16": "bfloat16",
    "long": "int64", "int": "int32", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool",
    "complexfloat": "complex64", "complexdouble": "complex128", "complexhalf": "complex32",
}
_LEGACY_TYPE = re.compile(r"torch\.(?:(cuda)\.)?(\w+)Tensor")
_DEVICE = re.compile(r"(?<![\w.])(cpu|meta|(?:cuda|mps|xpu|hpu|privateuseone)(?::\d+)?)(?![\w(])")


@dataclass(frozen=True)
class Explanation:
    """A device or dtype error, said in plain words, with the fix as a line or two of code."""

    kind: str | None  # one of the constants above; None when not recognised
    title: str
    what: str
    fix: str
    code: str = ""
    devices: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    message: str = ""

    @property
    def recognised(self) -> bool:
        """Return True when the error was one that explain() knows."""
        return self.kind is not None

    def __str__(self) -> str:
        lines = [self.title, f"What went wrong: {self.what}", f"Fix: {self.fix}"]
        if self.code:
            lines += [f"    {line}" for line in self.code.splitlines()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        code = f"<pre>{escape(self.code)}</pre>" if self.code else ""
        return (f"<p><b>{escape(self.title)}</b></p><p>What went wrong: {escape(self.what)}</p>"
                f"<p>Fix: {escape(self.fix)}</p>{code}")


def _dtype(name: str) -> str:
    """Return the torch name (float32, ...) for a dtype as an error message spells it."""
    name = name.strip().removeprefix("torch.")
    legacy = _LEGACY_TYPE.fullmatch(f"torch.{name}") or _LEGACY_TYPE.fullmatch(name)
    if legacy:
        name = legacy.group(2)
    return _DTYPE_NAMES.get(name.lower(), name.lower())


def _unique(items) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


# The fix as code: for a model's input, move it to the model's device; for any other tensor, find it first.
_MOVE_INPUT = "x = x.to(next(model.parameters()).device)"
_FIND_IT = ("tensor_table(model)  # or tensor_table(globals()): which tensor is on the other device?\n"
            "culprit = culprit.to(device)  # move that one (a module's plain attribute: make it a buffer)")


def _device_mismatch(message: str, devices: tuple[str, ...], detail: str = "", code: str = _FIND_IT
                     ) -> Explanation:
    shown = " and ".join(devices) if devices else "two different devices"
    meta = "meta" in devices
    what = (f"One operation got tensors on {shown}. Every tensor in an operation must be on the same device; "
            "PyTorch accepts one from another device only in narrow cases (a 0-dim CPU tensor or a Python "
            "number in elementwise operations, passed to the kernel as a number; a CPU index tensor, which "
            f"indexing copies over), and this operation is not one of them.{detail}")
    if meta:
        what += (" A meta tensor has a shape and dtype but no values; usually a model or tensor was moved to "
                 "meta ")
        what += "(to test moves without a GPU) and the other operand was not."
    return Explanation(
        DEVICE_MISMATCH,
        f"Device mismatch: {shown}",
        what,
        "Move the tensor that is in the wrong place to the device of the others (for a model input: the "
        "model's device), or move the whole model with model.to(device). tensor_table(model) shows where "
        "everything is.",
        code,
        devices,
        (),
        message,
    )


def _match_device(message: str) -> Explanation | None:
    if m := re.search(r"found at least two devices, (\S+?) and (\S+?)!", message):
        return _device_mismatch(message, _unique(m.groups()))
    if m := re.search(r"but got (\w+) is on (\S+?), different from other tensors on (\S+?)(?: \(when "
                      r"checking argument in method (\w+)\)|[.!]?$|\s)", message):
        argument, device, others, method = m.groups()
        detail = f" The argument `{argument}` is on {device} while the other tensors are on {others}"
        if method:
            detail += f" (in {method.split('_')[-1]}, the kernel PyTorch ran)"
        if argument == "mat1":
            detail += "; for nn.Linear, `mat1` is the input you passed in"
        return _device_mismatch(message, _unique((others, device)), detail + ".",
                                _MOVE_INPUT if argument in ("mat1", "input") else _FIND_IT)
    if m := re.search(r"Tensor on device (\S+?) is not on the expected device (\S+?)!", message):
        device, expected = m.groups()
        detail = f" It expected every tensor on {expected} and found one on {device}."
        return _device_mismatch(message, _unique((device, expected)), detail)
    if m := re.search(r"found input tensor at (\S+) and parameter tensor at (\S+)", message):
        return _device_mismatch(message, _unique(m.groups()),
                                " The input and the module's parameters differ.", _MOVE_INPUT)
    if m := re.search(r"Input type \((.+?)\) and (?:weight|bias) type \((.+?)\) should be the same", message):
        on_gpu = ["cuda" if ".cuda." in side else "cpu" for side in m.groups()]
        if "Tensor" in m.group(1) and on_gpu[0] != on_gpu[1]:
            return _device_mismatch(message, _unique(on_gpu))
        return None
    if re.search(r"same device", message, re.IGNORECASE):
        return _device_mismatch(message, _unique(_DEVICE.findall(message)))
    return None


def _match_dtype(message: str) -> Explanation | None:
    patterns = (
        r"same dtype, but got:? (\w+) (?:and|!=) (\w+)",
        r"expected scalar type (\w+) but found (\w+)",
        r"have same dtype, but found (\w+) and (\w+)",
        r"Found dtype (\w+) but expected (\w+)",
        r"Input type \((.+?)\) and (?:weight|bias) type \((.+?)\) should be the same",
    )
    for pattern in patterns:
        if m := re.search(pattern, message, re.IGNORECASE):
            dtypes = _unique(_dtype(name) for name in m.groups())
            break
    else:
        if not re.search(r"same dtype|expected scalar type|dtypes match", message, re.IGNORECASE):
            return None
        dtypes = ()
    shown = " and ".join(dtypes) if dtypes else "two different dtypes"
    target = f"torch.{dtypes[-1]}" if len(dtypes) == 2 else "w.dtype"
    return Explanation(
        DTYPE_MISMATCH,
        f"Dtype mismatch: {shown}",
        f"One operation got tensors of {shown}. Matrix products, linear layers and convolutions need both "
        "operands in one dtype, on every device (the CPU too); float64 itself works on GPUs. Data from NumPy "
        "is float64 by default, while model weights are float32.",
        "Convert one side to the other's dtype; for a model input, use the model's dtype (you can change "
        "device and dtype in one call: x.to(device, dtype)).",
        f"x = x.to({target})",
        (),
        dtypes,
        message,
    )


def _match_numpy(message: str) -> Explanation | None:
    if "numpy() on Tensor that requires grad" in message:
        return Explanation(
            NUMPY_REQUIRES_GRAD,
            "NumPy refused a tensor that requires grad",
            "The tensor is part of an autograd graph. A NumPy array cannot carry gradients, so PyTorch makes "
            "you say that you want the values without the graph.",
            "Detach first (and bring it to the CPU if it is on a GPU). On the CPU the array shares memory "
            "with the tensor; add .copy() if you will modify it.",
            "arr = t.detach().cpu().numpy()",
            message=message,
        )
    if m := re.search(r"can't convert (\S+) device type tensor to numpy", message, re.IGNORECASE):
        device = m.group(1)
        if device == "meta":
            return Explanation(
                NUMPY_NEEDS_CPU,
                "NumPy got a meta tensor, which has no values",
                "A meta tensor records only shape and dtype; there are no numbers to convert.",
                "Compute the values on a real device (cpu or your GPU) instead of meta.",
                "x = torch.zeros(t.shape, dtype=t.dtype, device=\"cpu\")",
                (device,),
                message=message,
            )
        return Explanation(
            NUMPY_NEEDS_CPU,
            f"NumPy needs a CPU tensor, got one on {device}",
            "NumPy arrays live in host memory, so .numpy() works only on CPU tensors; this one is on "
            f"{device}.", "Copy it to the host first (detach too if it requires grad).",
            "arr = t.detach().cpu().numpy()",
            (device,),
            message=message,
        )
    return None


def _match_meta(message: str) -> Explanation | None:
    if not re.search(r"copy out of meta tensor|cannot be called on meta tensors", message, re.IGNORECASE):
        return None
    return Explanation(
        META_HAS_NO_DATA,
        "A meta tensor has no values to read",
        "Meta tensors record only shape and dtype, so .cpu(), .item(), .tolist() or copying out of one has "
        "nothing to copy.",
        "Make real tensors on a real device; a model built on meta gets real (uninitialised) storage with "
        "to_empty, then load its weights.",
        "model.to_empty(device=device); model.load_state_dict(torch.load(path, map_location=device))",
        ("meta",),
        message=message,
    )


def _match_checkpoint(message: str) -> Explanation | None:
    m = re.search(r"deserialize object on (?:a )?(\w+) device(?: (\d+))?", message, re.IGNORECASE)
    if not m:
        return None
    backend = m.group(1).lower()
    device = f"{backend}:{m.group(2)}" if m.group(2) else backend
    return Explanation(
        CHECKPOINT_DEVICE,
        f"torch.load tried to put tensors on {device}, which this machine cannot use",
        "torch.save records each tensor's device, and torch.load puts every tensor back on that device "
        f"unless map_location says otherwise; {device} is not usable here.",
        "Tell torch.load where to put the tensors with map_location (\"cpu\" always works).",
        "state = torch.load(path, map_location=\"cpu\")",
        (device,),
        message=message,
    )


def _match_no_gpu(message: str) -> Explanation | None:
    pattern = (r"Found no NVIDIA driver|Torch not compiled with CUDA enabled|no CUDA GPUs are available|"
               r"Cannot access accelerator device when none is available")
    if not re.search(pattern, message, re.IGNORECASE):
        return None
    return Explanation(
        NO_GPU,
        "No usable GPU here",
        "The code asked for a CUDA device (with .cuda(), \"cuda\" or a pinned-memory call) on a machine "
        "where PyTorch cannot use one.",
        "Pick the device once from what is available and use that variable everywhere instead of \"cuda\".",
        "device = best_device()  # from devicelab; then x.to(device)",
        message=message,
    )


_MATCHERS: tuple[Callable[[str], Explanation | None], ...] = (
    _match_numpy, _match_meta, _match_checkpoint, _match_no_gpu, _match_device, _match_dtype,
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """Yield the exception, then what caused it or was being handled when it was raised."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _explain_message(message: str) -> Explanation | None:
    for matcher in _MATCHERS:
        if found := matcher(message):
            return found
    return None


def explain(exc: object) -> Explanation:
    """Return a plain-language explanation of a device or dtype error (an exception or its message)."""
    if isinstance(exc, BaseException):
        for link in _chain(exc):
            if found := _explain_message(str(link)):
                return found
        return Explanation(None, _NOT_RECOGNISED, f"{type(exc).__name__}: {exc}", f"Read the last line of "
                           f"the traceback; it names the problem. {_KNOWN}", message=str(exc))
    if isinstance(exc, str):
        if found := _explain_message(exc):
            return found
        return Explanation(None, _NOT_RECOGNISED, f"The message was: {exc!r}", _KNOWN, message=exc)
    return Explanation(None, _NOT_RECOGNISED, f"There is no exception here to explain (got {exc!r}).",
                       "Pass the exception itself: `except Exception as err: print(explain(err))`.")


@contextmanager
def explain_errors(file: TextIO | None = None) -> Iterator[None]:
    """Print an explanation of a device or dtype error raised in the block, then re-raise it."""
    try:
        yield
    except Exception as exc:
        explanation = explain(exc)
        if explanation.recognised:
            print(explanation, file=file if file is not None else sys.stdout)
        raise
