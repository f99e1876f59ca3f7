"""Run every lesson's cells, GPU-only ones included, on a machine that has a GPU but no Jupyter; record
outputs.

    python benchmarks/gpu_smoke.py export DIR   # here: turn lessons into plain cell lists (needs nbformat)
    python benchmarks/gpu_smoke.py run DIR      # there: run them cell by cell, print a JSON report
    python benchmarks/gpu_smoke.py record       # `make gpu-record`: run the lessons on this machine's GPU and
                                                # write each GPU cell's real output into its notebook
    python benchmarks/gpu_smoke.py refold       # `make gpu-notes`: lay the recorded notes out again (a note
                                                # that answers a prediction is folded); runs nothing

Only the standard library and torch are needed to `run`. IPython syntax is mapped to Python: `%load_ext
devicelab` is dropped and `%%requires_cuda` cells run as ordinary code (a GPU is expected there).

`record` keeps the notebooks clean (no cell outputs): every `requires-cuda` cell is followed by a markdown
cell tagged `gpu-output` (id `<cell id>-gpu-output`) that shows either the output a GPU printed, with the
device, the torch version and the date, or says that no GPU has run the cell yet. `CLAIMS` lists what a
recorded output must still show for the lesson's text to stay true; an output that breaks its claim is
reported and not written, and so is an output that ends in an exception the cell did not catch.
`STAND_INS` are cells replaced while recording (the capstone's Going further profiles a fixed copy of the
script, so the recording runs the course's reference fix there, and the notes say so); `KEPT` are files
a lesson's GPU cells write that the recording keeps for readers without a GPU (a real profiler trace).
Without a GPU, `record` says so and changes nothing.
"""

import contextlib
import datetime
import io
import json
import os
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT_TAG = "gpu-output"
NOT_YET = ("*Not yet run on a GPU: no output has been recorded for the cell above. `make gpu-record` on a "
           "machine with a GPU records it here.*")
RECORDED = "**Output recorded on a GPU** ({device}, torch {torch}, {date}):"
# The recorded output of a cell that answers a prediction is folded: it is on screen before anyone runs the
# cell, so open it would answer the question above it.
FOLDED = ("<details><summary><strong>Output recorded on a GPU</strong> ({device}, torch {torch}, {date}): "
          "it answers the prediction above, so open it once you have committed a guess</summary>")
FOLD_END = "</details>"
MAX_OUTPUT = 3000  # characters of a cell's output kept in the notebook (the end, where the result is)
UNCAUGHT = "Traceback (most recent call last)"  # what run_lesson prints when a cell raises
CAPSTONE = "08-capstone-fix-a-slow-training-script"
# Cells run from a file instead of the lesson's own source while recording: lesson -> cell id -> file.
STAND_INS: dict[str, dict[str, Path]] = {
    CAPSTONE: {"my-script": ROOT / "benchmarks" / "stand_ins" / "capstone_fixed.py"},
}
STAND_IN_NOTE = ("*Recorded with the course's reference fix in place of the `{cell}` cell, as a finished "
                 "capstone has it; your copy prints its own.*")
# Files a lesson's GPU cells write, kept under another name after a recording: lesson -> (written, kept).
KEPT: dict[str, tuple[tuple[str, str], ...]] = {
    "07-streams-events-and-profiling": (
        ("traces/my-gpu-timed-step.json", "traces/recorded-gpu-timed-step.json"),),
}


def _blocking_copy_waited(output: str) -> bool:
    """Lesson 07, section 1: the blocking copy took far longer than the non-blocking one (it waited)."""
    times = dict(re.findall(r"non_blocking=(False|True): ([\d.]+) ms", output))
    return len(times) == 2 and float(times["False"]) > 5 * float(times["True"])


def _graph_replay_faster(output: str) -> bool:
    """Lesson 07, Going further (CUDA Graphs): replaying 100 tiny kernels as a CUDA graph is faster than
    launching them."""
    times = dict(re.findall(r"(eager|graph replay): (\d+) us per step", output))
    return len(times) == 2 and float(times["graph replay"]) < float(times["eager"])


