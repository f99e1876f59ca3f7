"""Draw docs/images/machine.svg: host, host memory, the link, device memory, streams and engines.

`make diagrams` redraws it with the other diagrams (`diagrams.py`); lessons 02, 05 and 06 show the SVG. The
boxes, arrows and the SVG writer are `drawing.py`'s.
"""

from pathlib import Path

from drawing import BLUE, VERMILLION, arrow, box, canvas, render

OUT = Path(__file__).with_name("machine.svg")


def draw():
    """The machine: host and device side by side, the PCIe link between them."""
    fig, ax = canvas(11, 5.6)

    # host side
    box(ax, 0.2, 0.2, 4.2, 5.2, "", "#eef3fb")
    ax.text(2.3, 5.1, "HOST (CPU side)", ha="center", fontsize=12, weight="bold")
    box(ax, 0.5, 3.55, 3.6, 1.2, "CPU cores: your Python program\n"
        "queues work and returns at once;\n.item() / .cpu() / synchronize() wait", "#ffffff", 9)
    box(ax, 0.5, 1.95, 1.7, 1.3, "pageable RAM\n(torch.empty,\nNumPy)", "#fde2c8", 9)
    box(ax, 2.4, 1.95, 1.7, 1.3, "pinned RAM\n(pin_memory=True)\npage-locked", "#fbd0a0", 9)
    box(ax, 0.5, 0.45, 3.6, 1.2, "driver's pinned staging buffer:\na pageable copy is first copied here\n"
        "(an extra host copy; the host is held)", "#fff3e3", 8.5)
    arrow(ax, (1.35, 1.95), (1.35, 1.65), colour="#a0522d")

    # the link
    ax.text(5.5, 3.35, "PCIe link\nlimit per direction:\nGen3 x16 15.75 GB/s\nGen4 31.5, Gen5 63",
            ha="center", fontsize=8.5)
    arrow(ax, (4.1, 2.65), (6.9, 2.65), "host to device (H2D)", colour=VERMILLION)
    arrow(ax, (6.9, 2.15), (4.1, 2.15), "device to host (D2H)", colour=BLUE, offset=(0, -0.38))
    arrow(ax, (4.1, 1.05), (5.3, 2.6), colour="#a0522d")
    ax.text(5.05, 1.05, "pageable\ncopies go\nthis way", fontsize=8, color="#a0522d", ha="left")

    # device side
    box(ax, 6.6, 0.2, 4.2, 5.2, "", "#eefaf0")
    ax.text(8.7, 5.1, "DEVICE (GPU)", ha="center", fontsize=12, weight="bold")
    box(ax, 6.9, 3.85, 3.6, 0.95, "streams: in-order queues of work\n"
        "default stream | side stream(s)", "#ffffff", 9)
    box(ax, 6.9, 2.55, 1.15, 1.0, "copy\nengine 0\n(H2D)", "#ffd8a8", 8.5)
    box(ax, 8.12, 2.55, 1.15, 1.0, "copy\nengine 1\n(D2H)", "#c9ecc9", 8.5)
    box(ax, 9.35, 2.55, 1.15, 1.0, "compute:\nkernels\n(SMs)", "#cfe0f7", 8.5)
    box(ax, 6.9, 0.45, 3.6, 1.7, "device memory (HBM / GDDR)\ncuda:0 tensors live here;\n"
        "the caching allocator keeps freed blocks", "#d9f2dd", 9)
    for x in (7.47, 8.7, 9.92):
        arrow(ax, (x, 3.85), (x, 3.55))
        arrow(ax, (x, 2.55), (x, 2.15), both=True)
    fig.text(0.5, 0.005, "Copies go through the copy engines; kernels run on the compute engine (the SMs).",
             ha="center", fontsize=9, style="italic")
    return fig


def main(out: Path = OUT) -> Path:
    """Write machine.svg (or `out`)."""
    render(draw, out, tight=True)
    print("wrote", out)
    return out


if __name__ == "__main__":
    main()
