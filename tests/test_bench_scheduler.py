"""benchmarks/bench_scheduler.py's verdicts and exit status, on made-up samples (no
cluster), and the map kind's __main__ code against its importable twin."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_scheduler as bench

from graphpickle.cli import workloads

RUN = {"tasks": 10, "repeat": 2, "environment": "Python 3.11.7, test", "load": 0.5}


def sample(config: str, **values: float) -> dict[str, Any]:
    """One sample that passes every check, with these measures (1.0 unless given)."""
    keys = ("wall_s", "dumps_us", "dumps_back_to_back_us", "dumps_bytes", "loads_us")
    keys += ("loads_back_to_back_us", "driver_cpu_us", "workers_cpu_us", "total_cpu_us")
    return {
        **dict.fromkeys(keys, 1.0),
        **values,
        "dumps_calls": 10,
        "loads_calls": 10,
        "dumps_callers": {"create_pickled_sub_frames": 10},
        "loads_callers": {"_decode_default": 10},
        "driver_threads_us": {},
        "workers_threads_us": {},
        "scheduler_in_driver": True,
        "installed": [config != "stock"] * 3,
        "load_average": 1.0,
    }


def results(kinds: dict[str, dict[str, dict[str, float]]]) -> bench.Samples:
    """kind -> config -> measures: two repeats of the same sample."""
    return {
        (kind, config): [sample(config, **values), sample(config, **values)]
        for kind, configs in kinds.items()
        for config, values in configs.items()
    }


def report(samples: bench.Samples) -> tuple[str, int]:
    return bench.report(samples, {**RUN, "kinds": list(dict.fromkeys(k for k, _ in samples))})


@pytest.mark.parametrize(
    ("dumps", "status", "word"), [(1.4, 0, "1.40x (target <= 1.5x): met"), (1.6, 1, "MISSED")]
)
def test_per_task_target_against_the_twin(dumps, status, word):
    text, got = report(
        results(
            {
                "function": {"stock": {"dumps_us": 5.0}, "graphpickle": {"dumps_us": dumps}},
                "function-twin": {"stock": {}, "graphpickle": {}},
            }
        )
    )
    assert got == status
    line = next(
        x for x in text.splitlines() if "function / twin, graphpickle, scheduler dumps" in x
    )
    assert word in line and f"{dumps:.2f}x" in line


@pytest.mark.parametrize(("cpu", "status"), [(0.8, 0), (0.9, 1)])
def test_end_to_end_target_in_each_graphpickle_configuration(cpu, status):
    text, got = report(
        results(
            {
                "map": {
                    "stock": {},
                    "graphpickle": {"total_cpu_us": cpu},
                    "graphpickle+tokenize": {"total_cpu_us": 0.5},
                }
            }
        )
    )
    assert got == status
    assert f"map, graphpickle / stock, CPU of all processes: {cpu:.2f}x" in text
    assert "map, graphpickle+tokenize / stock, CPU of all processes: 0.50x" in text


def test_a_failed_check_outranks_the_targets():
    samples = results({"map": {"stock": {}, "graphpickle": {"total_cpu_us": 0.5}}})
    samples["map", "graphpickle"][1]["installed"] = [True, False, True]
    text, got = report(samples)
    assert got == 2
    assert "- map, graphpickle: FAILED" in text


def test_map_kind_main_code_matches_its_twin():
    main = workloads.main_definitions()
    assert main["norm"].__module__ == main["Point"].__module__ == "__main__"
    assert main["norm"](main["Point"](3, 4.0)) == workloads.norm(workloads.Point(3, 4.0)) == 5.0
    assert bench.KINDS["map"].expected(3) == workloads.norm(workloads.Point(3, 0.5))
