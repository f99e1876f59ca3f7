"""What an instructor reads after grading: grades.csv and a one-page class summary (summary.html)."""

import functools
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from autograder.csv_cells import figure, rows_text
from autograder.grading.results import CellKind, Status, StudentResult, write_atomic
from autograder.safe_html import STATIC_PAGE_CSP

CSV_HEADER = ("student", "assignment", "score", "max_score", "late_penalty", "status", "detail", "flags")


def number(value: float) -> str:
    """Format a score the way people write it: 10, 7.5, 0.25."""
    return f"{value:.2f}".rstrip("0").rstrip(".") if value % 1 else str(int(value))


def csv_text(results: list[StudentResult]) -> str:
    """Return grades.csv: a row per student, sorted by student id (text spreadsheet-safe, scores bare)."""
    rows: list[list] = [list(CSV_HEADER)]
    for r in sorted(results, key=lambda r: r.student):
        detail = " ".join(r.detail.split())
        flags = "; ".join(" ".join(f.split()) for f in r.flags)
        scores = (figure(float(number(x))) for x in (r.final_score, r.max_score, r.late_penalty))
        rows.append([r.student, r.assignment, *scores, r.status, detail, flags])
    return rows_text(rows)


@dataclass(frozen=True)
class Exercise:
    """How the class did on one graded cell."""

    notebook: str
    grade_id: str
    points: float
    passed: int
    attempted: int
    common_error: str

    @property
    def rate(self) -> float:
        """Return the fraction of students (whose notebook ran) that earned the cell's points."""
        return self.passed / self.attempted if self.attempted else 0.0


def exercises(results: list[StudentResult]) -> list[Exercise]:
    """Return per-cell pass rates over the students whose notebook ran, in notebook order."""
    ran = [r for r in results if r.status.ran_notebooks and r.ran]
    order: dict[tuple[str, str], float] = {}
    for r in results:
        for c in r.cells:
            if c.kind == CellKind.TEST:
                order.setdefault((c.notebook, c.grade_id), c.max_score)
    found = []
    for (notebook, gid), points in order.items():
        cells = [c for r in ran for c in r.cells if (c.notebook, c.grade_id) == (notebook, gid)]
        errors = Counter(c.error for c in cells if not c.passed and c.error)
        common = errors.most_common(1)[0][0] if errors else ""
        found.append(Exercise(notebook, gid, points, sum(c.passed for c in cells), len(cells), common))
    return found


@dataclass(frozen=True)
class Bar:
    """One bar of the score histogram."""

    x: float
    size: float
    count: int
    label: str


@dataclass(frozen=True)
class Histogram:
    """The score distribution, laid out for the SVG template."""

    bars: list[Bar]
    step: float
    max_label: str
    width: int
    height: int


@dataclass(frozen=True)
class StudentRow:
    """One student's line of the summary page."""

    student: str
    score: str
    max_score: str
    status: str
    detail: str
    flags: list[str]
    links: list[tuple[str, str]]  # (href, text) of each feedback page


def histogram(scores: list[float], max_score: float, width: int = 560, height: int = 180) -> Histogram:
    """Return the score distribution: one bar per point for small integer scores, else ten bins."""
    if max_score <= 20 and all(float(s).is_integer() for s in scores) and float(max_score).is_integer():
        edges = [(k, k) for k in range(int(max_score) + 1)]
        labels = [str(k) for k in range(int(max_score) + 1)]
    else:
        step = max_score / 10 if max_score else 1
        edges = [(i * step, (i + 1) * step) for i in range(10)]
        labels = [number(round(lo, 2)) for lo, _ in edges]
    counts = [0] * len(edges)
    for s in scores:
        for i, (lo, hi) in enumerate(edges):
            last = i == len(edges) - 1
            if (lo == hi and s == lo) or (lo <= s < hi) or (last and lo <= s <= hi):
                counts[i] += 1
                break
    top = max(counts, default=0) or 1
    step = (width - 40) / len(edges)
    bars = [Bar(30 + i * step, (height - 20) * count / top, count, label)
            for i, (count, label) in enumerate(zip(counts, labels, strict=True))]
    return Histogram(bars, step, number(max_score), width, height)