def _eager_step_about_1500_us(output: str) -> bool:
    """Lesson 07, Going further (CUDA Graphs): the prediction `pytorch-launch` answers "about 1500 us" for the
    eager step, three times what 100 launches at CUDA's 5 us would take; a recording outside 1000-2200 us
    contradicts it."""
    eager = re.search(r"eager: (\d+) us per step", output)
    return eager is not None and 1000 <= float(eager.group(1)) <= 2200


def _only_pinned_returns_at_once(output: str) -> bool:
    """Lesson 05, non_blocking case by case: behind 5 ms or more of queued work, only the copies whose host
    side is pinned (and the pageable upload, held for staging) return early; blocking ones and a pageable
    download wait for the queue."""
    held = {name.strip(): float(ms) for name, ms in re.findall(r"^(\S.*?)\s+host held\s+([\d.]+) ms$", output,
                                                               flags=re.MULTILINE)}
    busy = re.search(r"\(the busy work alone\)\s+([\d.]+) ms", output)
    if not busy or len(held) < 9 or float(busy.group(1)) < 5:
        return False
    waits = ("x.to(device)", "x_pinned.to(device)", "y.cpu()", "buf.copy_(y, non_blocking=True)")
    early = ("x.to(device, non_blocking=True)", "x_pinned.to(device, non_blocking=True)",
             "buf_pinned.copy_(y, non_blocking=True)")
    limit = float(busy.group(1)) / 2
    return all(held[n] > limit for n in waits) and all(held[n] < limit for n in early)


def _cache_keeps_freed_memory(output: str) -> bool:
    """Lesson 07, Going further (the caching allocator): del lowers allocated by 256 MiB, not reserved;
    empty_cache lowers reserved."""
    rows = re.findall(r"allocated ([\d.]+) (MiB|GiB), reserved ([\d.]+) (MiB|GiB)", output)
    if len(rows) != 3:
        return False
    mib = [(float(a) * (1024 if au == "GiB" else 1), float(r) * (1024 if ru == "GiB" else 1))
           for a, au, r, ru in rows]
    (alloc0, res0), (alloc1, res1), (_, res2) = mib
    return abs(alloc0 - alloc1 - 256) < 1 and res1 == res0 and res2 < res1


def _capstone_trace_clean(output: str) -> bool:
    """Lesson 08, Going further: the fixed copy's trace: no host wait inside an operator; pinned uploads."""
    waits = re.search(r"^host waits .*inside \{(.*)\}$", output, flags=re.MULTILINE)
    inside = re.findall(r"'([^']+)': \d+", waits.group(1)) if waits else ["(no summary)"]
    return all(op == "(no operator)" for op in inside) and "Pinned -> Device" in output and \
        "Pageable" not in output


def _capstone_timed_alternately(output: str) -> bool:
    """Lesson 08, Going further: the script and the fixed copy timed in turns, 7 runs or more each, with min,
    median and max (the lesson states the 3x target as a goal, so the ratio itself is not a claim)."""
    timed = r"^.* (?:before|after) +min .* median .* max .*\((\d+) runs\)$"
    runs = [int(n) for n in re.findall(timed, output, flags=re.MULTILINE)]
    return len(runs) == 2 and min(runs) >= 7 and re.search(r"x faster \(medians\)", output) is not None


