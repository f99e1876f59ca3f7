"""Make what a student wrote inert wherever staff look at it: rendered notebooks, our pages, the grader.

Three layers against the attacks tests/hub/test_hub_browser_xss.py tries:

1. nbconvert's own sanitising path (`HTMLExporter.sanitize_html`: its templates pass markdown, raw cells,
   text/html and text/markdown through the `clean_html` filter and print no script for
   application/javascript or widget views), with `clean_html` here in place of nbconvert's (bleach too, but
   nbconvert's allows no <p>, heading, <img> or table head, so honest markdown came out as escaped tags), plus
   `InertStudentContent`, a preprocessor for what the templates still print: markdown cells (nbgrader's
   formgrade and feedback templates render them without the sanitiser, so they become cleaned HTML here),
   widget state (its loader pulls the widget manager from a CDN), the notebook's title and other metadata,
   SVG attachments, output types nobody reviews, grade ids printed into attributes.
2. A Content-Security-Policy: static pages (feedback pages, summary.html) carry one in a `<meta>` that forbids
   every script; the grader service's server sends one that keeps scripts, connections and images on its
   own origin, so a script that slipped through can neither load more code nor send anything away.
3. Files a student handed in are served sandboxed: jupyter_server's /files/ already adds `sandbox
   allow-scripts`; formgrader's submission files get `sandbox` (no script at all) from the server
   extension here.
"""

import functools
import html
import re

import bleach
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor
from traitlets.config import Config

STATIC_PAGE_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; "
                   "base-uri 'none'; form-action 'none'; frame-src 'none'; object-src 'none'")
GRADER_SERVER_CSP = ("frame-ancestors 'self'; default-src 'self'; "
                     "script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
                     "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
                     "worker-src 'self' blob:; frame-src 'self' blob: data:; object-src 'none'; "
                     "base-uri 'self'; form-action 'self'")
SUBMITTED_FILE_CSP = GRADER_SERVER_CSP + "; sandbox"

KEPT_OUTPUT_TYPES = frozenset({"text/plain", "text/html", "text/markdown", "text/latex", "image/png",
                               "image/jpeg", "image/gif", "image/svg+xml", "application/json"})
KEPT_ATTACHMENT_TYPES = frozenset({"image/png", "image/jpeg", "image/gif"})
EMPTY_GIF = "R0lGODlhAQABAAAAACwAAAAAAQABAAA="  # a 1x1 transparent GIF
KEPT_NOTEBOOK_METADATA = frozenset({"kernelspec", "language_info", "nbgrader"})
REMEMBERED_MARKDOWN = 8_000  # characters (the course's longest markdown cell has about 2,900)
SAFE_GRADE_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
HEAD = re.compile(r"<head(\s[^>]*)?>", re.IGNORECASE)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # in a name a student chose: no new lines, no ANSI colours
RASTER_DATA = re.compile(r"^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*$")
HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
KEPT_TAGS = frozenset({*bleach.ALLOWED_TAGS, *HEADINGS, "p", "br", "hr", "div", "span", "pre", "img", "table",
                       "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "sup", "sub", "del", "s",
                       "kbd", "dl", "dt", "dd", "details", "summary", "mark", "small", "u"})
KEPT_ATTRIBUTES = {"*": ["class", "title", "align"], "a": ["href", "title", "class"],
                   "img": ["src", "alt", "title", "width", "height"], "th": ["colspan", "rowspan", "align"],
                   "td": ["colspan", "rowspan", "align"], **{h: ["id"] for h in HEADINGS}}


def _kept_attribute(tag: str, name: str, value: str) -> bool:
    """Return whether bleach keeps an attribute: those allowed, an image only from raster data or a URL."""
    allowed = KEPT_ATTRIBUTES.get(tag, []) + KEPT_ATTRIBUTES["*"]
    if tag == "img" and name == "src":
        return bool(RASTER_DATA.match(value)) or not value.strip().lower().startswith("data:")
    return name in allowed


def clean_html(text) -> str:
    """Return HTML with only inert tags and attributes left; anything else shows as text (nbconvert's filter).
    """
    text = text.decode() if isinstance(text, bytes) else str(text)
    return bleach.clean(text, tags=KEPT_TAGS, attributes=_kept_attribute,
                        protocols=["http", "https", "mailto", "data"], strip_comments=True)


