"""Feedback pages: nbgrader's own feedback template (the one `nbgrader generate_feedback` uses), made cheaper.

`nbgrader generate_feedback` builds a fresh HTML exporter for every student, so every page recompiles the
templates, and nbconvert then re-parses every page with BeautifulSoup only to add two accessibility
attributes: together more than a second per student, about a quarter of grading one. Here each worker keeps
one exporter for all its students and adds the same attributes with regular expressions. If nbconvert's
internals ever differ from what this expects, the page is rendered the standard way instead.
"""

import re
from pathlib import Path

MISSING_ALT = re.compile(r"<img(?![^>]*\balt=)")
FOCUSABLE = re.compile(r'(<div\b[^>]*\bclass="[^"]*(?<![\w-])(?:jp-Cell-inputWrapper|jp-OutputArea-output)'
                       r'(?![\w-])[^"]*")(?![^>]*\btabindex=)')


def accessible(html: str) -> str:
    """Add what nbconvert's HTMLExporter adds: alt text on bare images, tabindex on cell inputs and outputs."""
    html = MISSING_ALT.sub('<img alt="No description has been provided for this image"', html)
    return FOCUSABLE.sub(r'\1 tabindex="0"', html)


def _exporter_class():
    from nbconvert.exporters import HTMLExporter, TemplateExporter

    class FeedbackExporter(HTMLExporter):
        """HTMLExporter without the BeautifulSoup pass (see the module docstring)."""

        def from_notebook_node(self, nb, resources=None, **kw):
            try:
                from nbconvert.filters.highlight import Highlight2HTML
                from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

                langinfo = nb.metadata.get("language_info", {})
                lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
                highlight = self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
                resources = self._init_resources(resources)
                data_type = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self,
                                                  resources=resources)
            except (ImportError, AttributeError, TypeError):
                return super().from_notebook_node(nb, resources, **kw)
            self.register_filter("highlight_code", highlight)
            self.register_filter("filter_data_type", data_type)
            html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
            return accessible(html), resources

    return FeedbackExporter


class FeedbackWriter:
    """Renders feedback pages for one student after another with a single exporter."""

    def __init__(self, config) -> None:
        import nbgrader
        from nbgrader.preprocessors import GetGrades
        from traitlets.config import Config

        formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
        ours = Config()
        ours.Exporter.default_preprocessors = []
        ours.HTMLExporter.template_name = "feedback"
        ours.HTMLExporter.extra_template_basedirs = [str(formgrader / "templates")]
        ours.HTMLExporter.extra_template_paths = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist"
                                                      / "css")]
        merged = Config(config)
        merged.merge(ours)
        self.exporter = _exporter_class()(config=merged)
        self.exporter.register_preprocessor(GetGrades, enabled=True)  # as generate_feedback (its CSS step is off)

    def write(self, autograded: Path, dest: Path, student: str, assignment: str, db_url: str) -> list[Path]:
        """Write <notebook>.html for every autograded notebook of one student into `dest`."""
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        for path in sorted(autograded.glob("*.ipynb")):
            resources = {"nbgrader": {"student": student, "assignment": assignment, "notebook": path.stem,
                                      "db_url": db_url},
                         "metadata": {"name": path.stem, "path": str(path.parent)}, "unique_key": path.stem}
            html, _ = self.exporter.from_filename(str(path), resources=resources)
            page = dest / f"{path.stem}.html"
            page.write_text(html, encoding="utf-8")
            written.append(page)
        return written