# What a recorded output must show for the lesson's text to stay true: lesson -> cell id -> claims, each a
# regular expression the output must match or a function of the output that must return True.
CLAIMS: dict[str, dict[str, tuple[str | Callable[[str], bool], ...]]] = {
    "05-async-and-timing": {
        "non-blocking-cases-gpu": (_only_pinned_returns_at_once,),
    },
    CAPSTONE: {
        "be5b748b": (_capstone_trace_clean,),
        "12d95338": (_capstone_timed_alternately,),
    },
    "07-streams-events-and-profiling": {
        "allocator-gpu": (_cache_keeps_freed_memory,),
        "sync-point-gpu": (_blocking_copy_waited,),
        "d2h-gpu": (r"^True 1999998\.0$",),
        "streams-gpu": (r"^True$",),
        "async-errors-gpu": (r"CUDA_LAUNCH_BLOCKING=1",),
        "launch-bound-gpu": (_graph_replay_faster, _eager_step_about_1500_us),
    },
    "09-devices-in-real-code": {  # section 4's text: the message says what was asked for and what is free
        "oom-gpu": (r"^OutOfMemoryError: ", r"Tried to allocate", r"free", r"allocated by PyTorch"),
    },
}


def export(target: Path) -> None:
    """Write each lesson as a JSON list of {source, tags} cells."""
    import nbformat

    root = ROOT
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / "source").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cells = [{"source": c.source, "tags": c.metadata.get("tags", [])} for c in nb.cells
                 if c.cell_type == "code"]
        (target / f"{path.stem}.json").write_text(json.dumps(cells))


def _python(source: str) -> str:
    lines = source.splitlines()
    if lines and lines[0].startswith("%%requires_cuda"):
        lines = lines[1:]
    kept = [line for line in lines if not line.lstrip().startswith(("%load_ext", "%matplotlib"))]
    # `!command` lines are shell escapes in IPython, which expands {expressions} in them: an f-string does
    # too. Its output is captured like the cell's own (subprocess.PIPE is -1, STDOUT is -2).
    shell = ("print(__import__('subprocess').run(f{!r}, shell=True, stdout=-1, stderr=-2, text=True).stdout, "
             "end='')")
    return "\n".join(shell.format(line.strip()[1:]) if line.lstrip().startswith("!") else line
                     for line in kept)


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


@dataclass(frozen=True)
class Machine:
    """What the recorded note says about where an output came from."""

    device: str
    torch: str
    date: str


def this_machine() -> Machine | None:
    """Return this machine's GPU, torch version and today's date, or None without a usable CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    return Machine(torch.cuda.get_device_name(), torch.__version__, datetime.date.today().isoformat())


def gpu_cells(nb) -> list:
    """Return the notebook's code cells tagged `requires-cuda`."""
    return [c for c in nb.cells if c.cell_type == "code" and "requires-cuda" in c.metadata.get("tags", [])]


def note_text(output: str | None, machine: Machine | None, stand_ins: Iterable[str] = (),
              folded: bool = False) -> str:
    """Return the markdown shown under a GPU cell: its recorded output, or that none exists yet.

    `stand_ins` names the cells that ran from STAND_INS before this one: the note says so. A `folded` note
    (under a cell that answers a prediction) keeps the output in a closed `<details>` element.
    """
    if output is None or machine is None:
        return NOT_YET
    shown = output.rstrip()[-MAX_OUTPUT:] or "(the cell printed nothing)"
    fence = "```" if "```" not in shown else "~~~~"
    remarks = "".join(f"\n\n{STAND_IN_NOTE.format(cell=cell)}" for cell in stand_ins)
    header = (FOLDED if folded else RECORDED).format(device=machine.device, torch=machine.torch,
                                                     date=machine.date)
    return f"{header}\n\n{fence}text\n{shown}\n{fence}{remarks}" + (f"\n\n{FOLD_END}" if folded else "")


def answers_a_prediction(nb, cell) -> bool:
    """Return True if `cell` is the one that answers a prediction: it comes right after an `ask(...)` cell."""
    from devicelab.predict import ASK_CELL

    index = nb.cells.index(cell)
    before = nb.cells[index - 1] if index > 0 else None
    return before is not None and before.cell_type == "code" and ASK_CELL.match(before.source) is not None


