"""Student content rendered for staff is inert (autograder/safe_html.py): each vector, and honest content
kept.

Pages are rendered with nbconvert's HTMLExporter and formgrader's own template, as the grader service renders
a submission, and with nbconvert's lab template. A small HTML walker reports every place where the browser
would run script; the hostile notebook marks each of its payloads with a tag, so a failure names the vector.
"""

import base64
import html
import html.parser
import re
import warnings
from pathlib import Path

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from autograder import safe_html
from autograder.grading.report import summary_html
from autograder.grading.results import Status, StudentResult

MARK = "PWN"  # every payload carries MARK-<vector>
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def js(tag: str) -> str:
    return f"alert('{MARK}-{tag}')"


def hostile() -> nbformat.NotebookNode:
    """Return a notebook with script in every place a student controls (outputs as grading would leave them).
    """
    svg = (f"<svg xmlns='http://www.w3.org/2000/svg' onload=\"{js('svg-onload')}\">"
           f"<script>{js('svg-script')}</script></svg>")
    markdown = new_markdown_cell(
        f"<script>{js('md-script')}</script>\n\n<img src=x onerror=\"{js('md-img')}\">\n\n"
        f"<iframe srcdoc=\"<script>{js('md-srcdoc')}</script>\"></iframe>\n\n"
        f"<a href=\"javascript:{js('md-link')}\">more</a>\n\n"
        f"<object data=\"x.svg\" onload=\"{js('md-object')}\">"
        "</object>\n\n![plot](attachment:plot.svg)\n")
    markdown.attachments = {"plot.svg": {"image/svg+xml": base64.b64encode(svg.encode()).decode()}}
    markdown.metadata["tags"] = [f"\"><img src=x onerror=\"{js('cell-tag')}\">"]
    html_out = f"<script>{js('out-html')}</script><img src=x onerror=\"{js('out-onerror')}\">"
    code = new_code_cell(f"# <script>{js('code-source')}</script>", outputs=[
        new_output("display_data", {"text/html": html_out, "text/plain": "shown"}),
        new_output("display_data", {"image/svg+xml": svg.replace("svg-", "out-svg-")}),
        new_output("display_data", {"application/javascript": js("out-javascript")}),
        new_output("display_data", {"text/markdown": html_out.replace("out-", "out-md-")}),
        new_output("display_data", {"application/vnd.jupyter.widget-view+json":
                                    {"model_id": "evil", "version_major": 2, "version_minor": 0}}),
        new_output("execute_result", {"text/html": f"<a href=x onclick=\"{js('out-onclick')}\">x</a>"},
                   execution_count=1),
    ])
    code.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False, "schema_version": 3,
                                 "grade_id": f"x\"><img src=x onerror=\"{js('grade-id')}\">"}
    raw = new_raw_cell(f"<script>{js('raw')}</script>", metadata={"format": "text/html"})
    nb = new_notebook(cells=[markdown, code, raw])
    nb.metadata["title"] = f"</title><script>{js('title')}</script>"
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "version_major": 2, "version_minor": 0, "state": {"evil": {
            "model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls",
            "model_module_version": "2.0.0", "state": {"value": f"<img src=x onerror=\"{js('widget')}\">"}}}}}
    return nb


def honest() -> nbformat.NotebookNode:
    """Return what an honest student's graded notebook holds: a plot, text, a traceback, a table, code, LaTeX.
    """
    return new_notebook(cells=[
        new_markdown_cell("| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nx = a < b\n```\n\n"
                          "Energy $E = mc^2$.\n"),
        new_code_cell("plot()", outputs=[
            new_output("display_data", {"image/png": PNG, "text/plain": "<Figure>"}),
            new_output("stream", name="stdout", text="loss 0.25\n"),
            new_output("error", ename="AssertionError", evalue="a tensor stayed on cpu",
                       traceback=["\x1b[0;31mAssertionError\x1b[0m: a tensor stayed on cpu"]),
            new_output("execute_result", {"text/html": "<table><tr><td>df</td></tr></table>",
                                          "text/plain": "df"}, execution_count=2)]),
    ])


