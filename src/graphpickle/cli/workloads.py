"""The graphs the benchmarks pickle.

Each builder takes the task function, so that one graph can be built with an
importable function (this module's ``inc``), a function of ``__main__`` and a
lambda. ``scale`` shrinks every workload for quick runs.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def inc(x: Any, *args: Any) -> Any:
    """The importable task function."""
    return x + 1


def floor_inc(x: Any, *args: Any) -> Any:
    """An importable task function that uses a module, as most notebook code does."""
    return math.floor(x) + 1


@dataclass
class Point:
    """An importable dataclass, as a message argument (``__main__`` has its twin)."""

    x: int
    y: float


def norm(p: Point) -> float:
    """The importable function mapped over ``Point`` instances (``__main__`` has its twin)."""
    return math.hypot(p.x, p.y)


class SlotTask:
    """A small task object, as schedulers keep them: slots and a ``__reduce__``."""

    __slots__ = ("args", "func", "key")

    def __init__(self, key: Any, func: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.key, self.func, self.args = key, func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (SlotTask, (self.key, self.func, self.args))


def tuple_tasks(func: Callable[..., Any], scale: float) -> dict[Any, Any]:
    """dask's classic graph format: ``key -> (func, dependency_key, i)``."""
    n = int(1_000_000 * scale)
    return {("t", i): (func, ("t", i - 1), i) for i in range(n)}


def slot_tasks(func: Callable[..., Any], scale: float) -> list[SlotTask]:
    n = int(200_000 * scale)
    return [SlotTask(("t", i), func, (("t", i - 1), i)) for i in range(n)]


def delayed_graph(func: Callable[..., Any], scale: float) -> dict[Any, Any]:
    """A real ``dask.delayed`` graph: half leaves, half tasks depending on a leaf."""
    from dask.delayed import delayed

    half = int(50_000 * scale)
    task = delayed(func, pure=False)
    leaves = [task(i) for i in range(half)]
    graph: dict[Any, Any] = {}
    for node in (task(leaf) for leaf in leaves):
        graph.update(node.__dask_graph__())
    return graph


def array_graph(func: Callable[..., Any], scale: float) -> dict[Any, Any]:
    """A real ``dask.array`` graph: map_blocks over many small chunks, then a sum."""
    import dask.array as da

    side = int(6000 * scale**0.5) // 20 * 20
    x = da.ones((side, side), chunks=(20, 20))
    return dict(x.map_blocks(func, dtype=x.dtype).sum().__dask_graph__())


def numpy_arrays(func: Callable[..., Any], scale: float) -> list[Any]:
    """1,000 arrays of 1 MB, each next to the task function."""
    import numpy as np

    n = max(2, int(1000 * scale))
    rng = np.random.default_rng(0)
    return [(func, rng.random(131_072)) for _ in range(n)]


def numpy_scalars(func: Callable[..., Any], scale: float) -> list[Any]:
    """200,000 numpy scalars and datetimes (objects that reach reducer_override)."""
    import numpy as np

    n = int(200_000 * scale)
    start = datetime.datetime(2026, 1, 1)
    values: list[Any] = [func]
    for i in range(n // 4):
        values += [
            np.float64(i),
            np.int32(i),
            np.datetime64(i, "s"),
            start + datetime.timedelta(seconds=i),
        ]
    return values


@dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[Callable[..., Any], float], Any]
    out_of_band: bool = False


WORKLOADS = [
    Workload("1M tuple tasks", tuple_tasks),
    Workload("200k slot tasks", slot_tasks),
    Workload("dask.delayed 100k", delayed_graph),
    Workload("dask.array 300k", array_graph),
    Workload("1000 x 1 MB numpy (oob)", numpy_arrays, out_of_band=True),
    Workload("200k numpy scalars", numpy_scalars),
]


# --- small messages: what a running cluster pickles, one message at a time ----


def _distributed_message() -> dict[str, Any]:
    """A worker's task-finished report, as distributed builds it."""
    return {
        "op": "task-finished",
        "status": "OK",
        "key": ("inc-5b1f0c1ad3a94a2e8d6c6f0b1c2d3e4f", 17),
        "nbytes": 28,
        "type": b"\x80\x05\x95\x14\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x03int\x94\x93\x94.",
        "typename": "int",
        "metadata": {},
        "thread": 140234988812032,
        "startstops": ({"action": "compute", "start": 1767225600.125, "stop": 1767225600.127},),
        "stimulus_id": "compute-task-1767225600.1234567",
    }


def _who_has_message() -> dict[str, Any]:
    """A scheduler-to-worker message naming where 100 dependencies live (2.6 kB)."""
    workers = [f"tcp://10.0.0.{i}:40{i:03d}" for i in range(8)]
    return {
        "op": "acquire-replicas",
        "who_has": {
            ("getitem-9c2b6a1e0d3f4b5a8e7d6c5b4a3f2e1d", i): [workers[i % 8], workers[(i + 3) % 8]]
            for i in range(100)
        },
        "nbytes": {("getitem-9c2b6a1e0d3f4b5a8e7d6c5b4a3f2e1d", i): 8_000 + i for i in range(100)},
        "stimulus_id": "find-missing-1767225600.5",
    }


def _dask_task(func: Callable[..., Any]) -> Any:
    from dask._task_spec import Task, TaskRef

    return Task(("inc-5b1f0c1ad3a94a2e", 17), func, TaskRef(("inc-5b1f0c1ad3a94a2e", 16)), 17)


