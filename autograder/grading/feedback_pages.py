"""Feedback pages: nbgrader's own feedback template (the one `nbgrader generate_feedback` uses), made cheaper.

`nbgrader generate_feedback` builds a fresh HTML exporter for every student, so every page recompiles the
templates. Here each worker keeps one nbconvert HTMLExporter, configured as generate_feedback configures its
own, for all its students. What the student wrote is made inert (autograder.safe_html): nbconvert's
sanitiser, our preprocessor, and a Content-Security-Policy in each page that forbids every script.
"""

import functools
import re
from html import escape
from pathlib import Path

from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

from autograder.safe_html import exporter_config, with_csp

IMG_WITHOUT_ALT = re.compile(r"<img(?![^>]*\salt=)(?=[\s>/])", re.IGNORECASE)
NO_ALT_TEXT = ' alt="No description has been provided for this image"'


class RememberingHighlight(Highlight2HTML):
    """nbconvert's code highlighter, remembering what it highlighted: most code cells on a class's pages are
    the same for every student (the instructor's code, the tests), so each worker highlights each of them
    once. What the page shows depends only on the code, the language and a cell's `magics_language`: the key.
    Only short cells are remembered, and only so many: a student's cell may be megabytes long, and what a
    worker keeps counts against the memory of the next student it grades.
    """

    MEMORY = 256  # cells
    LONGEST = 8_000  # characters of a cell remembered (the course's longest test cell has about 3,300)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._remembered = functools.lru_cache(maxsize=self.MEMORY)(self._highlight)

    def _highlight(self, source: str, language: str | None, magics: str | None) -> str:
        return super().__call__(source, language, {"magics_language": magics} if magics else None)

    def __call__(self, source, language=None, metadata=None) -> str:
        """Return the highlighted HTML of `source`, as Highlight2HTML does."""
        magics = metadata.get("magics_language") if metadata else None
        magics = magics if isinstance(magics, str) else None
        if len(source) > self.LONGEST:
            return self._highlight(source, language, magics)
        return self._remembered(source, language, magics)


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTML exporter without its last pass, which parses and rewrites the whole page with
    BeautifulSoup (about 0.5 s for a 230 KiB feedback page on the project's machine) to add alt text to images
    and tab stops to JupyterLab's cells; the feedback template has no such cells, so only the alt text is
    added, here. Code is highlighted by one RememberingHighlight per language, kept for every page."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._highlighters: dict[str | None, RememberingHighlight] = {}

    def from_notebook_node(self, nb, resources=None, **kw):
        """Render the page as HTMLExporter does (its filters), then give every image without alt text one."""
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        if lexer not in self._highlighters:
            self._highlighters[lexer] = RememberingHighlight(pygments_lexer=lexer, parent=self)
        self.register_filter("highlight_code", self.filters.get("highlight_code", self._highlighters[lexer]))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources))
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return IMG_WITHOUT_ALT.sub("<img" + NO_ALT_TEXT, html), resources


class FeedbackWriter:
    """Renders feedback pages for one student after another with a single exporter."""

    def __init__(self, config) -> None:
        """Build the one exporter, configured as `nbgrader generate_feedback` configures its own."""
        import nbgrader
        from nbgrader.preprocessors import GetGrades
        from traitlets.config import Config

        formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
        ours = exporter_config()
        ours.Exporter.default_preprocessors = []
        ours.HTMLExporter.template_name = "feedback"
        ours.HTMLExporter.extra_template_basedirs = [str(formgrader / "templates")]
        ours.HTMLExporter.extra_template_paths = [
            str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
        merged = Config(config)
        merged.merge(ours)
        self.exporter = FeedbackExporter(config=merged)
        # as generate_feedback (its CSS step is off)
        self.exporter.register_preprocessor(GetGrades, enabled=True)

    def write(self, autograded: Path, dest: Path, student: str, assignment: str, db_url: str,
              course_id: str = "") -> list[Path]:
        """Write <notebook>.html for every autograded notebook of one student into `dest`."""
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        due = due_line(db_url, course_id, assignment, student) if course_id else None
        for path in sorted(autograded.glob("*.ipynb")):
            resources = {"nbgrader": {"student": student, "assignment": assignment, "notebook": path.stem,
                                      "db_url": db_url},
                         "metadata": {"name": path.stem, "path": str(path.parent)}, "unique_key": path.stem}
            html, _ = self.exporter.from_filename(str(path), resources=resources)
            if due:  # under the page's heading (the template's, before any of the student's content)
                html = html.replace("</h4>", f'</h4>\n        <p class="due-date">{escape(due)}</p>', 1)
            page = dest / f"{path.stem}.html"
            page.write_text(with_csp(html), encoding="utf-8")
            written.append(page)
        return written


def due_line(db_url: str, course_id: str, assignment: str, student: str) -> str | None:
    """Return the line that tells a student which due date applied to them (their extension, if any) and
    whether their submission made it; None when the assignment has no due date."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course_id) as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        due, own, submitted = submission.assignment.duedate, submission.duedate, submission.timestamp
        if own is None:
            return None
        text = f"Due {own:%Y-%m-%d %H:%M:%S} UTC"
        if submission.extension:
            hours = submission.extension.total_seconds() / 3600
            text += f" (your extension of {hours:g} h; the class's due date: {due:%Y-%m-%d %H:%M:%S} UTC)"
        if submitted is not None:
            late = submission.total_seconds_late
            text += f". Submitted {submitted:%Y-%m-%d %H:%M:%S} UTC: " + (
                f"{late / 3600:.2f} h late." if late > 0 else "on time.")
        return text
