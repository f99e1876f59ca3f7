"""What the course's diagrams share: the style, the colours, boxes, arrows and bars, and a deterministic SVG
writer.

`machine_diagram.py` and `diagrams.py` draw with these. Each drawing function returns a matplotlib figure laid
out in inches (the axes fill the figure, and one data unit is one inch), so font sizes in points are what a
reader sees when the SVG is shown at its own width: about 700 px for a 7.2 in figure, a notebook's column.
"""

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

# Okabe and Ito's palette, told apart with every common colour-vision deficiency; fills are light tints of it.
ORANGE, SKY, GREEN, YELLOW = "#E69F00", "#56B4E9", "#009E73", "#F0E442"
BLUE, VERMILLION, PURPLE, GREY = "#0072B2", "#D55E00", "#CC79A7", "#999999"
HOST_FILL, DEVICE_FILL = "#eef3fb", "#eefaf0"
PAGEABLE_FILL, PINNED_FILL, STAGING_FILL = "#fde2c8", "#f6c98a", "#fff3e3"
KERNEL_FILL, COPY_FILL, HOST_WORK_FILL = "#a9d8f5", "#f6c98a", "#dddddd"

# One look for every diagram, and SVGs that are byte for byte the same on every run: a fixed salt for the ids
# of clip paths (a random one otherwise), no date, and text kept as text (smaller files, searchable labels).
STYLE = {
    "svg.hashsalt": "devicelab-diagrams",
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.monospace": ["DejaVu Sans Mono"],
    "font.size": 10,
    "hatch.linewidth": 0.8,
}
WIDTH = 7.2  # inches: 518 pt, about 700 px, a notebook's column


def canvas(width: float, height: float) -> tuple[Figure, plt.Axes]:
    """A figure of `width` x `height` inches whose axes fill it, one data unit an inch, no axis drawn."""
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def box(ax, x, y, w, h, text, colour, size=10, weight="normal", edge="black", hatch=None, family=None):
    """A rounded box with centred text."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08", facecolor=colour,
                                edgecolor=edge, linewidth=1, hatch=hatch))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, weight=weight,
                family=family, wrap=True)


def bar(ax, start, end, y, h, text="", colour=KERNEL_FILL, size=9.5, hatch=None, edge="black",
        weight="normal"):
    """A square-cornered bar of a timeline, from `start` to `end` at height `y`, with its text in the middle
    (on a white ground where the bar is hatched)."""
    ax.add_patch(Rectangle((start, y), end - start, h, facecolor=colour, edgecolor=edge, linewidth=0.9,
                           hatch=hatch, zorder=2))
    if text:
        ground = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"} if hatch else None
        ax.text((start + end) / 2, y + h / 2, text, ha="center", va="center", fontsize=size, weight=weight,
                bbox=ground, zorder=3)


def arrow(ax, start, end, text="", both=False, colour="black", offset=(0, 0.12), size=8.5, style="-|>",
          linestyle="-", width=1.5):
    """An arrow from `start` to `end`, its text above the middle (moved by `offset`)."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="<|-|>" if both else style, mutation_scale=14,
                                 color=colour, linewidth=width, zorder=5, shrinkA=0, shrinkB=0,
                                 linestyle=linestyle))
    if text:
        ax.text((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1], text, ha="center",
                va="bottom", fontsize=size, color=colour)


def number(ax, x, y, n, size=8.5, colour="black"):
    """A small circled number, to tie a line of code to the place where it acts."""
    ax.add_patch(Circle((x, y), 0.1, facecolor="white", edgecolor=colour, linewidth=1, zorder=6))
    ax.text(x, y, str(n), ha="center", va="center", fontsize=size, weight="bold", color=colour, zorder=7)


def time_axis(ax, x0, x1, y, text="time"):
    """The arrow of time under a timeline."""
    arrow(ax, (x0, y), (x1, y), colour="#444444", width=1.2)
    ax.text(x1, y - 0.08, text, ha="right", va="top", fontsize=9.5, color="#444444", style="italic")


def render(draw: Callable[[], Figure], path: Path, tight: bool = False) -> Path:
    """Draw a figure in the diagrams' style and write it to `path` as an SVG that is the same on every run."""
    with plt.rc_context(STYLE):
        fig = draw()
        try:
            fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight" if tight else None)
        finally:
            plt.close(fig)
    return path
