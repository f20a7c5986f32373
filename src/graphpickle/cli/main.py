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
    demo.add_argument(
        "--engine",
        choices=["pool", "dask", "all"],
        default="all",
        help="a spawned process pool, a local dask cluster, or both when distributed is installed (all)",
    )
    demo.add_argument(
        "--graph-tasks",
        type=int,
        default=1_000_000,
        help="tasks of the one-graph comparison (1,000,000; 0 leaves it out)",
    )
    demo.add_argument(
        "--repeat", type=int, default=5, help="interleaved runs per timing, medians shown (5)"
    )
    inspect = commands.add_parser(
        "inspect",
        help="read a pickle without executing it: a verdict, imports, by-value objects",
        description="Read a pickle without executing it. Exit status: 0 the verdict passes "
        "the gate; 1 it fails (verdict 'code', or 'imports' with --fail-on imports); 2 the "
        "file cannot be read or is not a pickle; 3 it passes, but is malformed (loading "
        "would stop with an error).",
    )
    inspect.add_argument("file", help="the pickle file, or - for standard input")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.add_argument(
        "--fail-on",
        choices=["code", "imports"],
        default="code",
        help="the verdict that fails: 'code' (can run code on load, the default) or "
        "'imports' (anything outside the data-only list)",
    )
    bench = commands.add_parser(
        "bench", help="benchmark graphpickle against pickle, cloudpickle and distributed"
    )
    from .bench import add_arguments

    add_arguments(bench)
    args = parser.parse_args(argv)

    if args.command == "bench":
        from .bench import run_command

        return run_command(args)
    if args.command == "inspect":
        return _inspect(args.file, as_json=args.json, fail_on=args.fail_on)

    if args.command == "demo":
        from .demo import run_demo

        if args.tasks < 1 or args.workers < 1 or args.repeat < 1 or args.graph_tasks < 0:
            parser.error("--tasks, --workers and --repeat must be positive")
        return run_demo(
            n_tasks=args.tasks,
            workers=args.workers,
            engine=args.engine,
            graph_tasks=args.graph_tasks,
            repeat=args.repeat,
        )
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


# graphpickle inspect's exit status (documented in docs/security.md and in --help).
EXIT_PASSES, EXIT_FAILS, EXIT_UNREADABLE, EXIT_MALFORMED = 0, 1, 2, 3


def _inspect(path: str, *, as_json: bool, fail_on: str) -> int:
    import json

    from ..diagnostics.scan import inspect
    from ..errors import UnpicklingError

    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
        report = inspect(data)
    except (OSError, UnpicklingError) as exc:
        print(f"graphpickle inspect: {path}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    print(json.dumps(report.to_dict(), indent=2) if as_json else report)
    if report.verdict == "code" or (fail_on == "imports" and report.verdict == "imports"):
        return EXIT_FAILS
    return EXIT_PASSES if report.error is None else EXIT_MALFORMED


if __name__ == "__main__":
    sys.exit(main())
