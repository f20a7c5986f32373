"""The pinned payload corpus: run as a script, it prints the SHA-256 of each
case's payload as JSON (``{"environment": ..., "payloads": {case: digest}}``).

Its definitions are compiled under a fixed file name (and ``__file__`` is set to
it), so functions pickled by value carry the same names wherever the repository
is checked out.
``tests/test_payload_pins.py`` runs it in a fresh interpreter with a fixed hash
seed and compares the digests with ``pins.json``; ``scripts/pin-payloads``
rewrites the pins for this environment (do it only for a change of output you
mean, and say so in the commit).
"""

from __future__ import annotations

import sys

DEFINITIONS = """
import collections
import dataclasses
import datetime
import decimal
import enum
import functools

import numpy as np

SCALE = 3


def task(x, y=2):
    return (x + y) * SCALE


scale = lambda x: x * SCALE  # noqa: E731 (a lambda is the case)


def make_adder(n):
    def add(x):
        return x + n

    return add


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 0

    @property
    def norm(self):
        return abs(self.x) + abs(self.y)


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Tree:
    tags = {"a", "b", "c"}

    def __init__(self, children=()):
        self.children = list(children)


DATA = {
    "ints": list(range(20)),
    "text": ["alpha", "βeta", "", "x" * 300],
    "bytes": [b"", b"\\x00\\xff" * 50, bytearray(b"ab")],
    "floats": [0.0, -1.5, float("inf"), 1e300],
    "nested": {"a": (1, 2, [3, {"b": None}]), ("k", 1): frozenset({1, 2, 3})},
    "sets": {1, 2, 3, 40, 500},
    "time": [datetime.datetime(2026, 12, 1, 12, 30, tzinfo=datetime.timezone.utc), datetime.date(2026, 1, 1)],
    "numbers": [decimal.Decimal("1.25"), complex(1, -2)],
    "collections": [collections.OrderedDict(a=1, b=2), collections.deque([1, 2]), collections.Counter("abca")],
    "partial": functools.partial(max, 1),
}
ARRAY = np.arange(24, dtype="<f8").reshape(4, 6)
GRAPH = {("task", i): (task, ("task", i - 1) if i else 0, i) for i in range(50)}
"""


def main() -> None:
    import hashlib
    import json
    import pickle
    import platform

    import cloudpickle
    import numpy as np

    import graphpickle

    namespace = sys.modules["__main__"].__dict__
    # cloudpickle writes a by-value function's module __file__: fix it too.
    namespace["__file__"] = "<graphpickle pinned corpus>"
    exec(compile(DEFINITIONS, "<graphpickle pinned corpus>", "exec"), namespace)
    ns = namespace
    add = ns["make_adder"](5)
    by_reference = {
        "data": ns["DATA"],
        "array in band": ns["ARRAY"],
        "fortran array in band": np.asfortranarray(ns["ARRAY"]),
    }
    by_value = {
        "function": ns["task"],
        "lambda": ns["scale"],
        "closure": add,
        "graph of 50 tasks": ns["GRAPH"],
    }
    deterministic_only = {
        "dataclass instance": ns["Point"](1, 2),
        "enum member": ns["Color"].BLUE,
        "class with a set attribute": ns["Tree"],
        "tree of instances": ns["Tree"]([ns["Tree"](), ns["Tree"]([ns["Tree"]()])]),
    }

    def digest(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    payloads: dict[str, str] = {}
    for name, obj in by_reference.items():
        payloads[f"default: {name}"] = digest(graphpickle.dumps(obj))
        buffers: list[pickle.PickleBuffer] = []
        out_of_band = graphpickle.dumps(obj, buffer_callback=buffers.append)
        payloads[f"default, out of band: {name}"] = digest(
            out_of_band + b"".join(bytes(b.raw()) for b in buffers)
        )
        payloads[f"protocol 4: {name}"] = digest(graphpickle.dumps(obj, 4))
    for name, obj in {**by_reference, **by_value, **deterministic_only}.items():
        payloads[f"deterministic: {name}"] = digest(graphpickle.dumps(obj, deterministic=True))
    for name, obj in by_value.items():
        payloads[f"default: {name}"] = digest(graphpickle.dumps(obj))
    environment = (
        f"python {platform.python_version()}, cloudpickle {cloudpickle.__version__}, "
        f"numpy {np.__version__}"
    )
    print(json.dumps({"environment": environment, "payloads": payloads}, indent=1))


if __name__ == "__main__":
    main()
