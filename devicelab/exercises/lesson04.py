"""Practice for lesson 04: read the devices out of a mismatch message."""

from devicelab.feedback import Exercise, checker

MESSAGES = [
    ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
     ["cuda:0", "cpu"]),
    (("Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on "
      "cuda:0 (when checking argument in method wrapper_CUDA_addmm)"), ["cpu", "cuda:0"]),
    ("Tensor on device meta is not on the expected device cpu!", ["meta", "cpu"]),
    ("Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!",
     ["cuda:1", "cuda:0"]),
]


def _devices_in(devices_in) -> None:
    for message, expected in MESSAGES:
        got = devices_in(message)
        assert list(got) == expected, f"devices_in({message!r}) should be {expected}, not {got!r}."
    got = devices_in("mat1 and mat2 must have the same dtype, but got Double and Float")
    assert list(got) == [], f"a dtype message names no device: expected [], not {got!r}."


_exercises = checker(
    Exercise("devices_in", _devices_in, hints=(
        "Device names look like cpu, meta, mps or cuda followed by an optional :index.",
        "A regular expression finds them all in order: re.findall(r'\\b(?:cuda(?::\\d+)?|cpu|mps|meta)\\b', text).",
    ), solution=r'''
import re

def devices_in(message: str) -> list[str]:
    """Return the device names in an error message, in the order they appear."""
    return re.findall(r"\b(?:cuda(?::\d+)?|cpu|mps|meta)\b", message)
''', success="Now you can tell at a glance which devices collided."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
