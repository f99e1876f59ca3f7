"""Feedback pages are rendered without nbconvert's BeautifulSoup pass, and keep what that pass added."""

import re

import nbformat
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter

from autograder.grading.feedback_pages import NO_ALT_TEXT, FeedbackExporter

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
