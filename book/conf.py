"""Sphinx's settings for the course's book (`make book`, which runs `python -m book build`).

Sphinx with MyST-NB and sphinx-book-theme: the engine of Jupyter Book 1. Jupyter Book 2 (mystmd) renders its
HTML with a site theme it downloads when it builds, which the project's machines cannot reach (docs/
instructors.md, *Publishing the course as a book*, says why). MyST-NB executes nothing: the pages show what
`book.pages` made of them, a lesson's outputs taken from its executed copy (`book.site`; the lesson tests
read the same copy).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autograder.colab_cells import load_repository

REPO = load_repository(ROOT)

project = "Device Lab"
author = "the Device Lab authors"
copyright = "the Device Lab authors"
extensions = ["myst_nb", "sphinx_design"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3  # `[...](#a-heading)` links, as GitHub makes them
nb_execution_mode = "off"  # the staged pages hold their outputs already
nb_merge_streams = True
# .md files are MyST markdown; the notebooks are read by MyST-NB
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["**/.ipynb_checkpoints"]
suppress_warnings = ["mystnb.unknown_mime_type"]
language = "en"

html_theme = "sphinx_book_theme"
html_title = "Device Lab"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_js_files = ["toggles.js", "search_snippets.js"]  # the menu at every width; useful search snippets
html_favicon = "_static/favicon.svg"  # a host and a device (without one, every browser asks for /favicon.ico)
html_copy_source = False  # pages link to the repository's own files, never to the staged copies
html_show_sourcelink = False
html_last_updated_fmt = None
html_context = {"default_mode": "auto"}  # light or dark as the reader's system is (no theme error logged)
html_theme_options = {
    "repository_url": f"https://github.com/{REPO.name}",
    "repository_branch": REPO.branch,
    "path_to_docs": "",  # the staged pages have the repository's paths
    "use_repository_button": True,
    "use_download_button": False,  # each notebook page links to its file in the repository instead
    "use_fullscreen_button": False,
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "show_toc_level": 2,
    "home_page_in_toc": True,
}
