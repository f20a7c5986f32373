"""Ray end to end: stock Ray against Ray on graphpickle (graphpickle.integrations.ray).

    scripts/bench-ray [--repeat 3] [--objects 100000] [--tasks 2000] [--out FILE]

Each run is a fresh driver process that starts its own local Ray
(``num_cpus=2``), stock or with ``graphpickle.integrations.ray.init``, and runs
every workload once; runs alternate stock, graphpickle, stock, ... Workloads,
with ``Point`` a ``__main__`` dataclass and ``Plain`` a plain ``__main__`` class:

- a task whose argument is an object graph: 100,000 ``Point``s, 100,000 ``Plain``
  objects, a dict of 100,000 tuples; and a 64 MB numpy array;
- ``ray.get(ray.put(x))`` of each of those;
- 2,000 small tasks of a ``__main__`` function;
- an actor fed 2,000 ``Point``s, one method call each;
- a new actor's first result (from ``.remote()`` to its first method's result: a
  new worker process), median of 5 actors made one after another.

For each: wall time, the driver's CPU (``getrusage``) and the workers' CPU (the
``ray::`` processes this driver's Ray started, from ``/proc``). Also timed, in the
driver, for each object graph: Ray's serializer (``SerializationContext.serialize``:
Ray's msgpack walk of lists and dicts, then the pickle of what it cannot write),
and the pickler it uses alone (``ray.cloudpickle.dumps`` or graphpickle's), in
CPU time of the calling thread. Medians over the runs; the table is printed and written to ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODES = ("stock", "graphpickle")


@dataclasses.dataclass
class Point:
    x: int
    y: float
    name: str


class Plain:
    def __init__(self, i: int) -> None:
        self.i = i
        self.label = "p"


def graphs(n: int) -> dict[str, Any]:
    import numpy as np

    return {
        "dataclasses": [Point(i, i / 2, "p") for i in range(n)],
        "plain objects": [Plain(i) for i in range(n)],
        "dict of tuples": {i: (i, i + 1, "t") for i in range(n)},
        "numpy array": np.arange(8 * 1024 * 1024, dtype=np.float64),
    }


def consume(x: Any) -> int:
    return len(x)


def small(i: int) -> int:
    return i + 1


class Keeper:
    def __init__(self) -> None:
        self.total = 0

    def add(self, p: Point) -> int:
        self.total += p.x
        return self.total

    def installed(self) -> bool:
        import graphpickle.integrations.ray as gpray

        return gpray.installed()


#: New actors per run, one after another; their median is the run's figure.
FIRST_RESULTS = 5


def ray_processes() -> dict[int, tuple[str, float]]:
    """Title and CPU seconds of each Ray process (a ``ray::`` title) this
    driver's Ray started: descendants of this process, not another Ray on the
    machine."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    found: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read(100).split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        if title.startswith("ray::"):
            found[int(entry)] = (title, (int(fields[11]) + int(fields[12])) / tick)
    me, ours = os.getpid(), {}
    for pid, process in found.items():
        ancestor = parents.get(pid, 0)
        while ancestor > 1 and ancestor != me:
            ancestor = parents.get(ancestor, 0)
        if ancestor == me:
            ours[pid] = process
    return ours


def workers_cpu() -> dict[int, float]:
    """CPU seconds of each Ray process this driver's Ray started."""
    return {pid: seconds for pid, (_, seconds) in ray_processes().items()}


def driver_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(action: Callable[[], Any]) -> dict[str, float]:
    wall, cpu, workers = time.perf_counter(), driver_cpu(), workers_cpu()
    action()
    wall, cpu = time.perf_counter() - wall, driver_cpu() - cpu
    # A worker that exited meanwhile is not counted (none does in these workloads).
    after = workers_cpu()
    return {
        "wall": wall,
        "driver_cpu": cpu,
        "workers_cpu": sum(seconds - workers.get(pid, 0.0) for pid, seconds in after.items()),
    }


def start_ray(mode: str) -> None:
    """A local Ray with 2 CPUs, stock or with graphpickle's integration (``mode``)."""
    import ray

    import graphpickle.integrations.ray as gpray

    options = {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}
    if mode == "graphpickle":
        gpray.init(**options)
    else:
        ray.init(**options)


