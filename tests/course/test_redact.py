"""Feedback on submit keeps the hidden tests hidden (autograder/grading/redact.py).

First the rules on autograded-like notebooks built by hand (no kernel), then on a real assignment of this
course (ps01) graded by the course's grader: honest, wrong in a hidden test, wrong in the visible ones, and a
thief whose code reads the hidden tests while they run and tries to carry them out in every way a notebook
can (print, an exception, a display updated later, the repr of a value a visible test prints). The full pages
(what nbgrader's feedback shows, and `hub feedback` releases after the due date) do show the hidden tests:
that is the hole, and the tests check they still do, so the checks below are known to see a leak.
"""

import copy
import csv
import datetime
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests

from autograder import COURSE_ROOT
from autograder.cells import grade_id
from autograder.course import with_venv_on_path
from autograder.grading.demo import solved
from autograder.grading.redact import (
    DEFAULT_MESSAGE,
    FEEDBACK_PREFIX,
    RedactHiddenTests,
    due_date,
    hidden_blocks,
    student_feedback_pages,
)
from autograder.grading.remote_calls import is_marked
from autograder.hub.part_settings import HiddenTests
from autograder.hub.service.autograde_queue import AutogradeSetting, Queue
from tests.factories import graded_cell_meta, solution_cell_meta
from tests.once_per_run import once_per_run

PS01 = "ps01-tensors-and-devices"

# ----------------------------------------------------------------------------------------------------------
# The rules, on notebooks built by hand

DOUBLE_TESTS = ("assert double(2) == 4, 'double(2) should be 4'\n"
                "### BEGIN HIDDEN TESTS\n"
                "# Feedback: negative numbers count too.\n"
                "assert double(-3) == -6, 'SECRET-negative: double(-3) should be -6'\n"
                "### END HIDDEN TESTS\n"
                "### BEGIN HIDDEN TESTS\n"
                "assert double(10**20) == 2 * 10**20, 'SECRET-big numbers'\n"
                "### END HIDDEN TESTS")


def traceback_at(line: int, source: str, ename: str, evalue: str) -> list[str]:
    """Return an IPython 8 traceback of a test cell failing at `line` (it prints the lines around it)."""
    lines = source.split("\n")
    around = "\n".join(f"{'---> ' if n == line else '     '}{n} {lines[n - 1]}"
                       for n in range(max(1, line - 2), min(len(lines), line + 2) + 1))
    return ["\x1b[31m---------------------------------------------------------------------------\x1b[39m",
            f"\x1b[31m{ename}\x1b[39m      Traceback (most recent call last)",
            (f"\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[2]\x1b[39m\x1b[32m, line {line}\x1b[39m\n"
             f"{around}"), f"\x1b[31m{ename}\x1b[39m: {evalue}"]


def error(line: int | None, ename: str = "AssertionError", evalue: str = "", source: str = DOUBLE_TESTS):
    return new_output("error", ename=ename, evalue=evalue,
                      traceback=traceback_at(line, source, ename, evalue) if line else [f"{ename}: {evalue}"])


