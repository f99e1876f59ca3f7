"""Before a class is graded, the assignment's own solution is graded in the same sandbox and kernel.

A broken grading environment grades silently wrong: a sandbox that cannot import the course's package makes
every imports cell fail, and a student with every answer right scores 11 of 14 under the status "graded". So
the first job of a run is the instructor's solution (source/<assignment>/, every file of it), graded as a
student would be; unless it earns full marks, the run refuses before any student is graded, naming the cell
that failed and its error.

A pass is remembered (in the user's cache folder) for what it proved: the assignment as generated, the
sandbox's mode and what it shows, the Python and its installed packages, the course packages the notebooks
import, the time and memory limits. A run with all of those unchanged does not grade the solution again.
"""

import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.grading.attempt import AttemptReport, Job, Outcome
from autograder.grading.errors import BrokenGradingEnvironment
from autograder.grading.results import fingerprint, hash_tree, write_atomic
from autograder.grading.sandbox import Isolation
from autograder.grading.submissions import regular_files
from autograder.safe_copy import Refusal, read_small

SOLUTION = "solution-check"  # the name its job is graded under, in its own scratch course only
MAX_NOTEBOOK_BYTES = 16 * 2**20  # an autograded solution read back to find its first error
CACHE_ENV = "XDG_CACHE_HOME"


def cache_folder() -> Path:
    """Return where passed checks are remembered: the user's own cache folder (XDG), never a shared one."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache") / "devicelab" / "solution-checks"


@dataclass(frozen=True)
class SolutionCheck:
    """One assignment's solution, to be graded where the class will be."""

    template_key: str  # the generated assignment (template.template_key)
    isolation: Isolation
    timeout: float
    memory_mib: int
    packages: tuple[Path, ...]  # the course's packages the notebooks import (sandbox.student_package_folders)

    @property
    def key(self) -> str:
        """Return the digest of everything a pass proved."""
        purelib = Path(sysconfig.get_paths()["purelib"])
        installed = purelib.stat().st_mtime_ns if purelib.is_dir() else 0  # an install or removal changes it
        course_code = [hash_tree(sorted(p.rglob("*.py")), p) for p in self.packages]
        return fingerprint(self.template_key, self.isolation.mode, self.isolation.visible, sys.executable,
                           sys.version, installed, course_code, self.timeout, self.memory_mib)

    def passed_before(self) -> bool:
        """Return True if this very check passed before."""
        try:
            return (cache_folder() / self.key).is_file()
        except (OSError, RuntimeError):  # no home folder (RuntimeError), or one this account cannot read
            return False

    def remember(self) -> None:
        """Record that it passed (where the account has no cache folder it can write, the next run checks
        again)."""
        try:
            write_atomic(cache_folder() / self.key, json.dumps({"passed": True}))
        except (OSError, RuntimeError):
            pass


def solution_job(template: Path, assignment: str, run_root: Path) -> Job:
    """Return the job that grades the solution: a copy of every file of the template's source assignment."""
    source = template / "source" / assignment
    folder = run_root / SOLUTION
    for path in regular_files(source):
        target = folder / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    notebooks = {p.name: str(folder / p.name) for p in sorted(source.glob("*.ipynb"))}
    return Job(-1, SOLUTION, notebooks, str(folder))


def refusal(report: AttemptReport, max_points: dict[tuple[str, str], float]) -> str | None:
    """Return why the solution's grading shows a broken environment, or None when it earned full marks (of
    the points graded automatically: a cell an instructor grades by hand is left out)."""
    if report.outcome != Outcome.COMPLETED:
        why = report.failure.message if report.failure else report.outcome.value
        return f"its grading did not complete ({why})"
    earned = {(c.notebook, c.grade_id): c.score for c in report.cells}
    by_hand = {(c.notebook, c.grade_id) for c in report.cells if c.needs_manual_grade}
    points = {cell: p for cell, p in max_points.items() if cell not in by_hand}
    short = [cell for cell, p in sorted(points.items()) if earned.get(cell, 0) < p]
    if not short:
        return None
    total = sum(points.values())
    got = sum(min(earned.get(cell, 0), p) for cell, p in points.items())
    failing = next((c for c in report.cells if (c.notebook, c.grade_id) == short[0]), None)
    first = first_error(Path(report.scratch)) if report.scratch else None
    return (f"it earned {got:g} of {total:g} points"
            + (f"; the first cell that failed: {first}" if first else "")
            + (f"; {short[0][0]} test {short[0][1]!r}: {failing.error}" if failing and failing.error else ""))


def first_error(scratch: Path) -> str | None:
    """Return "<notebook> cell N: <error>" for the first cell of the autograded solution that raised."""
    for folder in sorted(scratch.glob(f"autograded/{SOLUTION}/*")):
        for name in sorted(p.name for p in folder.glob("*.ipynb")):
            try:
                nb = nbformat.reads(read_small(folder, name, MAX_NOTEBOOK_BYTES).decode("utf-8", "replace"),
                                    as_version=4)
            except (Refusal, ValueError, UnicodeError):
                continue
            for index, cell in enumerate(nb.cells):
                error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
                if cell.cell_type == "code" and error is not None:
                    return f"{name} cell {index}: {error.get('ename', '')}: {error.get('evalue', '')}"[:400]
    return None


def refuse(assignment: str, why: str) -> BrokenGradingEnvironment:
    """Return the error that stops the run, with what to do."""
    return BrokenGradingEnvironment(
        f"{assignment}: nothing was graded, because the assignment's own solution (source/{assignment}/), "
        f"graded in this run's sandbox, does not earn full marks: {why}. The students would be graded wrong "
        "the same way. Check that the sandbox can import what the notebooks import (the course's packages "
        "are installed for this Python) and that the solution passes `nbgrader validate` (a course whose "
        "source/ holds no working solution grades with --no-solution-check).")
