"""The grader's defaults, declared once: the command line, `GradeOptions` and the workers read them here.

Standard library only, so that `python -m autograder --help` states them without importing the grading stack.
"""

from autograder.grading.sandbox import MODES

DEFAULT_TIMEOUT = 300  # wall-clock seconds per notebook
DEFAULT_MEMORY_MIB = 4096  # memory cap per submission
SANDBOX_CHOICES = ("auto", *MODES)  # auto: the best of sandbox.MODES that works on this machine
DEFAULT_SANDBOX = "auto"
SANDBOX_HELP = "the sandbox student code runs in (auto: bubblewrap or unshare, never none unless asked)"
