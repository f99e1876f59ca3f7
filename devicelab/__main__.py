"""Command line: `env` prints the environment report, `bench` measures copy bandwidth, `workspace` makes
students their own copies of the course notebooks."""

import argparse
import csv
import sys
from typing import TextIO

BENCH_EPILOG = """\
examples:
  python -m devicelab bench                                  # h2d with a GPU, h2h without one
  python -m devicelab bench --direction h2d --host pinned --non-blocking --sizes 4KiB,1MiB,256MiB
  python -m devicelab bench --repeats 10 --csv copies.csv

Sizes are binary (4KiB = 4096 bytes, 1MiB = 2^20; K, M, G are short for KiB, MiB, GiB);
bandwidth is in GB/s = 10^9 bytes per second.
"""


def _bench_parser(commands) -> argparse.ArgumentParser:
    from devicelab.copybench import DIRECTIONS, HOSTS

    bench = commands.add_parser(
        "bench", help="measure copy bandwidth (host/device, pageable/pinned) over a sweep of sizes",
        description="Measure copy bandwidth: buffers allocated outside the timing, a warm-up, several "
                    "repeats, the median (CUDA events on a GPU, a host clock for host copies).",
        epilog=BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("--direction", choices=DIRECTIONS,
                       help="h2d, d2h, d2d (need a CUDA GPU) or h2h; default: h2d with a GPU, h2h without")
    bench.add_argument("--host", choices=HOSTS, default="pageable",
                       help="host memory for h2d, d2h and h2h (pinned needs a CUDA GPU); default: pageable")
    bench.add_argument("--non-blocking", action="store_true", help="copy with non_blocking=True")
    bench.add_argument("--sizes", help="comma-separated sizes, e.g. 4KiB,1MiB,256MiB; default: 4 KiB to 256 "
                                       "MiB in powers of two")
    bench.add_argument("--repeats", type=int, default=5,
                       help="timed samples per size (median reported); default 5")
    bench.add_argument("--threads", type=int, default=0,
                       help="CPU threads for host-to-host copies (default 0: PyTorch's own setting, as in "
                            "your code; 1 gives a figure that other busy cores disturb less)")
    bench.add_argument("--device",
                       help="CUDA device for GPU directions, e.g. cuda:1; default: the current one")
    bench.add_argument("--csv", metavar="FILE", help="also write one row per size to FILE")
    return bench


def main(argv: list[str] | None = None) -> int:
    """Run the devicelab command line."""
    parser = argparse.ArgumentParser(prog="devicelab", description="Device Lab helpers.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("env", help="print what this machine offers PyTorch (GPUs, CUDA, Colab, nbgrader)")
    bench = _bench_parser(commands)
    workspace = commands.add_parser("workspace", help="copy the lessons and assignments into a folder of "
                                                      "your own (never overwrites a copy you already have)")
    workspace.add_argument("folder", nargs="?", default="mywork", help="where to copy them (default: mywork)")
    workspace.add_argument("--course", default=".", help="the course folder (default: the current folder)")
    args = parser.parse_args(argv)
    if args.command == "env":
        from devicelab.environment import collect_environment

        print(collect_environment())
        return 0
    if args.command == "workspace":
        return run_workspace(args, workspace)
    return run_bench(args, bench)


def run_workspace(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `workspace`: copy what is new, keep every existing copy, and say which is which."""
    from pathlib import Path

    from devicelab.workspace import make_workspace

    course = Path(args.course)
    if not (course / "notebooks").is_dir():
        parser.error(f"{course.resolve()} is not the course folder (it has no notebooks/); use --course")
    try:
        report = make_workspace(course, Path(args.folder))
    except ValueError as error:
        parser.error(str(error))
    for path in report.copied:
        print(f"copied  {path}")
    print(f"{len(report.copied)} new files copied into {args.folder}/, "
          f"{len(report.kept)} of your copies left as they are")
    return 0


def run_bench(args: argparse.Namespace, parser: argparse.ArgumentParser, out: TextIO | None = None) -> int:
    """Run `bench`: check the request, then measure with a progress bar, printing a table and writing the CSV.
    """
    from tqdm import tqdm

    from devicelab import copybench as cb

    out = sys.stdout if out is None else out
    gpu = cb.cuda_usable()
    try:
        sizes = cb.parse_sizes(args.sizes) if args.sizes else list(cb.DEFAULT_SIZES)
    except (TypeError, ValueError) as error:
        parser.error(f"--sizes: {error}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.threads < 0:
        parser.error(f"--threads must be 0 (PyTorch's setting) or more, got {args.threads}")
    direction = args.direction or cb.default_direction()
    if not gpu and (direction in cb.GPU_DIRECTIONS or args.host == "pinned"):
        asked = f"--direction {direction}" if direction in cb.GPU_DIRECTIONS else "--host pinned"
        parser.error(f"{asked} needs a CUDA GPU and none is usable here (torch.cuda.is_available() is "
                     "False). Without a GPU, measure host copies: leave out --direction (or use --direction "
                     "h2h) with pageable memory.")
    try:
        results = cb.sweep(sizes, direction, args.host, args.non_blocking, repeats=args.repeats,
                           device=args.device, threads=args.threads or None)
    except (cb.NoGPUError, cb.CopyMemoryError, TypeError, ValueError) as error:
        parser.error(str(error))
    if args.direction is None and not gpu:
        print("No CUDA GPU is usable here, so this measures host-to-host copies (h2h). "
              "h2d, d2h and d2d need a CUDA GPU.", file=out)
    handle = open(args.csv, "w", newline="") if args.csv else None  # noqa: SIM115  (closed below)
    try:
        writer = None
        if handle is not None:
            writer = csv.DictWriter(handle, fieldnames=cb.CSV_COLUMNS)
            writer.writeheader()
        print(cb.table_header(), file=out, flush=True)
        measured = []
        # disable=None: no bar when stderr is not a terminal (a pipe, a log), where it would land inside the
        # table
        with tqdm(total=len(sizes), desc=f"{direction} copies", unit="size", file=sys.stderr,
                  disable=None) as progress:
            for result in results:
                measured.append(result)
                progress.write(cb.table_row(result), file=out)
                if writer is not None:
                    writer.writerow(result.as_row())
                    handle.flush()
                progress.update(1)
    except cb.CopyMemoryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        results.close()
        print("interrupted: the sizes measured so far are above"
              + (f" and in {args.csv}" if args.csv else ""), file=sys.stderr)
        return 130
    finally:
        if handle is not None:
            handle.close()
    if args.csv:
        print(f"wrote {len(sizes)} rows to {args.csv}", file=out)
    slow = cb.waited_for_cores(measured)
    if slow:
        import torch

        print(cb.contention_advice(slow, args.threads or torch.get_num_threads()), file=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
