"""graphpickle against pickle, cloudpickle and distributed, in one run.

Run it as a script, so that ``inc`` below really is a ``__main__`` function:

    .venv/bin/python benchmarks/bench_core.py            # full sizes, a few minutes
    .venv/bin/python benchmarks/bench_core.py --quick    # 1/20 of the sizes, seconds

Every workload is built three times: with an importable function, a function of
``__main__`` and a lambda. Times are medians over ``--repeat`` samples; a sample
repeats a call until it lasts 50 ms, and libraries take turns within each repeat
(in alternating order) so that drift of the machine hits all alike.
Ratios are to ``pickle.dumps(protocol=5)`` of the graph built with the
importable function: that is the speed a by-reference pickler reaches, and the
target graphpickle is held to for all three variants.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import pickle
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle
import workloads
from distributed.protocol import pickle as distributed_pickle
from workloads import WORKLOADS, Workload

import graphpickle


def inc(x: Any, *args: Any) -> Any:
    """The same task function as ``workloads.inc``, with the same name (dask puts
    it in keys), defined in ``__main__``."""
    return x + 1


VARIANTS: dict[str, Callable[..., Any]] = {
    "importable": workloads.inc,
    "__main__": inc,
    "lambda": lambda x, *args: x + 1,
}

Dumps = Callable[[Any, Callable[[pickle.PickleBuffer], Any] | None], bytes]
LIBRARIES: dict[str, Dumps] = {
    "pickle": lambda obj, cb: pickle.dumps(obj, protocol=5, buffer_callback=cb),
    "graphpickle": lambda obj, cb: graphpickle.dumps(obj, buffer_callback=cb),
    "cloudpickle": lambda obj, cb: cloudpickle.dumps(obj, protocol=5, buffer_callback=cb),
    "distributed": lambda obj, cb: distributed_pickle.dumps(obj, protocol=5, buffer_callback=cb),
}


def timed(func: Callable[[], Any], number: int = 1) -> float:
    """Seconds per call of ``func``, over ``number`` back-to-back calls."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            func()
        return (time.perf_counter() - start) / number
    finally:
        gc.enable()


def calls_per_sample(func: Callable[[], Any], min_seconds: float = 0.05) -> int:
    """Enough calls that one timing sample lasts ``min_seconds`` (as timeit's autorange)."""
    once = timed(func)
    return max(1, math.ceil(min_seconds / max(once, 1e-9)))


