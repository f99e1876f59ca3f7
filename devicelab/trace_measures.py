"""Read a chrome trace (torch.profiler's export, or the simulated GPU's in the same shape): where the host
waited, which copies ran, how busy the GPU was.

`summarize(trace)` gives the whole picture as a `TraceSummary`. `measure(trace, steps)` gives the four
measures the capstone and ps06 grade on, because they read the same from a real trace and a simulated one:

- host waits per step: sync calls (`cuda_runtime` calls ending in `Synchronize`) and copies that held the host
  (`cudaMemcpyAsync` longer than 50 us for a copy from or to pageable memory), divided by the steps;
- uploads by host memory: host-to-device `gpu_memcpy` events named `Pageable -> Device` or
  `Pinned -> Device`;
- the GPU's busy share: the time with a kernel or a copy running, over the trace from the first upload (the
  first batch reaching the GPU) to its end. What comes before, such as starting the loader's workers and
  making the first batch, happens once an epoch while the GPU has no batch yet: it counts in the epoch's time,
  not in this share;
- copy overlap: the share of host-to-device copy time with a kernel running at the same moment.

All are pure functions of the trace's events (`"ts"` and `"dur"` in microseconds); none needs a GPU.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TraceSummary:
    """What a trace says about host waits, copies and the GPU's busy time (seconds)."""

    waits: dict[str, int]  # innermost operator (or "(no operator)") -> host waits inside it
    # host time in sync calls and in copies that held the host (cudaMemcpyAsync longer than 50 us)
    wait_s: float
    copies: dict[str, int]  # gpu_memcpy name -> count
    copy_s: float
    kernel_s: float
    overlap: float  # fraction of h2d copy time with a kernel running
    loader_s: float  # host time spent in the DataLoader
    span_s: float  # from the first event to the last
    gpu_busy_s: float  # time with a kernel or a copy running on the GPU
    gpu_span_s: float = 0.0  # from the first upload (or the GPU's first work, without one) to the last event
    gpu_span_busy_s: float = 0.0  # the part of gpu_busy_s within gpu_span_s


# The host's rows for getting batches: the simulated GPU's, and torch.profiler's around each next() of a
# DataLoader iterator (`enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__`).
LOADER_ROWS = ("DataLoader", "enumerate(DataLoader)")


