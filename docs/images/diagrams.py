"""Draw the course's diagrams: `make diagrams` (or `.venv/bin/python docs/images/diagrams.py [FOLDER]`)
writes every SVG in DIAGRAMS into docs/images/ (or FOLDER). tests/lessons/test_diagrams.py redraws each and compares
it with the committed file, so change a drawing here, then run `make diagrams` and commit both.

Each picture draws only what docs/facts.md records (lesson 05 shows the queue and the upload, 06 the upload,
07 the streams and events, 09 a training step's memory); keep every label true to PyTorch when you change one.
"""

import sys
from collections.abc import Callable
from pathlib import Path

import machine_diagram
import matplotlib.pyplot as plt
from drawing import (
    BLUE,
    COPY_FILL,
    DEVICE_FILL,
    GREEN,
    HOST_FILL,
    HOST_WORK_FILL,
    KERNEL_FILL,
    ORANGE,
    PAGEABLE_FILL,
    PINNED_FILL,
    PURPLE,
    SKY,
    STAGING_FILL,
    VERMILLION,
    WIDTH,
    arrow,
    bar,
    box,
    canvas,
    number,
    render,
    time_axis,
)

HERE = Path(__file__).parent
WAIT_HATCH = "////"
GPU_MEMORY_FILL = "#cfe8d5"
MONO_EM = 0.602  # the advance of one DejaVu Sans Mono character, in ems
GREY_LAUNCH = "#777777"  # a launch: a sliver of the host's time


def _clock(x0, x1, span):
    """Turn a time of the story (0 to `span`) into inches along a timeline from `x0` to `x1`."""
    return lambda s: x0 + s * (x1 - x0) / span


def _rows(ax, labels):
    """The row labels at the left of a timeline: {y: text}."""
    for y, text in labels.items():
        ax.text(0.08, y, text, ha="left", va="center", fontsize=10, weight="bold")


def host_queue():
    """The host's Python thread queues kernels on a stream and goes on; the GPU runs them later, one after
    another; `loss.item()` is a sync point, where the host waits for everything queued before it."""
    fig, ax = canvas(WIDTH, 3.9)
    x0, x1, span = 1.45, WIDTH - 0.1, 4.0
    t = _clock(x0, x1, span)
    host_y, gpu_y, h = 2.65, 0.8, 0.42

    ax.text(WIDTH / 2, 3.72, "The host queues work; the GPU runs it later", ha="center", va="center",
            fontsize=12, weight="bold")
    _rows(ax, {host_y + h / 2: "host\n(Python thread)", 1.85: "the stream's\nqueue", gpu_y + h / 2: "GPU"})

    # the host: three launches, its own work, then .item(), which waits
    launches = [(0.0, 0.12), (0.12, 0.24), (0.24, 0.36)]
    for start, end in launches:
        bar(ax, t(start), t(end), host_y, h, colour=GREY_LAUNCH)
    bar(ax, t(0.36), t(1.6), host_y, h, "own work: next batch", HOST_WORK_FILL)
    bar(ax, t(1.6), t(1.68), host_y, h, colour=GREY_LAUNCH)
    bar(ax, t(1.68), t(3.45), host_y, h, "loss.item(): waits", "white", hatch=WAIT_HATCH, edge=VERMILLION)
    bar(ax, t(3.45), t(4.0), host_y, h, "goes on", HOST_WORK_FILL)
    ax.text(t(0.0), host_y + h + 0.08, "3 launches: each queues\na kernel and returns", ha="left",
            va="bottom", fontsize=9.5)
    ax.text(t(2.57), host_y + h + 0.08, "a sync point: the host waits for\neverything queued before it",
            ha="center", va="bottom", fontsize=9.5, color=VERMILLION)

    # the GPU: the kernels one after another, then the copy of the loss to the host
    kernels = [(0.15, 1.15, "kernel 1"), (1.15, 2.15, "kernel 2"), (2.15, 3.15, "kernel 3: loss")]
    for start, end, name in kernels:
        bar(ax, t(start), t(end), gpu_y, h, name, KERNEL_FILL)
    bar(ax, t(3.15), t(3.38), gpu_y, h, "", COPY_FILL)
    ax.text(t(3.265), gpu_y - 0.06, "copy of\nthe loss", ha="center", va="top", fontsize=8.5)

    # the queue: each piece of work waits there from its launch until the GPU is free for it
    top, bottom = host_y, gpu_y + h
    queued = [(0.12, 0.15, None, ""), (0.24, 1.15, 1.5, "kernel 2, queued"),
              (0.36, 2.15, 1.85, "kernel 3, queued"), (1.68, 3.15, 2.2, "the copy, queued")]
    for launched, starts, lane, text in queued:
        if lane is None:
            arrow(ax, (t(launched), top), (t(starts), bottom), colour=BLUE, width=1.2)
            continue
        ax.plot([t(launched), t(launched), t(starts)], [top, lane, lane], color=BLUE, linewidth=1.2, zorder=4)
        arrow(ax, (t(starts), lane), (t(starts), bottom), colour=BLUE, width=1.2)
        ax.text((t(launched) + t(starts)) / 2, lane + 0.03, text, ha="center", va="bottom", fontsize=8.5,
                color=BLUE)
    arrow(ax, (t(3.38), bottom), (t(3.45), top), colour=VERMILLION, width=1.2)
    ax.text(t(3.47), 1.5, "the value\nis back", ha="left", va="center", fontsize=8.5, color=VERMILLION)

    time_axis(ax, x0, x1, 0.45)
    ax.text(x0, 0.2, "The host's own work ran while kernel 1 did: neither waited for the other.", ha="left",
            va="center", fontsize=9.5, style="italic")
    return fig



