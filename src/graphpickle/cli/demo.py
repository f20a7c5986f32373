"""``graphpickle demo``: what a notebook user does, on real worker processes.

The demo runs a "notebook cell" in ``__main__`` (functions, a lambda, a closure
and a class, exactly as Jupyter defines them) and shows four tables, each cell
of which comes from something the demo ran:

1. ``--engine pool``: tasks built from them with numpy arguments, pickled in
   chunks with graphpickle, ``pickle``, ``cloudpickle`` and ``distributed``'s
   pickler, shipped to a process pool started with ``spawn`` (workers share
   nothing with this process), loaded there with plain ``pickle.loads`` and run,
   every result checked.
2. ``--engine dask``: a graph of ``__main__`` functions submitted with
   ``client.get``, end to end, with stock distributed and with
   ``graphpickle.integrations.dask_distributed.install(client)``, each run in its own fresh
   ``LocalCluster`` (worker processes), the two in turns (``--tasks`` of them, at
   most 1,000; ``--repeat`` runs of each, at most 3); beside the wall time,
   the scheduler's own CPU time in the dumps of each task it sends to a worker (a
   wrapper of ``distributed.protocol.pickle.dumps`` that
   ``client.run_on_scheduler`` puts in the scheduler), and whether the
   difference in wall time is more than the noise of the runs.
3. One graph of a million tasks whose function is in ``__main__`` (distributed
   pickles it twice: pickle, then cloudpickle of the whole graph once it sees
   ``__main__``); each payload is loaded, and all its tasks run, in a fresh
   worker process.
4. A single task dumped back to back, as a scheduler sends each one on its own;
   its median times 100,000 is an extrapolation, and labelled as one.

Dumps times are medians of interleaved runs (each serializer in turn, the order
reversed each round): on a shared machine a single shot can show the slowest as
the fastest. Progress bars go to standard error when it is a terminal, and
nothing is written there otherwise.
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import re
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..core.pickler import dumps
from .bench import interleaved_samples, timed
from .console import print_table, progress

# Executed in __main__, as a notebook executes its cells there.
NOTEBOOK_CELL = """
import numpy as np

OFFSET = 3

def weighted_sum(values, weight):
    return float(np.dot(values, weight)) + OFFSET

def make_scaler(factor):
    def scale(x):
        return x * factor
    return scale

class Accumulator:
    def __init__(self, start):
        self.start = start
    def add(self, x):
        return self.start + x

square = lambda x: x * x

def step(previous, i):
    return i + 1
"""
CHUNK_SIZE = 5_000
# The dask cluster section: at most this many tasks (a LocalCluster on two cores
# runs about 500 a second) and runs per configuration; a difference in wall time
# smaller than NOISE, or inside the range of the runs, is called noise.
CLUSTER_TASKS = 1_000
CLUSTER_RUNS = 3
NOISE = 0.05
STOCK, GRAPHPICKLE = "stock", "graphpickle"

Task = tuple[Callable[..., Any], tuple[Any, ...]]


def notebook() -> dict[str, Any]:
    """Run :data:`NOTEBOOK_CELL` in ``__main__``; return ``__main__``'s dict."""
    main = sys.modules["__main__"].__dict__
    exec(compile(NOTEBOOK_CELL, "<notebook cell>", "exec"), main)
    return main


def build_tasks(main: dict[str, Any], n_tasks: int) -> list[Task]:
    np = main["np"]
    weights = np.linspace(0.0, 1.0, 64)
    # As a notebook builds a graph: a few functions, each shared by many tasks.
    scale_by_3 = main["make_scaler"](3)
    add_to_100 = main["Accumulator"](100).add
    kinds: list[Callable[[int], Task]] = [
        lambda i: (main["weighted_sum"], (np.full(64, i % 7, dtype="f8"), weights)),
        lambda i: (scale_by_3, (i,)),
        lambda i: (add_to_100, (i,)),
        lambda i: (main["square"], (i,)),
    ]
    return [kinds[i % 4](i) for i in range(n_tasks)]


def _serializers() -> dict[str, Callable[[Any], bytes]]:
    import cloudpickle

    found: dict[str, Callable[[Any], bytes]] = {
        "graphpickle": dumps,
        "pickle": functools.partial(pickle.dumps, protocol=5),
        "cloudpickle": cloudpickle.dumps,  # protocol 5, its default
    }
    try:
        from distributed.protocol import pickle as distributed_pickle

        found["distributed"] = functools.partial(distributed_pickle.dumps, protocol=5)
    except ImportError:
        pass
    return found


