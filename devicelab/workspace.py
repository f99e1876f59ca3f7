"""Give students a folder of their own: copies of the lessons and assignments that course updates never touch.
"""

import shutil
from dataclasses import dataclass, field
from pathlib import Path

# The course as it is laid out in the repository, so that every link of a lesson (to a problem set in
# ../release/, a picture or a guide in ../docs/) leads to the student's own copy of it
COURSE_FOLDERS = ("notebooks", "release", "docs")


@dataclass
class CopyReport:
    """What `make_workspace` copied and what it left alone."""

    copied: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)


SKIPPED = {".ipynb_checkpoints", "__pycache__"}  # JupyterLab's and Python's own files, never the course's


def make_workspace(course_root: Path, target: Path) -> CopyReport:
    """Copy every lesson and assignment, with the files they read and link to (the traces lessons 07 and 08
    open, the pictures and guides in docs/), into `target` in the repository's layout (notebooks/, release/,
    docs/), never overwriting a file already there: run again after a course update, it adds only what is new.
    """
    if target.resolve() in {(course_root / f).resolve() for f in COURSE_FOLDERS}:
        raise ValueError(f"{target} is a course folder; choose a folder of your own, e.g. mywork/")
    report = CopyReport()
    for folder in COURSE_FOLDERS:
        for source in sorted((course_root / folder).rglob("*")):
            if not source.is_file() or source.is_symlink() or SKIPPED & set(source.parts):
                continue
            destination = target / source.relative_to(course_root)
            if destination.exists():
                report.kept.append(destination)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
            report.copied.append(destination)
    return report