def _dask_task_nested(func: Callable[..., Any]) -> Any:
    """A Task whose arguments hold nested tasks and a keyword (what dask.array fuses)."""
    from dask._task_spec import Task, TaskRef

    inner = Task(None, func, TaskRef(("ones-8e1a", 3, 4)), 1)
    return Task(("sum-4d2c", 3, 4), func, inner, [TaskRef(("x", 1)), TaskRef(("x", 2))], axis=0)


def _data_node() -> Any:
    from dask._task_spec import DataNode

    return DataNode(("from-sequence-1f0e", 3), list(range(20)))


def _alias() -> Any:
    from dask._task_spec import Alias

    return Alias(("finalize-0a9b", 0), ("sum-4d2c", 0))


def _numpy_array(n: int) -> Any:
    import numpy as np

    return np.linspace(0.0, 1.0, n)


def _dates_and_decimals() -> Any:
    from decimal import Decimal

    when = datetime.datetime(2026, 1, 1, 12, 30, 15, 250_000)
    return (
        when,
        when.date(),
        datetime.timedelta(seconds=90),
        Decimal("1234.5678"),
        Decimal("-0.01"),
    )


def _list_of_dicts() -> list[dict[str, Any]]:
    return [
        {"name": f"row-{i}", "value": i * 1.5, "ok": i % 2 == 0, "tags": ["a", "b"]}
        for i in range(10)
    ]


def _functions_and_classes() -> tuple[Any, ...]:
    """Importable functions and classes, each written by reference (what a
    message names: a task's function, the classes of its values)."""
    import collections
    import decimal
    import fractions
    import functools
    import json
    import os.path
    import textwrap

    import numpy as np

    return (
        json.dumps, os.path.join, textwrap.dedent, inc, collections.OrderedDict,
        collections.namedtuple, decimal.Decimal, datetime.datetime, fractions.Fraction,
        functools.partial, json.JSONDecoder, np.ndarray, np.dtype,
    )  # fmt: skip


@dataclass(frozen=True)
class Message:
    """One small message a cluster pickles on its own (``build()`` makes it)."""

    name: str
    build: Callable[[], Any]


SMALL_MESSAGES = [
    Message("tuple (1, 2)", lambda: (1, 2)),
    Message("distributed task-finished dict", _distributed_message),
    Message("distributed who_has dict, 100 keys", _who_has_message),
    Message("dask Task", lambda: _dask_task(inc)),
    Message("dask Task, nested, kwargs", lambda: _dask_task_nested(inc)),
    Message("dask DataNode of 20 ints", _data_node),
    Message("dask Alias", _alias),
    Message("numpy array, 10 floats", lambda: _numpy_array(10)),
    Message("numpy array, 1,000 floats", lambda: _numpy_array(1000)),
    Message("datetimes and Decimals", _dates_and_decimals),
    Message("list of 10 dicts", _list_of_dicts),
]

# What a module registered by value must not slow down: every small message, and
# the functions and classes a message names (benchmarks/bench_messages.py).
REGISTRY_MESSAGES = [
    *SMALL_MESSAGES,
    Message("13 importable functions and classes", _functions_and_classes),
]

# The same functions and dataclass as inc, floor_inc, Point and norm, as a notebook
# cell defines them.
MAIN_SOURCE = """
import math
from dataclasses import dataclass

def inc(x, *args):
    return x + 1

def floor_inc(x, *args):
    return math.floor(x) + 1

@dataclass
class Point:
    x: int
    y: float

def norm(p):
    return math.hypot(p.x, p.y)
"""


def main_definitions() -> dict[str, Any]:
    """Run :data:`MAIN_SOURCE` in ``__main__`` (once) and return ``__main__``'s dict."""
    import sys

    main = sys.modules["__main__"].__dict__
    if "Point" not in main or main["Point"].__module__ != "__main__":
        exec(compile(MAIN_SOURCE, "<notebook cell>", "exec"), main)
    return main


@dataclass(frozen=True)
class ByValueMessage:
    """A message holding something pickled by value, sent again and again, and
    the same message built from importable code (its baseline)."""

    name: str
    build: Callable[[dict[str, Any]], Any]  # from __main__'s dict
    baseline: Callable[[], Any]
    # Its target: at most this many times the baseline's dumps (None: measured,
    # no target).
    limit: float | None


def _task_of(point: Any) -> Any:
    from dask._task_spec import Task

    return Task(("inc-5b1f0c1ad3a94a2e", 17), inc, point)


BY_VALUE_MESSAGES = [
    ByValueMessage(
        "dask Task, __main__ function",
        lambda main: _dask_task(main["inc"]),
        lambda: _dask_task(inc),
        2.0,
    ),
    ByValueMessage(
        "dask Task, __main__ function that uses a module",
        lambda main: _dask_task(main["floor_inc"]),
        lambda: _dask_task(floor_inc),
        2.0,
    ),
    ByValueMessage(
        "dask Task, lambda",
        lambda main: _dask_task(lambda x, *a: x + 1),
        lambda: _dask_task(inc),
        2.0,
    ),
    ByValueMessage(
        "dask Task of a __main__ dataclass instance",
        lambda main: _task_of(main["Point"](1, 2.0)),
        lambda: _task_of(Point(1, 2.0)),
        # Its 5x target is given up: a by-value class's reduction is rebuilt in
        # every payload (checking a remembered one reads what building it reads),
        # so the whole class is pickled again each time.
        None,
    ),
]
