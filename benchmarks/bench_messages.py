"""Small messages: what a running dask cluster pickles one message at a time.

    scripts/bench-messages [--repeat 15]

    scripts/bench-messages --instructions   # instruction counts under callgrind instead
    PYTHON=3.14 scripts/bench-messages --instructions \
        --output benchmarks/results/messages-instructions-3.14.md   # each declared Python

Tuples, distributed's message dicts, dask Task/DataNode/Alias objects, small
numpy arrays, datetimes and Decimals, lists of dicts (by reference), and tasks
holding a __main__ function, a lambda or a __main__ dataclass instance, sent again
and again, next to their importable twins (compared through graphpickle.dumps and
through the dask integration's dumps; the dataclass one has no target: its class
is pickled whole in every payload). Every serializer is timed in turns (medians
of interleaved runs). Then the same messages, and a tuple of importable functions
and classes, through graphpickle's two dumps with one unrelated module registered
by value against none registered (target: at most 1.1x). Writes benchmarks/results/messages.md (or
messages-instructions.md); the exit status is 0 when every target holds, 1
otherwise.

Wall-clock ratios on a shared 2-core machine move by 10% or more between runs;
``--instructions`` counts instructions per call under valgrind's callgrind
(``setarch -R``, ``PYTHONHASHSEED=0``), which do not drift, and applies the same
targets to them. 3.14 and 3.15 run in the Debian chroot (scripts/debian-python),
which has valgrind.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import gc
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import cloudpickle
import distributed

from graphpickle.cli.bench import (
    BLOCKS,
    message_dumps,
    message_loads,
    message_payload,
    message_plan,
    one_module_registered,
    registry_dumps,
    registry_met,
    render_messages,
    render_registry,
    run_messages,
    run_registry,
    summarize_messages,
)
from graphpickle.cli.workloads import REGISTRY_MESSAGES

RESULTS = Path(__file__).parent / "results" / "messages.md"
INSTRUCTIONS = Path(__file__).parent / "results" / "messages-instructions.md"


def _calls() -> list[tuple[int, str, str, Any]]:
    """(message index, "dumps" or "loads", serializer, call): the same list in the
    parent and under callgrind."""

    calls = []
    for index, (_, _, message, _) in enumerate(message_plan()):
        for lib, dumps in message_dumps().items():
            try:
                dumps(message)
            except Exception:
                continue  # pickle: a lambda
            calls.append((index, "dumps", lib, functools.partial(dumps, message)))
        for lib, loads in message_loads().items():
            payload = message_payload(lib, message)
            calls.append((index, "loads", lib, functools.partial(loads, payload)))
    return calls


def _registry_calls() -> list[tuple[int, str, Any]]:
    """(message index, dumps, call) of the rows with a module registered."""
    return [
        (index, lib, functools.partial(dumps, message.build()))
        for index, message in enumerate(REGISTRY_MESSAGES)
        for lib, dumps in registry_dumps().items()
    ]


# Each measured loop runs inside libffi's ffi_call, whose instructions callgrind
# counts: a ctypes callback is called through it. It is a function of a shared
# library, found by name in every CPython build (Debian's stripped interpreters
# have no symbol of their own to count between), and nothing measured uses ctypes.
_CALLBACK = ctypes.CFUNCTYPE(None)


def _loop(call: Any, n: int) -> None:
    """``call`` n times, with the collector off, as the wall clock times it: a
    collection's instructions fall on whichever loop crosses its threshold (3.14's
    incremental collector put 4-11% on some loops of 100 loads and none on others)."""
    raised: list[BaseException] = []

    def body() -> None:
        try:
            for _ in range(n):
                call()
        except BaseException as exc:  # (a callback's exception is only printed)
            raised.append(exc)

    gc.collect()
    gc.disable()
    try:
        _CALLBACK(body)()
    finally:
        gc.enable()
    if raised:
        raise raised[0]


def under_callgrind(n: int) -> None:
    """Each call n times, after an empty loop (callgrind dumps its counts after
    each loop): half of them in a first round over the calls, half in a second
    round in the reverse order, as the wall clock takes turns. A call's cost can
    depend on what ran before it: loading a by-value class sets its attributes
    again on the class it finds already made, which changes that class's state
    for every later load. So each loop follows one uncounted call, as each
    wall-clock sample does (a connection's held classes are walked again there:
    the counts are of the steady state; performance.md gives the walk's cost)."""
    calls, registry = _calls(), _registry_calls()
    for *_, call in calls:
        for _ in range(3):
            call()  # first-use caches, as in a running cluster
    for *_, call in registry:  # (in both states)
        for registered in (False, True, False):
            with one_module_registered() if registered else contextlib.nullcontext():
                call()
    modules = len(sys.modules)
    _loop(int, n // 2)  # the loops' own cost, in two halves as every call's
    _loop(int, n - n // 2)
    for *_, call in calls:
        call()
        _loop(call, n // 2)
    for *_, call in reversed(calls):
        call()
        _loop(call, n - n // 2)
    # Then each dumps of the registry rows with nothing registered, then with
    # one unrelated module registered.
    for *_, call in registry:
        _loop(call, n)
        with one_module_registered():
            _loop(call, n)
    if len(sys.modules) != modules:
        raise SystemExit("a measured call imported a module: its counts are not the call's")


def instruction_rows(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with tempfile.TemporaryDirectory() as where:
        out = Path(where) / "cg.out"
        command = [
            "setarch", "-R", "valgrind", "--tool=callgrind", "--collect-atstart=no",
            "--toggle-collect=ffi_call", "--dump-after=ffi_call",
            f"--callgrind-out-file={out}", sys.executable, __file__, "--under-callgrind", str(n),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}
        subprocess.run(command, check=True, env=env, capture_output=True)
        parts = sorted(Path(where).glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
        totals = [int(re.search(r"^summary:\s+(\d+)", p.read_text(), re.M)[1]) for p in parts]
    # The last loops are the measured ones (any use of ctypes before them dumped parts too).
    calls, registry = _calls(), _registry_calls()
    measured = totals[-(2 + 2 * len(calls) + 2 * len(registry)) :]
    base = measured[0] + measured[1]
    first, second = measured[2 : 2 + len(calls)], measured[2 + len(calls) : 2 + 2 * len(calls)]
    pairs = measured[2 + 2 * len(calls) :]
    counts = [a + b for a, b in zip(first, reversed(second), strict=True)]  # both rounds
    plan = message_plan()
    rows = [
        {"message": name, "kind": kind, "limit": limit, "dumps": {}, "loads": {}}
        for name, kind, _, limit in plan
    ]
    import graphpickle

    for (index, op, lib, _), total in zip(calls, counts, strict=True):
        rows[index][op][lib] = (total - base) / n  # instructions, in the seconds' place
    for row, (_, _, message, _) in zip(rows, plan, strict=True):
        row["bytes"] = len(graphpickle.dumps(message))
        row["bytes_blocks"] = len(message_payload(BLOCKS, message))
        reference = "pickle" if "pickle" in row["dumps"] else "distributed"
        row["dumps_ratio"] = {lib: t / row["dumps"][reference] for lib, t in row["dumps"].items()}
        row["dask_dumps"] = row["dumps"]["graphpickle dask"] / row["dumps"]["distributed"]
        row["loads_ratio"] = row["loads"]["graphpickle"] / row["loads"]["pickle"]
        row["dask_loads"] = row["loads"]["graphpickle dask"] / row["loads"]["distributed"]
    registry_rows = [
        {"message": message.name, "dumps": {}, "ratio": {}} for message in REGISTRY_MESSAGES
    ]
    for k, (index, lib, _) in enumerate(registry):
        none, registered = ((t - base) / n for t in pairs[2 * k : 2 * k + 2])
        registry_rows[index]["dumps"][lib] = (none, registered)
        registry_rows[index]["ratio"][lib] = registered / none
    return rows, registry_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="samples per measurement (15)")
    parser.add_argument("--output", type=Path, help="the markdown file")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind"
    )
    parser.add_argument("--under-callgrind", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.under_callgrind:
        under_callgrind(args.under_callgrind)
        return 0
    versions = (
        f"CPython {platform.python_version()}, distributed {distributed.__version__}, "
        f"cloudpickle {cloudpickle.__version__}"
    )
    if args.instructions:
        rows, registry = instruction_rows(300)
        summary = summarize_messages(rows)
        meta = f"{versions}; callgrind, setarch -R, PYTHONHASHSEED=0; counts in place of times"
        output = args.output or INSTRUCTIONS
    else:
        rows, summary = run_messages(repeat=args.repeat)
        registry = run_registry(repeat=args.repeat)
        meta = f"{versions}, {args.repeat} samples"
        output = args.output or RESULTS
    text = render_messages(rows, summary, meta, instructions=args.instructions)
    text += "\n\n" + render_registry(registry, instructions=args.instructions)
    output.write_text(text + "\n")
    print(text)
    return 0 if summary["met"] and registry_met(registry) else 1


if __name__ == "__main__":
    sys.exit(main())
