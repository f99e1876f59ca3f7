"""Start an IPython kernel guarded by the grading kernel's audit hook."""

import importlib
import os
import sys
import tempfile

from .seal import arm
from .snapshot import COURSE_PACKAGES

# The course's modules the instructor's set-up cells import (comma-separated; set by the grader, worker.py):
# imported here, before the snapshot and any student code, so the guard records them as they are.
COURSE_MODULES_ENV = "DEVICELAB_GUARD_MODULES"


def import_course_modules(names: str) -> None:
    """Import each of the course's own modules named (others are ignored; one that fails is left to the
    notebook's own import, which fails the same way)."""
    for name in filter(None, (part.strip() for part in names.split(","))):
        if name.split(".", 1)[0] in COURSE_PACKAGES:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001, S110  (the set-up cell reports it as the student would see it)
                pass


def main(argv: list[str] | None = None, program: dict | None = None) -> None:
    """Start an IPython kernel guarded by the audit hook (`program`: the namespace of program.py, run as
    `grading_kernel.py [--channel FIFO] -f CONNECTION_FILE`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    channel_path = None
    if "--channel" in argv:
        at = argv.index("--channel")
        channel_path = argv[at + 1]
        del argv[at:at + 2]
    beside = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where this package was copied to
    if sys.path and beside == os.path.abspath(sys.path[0] or "."):
        del sys.path[0]  # the program's folder is the kernel's runtime folder, not a place to import from
    # IPython's profile (config files, startup scripts, extensions) lives in HOME, which student code of an
    # earlier notebook could write: this kernel reads a fresh, empty one instead.
    os.environ["IPYTHONDIR"] = tempfile.mkdtemp(prefix="ipython-")
    install = arm(channel_path, program)
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(argv)
    while "" in sys.path:  # nothing is imported from the notebook's folder until the snapshot is taken
        sys.path.remove("")
    import_course_modules(os.environ.get(COURSE_MODULES_ENV, ""))
    install(app.kernel)
    del install  # this frame stays on the stack while cells run: it holds nothing that leads to the guard
    app.start()

