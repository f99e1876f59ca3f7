"""Lay the book out in a staging folder that mirrors the repository, then build the HTML site with Sphinx.

The staging folder holds the front page (README.md, with the book's tables of contents appended), the
guides from docs/, the lessons and the released assignments (never source/), each made into its page by
`book.pages`, and the images they show. Each lesson's page shows its outputs from a copy executed on a CPU
(`book.execution.executed_copy`, in build/executed/): the lesson tests read the same copies, so a
test run executes each lesson once, and a build reuses a copy until the lesson, the course's package or an
installed version changes. Its paths are the repository's, so a page's Colab and download links
and every link between pages are the same in the book as on GitHub. Files are rewritten only when their
content changes, so Sphinx rebuilds only the pages that changed.
"""

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.colab_cells import load_repository
from autograder.course import COURSE_ROOT, assignment_notebooks, assignments, lessons
from book.pages import (
    assignment_page,
    lesson_module,
    lesson_page,
    load_figures,
    predictions_in,
    rewrite_links,
)

BOOK = Path(__file__).resolve().parent
FIGURES = BOOK / "recorded_figures.json"
# The guides, in the order the book lists them; each is written for one reader (README, "Where to go next").
GUIDES = ("docs/students.md", "docs/instructors.md", "docs/hub.md", "docs/lms.md", "docs/security.md",
          "docs/measurements.md")
REFERENCE = ("docs/cheatsheet.md", "docs/facts.md")
IMAGES = "docs/images"


@dataclass(frozen=True)
class Layout:
    """Where `make book` puts what it makes."""

    root: Path  # build/book/

    @property
    def staged(self) -> Path:
        """The pages Sphinx reads."""
        return self.root / "src"

    @property
    def html(self) -> Path:
        """The website."""
        return self.root / "html"

    @property
    def doctrees(self) -> Path:
        """Sphinx's cache between builds."""
        return self.root / "doctrees"


def _write(path: Path, text: str) -> None:
    """Write `text` unless the file already holds it (Sphinx then leaves the page alone)."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _toctree(caption: str, pages: list[str]) -> str:
    entries = "\n".join(page.rsplit(".", 1)[0] for page in pages)
    return f"```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{entries}\n```\n"


def executed_lessons(root: Path = COURSE_ROOT, folder: Path | None = None) -> dict[str, Path]:
    """Return each lesson's executed copy (repository path -> copy), executing those that have none yet: on a
    CPU, whatever this machine has, so the book is the same wherever it is built."""
    from nbclient.exceptions import CellExecutionError

    from book.execution import EXECUTED, executed_copies

    folder = folder or (EXECUTED if root == COURSE_ROOT else root / "build" / "executed")
    copies = {}
    for path in lessons(root):  # one at a time, to name the lesson that fails
        try:
            copies.update(executed_copies([path], gpu=False, folder=folder))
        except CellExecutionError as error:
            raise RuntimeError(f"{path.name} does not run top to bottom, so its page cannot show its "
                               f"outputs:\n{error}") from error
    return {path.relative_to(root).as_posix(): copy for path, copy in copies.items()}


def stage(root: Path, target: Path, executed: dict[str, Path] | None = None) -> list[str]:
    """Write every page of the book under `target`, laid out as in the repository; return their paths. A
    lesson with an executed copy in `executed` (repository path -> copy) shows its outputs."""
    repo = load_repository(root)
    lesson_pages = [p.relative_to(root).as_posix() for p in lessons(root)]
    assignment_pages = [nb.relative_to(root).as_posix() for a in assignments(root, folder="release")
                        for nb in assignment_notebooks(a, root, folder="release")]
    pages = ["index.md", *lesson_pages, *assignment_pages, *GUIDES, *REFERENCE]
    images = {p.relative_to(root).as_posix() for p in (root / IMAGES).iterdir() if p.is_file()}
    shown = set(pages) | images

    def in_book(path: str) -> bool:
        return path in shown

    def in_repository(path: str) -> bool:
        return (root / path).exists()

    renamed = {"README.md": "index.md"}
    front = rewrite_links((root / "README.md").read_text(encoding="utf-8"), "index.md", repo, in_book,
                          in_repository, renamed)
    tables = [_toctree("Lessons", lesson_pages), _toctree("Problem sets", assignment_pages),
              _toctree("Guides", list(GUIDES)), _toctree("Reference", list(REFERENCE))]
    _write(target / "index.md", front.rstrip("\n") + "\n\n" + "\n".join(tables))
    for page in (*GUIDES, *REFERENCE):
        text = (root / page).read_text(encoding="utf-8")
        _write(target / page, rewrite_links(text, page, repo, in_book, in_repository, renamed))
    figures = load_figures(FIGURES)
    for page in lesson_pages:
        nb = nbformat.read(root / page, as_version=4)
        module = lesson_module(nb)
        predictions = {}
        if module is not None:
            source = root / "devicelab" / "exercises" / f"{module}.py"
            where = source.relative_to(root).as_posix()
            predictions = predictions_in(source.read_text(encoding="utf-8"), where)
        name = Path(page).stem
        ran = nbformat.read(executed[page], as_version=4) if page in (executed or {}) else None
        made = lesson_page(nb, page, repo, predictions, [f for f in figures if f.lesson == name], in_book,
                           in_repository, executed=ran)
        _write(target / page, nbformat.writes(made) + "\n")
    for page in assignment_pages:
        made = assignment_page(nbformat.read(root / page, as_version=4), page, repo, in_book, in_repository)
        _write(target / page, nbformat.writes(made) + "\n")
    for image in sorted(images):
        destination = target / image
        if not destination.exists() or destination.read_bytes() != (root / image).read_bytes():
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / image, destination)
    # a page or image no longer in the course
    for stale in list(target.rglob("*")):
        if stale.is_file() and stale.relative_to(target).as_posix() not in shown:
            stale.unlink()
    return pages


def build(root: Path = COURSE_ROOT, out: Path | None = None, *, jobs: str = "1", quiet: bool = True,
          executed: Path | None = None) -> Path:
    """Execute the lessons that have no executed copy in `executed` (default build/executed/), stage the book
    and build its HTML with Sphinx (warnings are errors); return the site's folder."""
    from sphinx.cmd.build import build_main

    layout = Layout(out or root / "build" / "book")
    started = time.perf_counter()
    copies = executed_lessons(root, executed)
    ran = time.perf_counter() - started
    stage(root, layout.staged, copies)
    arguments = ["-b", "html", "-c", str(BOOK), "-d", str(layout.doctrees), "-W", "--keep-going", "-j", jobs,
                 str(layout.staged), str(layout.html)]
    if quiet:
        arguments.insert(0, "-q")
    if build_main(arguments) != 0:
        raise RuntimeError("Sphinx could not build the book (its messages are above)")
    print(f"The book is in {layout.html}/index.html ({time.perf_counter() - started:.1f} s, of which "
          f"{ran:.1f} s for the lessons' executed copies)")
    return layout.html
