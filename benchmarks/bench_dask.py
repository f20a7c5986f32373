"""Client-side graph submission to a real dask scheduler: stock distributed against
distributed on graphpickle, in one run.

    scripts/bench-dask [--tasks 100000] [--repeat 5]

The graph has 100,000 tasks ``key -> (inc, dependency, i)`` with ``inc`` defined in
``__main__``. A sample is the time ``client.get(graph, keys, sync=False)`` takes to
pickle the graph and hand it to the scheduler (the futures come back before the
tasks run); the tasks are then cancelled, outside the timing. Also timed: pickling
the graph alone with each ``dumps``. Medians and ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

from distributed import Client, LocalCluster
from distributed.protocol import pickle as stock_pickle

import graphpickle.integrations.dask_distributed as gpd


def inc(x, i):
    return i + 1


def submit_seconds(client: Client, tasks: int) -> float:
    graph = {("t", 0): (inc, 0, 0)}
    graph.update({("t", i): (inc, ("t", i - 1), i) for i in range(1, tasks)})
    start = time.perf_counter()
    futures = client.get(graph, [("t", tasks - 1)], sync=False)
    elapsed = time.perf_counter() - start
    client.cancel(futures)
    del futures
    while client.run_on_scheduler(_scheduler_task_count):
        time.sleep(0.2)
    return elapsed


def _scheduler_task_count(dask_scheduler: object) -> int:
    return len(dask_scheduler.tasks)  # type: ignore[attr-defined]


def dumps_seconds(dumps: object, tasks: int) -> float:
    graph = {("t", i): (inc, ("t", i - 1), i) for i in range(tasks)}
    start = time.perf_counter()
    dumps(graph)  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        submit: dict[str, list[float]] = {"stock": [], "graphpickle": []}
        pickling: dict[str, list[float]] = {"stock": [], "graphpickle": []}
        for _ in range(args.repeat):  # alternate, so that drift hits both alike
            gpd.uninstall()
            submit["stock"].append(submit_seconds(client, args.tasks))
            pickling["stock"].append(dumps_seconds(stock_pickle.dumps, args.tasks))
            gpd.install()
            submit["graphpickle"].append(submit_seconds(client, args.tasks))
            pickling["graphpickle"].append(dumps_seconds(gpd.dumps, args.tasks))
        gpd.uninstall()
    print(
        f"| {args.tasks:,} tasks, `__main__` function | stock distributed | on graphpickle | ratio |"
    )
    print("|---|---|---|---|")
    for label, samples in (
        ("client.get(..., sync=False)", submit),
        ("dumps of the graph", pickling),
    ):
        stock, ours = statistics.median(samples["stock"]), statistics.median(samples["graphpickle"])
        print(f"| {label} | {stock:.2f} s | {ours:.2f} s | {ours / stock:.2f}x |")


if __name__ == "__main__":
    main()
