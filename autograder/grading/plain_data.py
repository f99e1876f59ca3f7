"""Plain data across the grader's channel to the kernel: what may cross, and how it is read back safely.

Arguments and results of a call into the student's kernel (remote_calls.py) cross as `torch.save` bytes and
are read with `torch.load(..., weights_only=True)`, PyTorch's allow-list unpickler, which builds no object of
a class it does not know and runs no code of the sender's. Then `check_plain` walks what came: only the
types in PLAIN (tensors and parameters, numbers, strings, bools, None, lists, tuples, dicts, torch.Size,
torch.device, torch.dtype) pass, each exactly (no subclass), within caps on size, depth and items; anything
else is a wrong answer, never something the grader calls.
"""

import collections
import io
import warnings

MAX_BYTES = 64 * 2**20  # one call's arguments or result, serialised
MAX_DEPTH = 32
MAX_ITEMS = 100_000
PLAIN_WORDS = ("only tensors, numbers, strings, bools, None, lists, tuples, dicts, torch.device and "
               "torch.dtype cross to the grader")


class NotPlainData(ValueError):
    """What crossed is not plain data (or is too big): the message says what it was."""


def _plain_types() -> frozenset:
    import torch

    return frozenset({type(None), bool, int, float, complex, str, bytes, list, tuple, dict,
                      collections.OrderedDict, torch.Size, torch.device, torch.dtype, torch.Tensor,
                      torch.nn.Parameter})


def check_plain(value: object) -> None:
    """Raise NotPlainData unless `value` is plain data (exact types of PLAIN, nested within the caps)."""
    plain, seen, stack, items = _plain_types(), set(), [(value, 0)], 0
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind not in plain:
            raise NotPlainData(f"a {kind.__module__}.{kind.__qualname__} object, which is not plain data "
                               f"({PLAIN_WORDS})")
        items += 1
        if items > MAX_ITEMS or depth > MAX_DEPTH:
            raise NotPlainData(f"more than {MAX_ITEMS} items or nested deeper than {MAX_DEPTH}")
        if kind in (list, tuple, dict, collections.OrderedDict):
            if id(item) in seen:
                raise NotPlainData("a container that holds itself")
            seen.add(id(item))
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack += [(child, depth + 1) for child in children]


def dumps(value: object) -> bytes:
    """Return `value` serialised for the channel (NotPlainData unless it is plain data within the caps)."""
    import torch

    check_plain(value)
    buffer = io.BytesIO()
    torch.save(value, buffer)
    if buffer.tell() > MAX_BYTES:
        raise NotPlainData(f"more than {MAX_BYTES // 2**20} MiB of data")
    return buffer.getvalue()


def loads(data: bytes) -> object:
    """Read bytes that came over the channel with the allow-list unpickler; NotPlainData unless plain data."""
    import torch

    if len(data) > MAX_BYTES:
        raise NotPlainData(f"more than {MAX_BYTES // 2**20} MiB of data")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # noqa: BLE001  (bytes from the student's process: whatever fails, it is refused)
        why = type(exc).__name__
        raise NotPlainData(f"an object that is not plain data ({why}; {PLAIN_WORDS})") from None
    check_plain(value)
    return value
