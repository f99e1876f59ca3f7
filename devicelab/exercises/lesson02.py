"""Practice for lesson 02: reading a torch.device."""

import torch

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker


def _device_label(device_label) -> None:
    for name, expected in [("cpu", "cpu"), ("cuda", "the current cuda device"),
                           ("cuda:0", "cuda device number 0"), ("cuda:3", "cuda device number 3")]:
        got = device_label(torch.device(name))
        assert got == expected, f"device_label(torch.device({name!r})) should be {expected!r}, not {got!r}."


_exercises = checker(
    Exercise("device_label", _device_label, hints=(
        "A torch.device has .type and .index; plain 'cuda' has index None.",
        "Compare the index with `is None`, not with a truth test: cuda:0 has index 0, which is falsy.",
    ), solution='''
def device_label(d: torch.device) -> str:
    """Describe a device in words."""
    if d.type != "cuda":
        return d.type
    return "the current cuda device" if d.index is None else f"cuda device number {d.index}"
''', success="And you did it without a GPU: device objects are only labels."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "cuda1-label": Prediction(
        question='This machine may have no GPU at all. Can it still make `torch.device("cuda:1")`, a '
                 'device object '
                 "for a second GPU?",
        choices=("yes", "no: it raises, there is no such GPU", "only on a machine with two GPUs"),
        answer="yes",
        giveaways=("only a label", "is a label", "not a connection", "nothing checks the hardware",
                   "checks no hardware", "making one needs no gpu"),
        reason="A device object is only a label: making one checks no hardware. The check comes when a "
               "tensor is created on that device or moved there."),
    "current-accelerator": Prediction(
        question='A script picks `device = torch.accelerator.current_accelerator() or torch.device("cpu")`, '
                 "then makes `torch.ones(2, device=device)`. It runs on a PyTorch built with CUDA, on a "
                 "machine with no GPU. What happens?",
        choices=("`device` is the CPU, and the tensor is made there",
                 "`device` is `cuda`, and making the tensor raises an error",
                 "`current_accelerator()` itself raises an error: there is no GPU"),
        answer="`device` is `cuda`, and making the tensor raises an error",
        giveaways=("never reaches the cpu", "never falls back", "current_accelerator() ... compiled",
                   "reports the accelerator this pytorch was compiled", "the or keeps",
                   "breaks on exactly the machine"),
        reason="Without arguments `current_accelerator()` names the accelerator PyTorch was compiled for, "
               "usable or not: `cuda` here, so the `or` keeps it, and the first tensor made there fails. "
               "`current_accelerator(check_available=True)` gives `None` on that machine."),
}
ask = asker(PREDICTIONS)
