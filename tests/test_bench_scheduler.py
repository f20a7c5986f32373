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


def pair(dumps: float, loads: float = 1.0, size: float = 100.0) -> dict[str, float]:
    """A pair kind's group medians: the twin's 1 µs (each stratum too) and 100 bytes,
    by value these (cold and warm alike), half of each group's calls cold."""
    values = {"dumps_bytes_by_value": size, "dumps_bytes_twin": 100.0}
    for key, us in (("dumps_us", dumps), ("loads_us", loads)):
        for stratum in ("", "_cold", "_warm"):
            values |= {f"{key}{stratum}_by_value": us, f"{key}{stratum}_twin": 1.0}
    for name in ("dumps", "loads"):
        for label in ("by_value", "twin"):
            values[f"{name}_share_cold_{label}"] = 0.5
    return values


@pytest.mark.parametrize(("dumps", "status", "word"), [(1.4, 0, "met"), (1.6, 1, "MISSED")])
def test_a_pair_kind_is_judged_within_each_sample_and_stratum(dumps, status, word):
    samples = results({"function-pair": {"stock": pair(5.0), "graphpickle": pair(dumps)}})
    # (one repeat twice as slow on both groups: the ratio within it is the same)
    samples["function-pair", "graphpickle"][1] |= {"dumps_us_warm_by_value": 2 * dumps}
    samples["function-pair", "graphpickle"][1] |= {"dumps_us_warm_twin": 2.0}
    # (all calls: a mix of the strata, not judged)
    samples["function-pair", "graphpickle"][0] |= {"dumps_us_by_value": 9.0}
    text, got = report(samples)
    assert got == status
    lines = [x for x in text.splitlines() if "function / twin in the same run" in x]
    warm = next(x for x in lines if "dumps, warm calls" in x)
    assert f"{dumps:.2f}x (target <= 1.5x): {word}; per repeat {dumps:.2f}-{dumps:.2f}x" in warm
    assert any("dumps, cold calls" in x and word in x for x in lines)
    assert not any("9.00x" in x for x in lines)
    # (the table: medians over the repeats of each group, and of the ratios)
    assert f"{1.5 * dumps:.1f} / 1.5: {dumps:.2f}x ({dumps:.2f}-{dumps:.2f}x)" in text
    assert f"{dumps:.1f} / 1.0: {dumps:.2f}x ({dumps:.2f}-{dumps:.2f}x) [50% / 50%]" in text


def test_a_stratum_without_calls_is_said_and_not_judged():
    samples = results({"function-pair": {"stock": pair(5.0), "graphpickle": pair(1.2)}})
    for sample_ in samples["function-pair", "graphpickle"]:
        sample_ |= {"loads_us_warm_by_value": float("nan"), "loads_us_warm_twin": float("nan")}
    text, got = report(samples)
    assert got == 0
    assert "(function-pair), graphpickle, worker loads, warm calls: no calls" in text


def test_a_pair_kinds_calls_are_counted_in_their_groups_and_strata():
    calls = [
        (2000, 300, "f", "v", False),
        (1000, 100, "f", "w", True),
        (4000, 300, "f", "v", True),
        (1000, 100, "f", "w", False),
        (6000, 300, "f", "v", False),
    ]
    got = bench.per_call("dumps", [{"calls": calls, "back_to_back_ns": [1000]}])
    assert (got["dumps_us_by_value"], got["dumps_us_twin"]) == (4.0, 1.0)
    assert (got["dumps_us_cold_by_value"], got["dumps_us_warm_by_value"]) == (4.0, 4.0)
    assert (got["dumps_share_cold_by_value"], got["dumps_share_cold_twin"]) == (2 / 3, 0.5)
    assert (got["dumps_bytes_by_value"], got["dumps_bytes_twin"]) == (300, 100)
    assert got["dumps_calls"] == 5
    one_kind = [(1000, 100, "f", "t", False)] * 2
    alone = bench.per_call("dumps", [{"calls": one_kind, "back_to_back_ns": [1]}])
    assert "dumps_us_by_value" not in alone


def test_the_recorder_tells_warm_calls_from_cold(monkeypatch):
    # (dask's task spec, which the recorder counts, is dask 2024.12's)
    Task = pytest.importorskip("dask._task_spec").Task
    import distributed.protocol.pickle as protocol_pickle

    clock = iter([0, 50_000, 10_000_000]).__next__  # (ns: the second soon after, the third not)
    monkeypatch.setattr(bench.time, "perf_counter_ns", clock, raising=False)
    monkeypatch.setattr(protocol_pickle, "dumps", protocol_pickle.dumps)
    bench.install_recorder("dumps")
    recorder = protocol_pickle.dumps
    for i in range(3):
        recorder(Task(("v", i), abs, -i))
    assert [(group, warm) for _, _, _, group, warm in recorder.calls] == [
        ("v", False), ("v", True), ("v", False)
    ]  # fmt: skip


class _Client:
    def get(self, graph: dict[Any, Any], keys: list[Any]) -> list[Any]:
        return [graph[key] for key in keys]


def test_a_pair_kind_interleaves_its_kind_and_the_twin():
    tasks = bench.KINDS["function-pair"].prepare(2, True)(_Client())
    modules = [func.__module__ for func, _ in tasks]
    assert modules == ["__main__", "graphpickle.cli.workloads"] * 2
    assert [func(i) for func, i in tasks] == bench.KINDS["function-pair"].results(2) == [1, 1, 2, 2]
    points = bench.KINDS["dataclass-pair"].prepare(1, True)(_Client())
    assert [type(p).__module__ for _, p, _ in points] == ["__main__", "graphpickle.cli.workloads"]
