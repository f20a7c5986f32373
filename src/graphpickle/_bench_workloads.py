"""The graphs the benchmarks pickle.

Each builder takes the task function, so that one graph can be built with an
importable function (this module's ``inc``), a function of ``__main__`` and a
lambda. ``scale`` shrinks every workload for quick runs.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def inc(x: Any, *args: Any) -> Any:
    """The importable task function."""
    return x + 1


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
