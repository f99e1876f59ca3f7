"""Device Lab's instructor tooling: tidy notebooks, build release/, validate and grade assignments."""

from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIRS = ("notebooks", "source", "release")
