"""Command line: `python -m devicelab env` prints the environment report."""

import argparse


def main(argv: list[str] | None = None) -> int:
    """Run the devicelab command line."""
    parser = argparse.ArgumentParser(prog="devicelab", description="Device Lab helpers.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("env", help="print what this machine offers PyTorch (GPUs, CUDA, Colab, nbgrader)")
    args = parser.parse_args(argv)
    if args.command == "env":
        from devicelab.environment import collect_environment

        print(collect_environment())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