def pageable_upload():
    """An upload from pageable memory is two copies, through the driver's pinned staging buffer; from pinned
    memory it is one DMA."""
    fig, ax = canvas(WIDTH, 4.3)
    host_end, device_start = 4.85, 5.3  # the gap between the two panels stands for the PCIe link
    ax.text(WIDTH / 2, 4.12, "An upload from pageable memory is two copies", ha="center", va="center",
            fontsize=12, weight="bold")
    box(ax, 0.1, 0.1, host_end - 0.1, 3.65, "", HOST_FILL)
    box(ax, device_start, 0.1, WIDTH - 0.1 - device_start, 3.65, "", DEVICE_FILL)
    ax.text(host_end / 2, 3.56, "HOST (CPU and its RAM)", ha="center", va="center", fontsize=10.5,
            weight="bold")
    ax.text((device_start + WIDTH) / 2, 3.56, "GPU", ha="center", va="center", fontsize=10.5, weight="bold")
    ax.text((host_end + device_start) / 2, 3.56, "PCIe", ha="center", va="center", fontsize=8.5,
            style="italic")
    device_x, device_w, hb = device_start + 0.2, WIDTH - device_start - 0.5, 0.72
    ground = {"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none"}

    def label(x, y, text, colour):
        ax.text(x, y, text, ha="center", va="bottom", fontsize=9, color=colour, bbox=ground, zorder=6)

    # pageable: the host thread copies into the staging buffer, then the copy engine sends it on
    ax.text(0.3, 3.2, "x.to(device), x pageable", ha="left", va="center", fontsize=10, family="monospace",
            weight="bold")
    row = 2.2
    mid = row + hb / 2
    box(ax, 0.3, row, 1.25, hb, "pageable RAM:\nyour tensor x", PAGEABLE_FILL, size=9.5)
    box(ax, 2.55, row, 1.65, hb, "the driver's pinned\nstaging buffer", STAGING_FILL, size=9.5)
    box(ax, device_x, row, device_w, hb, "device memory", GPU_MEMORY_FILL, size=9.5)
    arrow(ax, (1.57, mid), (2.53, mid), colour=VERMILLION)
    label(2.05, mid + 0.08, "1: CPU copy,\nby the host", VERMILLION)
    arrow(ax, (4.22, mid), (device_x - 0.02, mid), colour=BLUE)
    label((4.22 + device_x) / 2, mid + 0.08, "2: DMA, by the\ncopy engine", BLUE)
    ax.text(0.3, 2.05, "The host is held through copy 1, chunk by chunk, until the last\nchunk is staged, "
            "with or without non_blocking=True. Without it,\nx.to(device) then also waits for the stream.",
            ha="left", va="top", fontsize=9)

    # pinned: one DMA, queued
    ax.text(0.3, 1.2, "x_pinned.to(device, non_blocking=True)", ha="left", va="center", fontsize=10,
            family="monospace", weight="bold")
    row2 = 0.3
    mid2 = row2 + hb / 2
    box(ax, 0.3, row2, 1.25, hb, "pinned RAM:\nx_pinned", PINNED_FILL, size=9.5)
    box(ax, device_x, row2, device_w, hb, "device memory", GPU_MEMORY_FILL, size=9.5)
    arrow(ax, (1.57, mid2), (device_x - 0.02, mid2), colour=BLUE)
    label(3.3, mid2 + 0.08, "one DMA, by the copy engine", BLUE)
    ax.text(3.3, mid2 - 0.08, "the call only queues it;\nthe host goes on", ha="center", va="top", fontsize=9)
    return fig


