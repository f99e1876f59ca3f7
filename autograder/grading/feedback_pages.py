"""Feedback pages: nbgrader's own feedback template (the one `nbgrader generate_feedback` uses), made cheaper.

`nbgrader generate_feedback` builds a fresh HTML exporter for every student, so every page recompiles the
templates. Here each worker keeps one nbconvert HTMLExporter, configured as generate_feedback configures its
own, for all its students. What the student wrote is made inert (autograder.safe_html): nbconvert's
sanitiser, our preprocessor, and a Content-Security-Policy in each page that forbids every script.
"""

from pathlib import Path

from autograder.safe_html import exporter_config, with_csp


class FeedbackWriter:
    """Renders feedback pages for one student after another with a single exporter."""

    def __init__(self, config) -> None:
        import nbgrader
        from nbconvert.exporters import HTMLExporter
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
        self.exporter = HTMLExporter(config=merged)
        # as generate_feedback (its CSS step is off)
        self.exporter.register_preprocessor(GetGrades, enabled=True)

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
            page.write_text(with_csp(html), encoding="utf-8")
            written.append(page)
        return written