def inert_markdown(source: str, attachments: dict) -> str:
    """Return markdown rendered to cleaned HTML, as one HTML block that a later markdown pass leaves alone.

    Most markdown on a class's pages is the instructor's, the same for every student: a cell without
    attachments and no longer than REMEMBERED_MARKDOWN characters is rendered once per process and
    remembered (256 at most: a student's cell may be megabytes long, and a grader's memory is shared).
    """
    if not attachments and len(source) <= REMEMBERED_MARKDOWN:
        return _remembered_markdown(source)
    return _inert_markdown(source, attachments)


def _inert_markdown(source: str, attachments: dict) -> str:
    renderer = IPythonRenderer(escape=False, attachments=attachments, anchor_link_text="\u00b6")
    cleaned = clean_html(MarkdownWithMath(renderer=renderer).render(source))
    # A blank line would end the HTML block; a newline entity keeps the same text (inside <pre> too).
    return '<div class="inert-markdown">\n' + re.sub(r"\n[ \t]*(?=\n)", "&#10;", cleaned.strip()) + "\n</div>"


@functools.lru_cache(maxsize=256)
def _remembered_markdown(source: str) -> str:
    return _inert_markdown(source, {})


class InertStudentContent(Preprocessor):
    """nbconvert step: drop or escape what a student controls and nbconvert's sanitiser leaves alone."""

    def preprocess(self, nb, resources):
        """Keep only the notebook metadata a page needs (no widget state, no title), then every cell."""
        for key in [k for k in nb.metadata if k not in KEPT_NOTEBOOK_METADATA]:
            del nb.metadata[key]
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        """Keep raster attachments (others become empty images), reviewable outputs, plain grade ids."""
        for bundle in cell.get("attachments", {}).values():
            for mime in [m for m in bundle if m not in KEPT_ATTACHMENT_TYPES]:
                del bundle[mime]
            if not bundle:
                # the markdown still names it: nbconvert fails on a missing one
                bundle["image/gif"] = EMPTY_GIF
        if cell.cell_type == "markdown":
            cell.source = inert_markdown(cell.source, cell.get("attachments", {}))
            cell.attachments = {}  # embedded above as data: URLs
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            dropped = [m for m in data if m not in KEPT_OUTPUT_TYPES]
            for mime in dropped:
                del data[mime]
            if dropped and not data:  # say what was there, as text (escaped on the page), names cut short
                data["text/plain"] = left_out(dropped)
        grading = cell.metadata.get("nbgrader", {})
        if not SAFE_GRADE_ID.match(str(grading.get("grade_id", "x"))):
            grading["grade_id"] = html.escape(str(grading["grade_id"]), quote=True)
        return cell, resources


def left_out(types: list[str], most: int = 3, longest: int = 60) -> str:
    """Return the note that stands for an output none of whose types a page shows."""
    names = [CONTROL.sub("?", t if len(t) <= longest else t[:longest] + "...") for t in types[:most]]
    more = f" and {len(types) - most} more" if len(types) > most else ""
    return f"[an output not shown here: {', '.join(names)}{more}]"


def exporter_config() -> Config:
    """Return HTMLExporter settings that render a student's notebook inert (formgrader, feedback pages)."""
    config = Config()
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.skip_svg_encoding = False  # SVG only as <img src="data:...">: no script runs in <img>
    config.HTMLExporter.preprocessors = [f"{__name__}.InertStudentContent"]
    config.HTMLExporter.filters = {"clean_html": f"{__name__}.clean_html"}
    return config


def with_csp(page: str) -> str:
    """Return a static page with a <meta> Content-Security-Policy forbidding every script, first in <head>."""
    meta = f'<meta http-equiv="Content-Security-Policy" content="{STATIC_PAGE_CSP}">'
    found = HEAD.search(page)
    if found is None:
        return meta + page
    return page[:found.end()] + meta + page[found.end():]


def configure_grader_server(c: Config) -> None:
    """Set the grader service's server up: inert formgrader views, its CSP, submitted files sandboxed."""
    c.merge(exporter_config())
    c.ServerApp.tornado_settings = {"headers": {"Content-Security-Policy": GRADER_SERVER_CSP}}
    c.ServerApp.jpserver_extensions = {**c.ServerApp.get("jpserver_extensions", {}), __name__: True}


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Serve formgrader's submission files (what a student handed in) in a CSP sandbox: no script runs."""
    from nbgrader.server_extensions.formgrader.handlers import SubmissionFilesHandler

    SubmissionFilesHandler.content_security_policy = property(lambda _self: SUBMITTED_FILE_CSP)
    serverapp.log.info("device lab: formgrader's submission files are served in a CSP sandbox")
