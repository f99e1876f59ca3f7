"""Which operations synchronise: each one run once under `torch.cuda.set_sync_debug_mode("warn")`."""

import warnings
from collections.abc import Callable, Mapping

import torch

SYNC_WARNING = "synchroniz"  # PyTorch's warning says "called a synchronizing CUDA operation"


def warned_syncs(operations: Mapping[str, Callable[[], object]]) -> dict[str, bool]:
    """Return, for each named operation, whether PyTorch's sync debug mode warned while it ran (needs CUDA).
    """
    result: dict[str, bool] = {}
    torch.cuda.set_sync_debug_mode("warn")
    try:
        for name, operation in operations.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                operation()
            result[name] = any(SYNC_WARNING in str(w.message) for w in caught)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return result


def print_syncs(operations: Mapping[str, Callable[[], object]]) -> None:
    """Print one line per operation: whether it warned about a synchronizing CUDA operation."""
    width = max(map(len, operations), default=0) + 2
    for name, synced in warned_syncs(operations).items():
        print(f"{name:{width}} {'warned: synchronizing' if synced else 'no warning'}")
