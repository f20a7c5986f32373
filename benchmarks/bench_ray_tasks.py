"""Ray, per task: code pickled by value against its importable twin, stock Ray
against Ray on graphpickle (graphpickle.integrations.ray); issue #33.

    scripts/bench-ray-tasks [--repeat 3] [--tasks 2000] [--out FILE]

``SOURCE`` (an ``inc`` function, a ``Point`` dataclass and a ``get_x`` function)
is run in ``__main__`` as a notebook cell would be, and written as the module
``ray_twin`` into a temporary directory on ``PYTHONPATH``, which the driver and
the workers Ray starts inherit: the same code, pickled by value from
``__main__``, by reference from ``ray_twin``. The kinds, each N tasks
``ray.get([f.remote(a) for a in args])``:

* ``function``: ``inc(i)`` with ``__main__``'s ``inc``;
* ``function-twin``: the same with ``ray_twin.inc``;
* ``dataclass``: ``ray_twin.get_x(Point(i, 0.5, "p"))`` with ``__main__``'s ``Point``;
* ``dataclass-twin``: the same with ``ray_twin.Point``.

Each sample is one kind in one configuration, in a fresh driver process (this
script run again with ``--sample MODE KIND``) that starts its own local Ray
(``num_cpus=2``), stock or with ``graphpickle.integrations.ray.init``; samples
are interleaved (for each repeat, for each kind: stock, then graphpickle).
A sample runs 200 tasks of its kind first (Ray exports the function, both
workers start and load it), then times the N tasks (arguments built before):
wall time, the driver's CPU (``getrusage``) and the workers' CPU (the ``ray::``
processes this driver's Ray started, Ray's two agents left out, from ``/proc``, in
10 ms ticks), per task.

Meanwhile the ``dumps`` of the pickler Ray's serializing modules use
(``ray.cloudpickle``, or graphpickle's stand-in) is wrapped to record, for each
call in the driver, what it pickled, its thread CPU time and its size: the
function's export (Ray pickles a remote function once per driver and job, on
its first ``.remote()``, and the workers fetch it once each), and the calls made
during the N tasks. After the run, the same pickler is timed back to back in
the driver (thread CPU time, 2,000 calls): ``dumps``/``loads`` of the task's
function and of one argument, and Ray's serializer (``SerializationContext.
serialize``: its msgpack layer, then the pickler for what msgpack cannot write)
on one argument. Medians over the repeats, with the range of the repeats for
the end-to-end figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_ray import driver_cpu, ray_processes, start_ray

MODES = ("stock", "graphpickle")
KINDS = ("function", "function-twin", "dataclass", "dataclass-twin")
WARM_UP = 200
LOOPS = 2000
AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")

SOURCE = """\
import dataclasses


def inc(i):
    return i + 1


@dataclasses.dataclass
class Point:
    x: int
    y: float
    name: str


def get_x(p):
    return p.x
"""


def main_definitions() -> dict[str, Any]:
    """Run SOURCE in ``__main__`` (as a notebook cell) and return its dict."""
    main = vars(sys.modules["__main__"])
    exec(compile(SOURCE, "<notebook cell>", "exec", dont_inherit=True), main)
    return main


def task_of(kind: str) -> tuple[Callable[..., Any], Callable[[int], Any]]:
    """The task function of ``kind`` and the argument of its task ``i``."""
    import ray_twin  # on PYTHONPATH, see main()

    main = main_definitions()
    return {
        "function": (main["inc"], int),
        "function-twin": (ray_twin.inc, int),
        "dataclass": (ray_twin.get_x, lambda i: main["Point"](i, 0.5, "p")),
        "dataclass-twin": (ray_twin.get_x, lambda i: ray_twin.Point(i, 0.5, "p")),
    }[kind]


def workers() -> dict[int, tuple[str, float]]:
    """Title and CPU seconds of each Ray worker process this driver's Ray
    started, Ray's two agents left out."""
    return {pid: p for pid, p in ray_processes().items() if p[0] not in AGENTS}


class Recorder:
    """Wraps ``dumps`` of the pickler Ray's serializing modules use, and records
    each call: what it pickled, thread CPU µs, bytes. ``"function"``: a remote
    function's export; ``"None"``: the task's retry-exception allow-list, which
    Ray's ``submit_task`` pickles for every task; ``"argument"``: the rest."""

    def __init__(self, pickler: types.ModuleType) -> None:
        self.pickler, self.inner = pickler, pickler.dumps
        self.calls: list[tuple[str, float, int]] = []

        def recording(obj: Any, *args: Any, **kwargs: Any) -> bytes:
            start = time.thread_time_ns()
            out: bytes = self.inner(obj, *args, **kwargs)
            cpu_us = (time.thread_time_ns() - start) / 1e3
            what = "function" if isinstance(obj, types.FunctionType) else "argument"
            self.calls.append(("None" if obj is None else what, cpu_us, len(out)))
            return out

        pickler.dumps = recording

    def take(self, what: str) -> list[tuple[str, float, int]]:
        """The calls that pickled ``what`` since the last ``clear``."""
        return [call for call in self.calls if call[0] == what]

    def clear(self) -> None:
        self.calls = []

    def remove(self) -> None:
        self.pickler.dumps = self.inner


