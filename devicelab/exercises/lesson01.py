"""Practice for lesson 01: bytes from shape and dtype, without allocating."""

import torch

from devicelab.feedback import Exercise, checker


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
        "Bytes per element: torch.tensor([], dtype=dtype).element_size(), or torch.finfo/iinfo(dtype).bits // 8.",
    ), solution='''
import math

def nbytes_for(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Return how many bytes a tensor of this shape and dtype takes, without making it."""
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()
''', success="A 100,000 x 100,000 bfloat16 tensor is 2 x 10**10 bytes (18.6 GiB): now you know before you allocate it."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