def streams_events():
    """A copy on a side stream, an event recorded after it, and a kernel on the default stream that waits for
    the event: on the GPU, while the host goes on."""
    fig, ax = canvas(WIDTH, 4.25)
    x0, x1, span = 1.45, WIDTH - 0.1, 4.0
    t = _clock(x0, x1, span)
    host_y, side_y, main_y, h = 2.05, 1.3, 0.6, 0.42

    code = [
        ("with torch.cuda.stream(side):", None),
        ("    x = x_pinned.to(device, non_blocking=True)", 1),
        ("ev = torch.cuda.Event(); ev.record(side)", 2),
        ("torch.cuda.current_stream().wait_event(ev)   # or .wait_stream(side)", 3),
        ("y = model(x)   # on the default stream", 4),
    ]
    for i, (line, n) in enumerate(code):
        y = 4.05 - i * 0.22
        indent = len(line) - len(line.lstrip())  # SVG collapses leading spaces: indent by position
        ax.text(0.55 + indent * MONO_EM * 9.5 / 72, y, line.lstrip(), ha="left", va="center", fontsize=9.5,
                family="monospace")
        if n:
            number(ax, 0.3, y, n)
    _rows(ax, {host_y + h / 2: "host", side_y + h / 2: "side stream", main_y + h / 2: "default\nstream"})

    # the host: four quick calls, then it goes on
    for i in range(4):
        start = 0.04 + 0.18 * i
        bar(ax, t(start), t(start + 0.1), host_y, h, colour=GREY_LAUNCH)
        number(ax, t(start + 0.05), host_y + h + 0.16, i + 1)
    bar(ax, t(0.8), t(4.0), host_y, h, "goes on (the next batch, ...): it never waits here", HOST_WORK_FILL)

    # the side stream: the copy, then the event's point
    bar(ax, t(0.15), t(2.4), side_y, h, "copy of the next batch", COPY_FILL)
    number(ax, t(0.15) + 0.2, side_y + h / 2, 1)
    ax.plot([t(2.4)], [side_y + h / 2], marker="D", markersize=11, color=PURPLE, markeredgecolor="black",
            zorder=6)
    number(ax, t(2.4) + 0.26, side_y + h / 2 + 0.02, 2)
    ax.text(t(2.4) + 0.42, side_y + h / 2, "ev: a point in the side stream", ha="left", va="center",
            fontsize=9)

    # the default stream: this step's kernels, the wait, then the kernel that reads the batch
    bar(ax, t(0.0), t(1.45), main_y, h, "this step's kernels", KERNEL_FILL)
    bar(ax, t(1.45), t(2.4), main_y, h, "waits for ev", "white", hatch=WAIT_HATCH, edge=VERMILLION)
    number(ax, t(1.45) + 0.02, main_y + h + 0.13, 3)
    bar(ax, t(2.4), t(3.7), main_y, h, "model(x)", KERNEL_FILL)
    number(ax, t(2.4) + 0.2, main_y + h / 2, 4)
    arrow(ax, (t(2.4), side_y - 0.01), (t(2.4), main_y + h + 0.01), colour=PURPLE, width=1.4)

    time_axis(ax, x0, x1, 0.4)
    ax.text(0.08, 0.14, "This step's kernels were queued earlier; the copy runs under them. The wait is the "
            "GPU's: \nthe host goes on, and could wait for the same point itself with ev.synchronize().",
            ha="left", va="center", fontsize=9, style="italic")
    return fig


