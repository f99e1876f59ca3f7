"""Why a grading run cannot start or go on: one type each, caught by type; the message is for people."""


class GradingError(RuntimeError):
    """A grading run cannot start or go on; the message says why and what to do."""


class UnknownAssignment(GradingError):
    """The course has no such assignment in source/."""


class UnsupportedCourse(GradingError):
    """The course is set up in a way only plain nbgrader grades (another layout, another kernel language)."""


class SubmissionsError(GradingError):
    """The submissions given cannot be read (missing, not a folder or a .zip, too large when unpacked)."""


class SandboxError(GradingError):
    """The sandbox asked for does not work on this machine."""


class GradebookError(GradingError):
    """The gradebook cannot be used for this run."""


class GradebookBusy(GradebookError):
    """Another grading run holds the gradebook: wait for it to finish."""


class GenerateFailed(GradebookError):
    """nbgrader could not generate the assignment from source/."""


class RecordFailed(GradebookError):
    """A student could not be written into the gradebook (the run stops: the gradebook may have been changed).
    """


class BrokenGradingEnvironment(GradingError):
    """The assignment's own solution does not earn full marks where the class would be graded."""