def per_call(action: Callable[[], Any]) -> float:
    """Thread CPU µs of one call, over LOOPS calls back to back."""
    start = time.thread_time_ns()
    for _ in range(LOOPS):
        action()
    return (time.thread_time_ns() - start) / LOOPS / 1e3


def sample(mode: str, kind: str, tasks: int) -> dict[str, Any]:
    """Start a local Ray, run ``tasks`` tasks of ``kind``, stop it."""
    import ray

    import graphpickle.integrations.ray as gpray

    func, argument = task_of(kind)
    start_ray(mode)
    try:
        assert gpray.installed() == (mode == "graphpickle")
        # Remote functions and task arguments are pickled by the same object:
        # ray.cloudpickle, or graphpickle's stand-in for it.
        pickler = sys.modules["ray._private.serialization"].pickle
        assert sys.modules["ray._common.serialization"].pickle is pickler
        remote = ray.remote(func)
        recorder = Recorder(pickler)
        try:
            ray.get([remote.remote(argument(i)) for i in range(WARM_UP)])
            exported = recorder.take("function")
            recorder.clear()
            args = [argument(i) for i in range(tasks)]
            before = workers()
            wall, cpu = time.perf_counter(), driver_cpu()
            results = ray.get([remote.remote(a) for a in args])
            wall, cpu = time.perf_counter() - wall, driver_cpu() - cpu
            after = workers()
            in_run = {what: recorder.take(what) for what in ("function", "None", "argument")}
        finally:
            recorder.remove()
        expected = [i + 1 if kind.startswith("function") else i for i in range(tasks)]
        assert results == expected, f"{kind}: wrong results"
        assert len(exported) == 1, f"{kind}: {len(exported)} function dumps in the warm-up"

        function_payload = pickler.dumps(func)  # as Ray's export does
        buffers: list[Any] = []
        one = argument(7)
        argument_payload = pickler.dumps(one, protocol=5, buffer_callback=buffers.append)
        context = ray._private.worker.global_worker.get_serialization_context()
        # A worker started during the run counts whole (the report lists them).
        workers_cpu = sum(cpu - before.get(pid, ("", 0.0))[1] for pid, (_, cpu) in after.items())

        def calls(what: str, i: int) -> float:
            return statistics.median(c[i] for c in in_run[what]) if in_run[what] else 0.0

        return {
            "wall": wall / tasks * 1e6,
            "driver_cpu": cpu / tasks * 1e6,
            "workers_cpu": workers_cpu / tasks * 1e6,
            "argument_calls": len(in_run["argument"]) / tasks,
            "argument_us": calls("argument", 1),
            "argument_run_bytes": calls("argument", 2),
            "none_calls": len(in_run["None"]) / tasks,
            "none_us": calls("None", 1),
            "function_calls": len(in_run["function"]),
            "workers": len(after),
            "new_workers": [after[pid][0] for pid in after.keys() - before.keys()],
            "export_us": exported[0][1],
            "export_bytes": exported[0][2],
            "function_dumps_us": per_call(lambda: pickler.dumps(func)),
            "function_loads_us": per_call(lambda: pickler.loads(function_payload)),
            "argument_dumps_us": per_call(
                lambda: pickler.dumps(one, protocol=5, buffer_callback=buffers.append)
            ),
            "argument_bytes": len(argument_payload),
            "argument_loads_us": per_call(lambda: pickler.loads(argument_payload)),
            "argument_serialize_us": per_call(lambda: context.serialize(one)),
        }
    finally:
        ray.shutdown()


# --- the report ------------------------------------------------------------------

# (key, header, digits)
END_TO_END = [
    ("wall", "wall µs", 0),
    ("driver_cpu", "driver CPU µs", 0),
    ("workers_cpu", "workers CPU µs", 0),
    ("argument_calls", "argument pickles", 2),
    ("argument_us", "their dumps µs", 1),
    ("argument_run_bytes", "bytes", 0),
    ("none_calls", "allow-list pickles", 2),
    ("none_us", "their dumps µs", 1),
]
PER_CALL = [
    ("export_us", "function export: dumps µs", 1),
    ("export_bytes", "bytes", 0),
    ("function_dumps_us", "function dumps µs", 1),
    ("function_loads_us", "function loads µs", 1),
    ("argument_dumps_us", "argument dumps µs", 2),
    ("argument_bytes", "bytes", 0),
    ("argument_loads_us", "argument loads µs", 2),
    ("argument_serialize_us", "Ray's serialize of the argument µs", 2),
]


def median(samples: list[dict[str, Any]], key: str) -> float:
    return statistics.median(s[key] for s in samples)


