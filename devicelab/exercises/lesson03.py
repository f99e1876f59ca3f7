"""Practice for lesson 03: do two tensors share memory?"""

import torch

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker


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
        ("Compare where the storages start: a.untyped_storage().data_ptr(). A view starts later (data_ptr() "
         "of the tensor differs) but its storage is the same."),
    ), solution='''
def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Return True when a and b read the same block of memory."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
''', success="Use it whenever you wonder whether a 'copy' is really one."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "same-object": Prediction(
        question='`x` is a float32 tensor on the CPU. Which of `x.cpu() is x`, `x.to("cpu") is x` and '
                 "`x.to(torch.float32) is x` are `True`?",
        choices=("none of them", "only `x.cpu() is x`", "the first two", "all three"),
        answer="all three",
        giveaways=("same tensor back", "returns t itself", "same tensor object", "hand back the same",
                   "hand back the tensor itself", "nothing has to change, so nothing is copied"),
        reason="When the tensor already has the device and dtype asked for, `.cpu()` and `.to()` hand back "
               "the tensor itself: nothing has to change, so nothing is copied."),
    "moved-grad": Prediction(
        question="`w` is made with `requires_grad=True`, and `w64 = w.to(torch.float64)`. After "
                 "`loss = (w64 ** 2).sum()` and `loss.backward()`, what is `w64.grad`?",
        choices=("`2 * w64`, the gradient of the loss", "`None`", "an error"),
        answer="`None`",
        giveaways=("non-leaf", "not leaves", "not a leaf", "stays none", "stay leaves",
                   "nothing ever updates it", "only leaves keep"),
        reason="`w64` is computed from `w`, so it is not a leaf: the gradient flows through the copy back to "
               "`w`, and only leaves keep a `.grad` (PyTorch warns when you read a non-leaf's)."),
    "numpy-shares": Prediction(
        question="`t` is a CPU tensor. Does writing into `b = t.detach().cpu().numpy()` change `t`?",
        choices=("yes", "no: `.numpy()` made a copy", "it raises an error"),
        answer="yes",
        giveaways=("numpy sharing", "shares memory with the tensor", "numpy() shares",
                   "still shares on a cpu", "shared one when"),
        reason="On the CPU, `.detach()` shares memory, `.cpu()` returns the same tensor and `.numpy()` "
               "shares memory: `b` is `t`'s memory. On a GPU, `.cpu()` really copies."),
}
ask = asker(PREDICTIONS)
