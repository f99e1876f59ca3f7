"""What an instructor reads after grading: grades.csv and a one-page class summary (summary.html)."""

import csv
import html
import io
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from autograder.grading.results import (
    CRASHED,
    DISK,
    GRADED,
    MEMORY,
    PROCESSES,
    STATUSES,
    TIMEOUT,
    StudentResult,
    write_atomic,
)

CSV_HEADER = ("student", "assignment", "score", "max_score", "late_penalty", "status", "detail", "flags")
RAN = (GRADED, TIMEOUT, MEMORY, PROCESSES, DISK, CRASHED)


def number(value: float) -> str:
    """Format a score the way people write it: 10, 7.5, 0.25."""
    return f"{value:.2f}".rstrip("0").rstrip(".") if value % 1 else str(int(value))


def csv_text(results: list[StudentResult]) -> str:
    """Return grades.csv: one row per student, sorted by student id."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for r in sorted(results, key=lambda r: r.student):
        detail = " ".join(r.detail.split())
        flags = "; ".join(" ".join(f.split()) for f in r.flags)
        writer.writerow([r.student, r.assignment, number(r.final_score), number(r.max_score), number(r.late_penalty),
                         r.status, detail, flags])
    return out.getvalue()


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
    ran = [r for r in results if r.status in RAN and r.ran]
    order: dict[tuple[str, str], float] = {}
    for r in results:
        for c in r.cells:
            if c.kind == "test":
                order.setdefault((c.notebook, c.grade_id), c.max_score)
    found = []
    for (notebook, gid), points in order.items():
        cells = [c for r in ran for c in r.cells if (c.notebook, c.grade_id) == (notebook, gid)]
        errors = Counter(c.error for c in cells if not c.passed and c.error)
        common = errors.most_common(1)[0][0] if errors else ""
        found.append(Exercise(notebook, gid, points, sum(c.passed for c in cells), len(cells), common))
    return found


def histogram_svg(scores: list[float], max_score: float, width: int = 560, height: int = 180) -> str:
    """Return an inline SVG bar chart of the score distribution."""
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
    bar = (width - 40) / len(edges)
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 40}" '
              f'role="img" aria-label="score distribution">')]
    for i, (count, label) in enumerate(zip(counts, labels, strict=True)):
        h = (height - 20) * count / top
        x = 30 + i * bar
        parts.append(f'<rect x="{x + 2:.1f}" y="{height - h:.1f}" width="{bar - 4:.1f}" height="{h:.1f}" '
                     f'fill="#4c72b0"><title>{count} students</title></rect>')
        if count:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{height - h - 4:.1f}" font-size="11" '
                         f'text-anchor="middle">{count}</text>')
        parts.append(f'<text x="{x + bar / 2:.1f}" y="{height + 14}" font-size="11" text-anchor="middle">'
                     f'{html.escape(label)}</text>')
    parts.append(f'<text x="{width / 2:.0f}" y="{height + 34}" font-size="12" text-anchor="middle">'
                 f'score (out of {number(max_score)})</text></svg>')
    return "\n".join(parts)


def summary_html(assignment: str, results: list[StudentResult], isolation: str, feedback: Path) -> str:
    """Return the class summary page: status counts, score distribution, per-exercise pass rates, students."""
    esc = html.escape
    counts = Counter(r.status for r in results)
    ran = [r for r in results if r.status in RAN]
    max_score = max((r.max_score for r in results), default=0)
    scores = [r.final_score for r in results]
    mean = number(round(statistics.mean(scores), 2)) if scores else "-"
    median = number(round(statistics.median(scores), 2)) if scores else "-"
    rows_ex = "".join(
        f"<tr><td>{esc(e.notebook)}</td><td>{esc(e.grade_id)}</td><td class=n>{number(e.points)}</td>"
        f"<td><div class=bar><span style='width:{100 * e.rate:.0f}%'></span></div> {100 * e.rate:.0f}%"
        f" ({e.passed}/{e.attempted})</td><td>{esc(e.common_error)}</td></tr>" for e in exercises(results))
    rows_st = []
    flagged = [r for r in results if r.flags]
    for r in sorted(results, key=lambda r: (not r.flags, r.student)):
        folder = feedback / r.student
        links = " ".join(f"<a href='feedback/{quote(r.student)}/{quote(p.name)}'>{esc(p.stem)}</a>"
                         for p in sorted(folder.glob("*.html"))) if folder.is_dir() else ""
        flags = "".join(f"<li>{esc(f)}</li>" for f in r.flags)
        rows_st.append(f"<tr class='{r.status}{' flagged' if r.flags else ''}'><td>{esc(r.student)}</td>"
                       f"<td class=n>{number(r.final_score)} / {number(r.max_score)}</td><td>{r.status}</td>"
                       f"<td>{esc(r.detail)}</td><td>{f'<ul>{flags}</ul>' if flags else ''}</td><td>{links}</td></tr>")
    status_line = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(assignment)}: class summary</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 70em; }}
table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ border-bottom: 1px solid #ddd; padding: 4px 8px;
text-align: left; vertical-align: top; }} td.n {{ text-align: right; white-space: nowrap; }}
.bar {{ display: inline-block; width: 8em; height: 0.8em; background: #eee; }}
.bar span {{ display: block; height: 100%; background: #55a868; }}
tr.timeout td, tr.memory td, tr.processes td, tr.disk td, tr.crashed td {{ background: #fff4e5; }}
tr.invalid td, tr.missing td {{ background: #fdecea; }}
tr.flagged td {{ background: #fce4ec; }} td ul {{ margin: 0; padding-left: 1.2em; }}
</style></head><body>
<h1>{esc(assignment)}: class summary</h1>
<p>{len(results)} students: {esc(status_line)}. Mean score {mean}, median {median} (out of {number(max_score)}).
{len(ran)} notebooks ran. Isolation: {esc(isolation)}.</p>
<h2>Score distribution</h2>
{histogram_svg(scores, max_score)}
<h2>Exercises</h2>
<p>Pass rate: the share of students whose notebook ran that earned all of a test cell's points.</p>
<table><tr><th>notebook</th><th>test cell</th><th>points</th><th>pass rate</th><th>most common error</th></tr>
{rows_ex}</table>
<h2>Students</h2>
{_flag_note(len(flagged))}
<table><tr><th>student</th><th>score</th><th>status</th><th>detail</th><th>flags</th><th>feedback</th></tr>
{"".join(rows_st)}</table>
</body></html>
"""


def _flag_note(count: int) -> str:
    if not count:
        return "<p>No submission tried to change how the tests run.</p>"
    return (f"<p class=flags><strong>{count} flagged</strong> (listed first): their code changed how later cells "
            "run. The grader undid it and scored what the tests gave; review them.</p>")


def write_reports(out: Path, assignment: str, results: list[StudentResult], isolation: str) -> None:
    """Write grades.csv and summary.html into `out`."""
    write_atomic(out / "grades.csv", csv_text(results))
    write_atomic(out / "summary.html", summary_html(assignment, results, isolation, out / "feedback"))
