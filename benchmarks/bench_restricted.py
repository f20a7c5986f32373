"""What restricted loading costs over ``pickle.loads``.

    scripts/bench-restricted      # or: .venv/bin/python benchmarks/bench_restricted.py

Restricted loading runs CPython's pure-Python unpickler with its checks (the C
unpickler has no hook for BUILD or SETITEM), so its cost grows with the number
of opcodes, not of bytes. Medians of --repeat samples, the two sides timed in
turns; results go to benchmarks/results/restricted.md.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import pathlib
import pickle
from typing import Any

import numpy as np
import pandas as pd

from graphpickle import DATA_ONLY, dumps, loads
from graphpickle.cli.bench import paired_medians

RESULTS = pathlib.Path(__file__).parent / "results" / "restricted.md"


def workloads() -> dict[str, Any]:
    return {
        "(1, 2)": (1, 2),
        "a message dict (op, key, 10 ints)": {
            "op": "task-finished",
            "key": ("x", 3),
            "v": list(range(10)),
        },
        "datetime + Decimal": [
            datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC),
            decimal.Decimal("1.5"),
        ],
        "1,000 dicts of 3 scalars": [{"a": i, "b": str(i), "c": 1.5} for i in range(1000)],
        "8 MB numpy array, in band": np.arange(1_000_000.0),
        "8 MB numpy array, out of band": np.arange(1_000_000.0),
        "DataFrame 10,000 x 5 (int, float, str, category, tz)": pd.DataFrame(
            {
                "i": np.arange(10_000),
                "f": np.linspace(0, 1, 10_000),
                "s": [f"s{i % 50}" for i in range(10_000)],
                "c": pd.Categorical([f"c{i % 5}" for i in range(10_000)]),
                "t": pd.date_range("2026-01-01", periods=10_000, freq="min", tz="UTC"),
            }
        ),
    }


def measure(data: bytes, buffers: list[Any] | None, repeat: int) -> tuple[float, float]:
    return paired_medians(
        lambda: loads(data, buffers=buffers, allowed=DATA_ONLY),
        lambda: pickle.loads(data, buffers=buffers),
        repeat,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    rows = []
    for name, obj in workloads().items():
        buffers: list[pickle.PickleBuffer] = []
        out_of_band = "out of band" in name
        data = dumps(obj, buffer_callback=buffers.append if out_of_band else None)
        raw = [b.raw() for b in buffers] if out_of_band else None
        rows.append((name, len(data), *measure(data, raw, args.repeat)))
    lines = [
        "| payload | bytes | `loads(allowed=DATA_ONLY)` | `pickle.loads` | ratio |",
        "|---|---|---|---|---|",
    ]
    for name, size, restricted, plain in rows:
        lines.append(
            f"| {name} | {size:,} | {_time(restricted)} | {_time(plain)} | {restricted / plain:.1f}x |"
        )
    table = "\n".join(lines)
    print(table)
    RESULTS.write_text(
        "# Restricted loading vs pickle.loads\n\n"
        f"`scripts/bench-restricted`, medians of {args.repeat}, timed in turns.\n\n{table}\n"
    )


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.2f} ms"


if __name__ == "__main__":
    main()
