"""The scheduler's dumps of each task in a real LocalCluster: stock distributed
against distributed on graphpickle, beside the same dumps called back to back.

    scripts/bench-scheduler [--tasks 5000] [--repeat 3] [--output FILE]

Each sample is one fresh LocalCluster (2 worker processes, 1 thread each) in a
fresh driver process (this script run again with ``--sample CONFIG``), so neither
configuration inherits what the other, or an earlier sample, left in memory:

* stock: distributed as installed;
* graphpickle: ``graphpickle.integrations.dask_distributed.install(client)`` (driver, scheduler
  and workers; with LocalCluster the scheduler runs in the driver process).

The graph is N independent tasks ``("t", i) -> (inc, i)`` with ``inc`` defined in
``__main__``; ``client.get(graph, keys)`` is timed end to end (submission, the
run, gathering the results). Before it, ``client.run_on_scheduler`` wraps
``distributed.protocol.pickle.dumps`` in the scheduler (distributed's protocol
code looks it up on that module at each call, so the wrapper is what
``create_pickled_sub_frames`` calls on ``ToPickle(ts.run_spec)``). For each call
whose object is a task (a ``dask._task_spec.GraphNode``) it records the thread's
CPU time and the pickle's size, and which function called it. After the run, the
last task the scheduler dumped is dumped again back to back, in the scheduler, by
the same ``dumps``: the per-call figure, beside the in-run one.

Medians over the repeats; the wall-time ranges are printed with them, and the
verdict says whether the difference exceeds them. CPU times are thread CPU time
(``time.thread_time_ns``), so other processes on the machine slow them less than
the wall time, but they still compete for the CPU caches.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

CONFIGS = ("stock", "graphpickle")
BACK_TO_BACK_LOOPS = 2000


def inc(x: int) -> int:
    return x + 1


# --- run in the scheduler, through client.run_on_scheduler ---------------------
# They arrive pickled by value (this is __main__), so they import what they use
# and keep their state on the wrapper, which lives in distributed's module.


def install_recorder() -> None:
    """Wrap ``distributed.protocol.pickle.dumps`` to record each task's dumps."""
    import sys
    import time

    import distributed.protocol.pickle as protocol_pickle
    from dask._task_spec import GraphNode

    inner = protocol_pickle.dumps

    def recording_dumps(x: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(x, GraphNode):
            return inner(x, *args, **kwargs)
        start = time.thread_time_ns()
        out = inner(x, *args, **kwargs)
        cpu_ns = time.thread_time_ns() - start
        recording_dumps.calls.append((cpu_ns, len(out), sys._getframe(1).f_code.co_name))
        recording_dumps.last = x
        return out

    recording_dumps.inner = inner
    recording_dumps.calls = []
    recording_dumps.last = None
    protocol_pickle.dumps = recording_dumps


def remove_recorder(loops: int) -> dict[str, Any]:
    """Unwrap ``dumps``; return the records and the back-to-back CPU times."""
    import time

    import distributed.protocol.pickle as protocol_pickle

    recorder = protocol_pickle.dumps
    protocol_pickle.dumps = recorder.inner
    frames: list[Any] = []
    times = []
    for _ in range(loops):
        start = time.thread_time_ns()
        recorder.inner(recorder.last, buffer_callback=frames.append)
        times.append(time.thread_time_ns() - start)
    return {"calls": recorder.calls, "back_to_back_ns": times}


# --- one sample, in its own process --------------------------------------------


def run_sample(config: str, tasks: int) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    import graphpickle.integrations.dask_distributed as gpd

    cluster_options = {"n_workers": 2, "threads_per_worker": 1, "processes": True}
    with (
        LocalCluster(**cluster_options, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        if config == "graphpickle":
            gpd.install(client)
        client.run_on_scheduler(install_recorder)
        graph = {("t", i): (inc, i) for i in range(tasks)}
        keys = list(graph)
        start = time.perf_counter()
        results = client.get(graph, keys)
        wall = time.perf_counter() - start
        assert results == [i + 1 for i in range(tasks)]
        record = client.run_on_scheduler(remove_recorder, BACK_TO_BACK_LOOPS)
        record["scheduler_in_driver"] = client.run_on_scheduler(os.getpid) == os.getpid()
        record["installed"] = gpd.installed()
    return summarize(record, wall)


def summarize(record: dict[str, Any], wall: float) -> dict[str, Any]:
    cpu_us = [cpu / 1e3 for cpu, _, _ in record["calls"]]
    callers: dict[str, int] = {}
    for _, _, caller in record["calls"]:
        callers[caller] = callers.get(caller, 0) + 1
    return {
        "wall_s": wall,
        "calls": len(cpu_us),
        "median_us": statistics.median(cpu_us),
        "p90_us": statistics.quantiles(cpu_us, n=10)[-1],
        "total_ms": sum(cpu_us) / 1e3,
        "bytes": statistics.median(size for _, size, _ in record["calls"]),
        "back_to_back_us": statistics.median(record["back_to_back_ns"]) / 1e3,
        "callers": callers,
        "scheduler_in_driver": record["scheduler_in_driver"],
        "installed": record["installed"],
    }


def sample_in_subprocess(config: str, tasks: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--sample", config, "--tasks", str(tasks)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{config} sample failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


# --- report --------------------------------------------------------------------

COLUMNS = (
    ("wall s", "wall_s", "{:.2f}"),
    ("scheduler dumps calls", "calls", "{:,.0f}"),
    ("median µs CPU per task dumps in the run", "median_us", "{:.1f}"),
    ("p90 µs", "p90_us", "{:.1f}"),
    ("total ms", "total_ms", "{:.1f}"),
    ("bytes per task", "bytes", "{:.0f}"),
    ("median µs back to back after the run", "back_to_back_us", "{:.1f}"),
)


def medians(samples: list[dict[str, Any]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in samples) for _, key, _ in COLUMNS}


def table(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    rows = {config: medians(samples) for config, samples in results.items()}
    lines = [
        "| | " + " | ".join(title for title, _, _ in COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    for config, row in rows.items():
        cells = (form.format(row[key]) for _, key, form in COLUMNS)
        lines.append(f"| {config} | " + " | ".join(cells) + " |")
    stock, ours = rows["stock"], rows["graphpickle"]
    ratios = (f"{ours[key] / stock[key]:.2f}x" for _, key, _ in COLUMNS)
    lines.append("| graphpickle / stock | " + " | ".join(ratios) + " |")
    return lines


def wall_verdict(results: dict[str, list[dict[str, Any]]]) -> str:
    spans = {
        c: (min(s["wall_s"] for s in v), max(s["wall_s"] for s in v)) for c, v in results.items()
    }
    if len(results["stock"]) < 2:
        walls = ", ".join(f"{c} {lo:.2f} s" for c, (lo, _) in spans.items())
        return (
            f"Wall time: one sample each ({walls}); no spread of repeats to judge a difference by."
        )
    ranges = ", ".join(f"{c} {lo:.2f} to {hi:.2f} s" for c, (lo, hi) in spans.items())
    (s_lo, s_hi), (g_lo, g_hi) = spans["stock"], spans["graphpickle"]
    if s_lo <= g_hi and g_lo <= s_hi:
        return f"Wall time over the repeats: {ranges}. The ranges overlap: the wall-time difference is within the spread of repeats."
    faster = "graphpickle" if g_hi < s_lo else "stock"
    return f"Wall time over the repeats: {ranges}. The ranges do not overlap: {faster} is faster in every repeat."


def checks(results: dict[str, list[dict[str, Any]]], tasks: int) -> list[str]:
    lines = []
    for config, samples in results.items():
        callers: dict[str, int] = {}
        for sample in samples:
            for name, count in sample["callers"].items():
                callers[name] = callers.get(name, 0) + count
        callers_text = ", ".join(f"{name} {count:,}" for name, count in callers.items())
        in_driver = all(s["scheduler_in_driver"] for s in samples)
        installed = all(s["installed"] for s in samples) == (config == "graphpickle")
        lines.append(
            f"- {config}: task dumps calls per sample {[s['calls'] for s in samples]} (tasks {tasks:,}); "
            f"callers {callers_text}; scheduler in the driver process: {in_driver}; "
            f"graphpickle installed as expected: {installed}"
        )
    return lines


def report(results: dict[str, list[dict[str, Any]]], tasks: int, repeat: int) -> str:
    import dask
    import distributed

    import graphpickle
    from graphpickle.core import pickler

    extension = "built" if pickler._speedups is not None else "not built"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "# The scheduler's dumps of each task (LocalCluster)",
        "",
        f"Python {platform.python_version()}, dask {dask.__version__}, distributed {distributed.__version__}, "
        f"graphpickle {graphpickle.__version__} (C extension {extension}); {os.cpu_count()} CPUs, "
        f"load average {load:.2f} at the start.",
        "",
        f"{tasks:,} independent tasks `inc(i)` of a `__main__` function; LocalCluster, 2 worker processes "
        f"x 1 thread; {repeat} repeat(s) per configuration, each a fresh cluster in a fresh driver process; "
        "medians over the repeats. CPU µs are the scheduler thread's CPU time in "
        "`distributed.protocol.pickle.dumps` of a task's run spec; back to back: the last such task "
        f"dumped {BACK_TO_BACK_LOOPS:,} times in a row in the scheduler after the run (median).",
        "",
        *table(results),
        "",
        wall_verdict(results),
        "",
        "Checks:",
        *checks(results, tasks),
        "",
        "Reproduce: `scripts/bench-scheduler"
        + (f" --tasks {tasks}" if tasks != 5000 else "")
        + f" --repeat {repeat}`",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", help="also write the markdown report to this file")
    parser.add_argument("--sample", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample:
        print(json.dumps(run_sample(args.sample, args.tasks)))
        return
    results: dict[str, list[dict[str, Any]]] = {config: [] for config in CONFIGS}
    for _ in range(args.repeat):
        for config in CONFIGS:
            results[config].append(sample_in_subprocess(config, args.tasks))
    text = report(results, args.tasks, args.repeat)
    print(text, end="")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(text)


if __name__ == "__main__":
    main()
