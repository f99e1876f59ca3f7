"""Check assignments in both directions with nbgrader's Validator: solutions pass, student stubs fail."""

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader import utils
from tqdm import tqdm

from autograder.course import assignment_notebooks, course_config, error_line, venv_on_path
from autograder.course import assignments as all_assignments


@dataclass
class NotebookCheck:
    """The outcome of validating one notebook in one direction."""

    path: Path
    direction: str  # "solution" (everything must pass) or "release" (every graded cell must fail)
    graded_cells: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Return True when this notebook behaved as its direction requires."""
        return not self.problems


@dataclass
class ValidationReport:
    """All notebook checks of a validation run."""

    checks: list[NotebookCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Return True when every check passed."""
        return bool(self.checks) and all(c.ok for c in self.checks)


def graded_cell_count(path: Path) -> int:
    """Return how many graded (grade: true) code cells a notebook has."""
    nb = nbformat.read(path, as_version=4)
    return sum(1 for c in nb.cells if utils.is_grade(c))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def validate_notebook(path: Path, direction: str, root: Path) -> NotebookCheck:
    """Run nbgrader's Validator on one notebook: direction 'solution' or 'release' (inverted)."""
    from nbgrader.validator import Validator

    from autograder.grading.channels import CLIENT_CLASS

    config = course_config(root)
    config.Validator.invert = direction == "release"
    config.AsyncKernelManager.client_class = CLIENT_CLASS  # no reply slept through on a loaded machine
    # The kernel's sockets in a folder of this run's own (IPC), never loopback TCP, which any local user
    # reaches (and which ipykernel warns of at every start, in the middle of the progress bar)
    with venv_on_path(), tempfile.TemporaryDirectory(prefix="devicelab-validate-") as runtime:
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(Path(runtime) / "k")
        config.KernelManager.connection_file = str(Path(runtime) / "kernel.json")
        results = Validator(config=config).validate(str(path))
    check = NotebookCheck(path, direction, graded_cell_count(path))
    if check.graded_cells == 0:
        check.problems.append("has no graded test cell")
    for key in ("type_changed", "changed"):
        for cell in results.get(key, []):
            check.problems.append(f"{key.replace('_', ' ')} cell: {_first_line(cell['source'])}")
    for cell in results.get("failed", []):
        error = error_line(cell.get("raw_error", ""))
        check.problems.append(f"test cell fails on the solution: {_first_line(cell['source'])} -> {error}")
    for cell in results.get("passed", []):
        check.problems.append(f"test cell passes on the student stub: {_first_line(cell['source'])}")
    return check


def validate_course(root: Path, assignments: list[str] | None = None) -> ValidationReport:
    """Validate every source notebook (must pass) and every release notebook (must fail) of the assignments.
    """
    wanted = assignments or all_assignments(root)
    jobs = [(nb, "solution") for a in wanted for nb in assignment_notebooks(a, root, "source")]
    jobs += [(nb, "release") for a in wanted for nb in assignment_notebooks(a, root, "release")]
    report = ValidationReport()
    for path, direction in tqdm(jobs, desc="validating", unit="notebook"):
        report.checks.append(validate_notebook(path, direction, root))
    return report


def print_report(report: ValidationReport) -> None:
    """Print one line per notebook, then the problems found."""
    for check in report.checks:
        mark = "ok  " if check.ok else "FAIL"
        want = "all tests pass" if check.direction == "solution" else "every graded cell fails"
        print(f"{mark} {_relative(check.path)} ({check.graded_cells} graded cells; {want})")
        for problem in check.problems:
            print(f"       - {problem}")
    if not report.checks:
        print("no assignments found")
    print("validation passed" if report.ok else "validation FAILED")


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