def table(
    results: dict[tuple[str, str], list[dict[str, Any]]],
    columns: list[tuple[str, str, int]],
    first: str,
) -> str:
    """Medians for each kind and mode, then their ratios."""
    header = f"| {first} | " + " | ".join(h for _, h, _ in columns) + " |"
    rule = "|---" * (len(columns) + 1) + "|"
    rows = [header, rule]
    for kind in KINDS:
        for mode in MODES:
            cells = [f"{median(results[kind, mode], k):,.{d}f}" for k, _, d in columns]
            rows.append(f"| {kind}, {mode} | " + " | ".join(cells) + " |")
    pairs = [
        (f"{kind} / twin, {mode}", (kind, mode), (f"{kind}-twin", mode))
        for kind in ("function", "dataclass")
        for mode in MODES
    ] + [(f"{kind}: graphpickle / stock", (kind, "graphpickle"), (kind, "stock")) for kind in KINDS]
    rows += ["", header.replace(first, "ratio of medians", 1), rule]
    for name, top, bottom in pairs:
        cells = []
        for key, _, _ in columns:
            a, b = median(results[top], key), median(results[bottom], key)
            cells.append(f"{a / b:.2f}x" if b else "-")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def ranges(results: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    columns = END_TO_END[:3]
    rows = [
        "| kind, configuration | " + " | ".join(h for _, h, _ in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for kind in KINDS:
        for mode in MODES:
            samples = results[kind, mode]
            cells = [
                f"{min(s[k] for s in samples):,.0f}-{max(s[k] for s in samples):,.0f}"
                for k, _, _ in columns
            ]
            rows.append(f"| {kind}, {mode} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--sample", nargs=2, metavar=("MODE", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample:
        print(json.dumps(sample(*args.sample, args.tasks)))
        return
    load_before = os.getloadavg()[0]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {
        (kind, mode): [] for kind in KINDS for mode in MODES
    }
    with tempfile.TemporaryDirectory() as twin_dir:
        (Path(twin_dir) / "ray_twin.py").write_text(SOURCE)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [twin_dir, env.get("PYTHONPATH")]))
        for repeat in range(args.repeat):
            for kind in KINDS:
                for mode in MODES:
                    command = [sys.executable, __file__, "--sample", mode, kind]
                    command += ["--tasks", str(args.tasks)]
                    out = subprocess.run(
                        command, check=True, capture_output=True, text=True, env=env
                    ).stdout
                    results[kind, mode].append(json.loads(out.strip().splitlines()[-1]))
                    print(f"run {repeat + 1}/{args.repeat}: {kind}, {mode} done", file=sys.stderr)
    import ray

    import graphpickle

    samples = [s for runs in results.values() for s in runs]
    function_calls = sum(s["function_calls"] for s in samples)
    started = [
        f"{kind}, {mode}, repeat {repeat + 1}: {', '.join(s['new_workers'])}"
        for (kind, mode), runs in results.items()
        for repeat, s in enumerate(runs)
        if s["new_workers"]
    ]
    report = f"""\
# Ray, per task: by-value code against its importable twin

Ray {ray.__version__}, Python {platform.python_version()}, graphpickle \
{graphpickle.__version__}; a local Ray with `num_cpus=2` on a 2-CPU machine \
shared with other work (load average {load_before:.2f} at the start, \
{os.getloadavg()[0]:.2f} at the end): compare CPU times rather than wall times.

{args.tasks:,} tasks per sample; {args.repeat} repeat(s) per kind and \
configuration, interleaved, each in a fresh Ray in a fresh driver process. \
Kinds: `function` is `inc(i)` with a `__main__` function, `dataclass` is \
`get_x(Point(i, 0.5, "p"))` with an importable `get_x` and a `__main__` \
dataclass `Point`; `-twin` is the same code from an importable module \
(`ray_twin`, on the workers' `PYTHONPATH`). Configurations: stock Ray, and \
`graphpickle.integrations.ray.init` (driver and workers).

End to end, per task (medians): wall time, the driver process's CPU, the worker \
processes' CPU (10 ms ticks; Ray's two agents left out); the driver's pickler \
calls during the timed tasks, per task, and the median CPU time and size of each: \
the task's argument, and the `None` that Ray's `submit_task` pickles for every \
task (its retry-exception allow-list):

{table(results, END_TO_END, "kind, configuration")}

The range (lowest-highest) of the repeats, µs per task:

{ranges(results)}

In the driver, per call (medians): the function's export (Ray's one dump of the \
remote function, on its first `.remote()`), then back to back, {LOOPS:,} calls, \
thread CPU time: the function's `dumps`/`loads` with the pickler Ray uses \
(`ray.cloudpickle`, or graphpickle's stand-in), one argument's, and Ray's \
serializer on one argument (`SerializationContext.serialize`: msgpack, then the \
pickler for what msgpack cannot write; an `int` never reaches the pickler):

{table(results, PER_CALL, "kind, configuration")}

Checks: every task's result checked; one function dump per sample, in the \
warm-up (the export); functions pickled by the driver during the timed tasks: \
{function_calls}; worker processes per sample: {min(s["workers"] for s in samples)}-\
{max(s["workers"] for s in samples)}; samples in which Ray started workers during the \
timed tasks (their CPU counted above): {"; ".join(started) or "none"}.

Reproduce: `scripts/bench-ray-tasks --repeat {args.repeat}`
"""
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