def _error(exc: BaseException) -> str:
    """An exception in one short line (a module's file name left out)."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return re.sub(r" (from '[^']*'|\(built-in\))", "", text)[:90]


def _count(n: int, thing: str) -> str:
    return f"{n:,} {thing}" + ("" if n == 1 else "s")


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


@dataclass
class _Timed:
    """What :func:`_in_turns` measured of each call."""

    results: dict[str, Any] = field(default_factory=dict)  # of the first call
    failures: dict[str, str] = field(default_factory=dict)
    medians: dict[str, float] = field(default_factory=dict)


def _in_turns(calls: dict[str, Callable[[], Any]], rounds: int, label: str) -> _Timed:
    """Call each of ``calls`` once (the warm-up of first-use caches; its result is
    kept), then time ``rounds`` more calls of each that did not fail, in turns,
    the order reversed each round."""
    out = _Timed()
    for name in progress(list(calls), len(calls), f"{label}: warm-up"):
        try:
            out.results[name] = calls[name]()
        except Exception as exc:
            out.failures[name] = _error(exc)
    order = list(out.results)
    plan: list[str] = []
    for _ in range(rounds):
        plan += order
        order = order[::-1]
    samples: dict[str, list[float]] = {name: [] for name in out.results}
    for name in progress(plan, len(plan), label):
        samples[name].append(timed(calls[name]))
    out.medians = {name: _median(values) for name, values in samples.items()}
    return out


# --- 1. tasks on a spawned process pool -------------------------------------------


def run_chunk(payload: bytes) -> list[Any]:
    """Executed on a worker: load a chunk of tasks and run them.

    Plain ``pickle.loads``: a worker needs cloudpickle, not graphpickle."""
    tasks = pickle.loads(payload)
    return [func(*args) for func, args in tasks]


def warm_up(_: object) -> None:
    """Executed on each worker before timing: the imports any payload needs, and a
    pause long enough that every worker gets one."""
    import cloudpickle  # noqa: F401
    import numpy  # noqa: F401

    time.sleep(0.2)


def _spawn_pool(workers: int, **options: Any) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), **options)


def _pool_table(main: dict[str, Any], n_tasks: int, workers: int, repeat: int) -> bool:
    tasks = build_tasks(main, n_tasks)
    expected = [func(*args) for func, args in tasks]
    chunks = [tasks[start : start + CHUNK_SIZE] for start in range(0, n_tasks, CHUNK_SIZE)]
    serializers = _serializers()
    measured = _in_turns(
        {
            name: functools.partial(lambda s: [s(c) for c in chunks], s)
            for name, s in serializers.items()
        },
        repeat,
        "dumps",
    )
    rows: list[list[str]] = []
    ok: dict[str, bool] = {}
    pool = _spawn_pool(workers)
    try:
        # Start every worker now, so that no serializer's run pays for the start-up.
        list(pool.map(warm_up, range(workers)))
        for name in serializers:
            if name in measured.failures:
                ok[name] = False
                rows.append([name, "-", "-", "-", f"FAILS: dumps: {measured.failures[name]}"])
                continue
            payloads: list[bytes] = measured.results[name]
            start = time.perf_counter()
            results: list[Any] = []
            try:
                for part in progress(pool.map(run_chunk, payloads), len(payloads), name):
                    results.extend(part)
            except Exception as exc:
                result = f"FAILS: {_error(exc)}"
            else:
                result = "ok" if results == expected else "FAILS: wrong results"
            seconds = time.perf_counter() - start
            ok[name] = result == "ok"
            rows.append(
                [
                    name,
                    f"{measured.medians[name] * 1e3:.0f} ms",
                    f"{sum(len(p) for p in payloads) / 1e6:.2f} MB",
                    f"{seconds:.2f} s" if ok[name] else "-",
                    result,
                ]
            )
    finally:
        pool.shutdown()
    print_table(
        f"{n_tasks:,} tasks in {_count(len(chunks), 'payload')} on a spawn pool ({workers} worker "
        "processes), every result checked",
        ["serializer", f"dumps (median of {repeat})", "payload", "ship, load, run", "result"],
        rows,
    )
    return ok["graphpickle"]


# --- 2. a graph of __main__ functions on a dask cluster ----------------------------


class TaskDumpsRecorder:
    """Stands in for ``distributed.protocol.pickle.dumps`` in the scheduler:
    records the thread's CPU time in each dumps of a task (a
    ``dask._task_spec.GraphNode``, what the scheduler sends to a worker), and
    passes every call on to the ``dumps`` it replaced."""

    def __init__(self, inner: Callable[..., bytes]) -> None:
        from dask._task_spec import GraphNode

        self.inner, self.task_type = inner, GraphNode
        self.cpu_ns: list[int] = []

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> bytes:
        if not isinstance(x, self.task_type):
            return self.inner(x, *args, **kwargs)
        start = time.thread_time_ns()
        out = self.inner(x, *args, **kwargs)
        self.cpu_ns.append(time.thread_time_ns() - start)
        return out


# Run in the scheduler by client.run_on_scheduler. distributed's protocol code
# looks dumps up on its module at each call (create_pickled_sub_frames), so the
# recorder sees every task the scheduler pickles, after install() too.
def start_recording() -> None:
    import distributed.protocol.pickle as protocol_pickle

    protocol_pickle.dumps = TaskDumpsRecorder(protocol_pickle.dumps)


def stop_recording() -> list[int]:
    """Put the recorded ``dumps`` back; the CPU time (ns) of each task's dumps."""
    import distributed.protocol.pickle as protocol_pickle

    recorder = protocol_pickle.dumps
    if not isinstance(recorder, TaskDumpsRecorder):
        return []
    protocol_pickle.dumps = recorder.inner
    return recorder.cpu_ns


