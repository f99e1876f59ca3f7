"""Feedback pages are rendered without nbconvert's BeautifulSoup pass, and keep what that pass added; the
grader's pages keep the hidden tests hidden unless asked."""

import re

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.highlight import Highlight2HTML

from autograder.grading.feedback_pages import NO_ALT_TEXT, FeedbackExporter, RememberingHighlight

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def notebook() -> nbformat.NotebookNode:
    """Return a notebook with a described image (markdown) and a plot without a description (an output)."""
    v4 = nbformat.v4
    plot = v4.new_code_cell("plot()", outputs=[v4.new_output("display_data", data={"image/png": PNG})])
    return v4.new_notebook(cells=[v4.new_markdown_cell("![a bar chart of copy times](chart.png)"), plot,
                                  v4.new_code_cell("print('<b>not bold</b>')", outputs=[
                                      v4.new_output("stream", name="stdout", text="<b>not bold</b>\n")])])


def test_every_image_gets_alt_text_and_the_page_has_what_nbconverts_has():
    ours, _ = FeedbackExporter(template_name="classic").from_notebook_node(notebook())
    theirs, _ = HTMLExporter(template_name="classic").from_notebook_node(notebook())
    images = re.findall(r"<img[^>]*>", ours)
    assert len(images) == 2 and all(" alt=" in tag for tag in images)
    assert 'alt="a bar chart of copy times"' in ours and NO_ALT_TEXT.strip() in ours
    ours_soup, theirs_soup = BeautifulSoup(ours, "html.parser"), BeautifulSoup(theirs, "html.parser")
    for tag in ("img", "div", "pre", "style", "script", "b"):
        assert len(ours_soup.find_all(tag)) == len(theirs_soup.find_all(tag)), tag
    assert ours_soup.get_text(" ", strip=True) == theirs_soup.get_text(" ", strip=True)
    assert not ours_soup.find_all("b")  # the student's printed markup stays text


def test_a_remembered_highlight_is_the_one_nbconvert_makes_and_each_cell_is_highlighted_once(monkeypatch):
    highlighted = []
    plain = Highlight2HTML.__call__
    monkeypatch.setattr(Highlight2HTML, "__call__",
                        lambda self, *args: highlighted.append(args[0]) or plain(self, *args))
    remembering, theirs = RememberingHighlight(), Highlight2HTML()
    cells = [("x = 1  # <b>", None, None), ("%%bash\necho hi", None, {"magics_language": "bash"}),
             ("%%bash\necho hi", None, None), ("x = 1  # <b>", "python", {"tags": ["a"]})]
    for source, language, metadata in cells * 3:
        assert remembering(source, language, metadata) == plain(theirs, source, language, metadata)
    assert highlighted == [source for source, *_ in cells]  # each once: by language, and as bash or IPython


def test_a_class_s_pages_highlight_the_shared_cells_once(monkeypatch):
    highlighted = []
    plain = Highlight2HTML.__call__
    monkeypatch.setattr(Highlight2HTML, "__call__",
                        lambda self, *args: highlighted.append(args[0]) or plain(self, *args))
    exporter = FeedbackExporter(template_name="classic")
    page = notebook()
    first, _ = exporter.from_notebook_node(page)
    again, _ = exporter.from_notebook_node(page)
    assert first == again and sorted(highlighted) == ["plot()", "print('<b>not bold</b>')"]


def test_a_long_cell_is_highlighted_each_time_and_never_kept(monkeypatch):
    highlighted = []
    plain = Highlight2HTML.__call__
    monkeypatch.setattr(Highlight2HTML, "__call__",
                        lambda self, *args: highlighted.append(len(args[0])) or plain(self, *args))
    remembering = RememberingHighlight()
    long_cell = "x = 1\n" * (RememberingHighlight.LONGEST // 6 + 1)  # a student's megabyte cell, in small
    for _ in range(3):
        assert remembering(long_cell) == plain(Highlight2HTML(), long_cell)
    assert highlighted == [len(long_cell)] * 3
    assert remembering._remembered.cache_info().currsize == 0


@pytest.mark.notebook
def test_the_graders_pages_keep_hidden_tests_hidden_unless_the_instructor_shows_them(tmp_path):
    """`python -m autograder grade` writes pages an instructor may hand out before the due date: a hidden test
    shows its score and a message, never its code (nbgrader's own pages print it between BEGIN HIDDEN TESTS
    markers). `--show-hidden-tests` gives nbgrader's pages as they are, for after the due date."""
    from tests.grade_commands import in_one_python
    from tests.grading.test_grading_end_to_end import assignment, make_course

    (tmp_path / "course").mkdir()
    course = make_course(tmp_path / "course")
    for student, double in {"right": "return 2 * x", "wrong": "return abs(2 * x)"}.items():
        (tmp_path / "class" / student).mkdir(parents=True)
        nbformat.write(assignment(double), tmp_path / "class" / student / "tiny.ipynb")
    grade = ["grade", "tiny", str(tmp_path / "class"), "--course", str(course), "--timeout", "120", "--quiet"]
    outcomes = in_one_python(course, [*grade, "--out", str(tmp_path / "kept")],
                             [*grade, "--out", str(tmp_path / "shown"), "--show-hidden-tests"])
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    hidden_code = "double(-3) == -6"  # the hidden test's own line (tests.factories.tiny_assignment)

    def text(out: str, student: str) -> str:  # what a reader sees (the code is split into highlighted spans)
        page = (tmp_path / out / "feedback" / student / "tiny.html").read_text(encoding="utf-8")
        return BeautifulSoup(page, "html.parser").get_text()

    for student in ("right", "wrong"):
        kept, shown = text("kept", student), text("shown", student)
        assert "double(2) == 4" in kept and "double(2) == 4" in shown, "the visible test is on both pages"
        assert hidden_code not in kept and "BEGIN HIDDEN TESTS" not in kept, student
        assert hidden_code in shown and "BEGIN HIDDEN TESTS" in shown, "nbgrader's page, hidden tests and all"
    assert "A hidden test of this cell failed" in text("kept", "wrong")  # a score and a message, no code
