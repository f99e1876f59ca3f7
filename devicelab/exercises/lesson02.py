"""Practice for lesson 02: reading a torch.device."""

import torch

from devicelab.feedback import Exercise, checker


def _device_label(device_label) -> None:
    for name, expected in [("cpu", "cpu"), ("cuda", "the current cuda device"), ("cuda:0", "cuda device number 0"),
                           ("cuda:3", "cuda device number 3")]:
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