def summarize(trace: dict) -> TraceSummary:
    """Return the TraceSummary of a chrome trace (real or simulated)."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    ops = sorted((e for e in events if e["cat"] == "cpu_op"), key=lambda e: e["dur"])
    syncs = [e for e in events if e["cat"] == "cuda_runtime" and e["name"].endswith("Synchronize")]
    copies_ = [e for e in events if e["cat"] == "gpu_memcpy"]
    # A real trace links each call to its copy (args.correlation): only a copy from or to pageable memory
    # holds the host; a long call for a pinned one is the host being slow, not a wait for the GPU.
    copy_names = {c["args"]["correlation"]: c["name"] for c in copies_ if "correlation" in c.get("args", {})}
    held = [e for e in events if e["cat"] == "cuda_runtime" and e["name"] == "cudaMemcpyAsync"
            and e["dur"] > 50 and "Pinned" not in copy_names.get(e.get("args", {}).get("correlation"), "")]

    def innermost(call: dict) -> dict | None:
        return next((o for o in ops if o["pid"] == call["pid"] and o["tid"] == call["tid"]
                     and o["ts"] <= call["ts"] and call["ts"] + call["dur"] <= o["ts"] + o["dur"]), None)

    def name(op: dict | None) -> str:
        return "(no operator)" if op is None else op["name"]

    sync_starts = {(e["pid"], e["tid"], e["ts"]) for e in syncs}
    synced_ops = {id(op) for op in map(innermost, syncs) if op is not None}
    # a held copy followed by its stream sync (in the same operator) is one wait
    alone = [e for e in held if (e["pid"], e["tid"], round(e["ts"] + e["dur"], 3)) not in sync_starts
             and (innermost(e) is None or id(innermost(e)) not in synced_ops)]
    waits: dict[str, int] = {}
    for call in syncs + alone:
        waits[name(innermost(call))] = waits.get(name(innermost(call)), 0) + 1
    kernels = [e for e in events if e["cat"] == "kernel"]
    h2d = [c for c in copies_ if "HtoD" in c["name"]]
    covered = sum(_covered(c, kernels) for c in h2d)
    counts: dict[str, int] = {}
    for c in copies_:
        counts[c["name"]] = counts.get(c["name"], 0) + 1
    end = max((e["ts"] + e["dur"] for e in events), default=0.0)
    span = end - min(e["ts"] for e in events) if events else 0.0
    gpu_work = copies_ + kernels
    first = min((e["ts"] for e in h2d or gpu_work), default=end)
    return TraceSummary(
        waits=waits, wait_s=sum(e["dur"] for e in syncs + held) / 1e6, copies=counts,
        copy_s=sum(c["dur"] for c in copies_) / 1e6, kernel_s=sum(k["dur"] for k in kernels) / 1e6,
        overlap=covered / sum(c["dur"] for c in h2d) if h2d and sum(c["dur"] for c in h2d) else 0.0,
        loader_s=sum(e["dur"] for e in events if e["cat"] == "user_annotation" and
                     e["name"].startswith(LOADER_ROWS)) / 1e6,
        span_s=span / 1e6, gpu_busy_s=_union(gpu_work) / 1e6, gpu_span_s=(end - first) / 1e6,
        gpu_span_busy_s=_union(gpu_work, since=first) / 1e6)


def _union(events: list[dict], since: float = -math.inf) -> float:
    """Return the time (us) at least one of `events` runs, counting from `since` on."""
    total, reach = 0.0, since
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        a = max(a, reach)
        if b > a:
            total, reach = total + b - a, b
    return total


def _covered(copy: dict, kernels: list[dict]) -> float:
    start, end = copy["ts"], copy["ts"] + copy["dur"]
    pieces = sorted((max(k["ts"], start), min(k["ts"] + k["dur"], end)) for k in kernels)
    total, reach = 0.0, start
    for a, b in pieces:
        a = max(a, reach)
        if b > a:
            total, reach = total + b - a, b
    return total


def show_summary(summary: TraceSummary) -> None:
    """Print a TraceSummary in the units a person reads."""
    waits = sum(summary.waits.values())
    print(f"host waits        {waits:4d}, {summary.wait_s * 1e3:7.2f} ms, inside {summary.waits}")
    print(f"host in loader          {summary.loader_s * 1e3:7.2f} ms")
    print(f"copies            {sum(summary.copies.values()):4d}, {summary.copy_s * 1e3:7.2f} ms: "
          f"{summary.copies}")
    print(f"kernels                 {summary.kernel_s * 1e3:7.2f} ms on the GPU; "
          f"{summary.overlap:.0%} of the upload time under a kernel")
    print(f"whole trace             {summary.span_s * 1e3:7.2f} ms, "
          f"the GPU busy for {summary.gpu_span_busy_s * 1e3:.2f} ms of the {summary.gpu_span_s * 1e3:.2f} ms "
          "from the first upload")


@dataclass(frozen=True)
class TraceMeasures:
    """The four graded measures of a training loop's trace (see the module's docstring)."""

    steps: int
    waits_per_step: float
    pageable_uploads: int
    pinned_uploads: int
    gpu_busy_share: float  # 0..1
    copy_overlap: float  # 0..1


@dataclass(frozen=True)
class Targets:
    """What a fixed training loop's trace reaches: the capstone's and ps06's bar."""

    max_waits_per_step: float = 0.1
    max_pageable_uploads: int = 0
    min_gpu_busy_share: float = 0.8
    min_copy_overlap: float = 0.5


def shortfalls(measures: TraceMeasures, targets: Targets = Targets()) -> list[str]:
    """Return, in the trace's own words, each measure that misses its target (empty when all reach it)."""
    found = []
    if measures.waits_per_step > targets.max_waits_per_step:
        found.append(f"host waits per step: {measures.waits_per_step:.2f} (target: at most "
                     f"{targets.max_waits_per_step:g}); the summary names the operator each one sits inside")
    if measures.pageable_uploads > targets.max_pageable_uploads:
        found.append(f"uploads from pageable memory: {measures.pageable_uploads} of "
                     f"{measures.pageable_uploads + measures.pinned_uploads} (target: "
                     f"{targets.max_pageable_uploads}); the gpu_memcpy rows name their host memory")
    if measures.gpu_busy_share < targets.min_gpu_busy_share:
        found.append(f"the GPU is busy {measures.gpu_busy_share:.0%} of the trace (target: at least "
                     f"{targets.min_gpu_busy_share:.0%}); look at what the host's rows do while it idles")
    if measures.copy_overlap < targets.min_copy_overlap:
        found.append(f"copy overlap: {measures.copy_overlap:.0%} of the upload time under a kernel (target: "
                     f"at least {targets.min_copy_overlap:.0%}); compare the GPU's rows of copies and "
                     "kernels")
    return found


def host_waits(trace: dict) -> int:
    """Return how many times the host waited for the GPU in `trace` (sync calls and held copies)."""
    return sum(summarize(trace).waits.values())


def uploads(trace: dict) -> tuple[int, int]:
    """Return the host-to-device copies in `trace` as (from pageable memory, from pinned memory)."""
    names = [e["name"] for e in _complete(trace) if e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]]
    return sum("Pageable" in n for n in names), sum("Pinned" in n for n in names)


