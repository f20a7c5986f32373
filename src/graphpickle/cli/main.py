"""The ``graphpickle`` command."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO, cast

from .bench_options import add_bench_arguments

# Every command's exit status when standard output is closed before it is done
# (``graphpickle inspect FILE | head -1``): 128 + SIGPIPE, what a shell reports
# for a command that a closed pipe stopped, never one of inspect's statuses.
EXIT_CLOSED_OUTPUT = 141

# What demo and bench need beyond graphpickle's own dependency: the modules of
# the extra that installs them (pyproject.toml's optional-dependencies).
EXTRA = "bench"
NEEDS = {"demo": ("numpy",), "bench": ("numpy", "dask")}
EXTRA_MODULES = ("numpy", "dask", "distributed", "matplotlib")


def main(argv: list[str] | None = None) -> int:
    """Run one command; a closed standard output ends it quietly."""
    stdout = sys.stdout
    if stdout is None:  # no console (pythonw): print() writes nothing anyway
        return _main(argv)
    guarded = cast(TextIO, _GuardedStdout(stdout))
    sys.stdout = guarded
    try:
        try:
            status = _main(argv)
        except SystemExit:  # --help, --version, a usage error: written, then exit
            guarded.flush()
            raise
        guarded.flush()  # a closed pipe shows here, not at exit
        return status
    except _OutputClosed:
        _discard_output(stdout)
        return EXIT_CLOSED_OUTPUT
    finally:
        if sys.stdout is guarded:
            sys.stdout = stdout


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="graphpickle",
        description="One-pass pickling of task graphs: by reference where possible, "
        "by value exactly where needed.",
        epilog=f"Exit status {EXIT_CLOSED_OUTPUT}: standard output was closed before the "
        "command was done (piped into head, for one).",
    )
    parser.add_argument(
        "--version",
        action=_Version,
        help="show the version and which native (C) parts are active, and exit",
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
        help="read a pickle without running what it names: a verdict, imports, by-value objects",
        description="Read a pickle without running what it names. Exit status: 0 the verdict passes "
        "the gate; 1 it fails (verdict 'code', or 'imports' with --fail-on imports); 2 the "
        "file cannot be read or is not a pickle; 3 it passes, but is malformed (loading "
        f"would stop with an error); {EXIT_CLOSED_OUTPUT} standard output was closed "
        "before the report was written.",
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
    inspect.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="NAMES",
        help="comma-separated modules, packages or objects whose globals count as imports, "
        "not as code (e.g. --trust numpy,dask); any other global outside the data-only "
        "list counts as able to run code",
    )
    bench = commands.add_parser(
        "bench", help="benchmark graphpickle against pickle, cloudpickle and distributed"
    )
    add_bench_arguments(bench)
    args = parser.parse_args(argv)

    if args.command == "inspect":
        trust = [name for names in args.trust for name in names.split(",") if name.strip()]
        return _inspect(args.file, as_json=args.json, fail_on=args.fail_on, trust=trust)
    if args.command == "demo" and (
        args.tasks < 1 or args.workers < 1 or args.repeat < 1 or args.graph_tasks < 0
    ):
        parser.error("--tasks, --workers and --repeat must be positive")
    needed = [*NEEDS[args.command]]
    if args.command == "demo" and args.engine == "dask":
        needed.append("distributed")
    if args.command == "bench" and args.plot:
        needed.append("matplotlib")
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        return _needs_extra(args.command, missing)
    try:
        return _run(args)
    except ModuleNotFoundError as exc:  # one the check above did not foresee
        name = (exc.name or "").partition(".")[0]
        if name not in EXTRA_MODULES:
            raise
        return _needs_extra(args.command, [name])


def _run(args: argparse.Namespace) -> int:
    if args.command == "bench":
        from .bench import run_command

        return run_command(args)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(
            n_tasks=args.tasks,
            workers=args.workers,
            engine=args.engine,
            graph_tasks=args.graph_tasks,
            repeat=args.repeat,
        )
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


def _needs_extra(command: str, missing: Sequence[str]) -> int:
    print(
        f"graphpickle {command}: needs {' and '.join(missing)}, which "
        f"{'is' if len(missing) == 1 else 'are'} not installed: "
        f'pip install "graphpickle[{EXTRA}]"',
        file=sys.stderr,
    )
    return 2


class _Version(argparse.Action):
    """``--version``: graphpickle's version and what each native part runs."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(version_text())
        parser.exit()


def version_text() -> str:
    import platform

    from .. import __version__, native_parts

    parts = native_parts()
    active = sum(status == "active" for status in parts.values())
    return (
        f"graphpickle {__version__} (Python {platform.python_version()})\n"
        f"native parts ({active} of {len(parts)} active): "
        + ", ".join(f"{part} {status}" for part, status in parts.items())
    )


class _OutputClosed(Exception):
    """Standard output's reader has gone (not an OSError: no command catches it)."""


class _GuardedStdout:
    """``sys.stdout`` while a command runs: a write or flush that finds the pipe
    closed raises :class:`_OutputClosed`, so that a BrokenPipeError of anything
    else (a worker's pipe) is not taken for it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise _OutputClosed from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise _OutputClosed from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _discard_output(stdout: TextIO) -> None:
    """Point standard output at the null device: what is still buffered must
    not fail again when the interpreter flushes it at exit."""
    try:
        fd = stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


# graphpickle inspect's exit status (documented in docs/security.md and in --help).
EXIT_PASSES, EXIT_FAILS, EXIT_UNREADABLE, EXIT_MALFORMED = 0, 1, 2, 3


def _inspect(path: str, *, as_json: bool, fail_on: str, trust: list[str]) -> int:
    import json

    from ..diagnostics.scan import inspect
    from ..errors import UnpicklingError

    try:
        report = inspect(sys.stdin.buffer.read() if path == "-" else path, trust=trust)
    except (OSError, UnpicklingError) as exc:
        print(f"graphpickle inspect: {path}: {exc}", file=sys.stderr)
        before = getattr(exc, "report", None)  # complete pickles before the rest
        if before is not None:
            print(json.dumps(before.to_dict(), indent=2) if as_json else before)
        return EXIT_UNREADABLE
    print(json.dumps(report.to_dict(), indent=2) if as_json else report)
    if report.verdict == "code" or (fail_on == "imports" and report.verdict == "imports"):
        return EXIT_FAILS
    return EXIT_PASSES if report.error is None else EXIT_MALFORMED


if __name__ == "__main__":
    sys.exit(main())
