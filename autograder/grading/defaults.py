"""The grader's defaults, declared once: the command line, `GradeOptions` and the workers read them here.

Standard library only, so that `python -m autograder --help` states them without importing the grading stack.
"""

from autograder.grading.sandbox import MODES

DEFAULT_TIMEOUT = 300  # wall-clock seconds per notebook
MAX_TIMEOUT = 24 * 3600  # no time limit per notebook is longer than a day


def timeout_problem(seconds: float | None) -> str | None:
    """Return what is wrong with a time limit per notebook (None: it is fine, or not given)."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= MAX_TIMEOUT:
        return f"a time limit per notebook is more than 0 and at most {MAX_TIMEOUT} s"
    return None
DEFAULT_MEMORY_MIB = 4096  # memory cap per submission
SANDBOX_CHOICES = ("auto", *MODES)  # auto: the best of sandbox.MODES that works on this machine
DEFAULT_SANDBOX = "auto"
SANDBOX_HELP = "the sandbox student code runs in (auto: bubblewrap or unshare, never none unless asked)"
