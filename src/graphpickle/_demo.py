"""``graphpickle demo``: what a notebook user does, on real worker processes.

The demo runs a "notebook cell" in ``__main__`` (functions, a lambda, a closure
and a class, exactly as Jupyter would define them), builds a graph of tasks from
them with numpy payloads, ships it in chunks to a process pool started with
``spawn`` (workers share nothing with this process), runs every task there and
checks every result. Then it pickles the same chunks with ``pickle``,
``cloudpickle`` and ``distributed`` and reports time, size, and whether the
payload loads on a worker at all.
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import sys
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from ._pickler import dumps, loads

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
"""


@dataclass
class Outcome:
    name: str
    dumps_seconds: float | None
    payload_bytes: int | None
    loads_on_workers: bool
    error: str = ""


def run_chunk(payload: bytes) -> list[Any]:
    """Executed on a worker: load a chunk of tasks and run them.

    Uses plain ``pickle.loads``: a worker needs cloudpickle, not graphpickle."""
    tasks = pickle.loads(payload)
    return [func(*args) for func, args in tasks]


def _define_notebook_objects() -> types.SimpleNamespace:
    main = sys.modules["__main__"]
    exec(compile(NOTEBOOK_CELL, "<notebook cell>", "exec"), main.__dict__)
    return types.SimpleNamespace(
        **{
            k: main.__dict__[k]
            for k in ("weighted_sum", "make_scaler", "Accumulator", "square", "np")
        }
    )


def build_tasks(n_tasks: int) -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
    nb = _define_notebook_objects()
    weights = nb.np.linspace(0.0, 1.0, 64)
    scale_by_3 = nb.make_scaler(3)
    acc = nb.Accumulator(100)
    tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    for i in range(n_tasks):
        kind = i % 4
        if kind == 0:
            tasks.append((nb.weighted_sum, (nb.np.full(64, i % 7, dtype="f8"), weights)))
        elif kind == 1:
            tasks.append((scale_by_3, (i,)))
        elif kind == 2:
            tasks.append((acc.add, (i,)))
        else:
            tasks.append((nb.square, (i,)))
    return tasks


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _serializers() -> dict[str, Callable[[Any], bytes]]:
    import cloudpickle

    found: dict[str, Callable[[Any], bytes]] = {
        "graphpickle": dumps,
        "pickle": lambda obj: pickle.dumps(obj, protocol=5),
        "cloudpickle": cloudpickle.dumps,  # protocol 5, its default
    }
    try:
        from distributed.protocol import pickle as distributed_pickle

        found["distributed"] = functools.partial(distributed_pickle.dumps, protocol=5)
    except ImportError:
        pass
    return found


def _progress(done: int, total: int, label: str) -> None:
    width = 30
    filled = width * done // total
    print(
        f"\r  {label:12} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}",
        end="",
        file=sys.stderr,
        flush=True,
    )
    if done == total:
        print(file=sys.stderr)


def run_demo(n_tasks: int = 100_000, workers: int = 2, chunk_size: int = 5_000) -> int:
    print(
        f"graphpickle demo: {n_tasks:,} tasks from __main__ functions, lambdas, closures, "
        f"bound methods and numpy arrays, on {workers} spawned worker processes"
    )
    tasks = build_tasks(n_tasks)
    expected = [func(*args) for func, args in tasks]
    chunks = list(_chunks(tasks, chunk_size))

    outcomes: list[Outcome] = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for name, serialize in _serializers().items():
            start = time.perf_counter()
            try:
                payloads = [serialize(chunk) for chunk in chunks]
            except Exception as exc:
                outcomes.append(
                    Outcome(name, None, None, False, f"dumps failed: {type(exc).__name__}")
                )
                continue
            elapsed = time.perf_counter() - start
            size = sum(len(p) for p in payloads)
            results: list[Any] = []
            try:
                for i, part in enumerate(pool.map(run_chunk, payloads)):
                    results.extend(part)
                    _progress(i + 1, len(payloads), name)
            except Exception as exc:
                print(file=sys.stderr)
                outcomes.append(
                    Outcome(name, elapsed, size, False, f"{type(exc).__name__}: {exc}"[:90])
                )
                continue
            if results != expected:
                outcomes.append(Outcome(name, elapsed, size, False, "wrong results"))
                continue
            outcomes.append(Outcome(name, elapsed, size, True))

    print()
    print(f"{'serializer':12} {'dumps':>9} {'payload':>10}  runs on workers")
    for o in outcomes:
        t = f"{o.dumps_seconds * 1e3:7.0f} ms" if o.dumps_seconds is not None else "        -"
        s = f"{o.payload_bytes / 1e6:7.2f} MB" if o.payload_bytes is not None else "         -"
        verdict = "yes, all results checked" if o.loads_on_workers else f"no: {o.error}"
        print(f"{o.name:12} {t} {s}  {verdict}")
    ours = next(o for o in outcomes if o.name == "graphpickle")
    # graphpickle must round-trip here as well, with its own loads.
    assert [f(*a) for f, a in loads(dumps(chunks[0]))] == expected[: len(chunks[0])]
    return 0 if ours.loads_on_workers else 1
