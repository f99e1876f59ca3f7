"""Run every lesson's cells, GPU-only ones included, on a machine that has a GPU but no Jupyter.

    python benchmarks/gpu_smoke.py export DIR   # here: turn lessons into plain cell lists (needs nbformat)
    python benchmarks/gpu_smoke.py run DIR      # there: run them cell by cell, print a JSON report

Only the standard library and torch are needed to `run`. IPython syntax is mapped to Python: `%load_ext
devicelab` is dropped and `%%requires_cuda` cells run as ordinary code (a GPU is expected there).
"""

import contextlib
import io
import json
import sys
import time
import traceback
from pathlib import Path


def export(target: Path) -> None:
    """Write each lesson as a JSON list of {source, tags} cells."""
    import nbformat

    root = Path(__file__).resolve().parent.parent
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / "source").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cells = [{"source": c.source, "tags": c.metadata.get("tags", [])} for c in nb.cells if c.cell_type == "code"]
        (target / f"{path.stem}.json").write_text(json.dumps(cells))


def _python(source: str) -> str:
    lines = source.splitlines()
    if lines and lines[0].startswith("%%requires_cuda"):
        lines = lines[1:]
    kept = [line for line in lines if not line.lstrip().startswith(("%load_ext", "%matplotlib"))]
    # `!command` lines are shell escapes in IPython, which expands {expressions} in them: an f-string does too.
    # Its output is captured like the cell's own (subprocess.PIPE is -1, STDOUT is -2).
    shell = "print(__import__('subprocess').run(f{!r}, shell=True, stdout=-1, stderr=-2, text=True).stdout, end='')"
    return "\n".join(shell.format(line.strip()[1:]) if line.lstrip().startswith("!") else line for line in kept)


def run(folder: Path) -> dict:
    """Run every exported lesson; return per-lesson timings and the cells that failed."""
    import matplotlib

    matplotlib.use("Agg")
    report = {}
    for path in sorted(folder.glob("*.json")):
        namespace: dict = {"__name__": "__main__"}
        failures, gpu_cells, start = [], 0, time.perf_counter()
        for index, cell in enumerate(json.loads(path.read_text())):
            gpu_cells += "requires-cuda" in cell["tags"]
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    code = compile(_python(cell["source"]), f"{path.stem}[{index}]", "exec")
                    exec(code, namespace)  # noqa: S102  (the course's own notebook cells)
            except Exception:  # noqa: BLE001  (report every failing cell, keep going)
                if "raises-exception" not in cell["tags"]:
                    failures.append({"cell": index, "source": cell["source"][:200],
                                     "error": traceback.format_exc(limit=3)[-1500:]})
            if "requires-cuda" in cell["tags"]:
                report.setdefault("gpu_outputs", []).append({"lesson": path.stem, "cell": index,
                                                             "out": out.getvalue()[-600:]})
        report[path.stem] = {"seconds": round(time.perf_counter() - start, 2), "gpu_cells": gpu_cells,
                             "failures": failures}
    return report


if __name__ == "__main__":
    command, folder = sys.argv[1], Path(sys.argv[2])
    if command == "export":
        export(folder)
    else:
        print(json.dumps(run(folder), indent=1))
