"""Google Colab: detect it, and tell students how to get a GPU when their session has none."""

import sys

import torch

NO_GPU_ADVICE = (
    "This Colab session has no GPU, so GPU-only cells will be skipped. To get one: Runtime > Change runtime "
    "type > T4 GPU > Save, then run the notebook again from the top (changing the runtime restarts it)."
)


def on_colab() -> bool:
    """Return True inside a Google Colab kernel."""
    return "google.colab" in sys.modules


def gpu_advice() -> str | None:
    """Return advice when on Colab without a usable GPU, else None."""
    if on_colab() and not torch.cuda.is_available():
        return NO_GPU_ADVICE
    return None
