"""Practice for lesson 01: bytes from shape and dtype, without allocating."""

import torch

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker


def _nbytes_for(nbytes_for) -> None:
    for shape, dtype in [((256, 256, 3), torch.uint8), ((256, 256, 3), torch.float32), ((10,), torch.float64),
                         ((), torch.int64), ((0, 5), torch.float16), ((100_000, 100_000), torch.bfloat16)]:
        expected = torch.empty(shape, dtype=dtype, device="meta").nbytes
        got = nbytes_for(shape, dtype)
        assert got == expected, f"nbytes_for({shape}, {dtype}) should be {expected}, not {got!r}."


_exercises = checker(
    Exercise("nbytes_for", _nbytes_for, hints=(
        "Bytes = number of elements x bytes per element.",
        "The number of elements is the product of the shape (math.prod); an empty shape () has 1 element.",
        ("Bytes per element: torch.tensor([], dtype=dtype).element_size(), or torch.finfo/iinfo(dtype).bits "
         "// 8."),
    ), solution='''
import math

def nbytes_for(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Return how many bytes a tensor of this shape and dtype takes, without making it."""
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()
''', success="A 100,000 x 100,000 bfloat16 tensor is 2 x 10**10 bytes (18.6 GiB): now you know before you "
             "allocate it."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "numpy-dtype": Prediction(
        question="The same numbers, once from a Python list and once from a NumPy array: "
                 "`torch.tensor([1.0, 2.0])` and `torch.tensor(np.array([1.0, 2.0]))`. Same dtype?",
        choices=("yes, both float32", "yes, both float64", "no: float32 from the list, float64 from NumPy",
                 "no: float64 from the list, float32 from NumPy"),
        answer="no: float32 from the list, float64 from NumPy",
        giveaways=("numpy brings float64", "numpy's default float is", "keeps the dtype of a numpy array",
                   "numpy arrays keep their own dtype", "arrives as float64", "numpy gives float64",
                   "numpy makes float64"),
        reason="Python floats become PyTorch's default float dtype, float32; a NumPy array keeps its own "
               "dtype, and NumPy's default float is float64."),
    "slice-storage": Prediction(
        question="`small = torch.zeros(1_000_000)[:2]` keeps the first 2 of a million float32 numbers. How "
                 "many bytes do `small.nbytes` and `small.untyped_storage().nbytes()` report?",
        choices=("8 and 8", "8 and 4,000,000", "4,000,000 and 4,000,000"),
        answer="8 and 4,000,000",
        giveaways=("whole storage alive", "whole block stays", "stays allocated", "keeps the whole storage",
                   "4,000,000 bytes of storage"),
        reason="`nbytes` counts only the elements the view shows; the view shares its base's storage, and "
               "the whole block stays allocated as long as the view exists."),
}
ask = asker(PREDICTIONS)