class LiveScript(html.parser.HTMLParser):
    """Collect every MARK the browser would run: script bodies, on* handlers, javascript: URLs, srcdoc."""

    def __init__(self) -> None:
        super().__init__()
        self.live: set[str] = set()
        self.in_script = False

    def handle_starttag(self, tag, attrs) -> None:
        for name, value in attrs:
            value = value or ""
            risky = name.startswith("on") or name == "srcdoc" or value.strip().lower().startswith(
                "javascript:")
            if risky or tag in ("iframe", "object", "embed"):
                self.live.update(re.findall(rf"{MARK}-[\w-]+", value))
        if tag in ("iframe", "object", "embed"):
            self.live.add(f"<{tag}>")  # none of nbgrader's or nbconvert's pages has one
        self.in_script = tag == "script"

    def handle_endtag(self, tag) -> None:
        self.in_script = False

    def handle_data(self, data) -> None:
        if self.in_script:
            self.live.update(re.findall(rf"{MARK}-[\w-]+", data))


def live(page: str) -> set[str]:
    """Return what would run in the page."""
    walker = LiveScript()
    walker.feed(page)
    return walker.live


def formgrade_exporter(config=None) -> HTMLExporter:
    """Return the exporter formgrader builds (HTMLExporter(config=...) with its template), given a config."""
    import nbgrader
    from traitlets.config import Config

    config = Config(config or Config())
    folder = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [str(folder)]
    return HTMLExporter(config=config)


FORMGRADE = {"assignment_id": "ps01", "notebook_id": "ps01", "submission_id": "1", "index": 0, "total": 1,
             "base_url": "/services/device-lab", "student": "mal", "last_name": "", "first_name": "",
             "notebook_path": "autograded/mal/ps01/ps01.ipynb"}


def formgrade_page(nb: nbformat.NotebookNode, config=None) -> str:
    page, _ = formgrade_exporter(config).from_notebook_node(nb, resources=dict(FORMGRADE))
    return page


def test_the_attack_is_real_without_the_defence() -> None:
    ran = live(formgrade_page(hostile()))
    assert {f"{MARK}-md-script", f"{MARK}-md-img", f"{MARK}-out-html", f"{MARK}-out-onerror",
            f"{MARK}-out-javascript", f"{MARK}-md-srcdoc", f"{MARK}-md-link", f"{MARK}-grade-id"} <= ran, ran


@pytest.mark.parametrize("template", ["formgrade", "lab", "classic"])
def test_no_student_script_survives_the_exporter(template: str) -> None:
    if template == "formgrade":
        page = formgrade_page(hostile(), safe_html.exporter_config())
    else:
        config = safe_html.exporter_config()
        config.HTMLExporter.template_name = template
        page, _ = HTMLExporter(config=config).from_notebook_node(hostile())
    assert live(page) == set(), live(page)
    assert "jupyter-widgets" not in page and "widget-state" not in page  # no widget loader, no state
    attachment = hostile().cells[0].attachments["plot.svg"]["image/svg+xml"]
    assert attachment not in page  # the SVG attachment is gone (SVG outputs stay, as <img> only)


def test_svg_outputs_become_images_where_no_script_runs() -> None:
    svg = "<svg xmlns='http://www.w3.org/2000/svg'><circle r='4'/></svg>"
    nb = new_notebook(cells=[new_code_cell("plot()",
                                           outputs=[new_output("display_data", {"image/svg+xml": svg})])])
    page = formgrade_page(nb, safe_html.exporter_config())
    assert 'src="data:image/svg+xml;base64,' in page and "<circle" not in page


def test_honest_content_survives() -> None:
    page = formgrade_page(honest(), safe_html.exporter_config())
    assert f'src="data:image/png;base64,{PNG}"' in page
    assert "loss 0.25" in page and "a tensor stayed on cpu" in page
    assert "<td>1</td>" in page and "<td>df</td>" in page
    assert '<span class="o">&lt;</span>' in page and "E = mc^2" in page and "<th>a</th>" in page


def test_the_preprocessor_keeps_plain_grade_ids_and_drops_what_no_page_needs() -> None:
    nb = hostile()
    nb.cells[1].metadata.nbgrader.grade_id = "to-device"
    nb, _ = safe_html.InertStudentContent().preprocess(nb, {})
    assert nb.cells[1].metadata.nbgrader.grade_id == "to-device"
    assert set(nb.metadata) <= safe_html.KEPT_NOTEBOOK_METADATA
    assert nb.cells[0].get("attachments") == {}
    kept = [set(o.data) for o in nb.cells[1].outputs]
    assert not any("application/javascript" in k or "application/vnd.jupyter.widget-view+json" in k
                   for k in kept)


