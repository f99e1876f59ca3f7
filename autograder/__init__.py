"""Device Lab's instructor tooling: tidy notebooks, build release/, validate and grade assignments."""

from autograder.course import COURSE_ROOT, NOTEBOOK_DIRS

__all__ = ["COURSE_ROOT", "NOTEBOOK_DIRS"]
