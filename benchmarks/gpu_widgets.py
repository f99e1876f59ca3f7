"""Drive the live widgets' GPU paths on a machine with a GPU but no Jupyter, and print what they measured.

    python benchmarks/gpu_widgets.py [--json FILE] [--figures DIR]

The transfer lab runs on a real asyncio event loop with its own scheduler, as in a kernel: Run, a sweep that
grows the plot size by size, a Stop clicked halfway through a long sweep. The timing-lies widget and the
overlap timeline run on the GPU too. It needs torch, matplotlib and ipywidgets (no Jupyter server or kernel).
"""

import argparse
import asyncio
import contextlib
import io
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def _sweep(lab, *, stop_after: int | None = None, limit_s: float = 300.0) -> dict:
    """Press Run, optionally press Stop once `stop_after` sizes are in, and wait for the sweep to end."""
    progress_seen: set[int] = set()  # one value per size the widget showed while it ran
    started = time.perf_counter()
    lab.run_button.click()
    if lab.stepper is None:
        raise RuntimeError(f"Run did not start a sweep: {lab.status.value}")
    while lab.stepper.running:
        progress = lab.progress.value
        progress_seen.add(progress)
        if stop_after is not None and progress >= stop_after and not lab.stop_button.disabled:
            lab.stop_button.click()
        if time.perf_counter() - started > limit_s:
            raise TimeoutError(f"the sweep did not end within {limit_s} s: {lab.status.value}")
        await asyncio.sleep(0.005)
    run = lab.state.runs[-1]
    return {"label": run.label, "status": run.status, "seconds": round(time.perf_counter() - started, 2),
            "first_point_s": lab._first_point_s, "plot_updates_seen": len(progress_seen - {0}),
            "table_rows": lab.table.value.count("<tr>") - 1, "plot_bytes": len(lab.plot.value),
            "results": [{"bytes": r.bytes, "gbps": round(r.gbps, 2), "method": r.method,
                         "share_of_link": r.share_of_link} for r in run.results]}


async def transfer_lab_report(figures: Path | None = None) -> dict:
    """Run the transfer lab the way a student would, on its real event-loop scheduler.

    With `figures`, the plot of the three full sweeps is written there as `transfer-lab-gpu.png`.
    """
    from devicelab.transfer_lab_widget import TransferLabWidget
    from devicelab.units import MiB

    lab = TransferLabWidget(cuda=True)
    report = {"directions": list(lab.direction.options),
              "backends": [label for label, _ in lab.backend.options],
              "pinned_offered": not lab.host.disabled, "reason": lab.reason.value}
    lab.direction.value, lab.host.value, lab.non_blocking.value = "h2d", "pinned", True
    lab.largest.value, lab.repeats.value = 256 * MiB, 3
    report["h2d_pinned"] = await _sweep(lab)
    lab.direction.value, lab.host.value, lab.non_blocking.value = "h2d", "pageable", False
    report["h2d_pageable"] = await _sweep(lab)
    lab.direction.value, lab.host.value = "d2h", "pinned"
    report["d2h_pinned"] = await _sweep(lab)
    if figures is not None:
        from devicelab.transfer_lab import render_png

        (figures / "transfer-lab-gpu.png").write_bytes(render_png(lab.state.runs, figsize=(8, 4.5), dpi=110))
    lab.repeats.value = max(lab.repeats.options)
    report["stopped"] = await _sweep(lab, stop_after=4)
    report["runs_on_plot"] = [run.label for run in lab.state.runs]
    report["run_enabled_after_stop"] = not lab.run_button.disabled
    return report


def timing_lies_report() -> dict:
    """Press Run on the timing-lies widget with the GPU as its target."""
    from devicelab.timing_lies_widget import TimingLiesWidget

    widget = TimingLiesWidget(size=2048)
    with contextlib.redirect_stdout(io.StringIO()):  # outside a kernel the chart "displays" as text
        ok = widget.run()
    return {"ok": ok, "error": repr(widget.error) if widget.error else None, "status": widget.status.value,
            "rows": [[{"method": row.method, "median_ms": round(row.result.median * 1e3, 3),
                      "device": row.result.device, "note": row.note} for row in result]
                     for result in widget.results or []]}


def overlap_report(figures: Path | None = None) -> dict:
    """Measure the overlap timeline's modes with CUDA events (its figure to `figures`/overlap-gpu.png)."""
    from devicelab.overlap import compare, plot_overlap

    runs = compare(steps=4)
    figure = plot_overlap(runs)
    if figures is not None:
        figure.savefig(figures / "overlap-gpu.png", dpi=110)
    return {run.mode: {"source": run.source, "total_ms": round(run.total_s * 1e3, 2),
                       "overlap_ms": round(run.overlap_s() * 1e3, 2)} for run in runs}


def problems(report: dict) -> list[str]:
    """Return what a student would see as broken in the report."""
    from devicelab.overlap import MEASURED

    lab = report["transfer_lab"]
    found = []
    if not {"h2d", "d2h", "d2d"} <= set(lab["directions"]) or not lab["pinned_offered"]:
        found.append(f"the lab does not offer the GPU copies: {lab['directions']}, pinned "
                     f"{lab['pinned_offered']}")
    for key in ("h2d_pinned", "h2d_pageable", "d2h_pinned"):
        sweep = lab[key]
        if not sweep["status"].startswith("done") or sweep["table_rows"] != len(sweep["results"]):
            found.append(f"{key}: {sweep['status']}, {sweep['table_rows']} table rows")
        if any(r["method"] != "CUDA events" for r in sweep["results"]):
            found.append(f"{key}: not timed with CUDA events")
    pinned, pageable = lab["h2d_pinned"]["results"][-1]["gbps"], lab["h2d_pageable"]["results"][-1]["gbps"]
    if pinned <= pageable:
        found.append(f"pinned h2d ({pinned} GB/s) is not faster than pageable ({pageable} GB/s) at the "
                     "largest size")
    stopped = re.match(r"stopped after (\d+) of (\d+)", lab["stopped"]["status"])
    if not stopped or int(stopped.group(1)) >= int(stopped.group(2)) or not lab["run_enabled_after_stop"]:
        found.append(f"Stop did not end the sweep early: {lab['stopped']['status']}")
    if not report["timing_lies"]["ok"]:
        found.append(f"timing lies: {report['timing_lies']['error']}")
    if any(run["source"] != MEASURED for run in report["overlap"].values()):
        found.append("the overlap timeline fell back to the simulator on a GPU")
    return found


def main() -> int:
    """Run all three widgets on the GPU, print the report, and fail if a student would see a problem."""
    import matplotlib

    matplotlib.use("Agg")
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the report to this file")
    parser.add_argument("--figures", type=Path, help="write the transfer lab's and the overlap timeline's "
                        "figures into this folder (PNG)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("This check needs a CUDA GPU; the test suite covers these widgets on CPU.", file=sys.stderr)
        return 2
    import ipywidgets

    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "ipywidgets": ipywidgets.__version__,
              "transfer_lab": asyncio.run(transfer_lab_report(args.figures)),
              "timing_lies": timing_lies_report(), "overlap": overlap_report(args.figures)}
    report["problems"] = problems(report)
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