def recorded_in(note: str) -> tuple[Machine, str, list[str]] | None:
    """Return what a note written by `note_text` holds (the machine, the output, the stood-in cells), or None
    for a note without a recording."""
    header, _, rest = note.partition("\n\n")
    match = next((m for m in (_template(RECORDED).match(header), _template(FOLDED).match(header)) if m), None)
    body = re.match(r"(?P<fence>```|~~~~)text\n(?P<output>.*?)\n(?P=fence)(?P<remarks>.*)$", rest, re.DOTALL)
    if match is None or body is None:
        return None
    stand_ins = re.findall(_template(STAND_IN_NOTE).pattern.strip("^$"), body["remarks"])
    return Machine(**match.groupdict()), body["output"], stand_ins


def _template(template: str) -> re.Pattern:
    """Return a regex matching a str.format `template`, each field captured by name."""
    import string

    parts = [re.escape(literal) + (f"(?P<{field}>.+?)" if field else "")
             for literal, field, _spec, _conversion in string.Formatter().parse(template)]
    return re.compile("^" + "".join(parts) + "$")


def refold(paths: Iterable[Path]) -> list[str]:
    """Lay out each recorded note again as `record` would now write it (folded under a cell that answers a
    prediction, open elsewhere), keeping its output, machine and date; run nothing.

    Return the names of the files changed.
    """
    import nbformat

    changed = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        written = False
        for cell in gpu_cells(nb):
            note = note_of(nb, cell)
            held = recorded_in(note.source) if note is not None else None
            if held is not None:
                machine, output, stand_ins = held
                written |= set_note(nb, cell, note_text(output, machine, stand_ins,
                                                        folded=answers_a_prediction(nb, cell)))
        if written:
            nbformat.write(nb, path)
            changed.append(path.name)
    return changed


def note_of(nb, cell):
    """Return the `gpu-output` markdown cell right after `cell`, or None."""
    index = nb.cells.index(cell)
    following = nb.cells[index + 1] if index + 1 < len(nb.cells) else None
    if following is not None and following.cell_type == "markdown" and \
            OUTPUT_TAG in following.metadata.get("tags", []):
        return following
    return None


def set_note(nb, cell, text: str) -> bool:
    """Put `text` in the note under `cell` (adding the note if missing); return True if anything changed."""
    import nbformat

    note = note_of(nb, cell)
    if note is None:
        note = nbformat.v4.new_markdown_cell(text)
        note.id = f"{cell.id}-gpu-output"
        note.metadata["tags"] = [OUTPUT_TAG]
        nb.cells.insert(nb.cells.index(cell) + 1, note)
        return True
    if note.source == text:
        return False
    note.source = text
    return True


def broken_claims(lesson: str, cell_id: str, output: str) -> list[str]:
    """Return the claims of CLAIMS that `output` no longer shows."""
    def holds(claim: str | Callable[[str], bool]) -> bool:
        return claim(output) if callable(claim) else re.search(claim, output, flags=re.MULTILINE) is not None

    broken = [getattr(claim, "__doc__", None) or str(claim)
              for claim in CLAIMS.get(lesson, {}).get(cell_id, ()) if not holds(claim)]
    if UNCAUGHT in output:
        broken.append("the cell ran to its end without an uncaught exception")
    return broken


def run_lesson(path: Path) -> dict[str, str]:
    """Run a lesson's code cells in order on this machine; return each `requires-cuda` cell's output by id."""
    import matplotlib
    import nbformat

    matplotlib.use("Agg")
    nb = nbformat.read(path, as_version=4)
    namespace: dict = {"__name__": "__main__"}
    outputs: dict[str, str] = {}
    here = Path.cwd()
    os.chdir(path.parent)  # lessons read and write paths relative to their folder (traces/...)
    try:
        stand_ins = STAND_INS.get(path.stem, {})
        for cell in nb.cells:
            if cell.cell_type != "code" or "colab-setup" in cell.metadata.get("tags", []):
                continue
            source = stand_ins[cell.id].read_text() if cell.id in stand_ins else cell.source
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    exec(compile(_python(source), f"{path.stem}[{cell.id}]", "exec"), namespace)  # noqa: S102
                except Exception:  # noqa: BLE001  (a failing cell is recorded as it failed)
                    traceback.print_exc(limit=2)
            if "requires-cuda" in cell.metadata.get("tags", []):
                outputs[cell.id] = out.getvalue()
    finally:
        os.chdir(here)
    return outputs