def peak_memory(func: Callable[[], Any]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        func()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure(workload: Workload, variant: str, graph: Any, repeat: int) -> dict[str, Any]:
    callback = (lambda buf: False) if workload.out_of_band else None
    times: dict[str, list[float]] = {name: [] for name in LIBRARIES}
    failed: dict[str, str] = {}
    number: dict[str, int] = {}
    for name, dumps in LIBRARIES.items():
        try:
            number[name] = calls_per_sample(lambda d=dumps: d(graph, callback))
        except Exception as exc:  # plain pickle cannot pickle lambdas
            failed[name] = f"{type(exc).__name__}"
    order = [name for name in LIBRARIES if name not in failed]
    for _ in range(repeat):
        for name in order:
            dumps = LIBRARIES[name]
            times[name].append(timed(lambda d=dumps: d(graph, callback), number[name]))
        order.reverse()  # alternate who goes first, so drift hits all alike
    row: dict[str, Any] = {"workload": workload.name, "variant": variant}
    for name in LIBRARIES:
        row[name] = None if name in failed else statistics.median(times[name])

    buffers: list[pickle.PickleBuffer] = []
    payload = graphpickle.dumps(graph, buffer_callback=buffers.append if callback else None)
    row["payload_bytes"] = len(payload)
    loaders: dict[str, Callable[[], Any]] = {
        "pickle.loads": lambda: pickle.loads(payload, buffers=buffers),
        "graphpickle.loads": lambda: graphpickle.loads(payload, buffers=buffers),
    }
    loads_times: dict[str, list[float]] = {name: [] for name in loaders}
    load_number = calls_per_sample(loaders["pickle.loads"])
    load_order = list(loaders)
    for _ in range(repeat):
        for name in load_order:
            loads_times[name].append(timed(loaders[name], load_number))
        load_order.reverse()
    for name, values in loads_times.items():
        row[name] = statistics.median(values)
    if variant == "importable":
        row["peak_pickle"] = peak_memory(lambda: LIBRARIES["pickle"](graph, callback))
        row["peak_graphpickle"] = peak_memory(lambda: LIBRARIES["graphpickle"](graph, callback))
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    baseline = {r["workload"]: r["pickle"] for r in rows if r["variant"] == "importable"}
    for r in rows:
        base = baseline[r["workload"]]
        for name in LIBRARIES:
            r[f"{name}_ratio"] = None if r[name] is None else r[name] / base
        r["loads_ratio"] = r["graphpickle.loads"] / r["pickle.loads"]
    importable = [r["graphpickle_ratio"] for r in rows if r["variant"] == "importable"]
    by_value = [r["graphpickle_ratio"] for r in rows if r["variant"] != "importable"]
    memory = [r["peak_graphpickle"] / r["peak_pickle"] for r in rows if "peak_pickle" in r]
    return {
        "importable_geomean": math.exp(statistics.fmean(math.log(x) for x in importable)),
        "importable_max": max(importable),
        "by_value_max": max(by_value),
        "loads_max": max(r["loads_ratio"] for r in rows),
        "memory_max": max(memory),
    }


TARGETS = {
    "importable_geomean": 1.05,
    "importable_max": 1.15,
    "by_value_max": 1.10,
    "loads_max": 1.02,
    "memory_max": 1.10,
}
TARGET_TEXT = {
    "importable_geomean": "dumps, importable functions, geometric mean",
    "importable_max": "dumps, importable functions, worst workload",
    "by_value_max": "dumps, __main__ functions and lambdas, worst workload",
    "loads_max": "loads, worst workload",
    "memory_max": "peak memory of dumps, worst workload",
}


def render(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    def cell(row: dict[str, Any], name: str) -> str:
        if row[name] is None:
            return "fails"
        mark = "†" if name == "pickle" and row["variant"] == "__main__" else ""
        return f"{row[f'{name}_ratio']:.2f}x ({row[name] * 1e3:.0f} ms){mark}"

    lines = [
        "| workload | function | " + " | ".join(LIBRARIES) + " | loads | payload |",
        "|---|---|" + "---|" * len(LIBRARIES) + "---|---|",
    ]
    for r in rows:
        cells = " | ".join(cell(r, name) for name in LIBRARIES)
        lines.append(
            f"| {r['workload']} | {r['variant']} | {cells} | {r['loads_ratio']:.2f}x "
            f"| {r['payload_bytes'] / 1e6:.1f} MB |"
        )
    lines.append("")
    lines.append(
        "Ratios are to pickle.dumps of the same workload built with the importable function. "
        "† pickle's payload references __main__ and does not load in another process."
    )
    lines.append("")
    for key, limit in TARGETS.items():
        value = summary[key]
        verdict = "met" if value <= limit else "MISSED"
        lines.append(f"- {TARGET_TEXT[key]}: {value:.3f}x (target {limit:.2f}x, {verdict})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/20 of the sizes")
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement")
    parser.add_argument("--only", help="run workloads whose name contains this text")
    parser.add_argument("--json", type=Path, help="write the rows and summary here")
    args = parser.parse_args()
    scale = 0.05 if args.quick else 1.0
    repeat = args.repeat or (3 if args.quick else 5)

    rows = []
    for workload in WORKLOADS:
        if args.only and args.only not in workload.name:
            continue
        for variant, func in VARIANTS.items():
            graph = workload.build(func, scale)
            row = measure(workload, variant, graph, repeat)
            rows.append(row)
            print(f"{workload.name:28} {variant:10} done", file=sys.stderr, flush=True)
            del graph
    summary = summarize(rows)
    print(render(rows, summary))
    if args.json:
        meta = {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "graphpickle": graphpickle.__version__,
            "cloudpickle": cloudpickle.__version__,
            "scale": scale,
            "repeat": repeat,
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
