"""dask's ``tokenize`` with and without ``graphpickle.integrations.dask_tokenize.install()``.

    scripts/bench-tokenize        # or: .venv/bin/python benchmarks/bench_tokenize.py [--repeat N]

The objects are defined here, in ``__main__``, as a notebook defines them: a
dataclass, a plain class, an enum, instances, a function, a lambda and a
closure that use them; and importable objects, which dask hashes by reference
(graphpickle must not slow them down). Each line times ``dask.base.tokenize``
with dask's ``_normalize_pickle`` and with graphpickle's, in turns within each
repeat (``paired_medians``); medians per call. Target: at most 0.5x dask's time
on every ``__main__`` object.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os.path
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import dask
import numpy as np
from dask.base import tokenize

import graphpickle.integrations.dask_tokenize as gpt
from graphpickle.cli.bench import paired_medians

TARGET = 0.5
SCALE = 10


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0

    def norm(self) -> int:
        return abs(self.x) + abs(self.y)


class Plain:
    unit = "m"

    def __init__(self, value: int) -> None:
        self.value = value

    @property
    def doubled(self) -> int:
        return self.value * 2


class Colour(enum.Enum):
    RED = 1
    BLUE = 2


def scale(x: int) -> int:
    return x * SCALE


def make_adder(n: int) -> Callable[[int], int]:
    def add(x: int) -> int:
        return x + n

    return add


MAIN_OBJECTS: dict[str, Any] = {
    "lambda using a __main__ dataclass": lambda x: Point(x).norm(),
    "__main__ function": scale,
    "closure": make_adder(3),
    "__main__ dataclass": Point,
    "__main__ dataclass instance": Point(1, 2),
    "__main__ class": Plain,
    "__main__ instance": Plain(4),
    "__main__ enum member": Colour.BLUE,
}
IMPORTABLE_OBJECTS: dict[str, Any] = {
    "os.path.join": os.path.join,
    "numpy.add (ufunc)": np.add,
    "Decimal('1.5')": Decimal("1.5"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    module = gpt._tokenize_module()
    stock_normalize = module._normalize_pickle

    def timer(obj: Any, normalize: Any) -> Callable[[], Any]:
        def call() -> Any:
            module._normalize_pickle = normalize
            return tokenize(obj)

        return call

    print(f"dask {dask.__version__}, Python {sys.version.split()[0]}; medians per call")
    print("| object | dask | graphpickle | ratio |")
    print("|---|---|---|---|")
    worst = 0.0
    for group in (MAIN_OBJECTS, IMPORTABLE_OBJECTS):
        for name, obj in group.items():
            stock, ours = paired_medians(
                timer(obj, stock_normalize), timer(obj, gpt._normalize_pickle), args.repeat
            )
            ratio = ours / stock
            if group is MAIN_OBJECTS:
                worst = max(worst, ratio)
            print(f"| {name} | {stock * 1e6:.1f} µs | {ours * 1e6:.1f} µs | {ratio:.2f}x |")
    module._normalize_pickle = stock_normalize
    verdict = "meets" if worst <= TARGET else "MISSES"
    print(f"\nworst ratio on __main__ objects: {worst:.2f}x ({verdict} the {TARGET}x target)")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
