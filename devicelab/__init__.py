"""Device Lab: the helpers that the course's notebooks import."""

from devicelab.devices import best_device, cuda_ready, mps_ready
from devicelab.environment import EnvironmentReport, collect_environment, show_environment

__version__ = "0.1.0"

__all__ = [
    "EnvironmentReport",
    "best_device",
    "collect_environment",
    "cuda_ready",
    "load_ipython_extension",
    "mps_ready",
    "show_environment",
]


def load_ipython_extension(ipython) -> None:
    """Register the course's cell magics (`%load_ext devicelab`)."""
    from devicelab.colab import gpu_advice
    from devicelab.magics import register

    register(ipython)
    advice = gpu_advice()
    if advice:
        print(advice)
