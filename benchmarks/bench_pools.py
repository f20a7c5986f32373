"""The standard library's pools with a ``__main__`` function: stock fork against
graphpickle's ``install()``, ``multiprocess`` and loky (issue #41).

    scripts/bench-pools [--repeat 3] [--tasks 4000] [--workers 2] [--out FILE]

Each sample is one engine in a fresh interpreter (this script run again with
``--sample ENGINE``), whose ``__main__`` defines the task ``inc``, as a notebook
would. Engines:

* ``stock-fork``: ``multiprocessing.get_context("fork").Pool``;
* ``stock-forkserver``: the forkserver context, stock (from a file, where it works:
  the server and each worker import this script again), for what the start
  method itself costs;
* ``graphpickle``: ``install()``, then ``multiprocessing.Pool`` under this
  Python's default start method (forkserver from 3.14), or ``--method``;
* ``graphpickle-fork``: ``install()``, then the fork context;
* ``multiprocess``: ``multiprocess.Pool`` (dill; fork by default);
* ``loky``: ``loky.ProcessPoolExecutor.map``.

A sample measures, with ``--workers`` workers:

* import: importing the engine (and ``install()``), before any pool;
* start: from creating the pool to the results of one task per worker (the
  first pool in the process: under forkserver it includes starting the server);
* per task at chunksize 1 and 100: ``map(inc, range(N))`` (a warm-up map first),
  wall time over N.

Figures are medians over the repeats (samples interleaved: for each repeat, for
each engine), with the ratio to stock fork.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

ENGINES = (
    "stock-fork",
    "stock-forkserver",
    "graphpickle",
    "graphpickle-fork",
    "multiprocess",
    "loky",
)


def inc(x: int) -> int:
    return x + 1


def _prepare(engine: str) -> None:
    """What a notebook does once, before any pool: imports (and ``install()``)."""
    if engine == "loky":
        import loky  # noqa: F401
    elif engine == "multiprocess":
        import multiprocess  # noqa: F401
    elif engine.startswith("graphpickle"):
        import graphpickle.integrations.multiprocessing as gpmp

        gpmp.install()


def _pool(engine: str, workers: int, method: str | None) -> tuple[Any, Any]:
    """``(map(function, items, chunksize), close())`` of a new pool."""
    if engine == "loky":
        import loky

        executor = loky.ProcessPoolExecutor(workers)
        return (
            lambda fn, items, chunksize: list(executor.map(fn, items, chunksize=chunksize)),
            executor.shutdown,
        )
    if engine == "multiprocess":
        import multiprocess

        pool = multiprocess.Pool(workers)
    else:
        import multiprocessing

        methods = {"graphpickle": method, "stock-forkserver": "forkserver"}
        context = multiprocessing.get_context(methods.get(engine, "fork"))
        pool = context.Pool(workers)
    return pool.map, pool.terminate


def sample(engine: str, tasks: int, workers: int, method: str | None) -> dict[str, float]:
    begin = time.perf_counter()
    _prepare(engine)
    out = {"import_s": time.perf_counter() - begin}
    start = time.perf_counter()
    run, close = _pool(engine, workers, method)
    run(inc, range(workers), 1)
    started = time.perf_counter() - start
    out["start_s"] = started
    for chunksize in (1, 100):
        n = tasks if chunksize == 1 else tasks * 10
        run(inc, range(n // 10), chunksize)  # warm-up
        begin = time.perf_counter()
        result = run(inc, range(n), chunksize)
        out[f"task_us_chunksize_{chunksize}"] = (time.perf_counter() - begin) / n * 1e6
        assert result[-1] == n
    close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--method", default=None, help="graphpickle's start method")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--out", default=None)
    parser.add_argument("--sample", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample:
        print(json.dumps(sample(args.sample, args.tasks, args.workers, args.method)))
        return
    engines = args.engines.split(",")
    samples: dict[str, list[dict[str, float]]] = {engine: [] for engine in engines}
    for _ in range(args.repeat):
        for engine in engines:
            command = [sys.executable, __file__, "--sample", engine, "--tasks", str(args.tasks)]
            command += ["--workers", str(args.workers)]
            if args.method:
                command += ["--method", args.method]
            proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise SystemExit(f"{engine} failed:\n{proc.stderr}")
            samples[engine].append(json.loads(proc.stdout.splitlines()[-1]))
    import multiprocessing

    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "default_start_method": multiprocessing.get_start_method(),
        "workers": args.workers,
        "tasks": args.tasks,
        "repeat": args.repeat,
        "engines": {},
    }
    keys = ("import_s", "start_s", "task_us_chunksize_1", "task_us_chunksize_100")
    stock = {
        key: statistics.median(s[key] for s in samples["stock-fork"])
        for key in keys
        if "stock-fork" in samples
    }
    print(f"Python {report['python']} (default start method {report['default_start_method']})")
    print(
        f"{'engine':<18}{'import (s)':>12}{'start (s)':>16}"
        f"{'per task, cs 1 (us)':>26}{'per task, cs 100 (us)':>28}"
    )
    for engine in engines:
        row = {key: statistics.median(s[key] for s in samples[engine]) for key in keys}
        report["engines"][engine] = row
        cells = []
        for key in keys:
            ratio = f" ({row[key] / stock[key]:.2f}x)" if stock and key != "import_s" else ""
            figure = f"{row[key]:.2f}" if key.endswith("_s") else f"{row[key]:.1f}"
            cells.append(figure + ratio)
        print(f"{engine:<18}{cells[0]:>12}{cells[1]:>16}{cells[2]:>26}{cells[3]:>28}")
    if args.out:
        with open(args.out, "w") as file:
            json.dump(report, file, indent=2)


if __name__ == "__main__":
    main()