def training_memory():
    """What one training step with Adam keeps, over two steps: weights, Adam's state (made by the first
    step()), gradients (made in backward, freed by zero_grad()) and the activations saved for backward (freed
    as backward goes)."""
    layers, weight, act = 4, 1.0, 0.4  # four equal layers; activations of one batch, 0.4 x the weights each
    moments = []  # (time, weights, adam, grads, activations), each held until the next moment
    adam = grads = acts = 0.0
    time = 0
    for _ in range(2):
        moments.append((time, weight, adam, grads, acts))  # the step begins (zero_grad() in step 2)
        time += 1
        for _ in range(layers):  # forward: each layer saves its activations
            acts += act
            moments.append((time, weight, adam, grads, acts))
            time += 1
        for _ in range(layers):  # backward, last layer first: its gradients made, its saved tensors freed
            grads += weight / layers
            acts -= act
            moments.append((time, weight, adam, grads, round(acts, 9)))
            time += 1
        adam = 2 * weight  # step(): the first one makes exp_avg and exp_avg_sq; later ones reuse them
        moments.append((time, weight, adam, grads, acts))
        time += 1
        grads = 0.0  # the next step's zero_grad() (set_to_none=True) frees the gradients
    end = time

    fig = plt.figure(figsize=(WIDTH, 4.1))
    ax = fig.add_axes((0.1, 0.23, 0.88, 0.6))
    xs = [m[0] for m in moments] + [end]
    series = [[m[i] for m in moments] + [moments[-1][i]] for i in range(1, 5)]
    names = ["weights", "Adam's state", "gradients", "activations"]
    colours = [BLUE, GREEN, ORANGE, SKY]
    hatches = [None, None, None, "//"]
    base = [0.0] * len(xs)
    for values, name, colour, hatch in zip(series, names, colours, hatches, strict=True):
        top = [b + v for b, v in zip(base, values, strict=True)]
        ax.fill_between(xs, base, top, step="post", facecolor=colour, edgecolor="black", linewidth=0.6,
                        hatch=hatch, label=name)
        base = top

    # the phases of each step, shaded, named above the plot
    per_step = 2 * layers + 2
    for step in range(2):
        first = step * per_step
        ax.axvspan(first + 1 + layers, first + 1 + 2 * layers, color="#000000", alpha=0.05, zorder=0)
        for a, b, text in ((first + 1, first + 1 + layers, "forward"),
                           (first + 1 + layers, first + 1 + 2 * layers, "backward"),
                           (first + 1 + 2 * layers, first + per_step, "step()")):
            ax.text((a + b) / 2, 5.05, text, ha="center", va="bottom", fontsize=9.5)
        ax.text(first + per_step / 2, 5.5, f"training step {step + 1}", ha="center", va="bottom",
                fontsize=10.5, weight="bold")
        ax.axvline(first, color="#444444", linewidth=1)
    ax.axvline(end, color="#444444", linewidth=1)

    arrows = {"arrowstyle": "-|>", "color": "black", "linewidth": 1}
    ax.text(5.0, 0.5, "weights", ha="center", va="center", fontsize=9.5, color="white", weight="bold")
    ax.text(15.0, 2.0, "Adam's state: made by the first step(), then kept", ha="center", va="center",
            fontsize=9, bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"})
    ax.annotate("saved in forward,\nfreed as backward goes", xy=(4.5, 2.35), xytext=(2.4, 3.75), fontsize=9,
                ha="center", va="center", arrowprops=arrows)
    ax.annotate("gradients:\nmade in backward", xy=(7.5, 1.6), xytext=(7.3, 3.05), fontsize=9, ha="center",
                va="center", arrowprops=arrows)
    ax.annotate("zero_grad() frees\nthe gradients", xy=(10.0, 3.5), xytext=(7.3, 4.35), fontsize=9,
                ha="center", va="center", arrowprops=arrows)
    peak_at, peak = max(((m[0], sum(m[1:])) for m in moments), key=lambda m: m[1])
    ax.annotate("peak", xy=(peak_at + 0.5, peak), xytext=(12.0, 4.75), fontsize=9.5, weight="bold",
                ha="center", va="center", arrowprops=arrows)

    ax.set_xlim(0, end)
    ax.set_ylim(0, 5)
    ax.set_xticks([])
    ax.set_yticks(range(6))
    ax.set_ylabel("bytes, in units of\nthe weights' bytes", fontsize=10)
    ax.tick_params(labelsize=9.5)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.03), ncol=4, fontsize=9.5, frameon=False,
              handlelength=1.6)
    fig.text(0.5, 0.05, "An illustration: four equal layers in float32, each saving activations of 0.4 x its "
             "weights.\nThe loss, the batch and short-lived temporaries are left out.", ha="center",
             va="center", fontsize=9, style="italic")
    return fig


DIAGRAMS: dict[str, Callable] = {
    "machine.svg": machine_diagram.draw,
    "host-queue.svg": host_queue,
    "pageable-upload.svg": pageable_upload,
    "streams-events.svg": streams_events,
    "training-memory.svg": training_memory,
}
TIGHT = {"machine.svg"}  # drawn on a larger canvas and cropped to what it holds, as it always was


def write(name: str, folder: Path = HERE) -> Path:
    """Draw one diagram into `folder`; return its path."""
    return render(DIAGRAMS[name], Path(folder) / name, tight=name in TIGHT)


def main(folder: Path = HERE) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = [write(name, folder) for name in DIAGRAMS]
    for path in written:
        print("wrote", path)
    return written


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
