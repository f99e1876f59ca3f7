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
    "cuda-vs-cuda0": Prediction(
        question='Is `torch.device("cuda") == torch.device("cuda:0")`?',
        choices=("True", "False", "it raises without a GPU"),
        answer="False",
        giveaways=("cuda and cuda:0 are not", "not equal", "has no index", "none is not 0", "cuda:0 != cuda",
                   "plain cuda means the current", "plain cuda is the current"),
        reason="Plain `cuda` has no index (it means the current CUDA device); device objects compare type "
               "and index, and `None` is not `0`."),
    "current-accelerator": Prediction(
        question="A PyTorch built with CUDA runs on a machine with no GPU, so "
                 "`torch.accelerator.is_available()` is `False`. What does "
                 "`torch.accelerator.current_accelerator()` return there?",
        choices=("`None`", "`device(type='cpu')`", "`device(type='cuda')`", "it raises an error"),
        answer="`device(type='cuda')`",
        giveaways=("compile-time trap", "comes back to this trap", "current_accelerator() ... compiled",
                   "reports the accelerator this pytorch was compiled", "not one that is actually usable"),
        reason="Without arguments it names the accelerator PyTorch was compiled for, usable or not. "
               "`current_accelerator(check_available=True)` returns `None` there."),
}
ask = asker(PREDICTIONS)