@dataclass
class _ClusterRun:
    wall: float = 0.0
    dumps_ns: list[int] = field(default_factory=list)
    installed: list[bool] = field(default_factory=list)  # driver, scheduler, workers
    error: str = ""


def _cluster_graph(main: dict[str, Any], n: int) -> tuple[dict[Any, Any], list[Any], list[Any]]:
    """Half the tasks square (a lambda), half scale the square (a closure)."""
    square, scale_by_3 = main["square"], main["make_scaler"](3)
    graph: dict[Any, Any] = {}
    for i in range(max(1, n // 2)):
        graph[("square", i)] = (square, i)
        graph[("scaled", i)] = (scale_by_3, ("square", i))
    keys = [("scaled", i) for i in range(max(1, n // 2))]
    return graph, keys, [3 * i * i for i in range(len(keys))]


def _cluster_run(
    config: str, graph: dict[Any, Any], keys: list[Any], expected: list[Any], workers: int
) -> _ClusterRun:
    from distributed import Client, LocalCluster

    from ..integrations import dask_distributed as gpd

    run = _ClusterRun()
    try:
        with (
            LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,
        ):
            if config == GRAPHPICKLE:
                gpd.install(client)
            run.installed = [
                gpd.installed(),
                client.run_on_scheduler(gpd.installed),
                *client.run(gpd.installed).values(),
            ]
            client.run_on_scheduler(start_recording)
            start = time.perf_counter()
            results = client.get(graph, keys)
            run.wall = time.perf_counter() - start
            run.dumps_ns = client.run_on_scheduler(stop_recording)
            if results != expected:
                run.error = "wrong results"
    except Exception as exc:
        run.error = _error(exc)
    finally:
        # A LocalCluster's scheduler runs in this process: the next cluster starts
        # from stock distributed, and from no recorder.
        stop_recording()
        gpd.uninstall()
    return run


def _cluster_table(main: dict[str, Any], n_tasks: int, workers: int, repeat: int) -> bool:
    try:
        import dask._task_spec  # noqa: F401
    except ImportError:
        print("dask cluster: skipped (dask._task_spec is missing; dask >= 2024.12 has it)")
        return True
    graph, keys, expected = _cluster_graph(main, n_tasks)
    runs_each = min(repeat, CLUSTER_RUNS)
    order, plan = [STOCK, GRAPHPICKLE], []
    for _ in range(runs_each):
        plan += order
        order = order[::-1]
    runs: dict[str, list[_ClusterRun]] = {STOCK: [], GRAPHPICKLE: []}
    for config in progress(plan, len(plan), "dask cluster"):
        runs[config].append(_cluster_run(config, graph, keys, expected, workers))

    rows, ok = [], True
    cpu_ms: dict[str, float] = {}
    for config, done in runs.items():
        want = config == GRAPHPICKLE
        # graphpickle in the client, the scheduler and every worker, or in none.
        failed = [r.error for r in done if r.error]
        failed += ["no task dumps recorded in the scheduler" for r in done if not r.dumps_ns]
        failed += [
            "graphpickle installed in some processes only"
            for r in done
            if r.installed != [want] * (workers + 2)
        ]
        if failed:
            ok = False
            rows.append([_config_name(config), *["-"] * 5, f"FAILS: {failed[0]}"])
            continue
        walls = [r.wall for r in done]
        cpu_ms[config] = statistics.median(sum(r.dumps_ns) / 1e6 for r in done)
        rows.append(
            [
                _config_name(config),
                f"{statistics.median(walls):.2f} s",
                f"{min(walls):.2f}-{max(walls):.2f} s" if len(walls) > 1 else "one",
                f"{cpu_ms[config]:.0f} ms",
                f"{statistics.median(statistics.median(r.dumps_ns) for r in done) / 1e3:.0f} µs",
                "client, scheduler, workers" if want else "none",
                f"{len(keys):,} ok",
            ]
        )
    print_table(
        f"dask cluster: {len(graph):,} tasks of __main__ functions (a lambda, a closure) "
        f"through client.get; {_count(runs_each, 'run')} of each, in turns, each in a fresh LocalCluster "
        f"({workers} worker processes); + graphpickle: graphpickle.integrations.dask_distributed.install(client)",
        [
            "distributed",
            "client.get (median)",
            "runs",
            "scheduler: task dumps, CPU",
            "per task",
            "graphpickle in",
            "results",
        ],
        rows,
    )
    if ok:
        print(_cluster_verdict(runs, cpu_ms))
    return ok


def _config_name(config: str) -> str:
    return "stock" if config == STOCK else "+ graphpickle"


def _cluster_verdict(runs: dict[str, list[_ClusterRun]], cpu_ms: dict[str, float]) -> str:
    """Two lines: whether the wall times differ by more than noise, and the
    scheduler's dumps beside them."""
    walls = {config: [r.wall for r in done] for config, done in runs.items()}
    stock, ours = walls[STOCK], walls[GRAPHPICKLE]
    medians = {config: statistics.median(w) for config, w in walls.items()}
    ranges = ", ".join(f"{c} {min(w):.2f}-{max(w):.2f} s" for c, w in walls.items())
    change = medians[GRAPHPICKLE] / medians[STOCK] - 1
    if len(stock) < 2:
        wall = f"one run each ({ranges}): no spread of runs to judge a difference by."
    elif min(stock) <= max(ours) and min(ours) <= max(stock):
        wall = (
            f"within noise. The ranges of the runs overlap ({ranges}), so the "
            f"{abs(change):.1%} between the medians is not a measured difference."
        )
    elif abs(change) < NOISE:
        wall = (
            f"within noise. The medians differ by {abs(change):.1%} ({ranges}), less than "
            f"the {NOISE:.0%} a shared machine varies by."
        )
    else:
        faster = "graphpickle" if change < 0 else "stock distributed"
        wall = f"{faster} is faster in every run ({ranges}), by {abs(change):.0%} at the median."
    share = " and ".join(f"{cpu_ms[c] / 1e3 / medians[c]:.0%}" for c in (STOCK, GRAPHPICKLE))
    return (
        f"End to end (client.get): {wall}\n"
        f"The scheduler's own task dumps: {cpu_ms[STOCK]:.0f} ms of CPU stock, "
        f"{cpu_ms[GRAPHPICKLE]:.0f} ms with graphpickle "
        f"({cpu_ms[STOCK] / max(cpu_ms[GRAPHPICKLE], 1e-9):.1f}x less): {share} of the wall time."
    )


# --- 3. one graph of a million tasks --------------------------------------------------


def run_graph(payload: bytes) -> tuple[float, int]:
    """Executed in a fresh worker process: load a graph of ``key -> (func,
    dependency, i)`` with plain ``pickle.loads``, run every task in order; return
    the seconds ``loads`` took and how many results are right (``i + 1``)."""
    start = time.perf_counter()
    graph = pickle.loads(payload)
    loads_seconds = time.perf_counter() - start
    results: dict[Any, Any] = {}
    right = 0
    for key, (func, dependency, i) in graph.items():
        results[key] = func(results.get(dependency), i)
        right += results[key] == i + 1
    return loads_seconds, right


def _big_graph(main: dict[str, Any], n: int, repeat: int) -> bool:
    """One dask-style graph of n tasks whose function is in __main__."""
    step = main["step"]
    graph = {("t", i): (step, ("t", i - 1), i) for i in range(n)}
    serializers = _serializers()
    rounds = max(3, repeat // 2)
    label = f"{n:,} tasks"
    measured = _in_turns(
        {name: functools.partial(serialize, graph) for name, serialize in serializers.items()},
        rounds,
        label,
    )
    del graph
    payloads: dict[str, bytes] = measured.results
    # Each payload in a process of its own, started for it: it has imported
    # nothing of this one (its __main__ is not this __main__). One at a time, so
    # that the loads times compare.
    on_worker: dict[str, str] = dict.fromkeys(measured.failures, "-")
    loads: dict[str, str] = dict.fromkeys(measured.failures, "-")
    pool = _spawn_pool(1, max_tasks_per_child=1)
    try:
        futures = {name: pool.submit(run_graph, payload) for name, payload in payloads.items()}
        for name in progress(list(futures), len(futures), f"{label}: workers"):
            try:
                seconds, right = futures[name].result()
            except Exception as exc:
                on_worker[name], loads[name] = f"FAILS: {_error(exc)}", "-"
            else:
                loads[name] = f"{seconds:.2f} s"
                on_worker[name] = (
                    f"all {n:,} ran, results ok" if right == n else f"FAILS: {n - right:,} wrong"
                )
    finally:
        pool.shutdown()
    base = measured.medians.get("graphpickle")
    print_table(
        f"one graph of {n:,} tasks with a __main__ function; each payload loaded, and every "
        "task run, in a fresh worker process (one at a time)",
        [
            "serializer",
            f"dumps (median of {rounds})",
            "vs graphpickle",
            "payload",
            "worker: loads",
            "worker: every task",
        ],
        [
            [name, "-", "-", "-", "-", f"FAILS: dumps: {measured.failures[name]}"]
            if name in measured.failures
            else [
                name,
                f"{measured.medians[name] * 1e3:.0f} ms",
                f"{measured.medians[name] / base:.2f}x" if base else "-",
                f"{len(payloads[name]) / 1e6:.1f} MB",
                loads[name],
                on_worker[name],
            ]
            for name in serializers
        ],
    )
    return on_worker["graphpickle"].startswith("all ")


# --- 4. one task at a time -----------------------------------------------------------


def _per_task(main: dict[str, Any], repeat: int) -> None:
    """A dask Task of the same __main__ function, pickled on its own as a
    scheduler pickles every task it sends to a worker."""
    try:
        from dask._task_spec import Task, TaskRef
        from distributed.protocol import pickle as stock
    except ImportError as exc:
        print(f"one task at a time: skipped ({exc.name} is missing; dask >= 2024.12 has it)")
        return
    from ..integrations import dask_distributed

    task = Task(("t", 1), main["step"], TaskRef(("t", 0)), 1)

    def keep(buffer: pickle.PickleBuffer) -> None:
        pass

    calls: dict[str, Callable[[], Any]] = {
        "distributed": lambda: stock.dumps(task, buffer_callback=keep, protocol=5),
        "graphpickle (dask integration)": lambda: dask_distributed.dumps(
            task, buffer_callback=keep, protocol=5
        ),
    }
    samples = interleaved_samples(calls, repeat * 3, min_seconds=0.02)
    rows = []
    for name, values in samples.items():
        median = _median(values)
        rows.append([name, f"{median * 1e6:.1f} µs", f"{median * 1e5:.2f} s"])
    print_table(
        "one task at a time, as a scheduler sends each: a dask Task of the __main__ function, "
        "dumped back to back",
        [
            "serializer",
            f"dumps per task (median of {repeat * 3})",
            "x 100,000 (an extrapolation, not a run)",
        ],
        rows,
    )


def run_demo(
    n_tasks: int = 100_000,
    workers: int = 2,
    engine: str = "all",
    graph_tasks: int = 1_000_000,
    repeat: int = 5,
) -> int:
    print(
        f"graphpickle demo: {n_tasks:,} tasks built from __main__ functions, a lambda, a "
        f"closure, bound methods of a __main__ class and numpy arrays"
    )
    main = notebook()
    ok = True
    if engine in ("pool", "all"):
        ok &= _pool_table(main, n_tasks, workers, repeat)
    if engine in ("dask", "all"):
        if _has("distributed"):
            ok &= _cluster_table(main, min(n_tasks, CLUSTER_TASKS), workers, repeat)
        else:
            print("dask cluster: skipped (distributed is not installed)")
    if graph_tasks:
        ok &= _big_graph(main, graph_tasks, repeat)
    _per_task(main, repeat)
    return 0 if ok else 1


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