def gpu_busy_share(trace: dict) -> float:
    """Return the share of the trace, from the first upload on, with a kernel or a copy running on the GPU
    (0 for no GPU work)."""
    summary = summarize(trace)
    return summary.gpu_span_busy_s / summary.gpu_span_s if summary.gpu_span_s > 0 else 0.0


def copy_overlap(trace: dict) -> float:
    """Return the share of host-to-device copy time with a kernel running at the same moment."""
    return summarize(trace).overlap


def measure(trace: dict, steps: int) -> TraceMeasures:
    """Return the graded measures of a trace that recorded `steps` training steps."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    summary = summarize(trace)
    pageable, pinned = uploads(trace)
    return TraceMeasures(
        steps=steps, waits_per_step=sum(summary.waits.values()) / steps, pageable_uploads=pageable,
        pinned_uploads=pinned,
        gpu_busy_share=summary.gpu_span_busy_s / summary.gpu_span_s if summary.gpu_span_s > 0 else 0.0,
        copy_overlap=summary.overlap)


def show_measures(measures: TraceMeasures) -> None:
    """Print TraceMeasures in the units a person reads."""
    print(f"host waits per step     {measures.waits_per_step:6.2f}  ({measures.steps} steps)")
    print(f"uploads                 {measures.pageable_uploads} from pageable memory, "
          f"{measures.pinned_uploads} from pinned memory")
    print(f"GPU busy                {measures.gpu_busy_share:6.0%} of the trace from the first upload")
    print(f"copy overlap            {measures.copy_overlap:6.0%} of the upload time under a kernel")


def _complete(trace: dict) -> list[dict]:
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]


# ----- the trace drawn, without a browser ------------------------------------------------------------------

# What a row of the drawing shows, by event category: the host's operators and waits, the GPU's work
DRAWN = {"cpu_op": "#4c72b0", "cuda_runtime": "#c44e52", "user_annotation": "#8172b2", "kernel": "#55a868",
         "gpu_memcpy": "#dd8452", "gpu_memset": "#937860"}


@dataclass(frozen=True)
class TraceRow:
    """One row of the drawing: a thread of the host or a stream of the GPU, and its events (microseconds)."""

    label: str
    bars: list[tuple[float, float, str]]  # (start, duration, category), from the trace's first event


def trace_rows(trace: dict, until_us: float | None = None) -> list[TraceRow]:
    """Return the rows a trace is drawn in: one per (process, thread) with events of a drawn category, named
    by the trace's own metadata (thread_name, process_name), host rows first; only what starts before
    `until_us` (from the first event), when given."""
    events = [e for e in _complete(trace) if e.get("cat") in DRAWN]
    if not events:
        return []
    start = min(e["ts"] for e in events)
    names = {(e.get("pid"), e.get("tid")): e.get("args", {}).get("name", "") for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    processes = {e.get("pid"): e.get("args", {}).get("name", "") for e in trace["traceEvents"]
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    rows: dict[tuple, list[tuple[float, float, str]]] = {}
    for e in sorted(events, key=lambda e: e["ts"]):
        at = e["ts"] - start
        if until_us is None or at < until_us:
            rows.setdefault((e.get("pid"), e.get("tid")), []).append((at, e["dur"], e["cat"]))

    def on_gpu(key: tuple) -> bool:
        return any(cat in ("kernel", "gpu_memcpy", "gpu_memset") for _, _, cat in rows[key])

    ordered = sorted(rows, key=lambda key: (on_gpu(key), str(key)))
    return [TraceRow(names.get(key) or f"{processes.get(key[0]) or key[0]} / {key[1]}", rows[key])
            for key in ordered]


def plot_trace(trace: dict, ax=None, *, until_us: float | None = None, title: str = ""):
    """Draw a chrome trace as Perfetto shows it, a row per host thread and GPU stream, in matplotlib (no
    browser, no network); return the Axes. `until_us`: only its first stretch (e.g. five steps)."""
    rows = trace_rows(trace, until_us)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(10, 0.6 * len(rows) + 1.2))
    for y, row in enumerate(rows):
        for cat, color in DRAWN.items():
            bars = [(at / 1000, dur / 1000) for at, dur, c in row.bars if c == cat]
            if bars:
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=color, label=cat)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize="small", loc="upper center", ncol=len(unique),
                  bbox_to_anchor=(0.5, -0.22), frameon=False)
    ax.set_yticks(range(len(rows)), [r.label for r in rows])
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_xlabel("ms from the first event")
    ax.set_title(title or "the trace, a row per host thread and GPU stream")
    ax.grid(True, axis="x", alpha=0.3)
    return ax
