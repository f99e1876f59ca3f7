"""Practice for lesson 03: do two tensors share memory?"""

import torch

from devicelab.feedback import Exercise, checker


def _same_storage(same_storage) -> None:
    t = torch.zeros(4)
    cases = [
        (t, t, True, "a tensor and itself"),
        (t, t.detach().cpu(), True, "t and t.detach().cpu() on the CPU"),
        (t, t[1:], True, "t and the view t[1:] (it starts later in the same storage)"),
        (t, t.clone(), False, "t and t.clone()"),
        (t, t.to(torch.float64), False, "t and t.to(torch.float64)"),
        (t, torch.zeros(4), False, "two separately made tensors"),
    ]
    for a, b, expected, what in cases:
        got = same_storage(a, b)
        assert got is expected, f"for {what}, same_storage should return {expected}, not {got!r}."


_exercises = checker(
    Exercise("same_storage", _same_storage, hints=(
        "Every tensor reads from a storage: t.untyped_storage().",
        ("Compare where the storages start: a.untyped_storage().data_ptr(). A view starts later (data_ptr() of "
         "the tensor differs) but its storage is the same."),
    ), solution='''
def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Return True when a and b read the same block of memory."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
''', success="Use it whenever you wonder whether a 'copy' is really one."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
