"""Choose a device without hard-coding "cuda"."""

import torch


def cuda_ready() -> bool:
    """Return True when PyTorch can use a CUDA GPU right now."""
    return torch.cuda.is_available()


def mps_ready() -> bool:
    """Return True when PyTorch can use Apple's Metal (MPS) GPU right now."""
    return torch.backends.mps.is_available()


def best_device() -> torch.device:
    """Return the first usable device in a fixed order: cuda, then mps, then cpu.

    It checks availability only and measures nothing, so it is not "the fastest device" for every job: for
    small work the CPU can be faster than a GPU. It returns plain `cuda` (the current CUDA device), never
    `cuda:N`.
    """
    if cuda_ready():
        return torch.device("cuda")
    if mps_ready():
        return torch.device("mps")
    return torch.device("cpu")
