"""The course as a book: a website built from the same notebooks and docs, with `make book`.

`pages` turns one notebook or markdown file into the page the book shows (pure functions on text and
nbformat notebooks); `site` lays every page out in a staging folder that mirrors the repository and runs
Sphinx on it (MyST-NB and the book theme, configured in `book/conf.py`). Nothing is executed: a lesson shows
only the outputs recorded on a GPU, labelled as such.
"""
