"""Feedback on submit that keeps the hidden tests hidden: the student-safe autograded notebook, and its pages.

nbgrader's feedback page shows the whole autograded notebook, and autograde puts the hidden tests back into
it. Every output of a notebook with hidden tests may carry them too: its kernel ran them, and student code can
read them (`In`, `linecache`, the caller's frame) and print them, raise them, or update an earlier cell's
display. So in such a notebook `RedactHiddenTests` keeps what the student wrote and what release/ shows, and
makes each output anew from the instructor's own text:

- a test cell shows its release/ source (nbgrader's ClearHiddenTests) and, when it failed, either the visible
  statement that failed (with the error's name when it is a builtin one, and its message when that message is
  written in the visible source), or, when the failing line is hidden or cannot be told, "a hidden test
  failed" and the `# Feedback:` lines of that hidden block (`default_message` when it has none);
- every other output is dropped, save the grader's own "not run" note; the scores come from the gradebook
  (nbgrader's GetGrades, in the feedback template) as before;
- the notebook's and the cells' metadata keep only what the feedback template reads (no checksums, no
  widgets).

A notebook without hidden tests is left as it is.
"""

import ast
import builtins
import copy
import functools
import re
import shutil
import textwrap
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import jinja2
from nbconvert.filters.ansi import strip_ansi
from nbformat import NotebookNode
from nbformat.v4 import new_markdown_cell
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor
from traitlets import List, Unicode

from autograder.grading.execution import NOT_RUN
from autograder.grading.guard_verdicts import UNCONFIRMED

FEEDBACK_PREFIX = "# Feedback:"  # a line of a hidden block that students read when that block fails
DEFAULT_MESSAGE = ("Your answer passes the visible tests but not every case: check the cases they do not try "
                   "(edge cases, other shapes, dtypes and devices).")
NOTE = ("**Feedback on submit.** Each test cell shows its score and the visible tests; a hidden test that "
        "fails shows only a message from your instructor. The outputs of your cells are not shown here (run "
        "your notebook to see them). The full feedback comes after the due date.")
GRADER_NOTES = {NOT_RUN: "The grader did not run this cell.",
                UNCONFIRMED: "The grader could not run this test as written, so it earns no points."}
KEPT_NOTEBOOK_METADATA = ("kernelspec", "language_info")
KEPT_CELL_METADATA = ("nbgrader", "tags")
BUILTIN_ERRORS = frozenset(name for name, value in vars(builtins).items()
                           if isinstance(value, type) and issubclass(value, BaseException))
CELL_LINE = re.compile(r"Cell In\s*\[\d*\],\s*line (\d+)|<cell line: (\d+)>")  # IPython 8 and IPython 7.x
RED, RESET = "\x1b[0;31m", "\x1b[0m"
UNDEFINED_NAME = re.compile(r"name '(\w+)' is not defined")  # NameError's message, of a visible name


@dataclass(frozen=True)
class HiddenBlock:
    """One hidden region of a test cell: its first and last line (1-based, markers included), its message."""

    first: int
    last: int
    message: str  # its `# Feedback:` lines, joined ("" when it has none)

    def holds(self, line: int) -> bool:
        """Return whether the line is inside this block."""
        return self.first <= line <= self.last


@dataclass(frozen=True)
class TestCell:
    """A graded test cell as students may see it: its release/ source, and where its hidden lines are."""

    source: str  # the whole source, as the kernel ran it
    visible: str  # what release/ shows
    blocks: tuple[HiddenBlock, ...]

    def is_hidden(self, line: int) -> bool:
        """Return whether a line (1-based) of the source is hidden."""
        return any(b.holds(line) for b in self.blocks)

    def messages(self, line: int | None) -> tuple[str, ...]:
        """Return the instructor's messages of the block holding the line (of every block when unknown)."""
        return tuple(b.message for b in self.blocks if (line is None or b.holds(line)) and b.message)

    def statement(self, line: int) -> str:
        """Return the visible lines of the statement that holds the line (a compound one: its header)."""
        lines = self.source.split("\n")
        span = statement_span(self.source, line)
        return textwrap.dedent("\n".join(lines[n - 1] for n in span if not self.is_hidden(n)))