def one_run(mode: str, objects: int, tasks: int) -> dict[str, dict[str, float]]:
    """Start a local Ray, run every workload once, stop it."""
    import ray

    import graphpickle.integrations.ray as gpray

    start_ray(mode)
    try:
        remote_consume = ray.remote(consume)
        remote_small = ray.remote(small)
        keeper = ray.remote(Keeper).remote()
        # Workers started and functions exported before anything is timed.
        ray.get([remote_consume.remote([i]) for i in range(20)])
        ray.get([remote_small.remote(i) for i in range(20)])
        ray.get(keeper.add.remote(Point(0, 0.0, "p")))
        context = ray._private.worker.global_worker.get_serialization_context()
        # What Ray's serializer pickles with: ray.cloudpickle, or graphpickle's stand-in.
        serialization = sys.modules["ray._private.serialization"]
        results: dict[str, dict[str, float]] = {}
        for name, value in graphs(objects).items():
            results[f"task argument: {name}"] = measure(
                lambda v=value: ray.get(remote_consume.remote(v))
            )
            results[f"put/get: {name}"] = measure(lambda v=value: ray.get(ray.put(v)))
            if name != "numpy array":
                # CPU time of this thread: steadier than the wall clock on a busy machine.
                start = time.thread_time()
                context.serialize(value)
                results[f"serialize: {name}"] = {"wall": time.thread_time() - start}
                buffers: list[Any] = []
                start = time.thread_time()
                serialization.pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
                results[f"pickle: {name}"] = {"wall": time.thread_time() - start}
        results[f"{tasks:,} small tasks"] = measure(
            lambda: ray.get([remote_small.remote(i) for i in range(tasks)])
        )
        points = [Point(i, float(i), "p") for i in range(tasks)]
        results[f"actor fed {tasks:,} dataclasses"] = measure(
            lambda: ray.get([keeper.add.remote(p) for p in points])
        )
        # A new worker process: an actor's first result, from .remote() on.
        remote_keeper = ray.remote(Keeper)
        firsts = []
        for _ in range(FIRST_RESULTS):
            time.sleep(0.5)  # (the killed actor's worker goes; Ray may prestart another)
            start = time.perf_counter()
            actor = remote_keeper.remote()
            installed = ray.get(actor.installed.remote())
            firsts.append(time.perf_counter() - start)
            ray.kill(actor)
            assert installed == (mode == "graphpickle")
        results["a new actor's first result"] = {"wall": statistics.median(firsts)}
        assert gpray.installed() == (mode == "graphpickle")
        return results
    finally:
        ray.shutdown()


def table(runs: dict[str, list[dict[str, dict[str, float]]]]) -> str:
    rows = [
        "| workload | wall stock | wall graphpickle | ratio | driver CPU stock / gp | workers CPU stock / gp |",
        "|---|---|---|---|---|---|",
    ]
    for workload in runs["stock"][0]:

        def median(mode: str, key: str, w: str = workload) -> float:
            return statistics.median(run[w][key] for run in runs[mode])

        def spread(mode: str, w: str = workload) -> str:
            walls = [run[w]["wall"] * 1e3 for run in runs[mode]]
            return f"{statistics.median(walls):.0f} ms ({min(walls):.0f}-{max(walls):.0f})"

        stock, ours = median("stock", "wall"), median("graphpickle", "wall")
        ratios = [
            mine[workload]["wall"] / theirs[workload]["wall"]
            for mine, theirs in zip(runs["graphpickle"], runs["stock"], strict=True)
        ]
        cells = [
            workload,
            spread("stock"),
            spread("graphpickle"),
            f"{ours / stock:.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
        ]
        if "driver_cpu" in runs["stock"][0][workload]:
            for key in ("driver_cpu", "workers_cpu"):
                cells.append(
                    f"{median('stock', key) * 1e3:.0f} / {median('graphpickle', key) * 1e3:.0f} ms"
                )
        else:
            cells += ["", ""]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one-run", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_run:
        print(json.dumps(one_run(args.one_run, args.objects, args.tasks)))
        return
    runs: dict[str, list[dict[str, dict[str, float]]]] = {mode: [] for mode in MODES}
    for repeat in range(args.repeat):
        for mode in MODES:
            command = [sys.executable, __file__, "--one-run", mode]
            command += ["--objects", str(args.objects), "--tasks", str(args.tasks)]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            runs[mode].append(json.loads(out.strip().splitlines()[-1]))
            print(f"run {repeat + 1}/{args.repeat}: {mode} done", file=sys.stderr)
    import ray

    report = (
        f"Ray {ray.__version__}, Python {sys.version.split()[0]}, local Ray with 2 CPUs, "
        f"medians of {args.repeat} runs per configuration, each in a fresh Ray, interleaved "
        "(wall: median (min-max); ratio: of the medians (min-max of the runs, paired in order); 'serialize' rows: Ray's serializer in the driver "
        "alone, 'pickle' rows: the pickler it calls, alone, both in CPU time of the "
        "calling thread; other rows: wall time; CPU columns: sums over the process, "
        "with the kernel's 10 ms ticks for the workers).\n\n" + table(runs) + "\n"
    )
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
