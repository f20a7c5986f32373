"""What deterministic mode costs over the default mode, on graphs with by-value objects.

    scripts/bench-determinism      # or: .venv/bin/python benchmarks/bench_determinism.py [--quick]

Every workload of the core benchmark, built with a ``__main__`` function and with
a lambda (the graphs that hold by-value objects), plus three of its own: a
``__main__`` dataclass and 200,000 of its instances, 200,000 tasks that each
carry a set of dependency names (the sets take the second pass), and a single
``__main__`` function with a set literal and a class (what ``tokenize`` pickles).
Medians of --repeat samples; a sample repeats a call until it lasts 50 ms, and
the modes take turns (in alternating order) within each repeat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from typing import Any

import cloudpickle

import graphpickle
from graphpickle.cli.bench import paired_medians, timed, variants
from graphpickle.cli.workloads import WORKLOADS

TARGET = 1.5


def _main_class() -> type:
    """A dataclass defined in ``__main__`` (as a script or notebook defines it)."""
    source = (
        "import dataclasses\n"
        "@dataclasses.dataclass\n"
        "class Task:\n"
        "    key: tuple\n"
        "    deps: tuple = ()\n"
        "    priority: int = 0\n"
        "    def ready(self, done):\n"
        "        return all(d in done for d in self.deps)\n"
    )
    main = sys.modules["__main__"].__dict__
    exec(compile(source, "<benchmark script>", "exec"), main)
    cls: type = main["Task"]
    return cls


def extra_workloads(func: Callable[..., Any], scale: float) -> dict[str, Any]:
    n = int(200_000 * scale)
    task = _main_class()
    instances = [task(("t", i), (("t", i - 1),), i % 7) for i in range(n)]
    with_sets = {
        ("t", i): (func, ("t", i - 1), {f"dep-{i}", f"dep-{i + 1}", f"dep-{i + 2}"})
        for i in range(n)
    }
    main = sys.modules["__main__"].__dict__
    exec(
        "def classify(word):\n    return word in {'red', 'green', 'blue'} and Task\n",
        main,
    )
    return {
        "200k __main__ dataclass instances": instances,
        "200k tasks with a set each": with_sets,
        "one function (tokenize)": main["classify"],
    }


def measure(name: str, graph: Any, repeat: int) -> tuple[str, float, float, float]:
    keep: list[Any] = []
    a, b = paired_medians(
        lambda: graphpickle.dumps(graph, buffer_callback=keep.append),
        lambda: graphpickle.dumps(graph, buffer_callback=keep.append, deterministic=True),
        repeat,
    )
    keep.clear()
    reference = statistics.median(
        timed(lambda: cloudpickle.dumps(graph, protocol=5, buffer_callback=keep.append))
        for _ in range(3)
    )
    return name, a, b, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/20 of the sizes")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    scale = 0.05 if args.quick else 1.0
    rows = []
    functions = variants()
    for variant in ("__main__", "lambda"):
        func = functions[variant]
        for workload in WORKLOADS:
            graph = workload.build(func, scale)
            rows.append(measure(f"{workload.name}, {variant}", graph, args.repeat))
            del graph
            print(".", end="", file=sys.stderr, flush=True)
    core_rows = len(rows)
    for name, graph in extra_workloads(functions["__main__"], scale).items():
        rows.append(measure(name, graph, args.repeat))
    print(file=sys.stderr)
    print("| workload | default | deterministic | ratio | cloudpickle (not deterministic) |")
    print("|---|---|---|---|---|")
    for name, default, deterministic, reference in rows:
        print(
            f"| {name} | {default * 1e3:.2f} ms | {deterministic * 1e3:.2f} ms "
            f"| {deterministic / default:.2f}x | {reference * 1e3:.2f} ms |"
        )
    core = [deterministic / default for _, default, deterministic, _ in rows[:core_rows]]
    print()
    print(
        f"- the core benchmark's workloads with by-value objects: worst {max(core):.2f}x "
        f"(target {TARGET:.1f}x, {'met' if max(core) <= TARGET else 'MISSED'}), "
        f"geometric mean {statistics.geometric_mean(core):.2f}x"
    )


if __name__ == "__main__":
    main()
