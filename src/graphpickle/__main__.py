"""The ``graphpickle`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="graphpickle",
        description="One-pass pickling of task graphs: by reference where possible, "
        "by value exactly where needed.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="ship a notebook-style task graph to spawned worker processes"
    )
    demo.add_argument("--tasks", type=int, default=100_000, help="number of tasks (100,000)")
    demo.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from ._demo import run_demo

        if args.tasks < 1 or args.workers < 1:
            parser.error("--tasks and --workers must be positive")
        return run_demo(n_tasks=args.tasks, workers=args.workers)
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
