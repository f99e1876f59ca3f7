"""`python -m autograder demo`: build a small, realistic class from the current assignments and grade it.

Every assignment in source/ gets the same eight students, built from the instructor's notebook:

    ada   everything right                     ben   the first exercise left undone
    cam   nothing done (the release version)   dia   everything right, saved as "Copy of <name>.ipynb"
    eli   right, but deleted one test cell     fay   right, but one stray cell kills the kernel
          and turned another into markdown     gus   an empty .ipynb file
    hal   handed in a text file instead

It grades them in a scratch copy of the course (graded/demo/course), so the real gradebook never sees them.
"""

import copy
import re
import shutil
from dataclasses import replace
from pathlib import Path

import nbformat
from nbgrader import utils

from autograder.cells import grade_id
from autograder.course import assignments
from autograder.grading import gradebook as gbook
from autograder.grading.errors import UnknownAssignment
from autograder.grading.session import GradeOptions, RunSummary, grade_class

MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)
PLAN = {
    "ada": "everything right", "ben": "first exercise left undone", "cam": "nothing done",
    "dia": "right, misnamed file", "eli": "right, test cells deleted/retyped",
    "fay": "a cell kills the kernel", "gus": "empty .ipynb file", "hal": "no notebook at all",
}


def solved(release: nbformat.NotebookNode, source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Return the student version with every answer cell filled in from the instructor's solution."""
    answers = {grade_id(c): MARKER.sub("", c.source) for c in source.cells if utils.is_solution(c)}
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        gid = grade_id(cell)
        if utils.is_solution(cell) and gid in answers:
            cell.source = answers[gid]
    return nb


def class_notebooks(release: nbformat.NotebookNode, source: nbformat.NotebookNode, name: str
                    ) -> dict[str, dict[str, nbformat.NotebookNode | str]]:
    """Return student -> {file name: notebook or raw text} for one notebook of an assignment."""
    right = solved(release, source)
    answer_ids = [grade_id(c) for c in right.cells if utils.is_solution(c)]
    test_ids = [grade_id(c) for c in right.cells if utils.is_grade(c)
                and not utils.is_solution(c)]
    ben = copy.deepcopy(right)
    if answer_ids:
        stub = next(c for c in release.cells if grade_id(c) == answer_ids[0])
        next(c for c in ben.cells if grade_id(c) == answer_ids[0]).source = stub.source
    eli = copy.deepcopy(right)
    if test_ids:
        eli.cells = [c for c in eli.cells if grade_id(c) != test_ids[0]]
    if len(test_ids) > 1:
        index, cell = next((i, c) for i, c in enumerate(eli.cells) if grade_id(c) == test_ids[1])
        eli.cells[index] = nbformat.v4.new_markdown_cell(cell.source, metadata=cell.metadata)
    fay = copy.deepcopy(right)
    first = next((i for i, c in enumerate(fay.cells) if utils.is_solution(c)), 0)
    fay.cells.insert(first + 1, nbformat.v4.new_code_cell("import os\nos._exit(1)  # a stray experiment"))
    return {"ada": {name: right}, "ben": {name: ben}, "cam": {name: release},
            "dia": {f"Copy of {name}": right}, "eli": {name: eli}, "fay": {name: fay}, "gus": {name: ""},
            "hal": {"answers.txt": "see attached\n"}}


def build_class(course: Path, assignment: str, dest: Path) -> list[str]:
    """Write the demo class's submission folders for one assignment into `dest`; return the students."""
    generated = gbook.generate(course, assignment, dest.parent / f".generate-{assignment}")
    if dest.exists():
        shutil.rmtree(dest)
    for path in sorted((generated / "release" / assignment).glob("*.ipynb")):
        release = nbformat.read(path, as_version=4)
        source = nbformat.read(course / "source" / assignment / path.name, as_version=4)
        for student, files in class_notebooks(release, source, path.name).items():
            folder = dest / student
            folder.mkdir(parents=True, exist_ok=True)
            for fname, content in files.items():
                if isinstance(content, str):
                    (folder / fname).write_text(content, encoding="utf-8")
                else:
                    nbformat.write(content, folder / fname)
    shutil.rmtree(generated, ignore_errors=True)
    return sorted(PLAN)


DEMO_OPTIONS = GradeOptions(timeout=120)


def run_demo(root: Path, out: Path, only: list[str] | None = None, options: GradeOptions = DEMO_OPTIONS,
             echo=print) -> list[RunSummary]:
    """Build the demo course and class under `out`, grade every assignment (or `only` these), return the runs.
    """
    course = out / "course"
    if course.exists():
        shutil.rmtree(course)
    (course / "source").mkdir(parents=True)
    shutil.copyfile(root / "nbgrader_config.py", course / "nbgrader_config.py")
    found = [a for a in assignments(root) if not only or a in only]
    unknown = sorted(set(only or []) - set(found))
    if unknown or not found:
        raise UnknownAssignment(f"no assignment {', '.join(unknown)} in source/" if unknown
                           else "no assignments in source/: nothing to demonstrate")
    runs = []
    for assignment in found:
        shutil.copytree(root / "source" / assignment, course / "source" / assignment)
        subs = out / "submissions" / assignment
        build_class(course, assignment, subs)
        echo(f"\n== {assignment}: a class of {len(PLAN)} ==")
        for student, what in PLAN.items():
            echo(f"   {student}: {what}")
        runs.append(grade_class(course, assignment, subs, replace(options, force=True), out=out / assignment,
                                echo=echo))
    return runs