def hidden_blocks(source: str, begin: str, end: str) -> tuple[HiddenBlock, ...]:
    """Return the hidden blocks of a source, delimited as nbgrader's ClearHiddenTests reads them."""
    blocks, first, messages = [], None, []
    lines = source.split("\n")
    for number, line in enumerate(lines, start=1):
        if begin in line:
            first, messages = number, []
        elif end in line and first is not None:
            blocks.append(HiddenBlock(first, number, " ".join(messages)))
            first = None
        elif first is not None and line.strip().startswith(FEEDBACK_PREFIX):
            messages.append(line.strip()[len(FEEDBACK_PREFIX):].strip())
    if first is not None:  # no END marker: hidden to the end (nbgrader refuses to build it anyway)
        blocks.append(HiddenBlock(first, len(lines), " ".join(messages)))
    return tuple(blocks)


def statement_span(source: str, line: int) -> range:
    """Return the lines of the innermost statement holding the line (a compound statement's header only)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return range(line, line + 1)
    holding = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)
               and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not holding:
        return range(line, line + 1)
    node = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    last = node.end_lineno or node.lineno
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        last = max(line, body[0].lineno - 1)
    return range(node.lineno, last + 1)


def failing_line(error: dict) -> int | None:
    """Return the line of the test cell where an error output says it was raised (None: it does not say)."""
    text = strip_ansi("\n".join(str(t) for t in error.get("traceback") or []))
    match = CELL_LINE.search(text)
    return int(match.group(1) or match.group(2)) if match else None


def _red(text: str) -> str:
    return f"{RED}{text}{RESET}"


class RedactHiddenTests(NbGraderPreprocessor):
    """Make an autograded notebook safe to show a student before the hidden tests are released."""

    default_message = Unicode(DEFAULT_MESSAGE, help="shown when a hidden block that fails has no "
                                                    f"'{FEEDBACK_PREFIX}' line").tag(config=True)
    note = Unicode(NOTE, help="markdown put first in a redacted notebook").tag(config=True)
    # set by nbconvert's exporters for every NbConvertBase; nbgrader's preprocessors declare it without
    # config=True, so traitlets would warn about it once per worker: taken here, and unused
    display_data_priority = List().tag(config=True)

    def test_cell(self, cell: NotebookNode, clearer: ClearHiddenTests) -> TestCell:
        """Read a graded test cell: its visible source (as release/ has it) and its hidden blocks."""
        blocks = hidden_blocks(cell.source, clearer.begin_test_delimeter, clearer.end_test_delimeter)
        released = copy.deepcopy(cell)
        try:
            clearer.preprocess_cell(released, {}, 0)
        except RuntimeError:  # markers nbgrader cannot read: show none of it
            released.source = "# (this test cell is shown with the full feedback)"
        return TestCell(cell.source, released.source, blocks)

    def verdict(self, cell: TestCell, error: dict) -> NotebookNode:
        """Return what a failing test cell may tell the student, made from the instructor's text alone."""
        ename = str(error.get("ename", ""))
        if ename in GRADER_NOTES:
            return _note(ename, GRADER_NOTES[ename])
        lines = cell.source.split("\n")
        line = failing_line(error)
        line = line if line is not None and 1 <= line <= len(lines) else None
        if cell.blocks and (line is None or cell.is_hidden(line)):
            return _note("HiddenTestFailed", _red("A hidden test of this cell failed."),
                         *(cell.messages(line) or (self.default_message,)))
        name = ename if ename in BUILTIN_ERRORS else "An error"
        shown = [_red(name + (f" at line {line}:" if line else ""))]
        if line:
            shown += cell.statement(line).split("\n")
        evalue = str(error.get("evalue", "")).strip()
        if evalue and _instructor_s(evalue, cell.visible):
            shown.append(f"{_red(name)}: {evalue}")
        return _note(name, *shown)

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        """Redact a notebook that has hidden tests; leave any other as it is."""
        # nbconvert's exporters set NbConvertBase.display_data_priority, which nbgrader's preprocessors do not
        # take as config: without that section, no "not recognized" warning in the log for every student
        config = copy.copy(self.config)
        config.pop("NbConvertBase", None)
        clearer = ClearHiddenTests(config=config)
        tests = {i: self.test_cell(c, clearer) for i, c in enumerate(nb.cells)
                 if utils.is_grade(c) and not utils.is_solution(c)}
        if not any(t.blocks for t in tests.values()):
            return nb, resources
        for index, cell in enumerate(nb.cells):
            cell.metadata = _kept_cell_metadata(cell.metadata)
            if index in tests:
                cell.source = tests[index].visible
            if cell.cell_type != "code":
                continue
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if index in tests:
                cell.outputs = [self.verdict(tests[index], e) for e in errors]
            else:
                cell.outputs = [_note(NOT_RUN, GRADER_NOTES[NOT_RUN]) for e in errors
                                if e.get("ename") == NOT_RUN]
        nb.metadata = NotebookNode({k: v for k, v in nb.metadata.items() if k in KEPT_NOTEBOOK_METADATA})
        nb.cells.insert(0, new_markdown_cell(self.note))
        return nb, resources


