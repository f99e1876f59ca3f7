"""Practice for lesson 00: a device-agnostic branch."""

import torch

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker


def _device_time(device_time) -> None:
    for name, expected in [("cpu", "CPU time!"), ("cuda", "GPU time!"), ("cuda:1", "GPU time!"),
                           ("mps", "GPU time!"), ("meta", "CPU time!")]:
        got = device_time(torch.device(name))
        assert got == expected, f"device_time(torch.device({name!r})) should be {expected!r}, not {got!r}."


_exercises = checker(
    Exercise("device_time", _device_time, hints=(
        "Every torch.device has a .type: 'cpu', 'cuda', 'mps', 'meta', ...",
        "'cuda' and 'mps' are GPUs; treat everything else as the CPU.",
    ), solution='''
def device_time(device: torch.device) -> str:
    """Return "GPU time!" for a CUDA or MPS device, else "CPU time!"."""
    return "GPU time!" if device.type in ("cuda", "mps") else "CPU time!"
''', success="You branched on device.type, so the same code runs on any machine."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

# The tour asks no prediction: the environment report is taught (the first predictions are in lesson 01).
PREDICTIONS: dict[str, Prediction] = {}
ask = asker(PREDICTIONS)
