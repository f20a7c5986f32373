"""``graphpickle demo``: what a notebook user does, on real worker processes.

The demo runs a "notebook cell" in ``__main__`` (functions, a lambda, a closure
and a class, exactly as Jupyter defines them), builds a graph of tasks from them
with numpy payloads, pickles it in chunks, ships the chunks to a process pool
started with ``spawn`` (workers share nothing with this process) and, when
``distributed`` is installed, to a local dask cluster; runs every task there and
checks every result. It does the same with ``pickle``, ``cloudpickle`` and
``distributed``'s pickler and reports time, size, and whether the payload runs
on a worker at all.

Every time shown is the median of interleaved runs (each serializer in turn,
the order reversed each round): on a shared machine a single shot can show the
slowest as the fastest. Two more tables show where the difference is real: one
graph of a million tasks whose function is in ``__main__`` (distributed pickles
it twice: pickle, then cloudpickle of the whole graph once it sees
``__main__``), and a single task as a scheduler sends each one on its own.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing
import pickle
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..core.pickler import dumps
from .bench import interleaved_samples
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

Task = tuple[Callable[..., Any], tuple[Any, ...]]


@dataclass
class Outcome:
    engine: str
    serializer: str
    dumps_seconds: float | None = None
    payload_bytes: int | None = None
    run_seconds: float | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


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


def build_tasks(n_tasks: int) -> list[Task]:
    main = sys.modules["__main__"].__dict__
    exec(compile(NOTEBOOK_CELL, "<notebook cell>", "exec"), main)
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


def _chunks(items: list[Task], size: int) -> Iterator[list[Task]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


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


class _Engine:
    name = ""

    def map(self, payloads: list[bytes]) -> Iterator[list[Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _SpawnPool(_Engine):
    def __init__(self, workers: int) -> None:
        self.name = f"spawn pool ({workers})"
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        # Start every worker now, so that no serializer's run pays for the start-up.
        list(self.pool.map(warm_up, range(workers)))

    def map(self, payloads: list[bytes]) -> Iterator[list[Any]]:
        return self.pool.map(run_chunk, payloads)

    def close(self) -> None:
        self.pool.shutdown()


class _DaskCluster(_Engine):
    def __init__(self, workers: int) -> None:
        from distributed import Client, LocalCluster

        self.name = f"dask cluster ({workers})"
        self.cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        self.client = Client(self.cluster)
        self.client.wait_for_workers(workers)
        self.client.run(warm_up, None)

    def map(self, payloads: list[bytes]) -> Iterator[list[Any]]:
        # The payloads are bytes: distributed ships them as they are (and warns
        # that they are large, which is the point here).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            futures = self.client.map(run_chunk, payloads, pure=False)
        for future in futures:
            yield future.result(timeout=120)

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


def _engines(choice: str, workers: int) -> list[Callable[[], _Engine]]:
    engines: list[Callable[[], _Engine]] = []
    if choice in ("pool", "all"):
        engines.append(lambda: _SpawnPool(workers))
    if choice in ("dask", "all"):
        try:
            import distributed  # noqa: F401
        except ImportError:
            if choice == "dask":
                raise SystemExit(
                    "graphpickle demo: --engine dask needs distributed installed"
                ) from None
        else:
            engines.append(lambda: _DaskCluster(workers))
    return engines


def _run(engine: _Engine, name: str, payloads: list[bytes], expected: list[Any]) -> Outcome:
    outcome = Outcome(engine.name, name)
    start = time.perf_counter()
    results: list[Any] = []
    try:
        for part in progress(engine.map(payloads), len(payloads), name):
            results.extend(part)
    except Exception as exc:
        outcome.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:70]
        return outcome
    outcome.run_seconds = time.perf_counter() - start
    if results != expected:
        outcome.error = "wrong results"
    return outcome


def _medians(calls: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    gc.collect()  # every serializer starts from the same collector state
    samples = interleaved_samples(calls, repeat, min_seconds=0.0)
    return {name: sorted(values)[len(values) // 2] for name, values in samples.items()}


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
    tasks = build_tasks(n_tasks)
    expected = [func(*args) for func, args in tasks]
    chunks = list(_chunks(tasks, CHUNK_SIZE))

    shipped: dict[str, list[bytes]] = {}
    failures: dict[str, str] = {}
    serializers = _serializers()
    for name, serialize in serializers.items():
        try:
            # Also the warm-up (first-use caches), so that the timings compare.
            shipped[name] = [serialize(chunk) for chunk in chunks]
        except Exception as exc:
            failures[name] = f"dumps failed: {type(exc).__name__}"
    seconds = _medians(
        {
            name: functools.partial(lambda s: [s(c) for c in chunks], serializers[name])
            for name in shipped
        },
        repeat,
    )

    outcomes: list[Outcome] = []
    for make_engine in _engines(engine, workers):
        started = make_engine()
        try:
            for name in serializers:
                if name in failures:
                    outcomes.append(Outcome(started.name, name, error=failures[name]))
                    continue
                outcome = _run(started, name, shipped[name], expected)
                outcome.dumps_seconds = seconds[name]
                outcome.payload_bytes = sum(len(p) for p in shipped[name])
                outcomes.append(outcome)
        finally:
            started.close()

    print_table(
        f"{n_tasks:,} tasks in {len(chunks)} payloads, every result checked "
        f"(dumps: median of {repeat} interleaved runs)",
        ["engine", "serializer", "dumps", "payload", "run", "result"],
        [
            [
                o.engine,
                o.serializer,
                "-" if o.dumps_seconds is None else f"{o.dumps_seconds * 1e3:.0f} ms",
                "-" if o.payload_bytes is None else f"{o.payload_bytes / 1e6:.2f} MB",
                "-" if o.run_seconds is None else f"{o.run_seconds:.2f} s",
                "ok" if o.ok else f"FAILS: {o.error}",
            ]
            for o in outcomes
        ],
    )
    if graph_tasks:
        _big_graph(graph_tasks, serializers, repeat)
    _per_task(repeat)
    ours = [o for o in outcomes if o.serializer == "graphpickle"]
    return 0 if ours and all(o.ok for o in ours) else 1


def _big_graph(n: int, serializers: dict[str, Callable[[Any], bytes]], repeat: int) -> None:
    """One dask-style graph of n tasks whose function is in __main__."""
    step = sys.modules["__main__"].__dict__["step"]
    graph = {("t", i): (step, ("t", i - 1), i) for i in range(n)}
    sizes = {name: len(serialize(graph)) for name, serialize in serializers.items()}
    seconds = _medians(
        {name: functools.partial(serialize, graph) for name, serialize in serializers.items()},
        max(3, repeat // 2),
    )
    base = seconds["graphpickle"]
    print_table(
        f"one graph of {n:,} tasks with a __main__ function (dumps: medians of interleaved runs)",
        ["serializer", "dumps", "vs graphpickle", "payload", "on a worker"],
        [
            [
                name,
                f"{seconds[name] * 1e3:.0f} ms",
                f"{seconds[name] / base:.2f}x",
                f"{sizes[name] / 1e6:.1f} MB",
                "fails: __main__.step by reference" if name == "pickle" else "runs",
            ]
            for name in serializers
        ],
    )


def _per_task(repeat: int) -> None:
    """A dask Task of the same __main__ function, pickled on its own as a
    scheduler pickles every task it sends to a worker."""
    try:
        from dask._task_spec import Task, TaskRef
        from distributed.protocol import pickle as stock
    except ImportError as exc:
        print(f"one task at a time: skipped ({exc.name} is missing; dask >= 2024.12 has it)")
        return
    from ..integrations import dask_distributed

    step = sys.modules["__main__"].__dict__["step"]
    task = Task(("t", 1), step, TaskRef(("t", 0)), 1)

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
        median = sorted(values)[len(values) // 2]
        rows.append([name, f"{median * 1e6:.1f} µs", f"{median * 1e5:.2f} s"])
    print_table(
        "one task at a time, as a scheduler sends each task (a dask Task of the __main__ function)",
        ["serializer", "dumps per task", "per 100,000 tasks"],
        rows,
    )