def record(paths: Iterable[Path], machine: Machine | None,
           runner: Callable[[Path], dict[str, str]] = run_lesson) -> dict:
    """Run each lesson with `runner` and write its GPU cells' outputs under them; return what happened.

    Without a machine (no GPU) nothing runs and nothing is written.
    """
    import nbformat

    report: dict = {"written": [], "unchanged": [], "broken": {}, "missing": [], "kept": []}
    if machine is None:
        return report
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        cells = gpu_cells(nb)
        if not cells:
            continue
        started = time.time()
        outputs = runner(path)
        report["kept"] += keep_files(path, since=started)
        ids = [c.id for c in nb.cells]
        stood_in = [i for i in STAND_INS.get(path.stem, {}) if i in ids]
        changed = False
        for cell in cells:
            if cell.id not in outputs:
                report["missing"].append(f"{path.stem}:{cell.id}")
                continue
            broken = broken_claims(path.stem, cell.id, outputs[cell.id])
            if broken:
                report["broken"][f"{path.stem}:{cell.id}"] = broken
                report.setdefault("broken_outputs", {})[f"{path.stem}:{cell.id}"] = outputs[cell.id][-2000:]
                continue
            before = [i for i in stood_in if ids.index(i) < ids.index(cell.id)]
            changed |= set_note(nb, cell, note_text(outputs[cell.id], machine, before,
                                                    folded=answers_a_prediction(nb, cell)))
        if changed:
            nbformat.write(nb, path)
            report["written"].append(path.name)
        else:
            report["unchanged"].append(path.name)
    return report


def keep_files(lesson: Path, *, since: float) -> list[str]:
    """Copy the files of KEPT that the lesson's run wrote (modified since `since`); return the kept paths."""
    kept = []
    for written, name in KEPT.get(lesson.stem, ()):
        source = lesson.parent / written
        if source.is_file() and source.stat().st_mtime >= since:
            shutil.copyfile(source, lesson.parent / name)
            kept.append(name)
    return kept


def main_record(argv: list[str]) -> int:
    """`make gpu-record`: record every lesson's GPU outputs here; 2 without a GPU, 1 if a claim broke."""
    machine = this_machine()
    if machine is None:
        print("gpu-record: no CUDA GPU is usable on this machine (torch.cuda.is_available() is False), so "
              "nothing was run and no notebook was changed. Run `make gpu-record` where a GPU "
              "is.", file=sys.stderr)
        return 2
    paths = _lessons(argv)
    report = record(paths, machine)
    print(json.dumps(report, indent=1))
    _tidy(paths, report["written"])
    return 1 if report["broken"] or report["missing"] else 0


def main_refold(argv: list[str]) -> int:
    """`make gpu-notes`: fold the recorded notes that answer a prediction, open the others; runs no cell."""
    paths = _lessons(argv)
    changed = refold(paths)
    _tidy(paths, changed)
    print("gpu-notes: " + (f"laid out again in {', '.join(changed)}" if changed else "every note is as "
                           "`make gpu-record` would write it now"))
    return 0


def _lessons(argv: list[str]) -> list[Path]:
    return [Path(a) for a in argv] or sorted((ROOT / "notebooks").glob("*.ipynb"))


def _tidy(paths: list[Path], names: list[str]) -> None:
    """Save the written notebooks in the course's committed form (autograder.tidy)."""
    if names:
        sys.path.insert(0, str(ROOT))
        from autograder.tidy import tidy_file

        for name in names:
            tidy_file(next(p for p in paths if p.name == name))


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "record":
        sys.exit(main_record(sys.argv[2:]))
    if command == "refold":
        sys.exit(main_refold(sys.argv[2:]))
    folder = Path(sys.argv[2])
    if command == "export":
        export(folder)
    else:
        print(json.dumps(run(folder), indent=1))