def autograded(*test_outputs, answer: str = "return 2 * x", more=()) -> nbformat.NotebookNode:
    """Return an autograded-like notebook: `double`, its test cell (hidden tests back in) with these outputs.
    """
    test = new_code_cell(DOUBLE_TESTS, metadata=graded_cell_meta("double-tests", 2))
    test.metadata.nbgrader["checksum"] = "0786563454686bf042baae0b2dec853e"
    test.outputs = list(test_outputs)
    nb = nbformat.v4.new_notebook(cells=[
        new_markdown_cell("# Tiny"),
        new_code_cell(f'def double(x):\n    """Return 2x."""\n    {answer}',
                      metadata=solution_cell_meta("double")),
        test, *more])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def redact(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    redacted, _ = RedactHiddenTests().preprocess(copy.deepcopy(nb), {})
    return redacted


def graded_cell(nb: nbformat.NotebookNode, gid: str = "double-tests") -> nbformat.NotebookNode:
    return next(c for c in nb.cells if grade_id(c) == gid)


def shown(nb: nbformat.NotebookNode) -> str:
    """Return everything of a notebook (or cell) a page could show: its whole JSON."""
    return json.dumps(nb)


def test_a_failing_hidden_test_shows_only_its_score_place_and_the_instructor_s_message() -> None:
    nb = autograded(error(4, evalue="SECRET-negative: double(-3) should be -6"), answer="return abs(2 * x)")
    assert "SECRET" in shown(nb)  # the hole: source, traceback and message all carry the hidden test
    cell = graded_cell(redact(nb))
    assert cell.source == "assert double(2) == 4, 'double(2) should be 4'"  # the visible test, whole
    assert "SECRET" not in shown(redact(nb)) and "HIDDEN" not in shown(redact(nb))
    (output,) = cell.outputs
    assert "A hidden test of this cell failed." in output.traceback[0]
    assert output.traceback[1:] == ["negative numbers count too."]  # its block's message, not the other's
    assert cell.metadata.nbgrader.points == 2 and "checksum" not in cell.metadata.nbgrader


def test_a_hidden_block_without_a_message_shows_the_default_and_an_unknown_line_shows_every_message() -> None:
    big = graded_cell(redact(autograded(error(7, evalue="SECRET-big numbers"))))
    assert big.outputs[0].traceback[1:] == [DEFAULT_MESSAGE]
    unknown = graded_cell(redact(autograded(error(None, evalue="SECRET-big numbers"))))
    assert unknown.outputs[0].traceback[1:] == ["negative numbers count too."]
    forged = graded_cell(redact(autograded(error(999, evalue="SECRET"))))  # a line the cell does not have
    assert "hidden test" in forged.outputs[0].traceback[0] and "SECRET" not in shown(forged)


def test_a_failing_visible_test_shows_its_statement_name_and_message() -> None:
    cell = graded_cell(redact(autograded(error(1, evalue="double(2) should be 4"), answer="return x + 1")))
    text = "\n".join(cell.outputs[0].traceback)
    assert "AssertionError at line 1:" in text
    assert "assert double(2) == 4, 'double(2) should be 4'" in text
    assert "AssertionError\x1b[0m: double(2) should be 4" in text
    assert "SECRET" not in shown(cell)
    undefined = graded_cell(redact(autograded(error(1, "NameError", "name 'double' is not defined"))))
    assert "NameError\x1b[0m: name 'double' is not defined" in "\n".join(undefined.outputs[0].traceback)


def test_text_made_by_student_code_is_never_shown() -> None:
    """A message or an error name the student's code made could carry what it read of the hidden tests."""
    stolen = "assert double(-3) == -6, 'SECRET-negative"
    made = graded_cell(redact(autograded(error(1, evalue=f"got {stolen}"))))
    text = "\n".join(made.outputs[0].traceback)
    assert "AssertionError at line 1:" in text and "SECRET" not in text and "got" not in text
    named = graded_cell(redact(autograded(error(1, ename="SECRET_double_minus_3"))))
    assert "An error at line 1:" in named.outputs[0].traceback[0] and "SECRET" not in shown(named)
    hidden_name = graded_cell(
        redact(autograded(error(1, "NameError", "name 'SECRET_hidden' is not defined"))))
    assert "SECRET" not in shown(hidden_name)


def test_every_output_of_a_notebook_with_hidden_tests_is_dropped_but_the_grader_s_notes() -> None:
    stolen = "SECRET " + DOUBLE_TESTS
    printed = new_output("stream", name="stdout", text=stolen)
    displayed = new_output("display_data", data={"text/html": f"<b>{stolen}</b>", "text/plain": stolen})
    thief = new_code_cell("print(In)", outputs=[printed, displayed])
    skipped = new_code_cell("while True: pass", outputs=[new_output("error", ename="NotRunByGrader",
                                                                      evalue=stolen, traceback=[stolen])])
    nb = autograded(printed, more=[thief, skipped])
    nb.metadata.widgets = {"application/vnd.jupyter.widget-state+json": {"state": {"x": {"value": stolen}}}}
    thief.metadata.scrolled = stolen
    redacted = redact(nb)
    assert "SECRET" not in shown(redacted)
    assert graded_cell(redacted).outputs == [] and redacted.cells[-2].outputs == []
    assert redacted.cells[-1].outputs[0].traceback == ["The grader did not run this cell."]
    assert set(redacted.metadata) == {"kernelspec"} and "Feedback on submit" in redacted.cells[0].source


def test_redacting_with_the_feedback_exporter_s_config_logs_no_warning(caplog) -> None:
    # nbconvert's HTML exporter configures NbConvertBase.display_data_priority for every preprocessor;
    # nbgrader's do not take it as config, and traitlets said so in the log for every student graded
    from nbconvert.exporters import HTMLExporter

    exporter = HTMLExporter()
    exporter.register_preprocessor(RedactHiddenTests, enabled=True)
    with caplog.at_level("WARNING"):
        redacted, _ = exporter._preprocessors[-1].preprocess(copy.deepcopy(autograded(error(5))), {})
    assert "SECRET" not in shown(redacted)
    assert not [r for r in caplog.records if "not recognized" in r.getMessage()], caplog.text


def test_a_notebook_without_hidden_tests_is_left_as_it_is() -> None:
    nb = autograded(error(1, evalue="double(2) should be 4"))
    test = graded_cell(nb)
    test.source = test.source.split("\n### BEGIN")[0]
    assert redact(nb) == nb


def test_hidden_blocks_leave_exactly_what_release_shows() -> None:
    """The visible source and the hidden lines agree with nbgrader's ClearHiddenTests and with release/."""
    clearer = ClearHiddenTests()
    for path in sorted((COURSE_ROOT / "source").glob("*/*.ipynb")):
        release = nbformat.read(COURSE_ROOT / "release" / path.parent.name / path.name, as_version=4)
        released = {grade_id(c): c.source for c in release.cells if utils.is_grade(c)}
        for cell in nbformat.read(path, as_version=4).cells:
            if not utils.is_grade(cell) or utils.is_solution(cell):
                continue
            lines = cell.source.split("\n")
            blocks = hidden_blocks(cell.source, clearer.begin_test_delimeter, clearer.end_test_delimeter)
            kept = "\n".join(line for n, line in enumerate(lines, 1) if not any(b.holds(n) for b in blocks))
            redacted = RedactHiddenTests().test_cell(cell, clearer)
            assert kept == redacted.visible == released[grade_id(cell)], (path.name, grade_id(cell))


def test_the_setting_protects_by_default_until_the_due_date(tmp_path: Path) -> None:
    now = datetime.datetime(2026, 12, 1, 12)
    hour = datetime.timedelta(hours=1)
    protected = AutogradeSetting("ps01", True)
    assert protected.hidden_tests == HiddenTests.PROTECTED
    assert protected.protects_hidden_tests(None, now) and protected.protects_hidden_tests(now + hour, now)
    assert not protected.protects_hidden_tests(now - hour, now)
    assert protected.protects_hidden_tests(now, now)  # at the due date itself: still protected
    assert not AutogradeSetting("ps01", True,
                                hidden_tests=HiddenTests.SHOWN).protects_hidden_tests(now + hour, now)
    queue = Queue(tmp_path / "queue.sqlite")
    assert queue.setting("ps01").hidden_tests == HiddenTests.PROTECTED
    queue.configure("ps01", True, hidden_tests=HiddenTests.SHOWN)
    queue.configure("ps01", False, per_hour=2)  # other switches keep it
    assert queue.setting("ps01").hidden_tests == HiddenTests.SHOWN
    with pytest.raises(ValueError, match="protected or shown"):
        queue.configure("ps01", True, hidden_tests="hidden")


def test_a_queue_made_before_the_setting_protects(tmp_path: Path) -> None:
    import sqlite3

    db = sqlite3.connect(tmp_path / "queue.sqlite")
    db.execute("CREATE TABLE assignments (assignment TEXT PRIMARY KEY, enabled INTEGER NOT NULL, "
               "per_hour INTEGER NOT NULL DEFAULT 0, timeout REAL NOT NULL DEFAULT 120)")
    db.execute("INSERT INTO assignments VALUES ('ps01', 1, 0, 30)")
    db.commit()
    db.close()
    setting = Queue(tmp_path / "queue.sqlite").setting("ps01")
    assert (setting.enabled, setting.timeout, setting.hidden_tests) == (True, 30, HiddenTests.PROTECTED)


# ----------------------------------------------------------------------------------------------------------
# A real assignment, graded by the course's grader

THIEF_DISPLAY = "from IPython.display import display\nstolen_view = display('nothing yet', display_id=True)"
THIEF_PRINTS = ("hidden = '\\n'.join(get_ipython().user_ns['In'])\n"
                "print(hidden)\n"
                "stolen_view.update(hidden)\n"
                "raise RuntimeError(hidden)")
THIEF_PICK_DEVICE = '''def pick_device(prefer=None):
    """Return a value whose repr is every cell run so far: the visible test prints it in its message."""
    class Stolen:
        def __repr__(self):
            return "\\n".join(get_ipython().user_ns["In"])
    return Stolen()'''


def ps01_class() -> dict[str, nbformat.NotebookNode]:
    """Return student -> notebook: right, hidden-wrong, visible-wrong, thief."""
    release = nbformat.read(COURSE_ROOT / "release" / PS01 / f"{PS01}.ipynb", as_version=4)
    source = nbformat.read(COURSE_ROOT / "source" / PS01 / f"{PS01}.ipynb", as_version=4)
    right = solved(release, source)

    def answer(nb, gid: str, change) -> nbformat.NotebookNode:
        nb = copy.deepcopy(nb)
        cell = next(c for c in nb.cells if grade_id(c) == gid)
        cell.source = change(cell.source)
        return nb

    # torch.Size is a tuple to ==, so the visible tests pass; a hidden one asks for a plain tuple
    hidden_wrong = answer(right, "describe", lambda s: s.replace("tuple(t.shape)", "t.shape"))
    assert hidden_wrong != right
    visible_wrong = answer(right, "describe", lambda s: "\n".join(s.split("\n")[:2]) + "\n    return {}")
    thief = answer(right, "pick-device", lambda s: THIEF_PICK_DEVICE)
    imports = next(i for i, c in enumerate(thief.cells) if grade_id(c) == "imports")
    thief.cells.insert(imports + 1, new_code_cell(THIEF_DISPLAY))
    thief.cells.append(new_code_cell(THIEF_PRINTS))
    return {"right": right, "hidden-wrong": hidden_wrong, "visible-wrong": visible_wrong, "thief": thief}


@pytest.fixture(scope="module")
def ps01_graded(tmp_path_factory) -> Path:
    """Grade the four students of ps01 once (a scratch course with this course's ps01); return the course."""

    def grade(course: Path) -> dict:
        shutil.copyfile(COURSE_ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
        shutil.copytree(COURSE_ROOT / "source" / PS01, course / "source" / PS01)
        for student, nb in ps01_class().items():
            (course / "incoming" / student).mkdir(parents=True)
            nbformat.write(nb, course / "incoming" / student / f"{PS01}.ipynb")
        # In a process of its own, as instructors run it (and away from the state of the tests run before).
        done = subprocess.run([sys.executable, "-m", "autograder", "grade", PS01, str(course / "incoming"),
                               "--course", str(course), "--jobs", "2", "--timeout", "120", "--quiet",
                               "--show-hidden-tests"],  # feedback/ holds the full pages, as hub grade's
                              cwd=COURSE_ROOT, env=with_venv_on_path(), capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        with (course / "graded" / PS01 / "grades.csv").open(newline="") as handle:
            return {r["student"]: [r["status"], float(r["score"]), float(r["max_score"])]
                    for r in csv.DictReader(handle)}

    course, results = once_per_run(tmp_path_factory, "redact-ps01", grade)
    assert {s: r[0] for s, r in results.items()} == dict.fromkeys(ps01_class(), "graded"), results
    return course


def text_of(page: str) -> str:
    """Return the text a student reads on a page (tags dropped, entities decoded) and its scripts' text."""
    return BeautifulSoup(page, "html.parser").get_text()


def hidden_texts(out_of_process: bool | None = None) -> list[str]:
    """Return ps01's hidden test lines that appear nowhere in release/ (each at least 16 characters); of the
    cells tagged out-of-process only (True, and in no other cell), of the others only (False), or of all."""
    source = nbformat.read(COURSE_ROOT / "source" / PS01 / f"{PS01}.ipynb", as_version=4)
    release = nbformat.read(COURSE_ROOT / "release" / PS01 / f"{PS01}.ipynb", as_version=4)
    visible = "\n".join(c.source for c in release.cells)
    clearer = ClearHiddenTests()
    texts = set()
    tagged = {id(c) for c in source.cells if is_marked(c)}
    guarded = "\n".join(c.source for c in source.cells if id(c) not in tagged)
    for cell in source.cells:
        if out_of_process is not None and (id(cell) in tagged) != out_of_process:
            continue
        if utils.is_grade(cell) and not utils.is_solution(cell):
            lines = cell.source.split("\n")
            for block in hidden_blocks(cell.source, clearer.begin_test_delimeter, clearer.end_test_delimeter):
                for line in lines[block.first:block.last - 1]:
                    line = line.strip()
                    if (len(line) >= 16 and line not in visible and not line.startswith(FEEDBACK_PREFIX)
                            and not (out_of_process and line in guarded)):
                        texts.add(line)
    assert len(texts) > (10 if out_of_process else 100)
    return sorted(texts)


def leaks(text: str) -> list[str]:
    """Return the hidden test lines (or markers) found in a page's text."""
    found = [t for t in hidden_texts() if t in text]
    return found + [m for m in ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS") if m in text]


def full_page(course: Path, student: str) -> str:
    return (course / "graded" / PS01 / "feedback" / student / f"{PS01}.html").read_text(encoding="utf-8")


def safe_page(course: Path, student: str, tmp_path: Path) -> str:
    pages = student_feedback_pages(course, PS01, student, tmp_path / student)
    assert list(pages) == [PS01] and (tmp_path / student / f"{PS01}.html").read_text(
        encoding="utf-8") == pages[PS01]
    return pages[PS01]


SCORE = re.compile(r"\(Score: (?P<score>[\d.]+) / (?P<max>[\d.]+)\)")


@pytest.mark.notebook
@pytest.mark.parametrize("student", ["right", "hidden-wrong", "visible-wrong", "thief"])
def test_full_feedback_shows_the_hidden_tests(ps01_graded: Path, student: str) -> None:
    """The hole, as nbgrader's feedback (and `hub feedback`, after the due date) shows a submission."""
    assert leaks(text_of(full_page(ps01_graded, student)))


@pytest.mark.notebook
def test_the_thief_carries_no_hidden_test_out_of_the_kernel(ps01_graded: Path) -> None:
    nb = nbformat.read(ps01_graded / "autograded" / "thief" / PS01 / f"{PS01}.ipynb", as_version=4)
    thief_cells = [c for c in nb.cells if c.source in (THIEF_DISPLAY, THIEF_PRINTS)]
    outputs = json.dumps([c.outputs for c in thief_cells])
    assert "def describe" in outputs  # it printed, raised and displayed every cell the kernel ran
    # every test cell of ps01 runs out of process (the grader runs it): no hidden test reaches the kernel
    assert leaks(outputs) == []
    pick_tests = json.dumps([c.outputs for c in nb.cells if grade_id(c) == "pick-device-tests-default"])
    assert "not plain data" in pick_tests and leaks(pick_tests) == []  # Stolen's repr is never read


@pytest.mark.notebook
@pytest.mark.parametrize("student", ["right", "hidden-wrong", "visible-wrong", "thief"])
def test_feedback_on_submit_shows_no_hidden_test(ps01_graded: Path, student: str, tmp_path: Path) -> None:
    page = safe_page(ps01_graded, student, tmp_path)
    assert leaks(text_of(page)) == [] and leaks(page) == []
    assert "checksum" not in page
    release = nbformat.read(COURSE_ROOT / "release" / PS01 / f"{PS01}.ipynb", as_version=4)
    text = text_of(page)
    for cell in release.cells:
        if utils.is_grade(cell):
            for line in cell.source.split("\n"):
                assert line.strip() in text, (grade_id(cell), line)  # every visible test, whole
    full, safe = SCORE.search(text_of(full_page(ps01_graded, student))), SCORE.search(text)
    assert safe and full and safe.group(0) == full.group(0)  # the same score


@pytest.mark.notebook
def test_a_hidden_failure_shows_the_instructor_s_message(ps01_graded: Path, tmp_path: Path) -> None:
    text = text_of(safe_page(ps01_graded, "hidden-wrong", tmp_path))
    assert "A hidden test of this cell failed." in text
    assert "each value must be the plain Python type the prompt names" in text
    assert SCORE.search(text).group("score") != SCORE.search(text).group("max")


@pytest.mark.notebook
def test_a_visible_failure_shows_the_failing_visible_test(ps01_graded: Path, tmp_path: Path) -> None:
    text = text_of(safe_page(ps01_graded, "visible-wrong", tmp_path))
    assert re.search(r"AssertionError at line 3:\s*assert set\(info\) == .*\n.*use exactly the keys", text)
    assert "got []" not in text  # the message the student's answer filled in: seen in their own notebook


@pytest.mark.notebook
def test_an_honest_student_sees_every_visible_test_pass(ps01_graded: Path, tmp_path: Path) -> None:
    text = text_of(safe_page(ps01_graded, "right", tmp_path))
    score = SCORE.search(text)
    assert score.group("score") == score.group("max")
    assert "A hidden test of this cell failed" not in text and not re.search(r"(Error|An error) at line",
                                                                             text)


@pytest.mark.notebook
def test_due_date_is_read_from_the_gradebook(ps01_graded: Path) -> None:
    import subprocess

    from autograder.course import with_venv_on_path

    assert due_date(ps01_graded, PS01) is None
    copy_of = ps01_graded.parent / "redact-due"
    shutil.rmtree(copy_of, ignore_errors=True)
    shutil.copytree(ps01_graded, copy_of, ignore=shutil.ignore_patterns("autograded", "incoming", "graded"))
    subprocess.run(["nbgrader", "db", "assignment", "add", PS01, "--duedate", "2026-12-01 17:00:00 UTC"],
                   cwd=copy_of, env=with_venv_on_path(), capture_output=True, check=True)
    assert due_date(copy_of, PS01) == datetime.datetime(2026, 12, 1, 17)
