"""Staff never run a submission outside the sandbox: nbgrader's own ways of running one refuse for the grader.

The grader account owns the course: the solutions and hidden tests (source/), the gradebook, every
submission, and the grader service's hub token in its environment. nbgrader runs a notebook's code as whoever
runs nbgrader, in a kernel started in the notebook's folder, so formgrader's *Autograde* button (`nbgrader
autograde`) and the grader server's *Validate* button (`nbgrader validate`) ran a student's code with all of
that. Our grader (`hub grade`, `python -m autograder grade`) and the autograde service run it in the sandbox.

`refuse_staff_execution(c, hub_root)` makes those two refuse before any kernel starts, saying what to use.
`hub setup` puts it into the grader's configuration (etc/grader: the grader service and the grader's commands)
and into the course folder's nbgrader_config.py (`course_config_source`: an nbgrader command typed in the
course folder, from any shell):

- Autograde: both of its preprocessor chains are the refusal alone (`RefuseExecution`), so it stops at the
  first notebook, before a line of the submission runs or its notebook is written (nbgrader then removes the
  student's autograded/ folder it had begun).
- Validate: nbgrader's Validator does not let its chain be configured; the `Execute` it makes gets a kernel
  manager that starts no kernel (`RefusedKernelManager`; nbconvert applies the setting as the Execute runs,
  and tests/hub/test_hub_staff_execution.py fails if it stops doing so). The instructor's source notebooks are
  refused too: a Validator cannot tell whose code a notebook holds (a submission copied into source/ or
  opened from submitted/ looks the same), and run as the grader that code has everything a hostile notebook
  wants. Source notebooks are validated in the course repository, as the instructor: `python -m autograder
  validate`.
- Generate Feedback runs nothing (nbgrader's GetGrades and the page's CSS) and is left as it is.

The settings name the classes by their dotted names, and the course file writes them out without importing
anything: nbgrader imports the classes only when it would run a notebook, so where this module cannot be
imported nbgrader stops with its import error instead of running the notebook. Our grader sets both chains
itself (grading/worker.py) and makes no Validator: it reads the same course file and is not affected.

Not covered (SECURITY.md): a grader who opens a submission in the grader service's JupyterLab and runs it, or
who runs nbgrader with other options or another configuration.
"""

import shlex

from jupyter_client.manager import AsyncKernelManager
from nbgrader.preprocessors.base import NbGraderPreprocessor
from traitlets import Unicode
from traitlets.config import Config, Configurable

REFUSE = f"{__name__}.RefuseExecution"
NO_KERNEL = f"{__name__}.RefusedKernelManager"
RISK = ("nbgrader would run the student's code as the grader account, outside the grading sandbox, where it "
        "can read the solutions and hidden tests, change the gradebook and use the grader service's hub "
        "token. Nothing was run.")


class StaffExecutionRefused(RuntimeError):
    """nbgrader was about to run a notebook's code for staff, outside the grading sandbox."""


def grade_command(hub_root: str, assignment: str) -> str:
    """Return the command that grades an assignment's collected submissions in the sandbox."""
    return f"sudo python -m autograder hub grade {shlex.quote(assignment)} --root {shlex.quote(hub_root)}"


def autograde_refusal(hub_root: str, assignment: str, student: str) -> str:
    """Return what formgrader's Autograde and `nbgrader autograde` say instead of running a submission."""
    return (f"{student}'s {assignment} was not autograded: {RISK} Grade with our sandboxed grader: "
            f"`{grade_command(hub_root, assignment)}` (every collected submission), or have each submission "
            f"graded as it arrives: `sudo python -m autograder hub autograde on {shlex.quote(assignment)} "
            f"--root {shlex.quote(hub_root)}`.")


def validate_refusal(hub_root: str) -> str:
    """Return what Validate says instead of running a notebook for the grader account."""
    return (f"Validate was refused: {RISK} Validate your source notebooks in the course repository, as "
            "yourself: `python -m autograder validate`; grade submissions with our sandboxed grader: "
            f"`{grade_command(hub_root, 'ASSIGNMENT')}`.")


class StaffGuard(Configurable):
    """What the refusals need to know: the hub's folder, for the commands they name."""

    hub_root = Unicode("", help="The class hub's folder (the hub commands' --root).").tag(config=True)


class RefuseExecution(StaffGuard, NbGraderPreprocessor):
    """Autograde's only preprocessor for the grader account: refuse, naming the sandboxed grader."""

    def preprocess(self, nb, resources):
        """Raise StaffExecutionRefused (nbgrader logs it, fails the submission and removes what it began)."""
        about = resources.get("nbgrader", {})
        message = autograde_refusal(self.hub_root, about.get("assignment", "ASSIGNMENT"),
                                    about.get("student", "the student"))
        self.log.error(message)
        raise StaffExecutionRefused(message)


class RefusedKernelManager(StaffGuard, AsyncKernelManager):
    """The kernel manager of the Execute that nbgrader's Validator makes for the grader account: it starts no
    kernel (starting one in the notebook's folder can already run the student's files)."""

    async def start_kernel(self, **kw) -> None:
        """Raise StaffExecutionRefused."""
        raise StaffExecutionRefused(validate_refusal(self.hub_root))


def refuse_staff_execution(c: Config, hub_root: str) -> None:
    """Configure nbgrader so that neither Autograde nor Validate runs a notebook's code; they say what to use.
    """
    c.Autograde.sanitize_preprocessors = [REFUSE]
    c.Autograde.autograde_preprocessors = [REFUSE]
    c.Validator.Execute.kernel_manager_class = NO_KERNEL
    c.StaffGuard.hub_root = hub_root


def _settings(section: Config, prefix: str) -> list[str]:
    lines = []
    for key, value in section.items():
        if isinstance(value, Config):
            lines += _settings(value, f"{prefix}{key}.")
        else:
            lines.append(f"c.{prefix}{key} = {value!r}")
    return lines


def course_config_source(hub_root: str) -> str:
    """Return the lines `hub setup` adds to the course folder's nbgrader_config.py: the same settings, written
    out (the file is read by an nbgrader command typed in the course folder, from any shell)."""
    c = Config()
    refuse_staff_execution(c, hub_root)
    return "\n".join([
        "# Added by `hub setup`: staff never run a submission outside the grading sandbox. nbgrader's",
        "# Autograde and Validate refuse here and say what to use",
        "# (autograder/hub/spawning/staff_execution.py, installed with devicelab-grader:",
        "# importable from any shell of the hub's environment).",
        *_settings(c, ""),
    ]) + "\n"