@functools.cache
def _templates() -> Environment:
    """Return the page templates (autoescaped, as nbgrader's own pages are)."""
    env = Environment(loader=PackageLoader("autograder.grading", "templates"), autoescape=True,
                      undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters["number"] = number
    return env


def histogram_svg(scores: list[float], max_score: float) -> Markup:
    """Return an inline SVG bar chart of the score distribution."""
    return Markup(_templates().get_template("histogram.svg.j2").render(h=histogram(scores, max_score)))


def summary_html(assignment: str, results: list[StudentResult], isolation: str, feedback: Path) -> str:
    """Return the class summary page: status counts, score distribution, per-exercise pass rates, students."""
    counts = Counter(r.status for r in results)
    max_score = max((r.max_score for r in results), default=0)
    scores = [r.final_score for r in results]
    rows = []
    for r in sorted(results, key=lambda r: (not r.flags, r.student)):
        folder = feedback / r.student
        pages = sorted(folder.glob("*.html")) if folder.is_dir() else []
        rows.append(StudentRow(r.student, number(r.final_score), number(r.max_score), r.status, r.detail,
                               r.flags,
                               [(f"feedback/{quote(r.student)}/{quote(p.name)}", p.stem) for p in pages]))
    return _templates().get_template("summary.html.j2").render(
        assignment=assignment, csp=STATIC_PAGE_CSP, students=rows, isolation=isolation,
        exercises=exercises(results),
        status_line=", ".join(f"{counts[s]} {s}" for s in Status if counts[s]),
        mean=number(round(statistics.mean(scores), 2)) if scores else "-",
        median=number(round(statistics.median(scores), 2)) if scores else "-",
        max_score=number(max_score), ran=sum(r.status.ran_notebooks for r in results),
        flagged=sum(bool(r.flags) for r in results), histogram=histogram_svg(scores, max_score))


def write_reports(out: Path, assignment: str, results: list[StudentResult], isolation: str) -> None:
    """Write grades.csv and summary.html into `out`."""
    write_atomic(out / "grades.csv", csv_text(results))
    write_atomic(out / "summary.html", summary_html(assignment, results, isolation, out / "feedback"))


@dataclass(frozen=True)
class Attention:
    """A student an instructor should look at in one assignment, and why."""

    student: str
    score: str
    max_score: str
    why: str


def needs_attention(results: list[StudentResult]) -> list[Attention]:
    """Return the students to look at: not graded (and why), flagged for tampering, or under half the points;
    the not graded first, then the flagged, then the lowest scores."""
    found = []
    for r in results:
        reasons = []
        if r.status != Status.GRADED:
            reasons.append(f"{r.status}: {r.detail}" if r.detail else str(r.status))
        reasons += [f"flagged: {f}" for f in r.flags]
        if r.status == Status.GRADED and r.max_score and r.final_score < r.max_score / 2:
            reasons.append("under half the points")
        if reasons:
            rank = (0 if r.status != Status.GRADED else 1 if r.flags else 2, r.final_score, r.student)
            found.append((rank, Attention(r.student, number(r.final_score), number(r.max_score),
                                          "; ".join(reasons))))
    return [a for _, a in sorted(found, key=lambda pair: pair[0])]


def class_index_html(graded: dict[str, list[StudentResult]], next_step: str) -> str:
    """Return one page over every graded assignment (assignment -> its results, each in a folder of that name
    beside the page): its score histogram, each test cell's pass rate, the students to look at."""
    assignments = []
    for name, results in graded.items():
        counts = Counter(r.status for r in results)
        scores = [r.final_score for r in results]
        max_score = max((r.max_score for r in results), default=0)
        assignments.append({
            "name": name, "href": f"{quote(name)}/summary.html", "count": len(results),
            "status_line": ", ".join(f"{counts[s]} {s}" for s in Status if counts[s]),
            "mean": number(round(statistics.mean(scores), 2)) if scores else "-",
            "median": number(round(statistics.median(scores), 2)) if scores else "-",
            "max_score": number(max_score), "histogram": histogram_svg(scores, max_score),
            "exercises": exercises(results), "attention": needs_attention(results)})
    return _templates().get_template("class_index.html.j2").render(
        csp=STATIC_PAGE_CSP, assignments=assignments, next_step=next_step)


def write_class_index(out: Path, next_step: str) -> Path | None:
    """Write out/index.html over every assignment graded in out/<assignment>/ (its results/); return it, or
    None when there is none. A result that cannot be read is left out."""
    graded: dict[str, list[StudentResult]] = {}
    for folder in sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else []:
        results = []
        for path in sorted((folder / "results").glob("*.json")):
            try:
                results.append(StudentResult.from_json(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError, KeyError):
                continue
        if results and (folder / "summary.html").is_file():
            graded[folder.name] = sorted(results, key=lambda r: r.student)
    if not graded:
        return None
    write_atomic(out / "index.html", class_index_html(graded, next_step))
    return out / "index.html"


def not_graded_page(assignment: str, notebook: str, max_score: float, status: str, detail: str) -> str:
    """Return the feedback page of a submission that could not be graded (no notebook ran), saying why."""
    return _templates().get_template("not_graded.html.j2").render(
        csp=STATIC_PAGE_CSP, assignment=assignment, notebook=notebook, max_score=max_score, status=status,
        detail=detail)