def test_static_pages_forbid_every_script() -> None:
    page = safe_html.with_csp('<!DOCTYPE html>\n<html>\n<head lang="en">\n<title>x</title></head></html>')
    assert re.search(r'<head lang="en"><meta http-equiv="Content-Security-Policy" content="[^"]*'
                     r"default-src 'none'", page)
    assert "script-src" not in safe_html.STATIC_PAGE_CSP  # default-src 'none' covers scripts
    assert safe_html.with_csp("<p>no head</p>").startswith("<meta http-equiv")


def test_the_summary_escapes_names_and_forbids_scripts(tmp_path: Path) -> None:
    name = f"<img src=x onerror=\"{js('student')}\">"
    (tmp_path / name).mkdir()
    (tmp_path / name / f"{name}.html").write_text("page")
    result = StudentResult(student=name, assignment="ps01", status=Status.GRADED,
                           detail=f"<script>{js('detail')}</script>",
                           flags=[f"<script>{js('flag')}</script>"])
    page = summary_html("ps01", [result], "none", tmp_path)
    assert live(page) == set()
    assert f'http-equiv="Content-Security-Policy" content="{safe_html.STATIC_PAGE_CSP}"' in html.unescape(
        page)


def test_the_grader_server_renders_formgrader_inert_and_sandboxes_submitted_files() -> None:
    from unittest import mock

    from nbgrader.server_extensions.formgrader.handlers import SubmissionFilesHandler
    from traitlets.config import Config

    c = Config()
    c.ServerApp.jpserver_extensions = {"nbgrader.server_extensions.formgrader": True}
    safe_html.configure_grader_server(c)
    assert c.ServerApp.jpserver_extensions == {"nbgrader.server_extensions.formgrader": True,
                                               "autograder.safe_html": True}
    assert c.ServerApp.tornado_settings["headers"]["Content-Security-Policy"] == safe_html.GRADER_SERVER_CSP
    assert "frame-ancestors 'self'" in safe_html.GRADER_SERVER_CSP  # JupyterLab frames formgrader
    assert live(formgrade_page(hostile(), c)) == set()  # formgrader builds HTMLExporter(config=self.config)
    saved = SubmissionFilesHandler.__dict__.get("content_security_policy")
    try:
        safe_html._load_jupyter_server_extension(mock.Mock())
        assert SubmissionFilesHandler.content_security_policy.fget(None).endswith("; sandbox")
    finally:
        if saved is None:
            del SubmissionFilesHandler.content_security_policy
        else:
            SubmissionFilesHandler.content_security_policy = saved


def test_short_markdown_is_rendered_once_and_long_or_attached_markdown_every_time() -> None:
    remembered = safe_html._remembered_markdown
    remembered.cache_clear()
    hostile = "# Task\n\n<img src=x onerror=alert(1)> and <script>alert(2)</script>"
    first, again = safe_html.inert_markdown(hostile, {}), safe_html.inert_markdown(hostile, {})
    assert first == again == safe_html._inert_markdown(hostile, {})
    assert "onerror" not in first and "<script" not in first
    assert remembered.cache_info().hits == 1
    safe_html.inert_markdown("word " * (safe_html.REMEMBERED_MARKDOWN // 5 + 1), {})
    safe_html.inert_markdown("![p](attachment:p.png)", {"p.png": {"image/png": "iVBORw0KGgo="}})
    assert remembered.cache_info().currsize == 1  # neither was kept


def test_an_output_with_nothing_reviewable_says_what_was_left_out_in_escaped_text() -> None:
    hostile_type = "application/x-<img src=x onerror=alert(1)>" + "y" * 500
    nb = new_notebook(cells=[new_code_cell("show()", outputs=[
        new_output("display_data", {"application/javascript": "alert(1)"}),
        new_output("display_data", {hostile_type: "z"}),
        new_output("display_data", {"application/x-a]\n\x1b[32mScore: 10 of 10": "z"}),
        new_output("display_data", {"text/plain": "kept"})])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nbconvert warns of an output it has no way to show
        page = formgrade_page(nb, safe_html.exporter_config())
    assert "not shown here: application/javascript" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img src=x" not in page
    assert "y" * 100 not in page  # a type's name is cut short
    assert "kept" in page and "not shown here: text/plain" not in page
    # a type's name cannot start a line of its own or colour itself into a fake score
    assert "not shown here: application/x-a]??[32mScore: 10 of 10]" in page