def _instructor_s(evalue: str, visible: str) -> bool:
    """Return whether an error message says nothing but what the visible source says (never text that student
    code made, which could carry the hidden tests it read)."""
    undefined = UNDEFINED_NAME.fullmatch(evalue)
    return evalue in visible or bool(undefined and re.search(rf"\b{undefined.group(1)}\b", visible))


def _note(ename: str, *lines: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue="", traceback=list(lines))


def _kept_cell_metadata(metadata: dict) -> NotebookNode:
    kept = NotebookNode({k: copy.deepcopy(v) for k, v in metadata.items() if k in KEPT_CELL_METADATA})
    if "nbgrader" in kept:
        kept.nbgrader.pop("checksum", None)
    return kept


# The pages

UNRENDERED_PAGE = jinja2.Environment(autoescape=True).from_string(
    '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{{ notebook }}</title></head>\n'
    "<body><h1>{{ notebook }}</h1><p>Your submission was graded, but its feedback page could not be made. "
    "Your instructor can see why; the full feedback comes after the due date.</p></body></html>\n")


@functools.lru_cache(maxsize=8)
def _writer(course: str):
    from autograder.course import course_config
    from autograder.grading.feedback_pages import FeedbackWriter

    writer = FeedbackWriter(course_config(Path(course)))
    writer.exporter.register_preprocessor(RedactHiddenTests, enabled=True)  # after GetGrades: scores stay
    return writer


def student_feedback_pages(course: Path, assignment: str, student: str, dest: Path) -> dict[str, str]:
    """Write a graded student's feedback pages, hidden tests kept hidden, into `dest`; return notebook ->
    HTML.

    Reads the course's autograded/<student>/<assignment>/*.ipynb and the course gradebook (as `hub feedback`'s
    pages do). A page that cannot be made says so, and shows nothing of the notebook.
    """
    from autograder.grading.gradebook import course_db_url

    course = Path(course).resolve()
    autograded = course / "autograded" / student / assignment
    if dest.exists():
        shutil.rmtree(dest)
    try:
        written = _writer(str(course)).write(autograded, dest, student, assignment, course_db_url(course))
    except Exception:  # noqa: BLE001  (fail closed: a page that says so, never the full one)
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        for notebook in sorted(p.stem for p in autograded.glob("*.ipynb")):
            page = dest / f"{notebook}.html"
            page.write_text(UNRENDERED_PAGE.render(notebook=notebook), encoding="utf-8")
            written.append(page)
    return {p.stem: p.read_text(encoding="utf-8") for p in written}


def due_date(course: Path, assignment: str, student: str | None = None) -> datetime | None:
    """Return the assignment's due date in the course gradebook (naive UTC, as nbgrader keeps it), or None;
    with a student, their own (the due date plus their extension, `hub extend`)."""
    from autograder.grading.gradebook import course_db_url, student_due_date

    return student_due_date(course_db_url(Path(course)), assignment, student)
