"""The commands, run as a user runs them: in subprocesses."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys


def _run(*args: str, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphpickle", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def _table(stdout: str) -> dict[tuple[str, str], str]:
    """The demo's table as {(engine, serializer): result}, rich or plain."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"│|\s{2,}", line) if c.strip()]
        if len(cells) == 6 and ("pool" in cells[0] or "dask" in cells[0]):
            rows[(cells[0].split()[0], cells[1])] = cells[5]
    return rows


def test_demo_on_a_spawned_pool_checks_every_result(tmp_path):
    result = _run(
        "demo", "--tasks", "2000", "--engine", "pool", "--graph-tasks", "20000", "--repeat", "2",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # The one-graph comparison and the per-task cost, next to the engines' table.
    assert "one graph of 20,000 tasks with a __main__ function" in result.stdout
    assert re.search(r"distributed\s.*\d+ ms\s.*\d\.\d\dx", result.stdout)
    if importlib.util.find_spec("dask._task_spec") is not None:
        assert "per 100,000 tasks" in result.stdout
    else:  # dask before 2024.12 (the floor) has no Task objects to send one by one
        assert "one task at a time: skipped (dask._task_spec is missing" in result.stdout
    table = _table(result.stdout)
    assert {s for _, s in table} >= {"graphpickle", "pickle", "cloudpickle", "distributed"}
    assert table[("spawn", "graphpickle")] == "ok"
    assert table[("spawn", "cloudpickle")] == "ok"
    # plain pickle cannot pickle the closure at all
    assert table[("spawn", "pickle")].startswith("FAILS")


def test_demo_on_a_dask_cluster(tmp_path):
    result = _run("demo", "--tasks", "2000", "--engine", "dask", "--graph-tasks", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert _table(result.stdout)[("dask", "graphpickle")] == "ok"


def test_demo_rejects_bad_options():
    result = _run("demo", "--tasks", "0")
    assert result.returncode == 2 and "positive" in result.stderr
    result = _run("demo", "--repeat", "0")
    assert result.returncode == 2 and "positive" in result.stderr


def test_bench_quick_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = _run(
        "bench",
        "--quick",
        "--only",
        "slot",
        "--repeat",
        "1",
        "--json",
        str(out),
        "--plot",
        str(png),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert [r["variant"] for r in data["rows"]] == ["importable", "__main__", "lambda"]
    assert all(r["graphpickle"] > 0 for r in data["rows"])
    assert data["rows"][2]["pickle"] is None  # plain pickle cannot pickle the lambda
    assert set(data["summary"]) >= {"importable_geomean", "by_value_max", "loads_max"}
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "dumps, importable functions, geometric mean" in result.stdout


def test_bench_unknown_workload_is_an_error():
    result = _run("bench", "--quick", "--only", "no such workload")
    assert result.returncode == 2 and "no workload matches" in result.stderr
