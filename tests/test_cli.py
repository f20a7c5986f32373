"""The commands, run as a user runs them: in subprocesses."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys

# A worker without the sender's __main__.step (3.14 words it "module ... has no attribute").
MISSING_STEP = (
    r"FAILS: AttributeError: (Can't get attribute 'step'|module '__\w+__' has no attribute 'step')"
)


def _run(*args: str, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphpickle", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


# The demo's tables, by how their titles start.
_TITLES = {
    "pool": r"[\d,]+ tasks in ",
    "cluster": r"dask cluster: ",
    "graph": r"one graph of ",
    "task": r"one task at a time, ",
}


def _tables(stdout: str) -> dict[str, dict[str, list[str]]]:
    """The demo's rich tables: {table: {first cell: the other cells}}, the rows
    that wrap onto a second line (an empty first cell) left out."""
    tables: dict[str, dict[str, list[str]]] = {}
    rows: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            if cells[0]:
                rows[cells[0]] = cells[1:]
            continue
        for table, title in _TITLES.items():
            if re.match(title, line):
                rows = tables.setdefault(table, {})
    return tables


def test_demo_on_a_spawned_pool_checks_every_result(tmp_path):
    result = _run(
        "demo", "--tasks", "2000", "--engine", "pool", "--graph-tasks", "20000", "--repeat", "2",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # Piped: no progress bar, and no blank line where one was.
    assert result.stderr == ""
    assert "" not in result.stdout.splitlines()
    assert "dask cluster" not in result.stdout  # --engine pool
    tables = _tables(result.stdout)
    pool = tables["pool"]
    assert set(pool) == {"graphpickle", "pickle", "cloudpickle", "distributed"}
    assert pool["graphpickle"][-1] == "ok" and pool["cloudpickle"][-1] == "ok"
    # plain pickle cannot pickle the closure at all
    # (AttributeError up to 3.13, worded "Can't get local object" on 3.13; PicklingError from 3.14)
    assert re.match(
        r"FAILS: dumps: (AttributeError|PicklingError): Can't (pickle|get) local object",
        pool["pickle"][-1],
    )
    assert re.fullmatch(r"\d+\.\d\d s", pool["graphpickle"][2])  # ship, load, run

    # The one-graph comparison: every payload loaded, every task run on a worker.
    graph = tables["graph"]
    assert "one graph of 20,000 tasks with a __main__ function" in result.stdout
    assert re.fullmatch(r"\d\.\d\dx", graph["distributed"][1])
    for name in ("graphpickle", "cloudpickle", "distributed"):
        assert re.fullmatch(r"\d+\.\d\d s", graph[name][3]), graph[name]
        assert graph[name][4] == "all 20,000 ran, results ok"
    # pickle dumps __main__.step by reference, and a fresh worker has no such thing.
    assert graph["pickle"][3] == "-"
    assert re.match(MISSING_STEP, graph["pickle"][4]), graph["pickle"][4]

    if importlib.util.find_spec("dask._task_spec") is not None:
        per_task = tables["task"]
        assert "x 100,000 (an extrapolation, not a run)" in result.stdout
        assert "per 100,000 tasks" not in result.stdout
        assert len(per_task) == 2
    else:  # dask before 2024.12 (the floor) has no Task objects to send one by one
        assert "one task at a time: skipped (dask._task_spec is missing" in result.stdout


def test_demo_on_a_dask_cluster_runs_the_integration(tmp_path):
    result = _run(
        "demo", "--tasks", "200", "--engine", "dask", "--graph-tasks", "0", "--repeat", "2",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # Piped: no progress bar on stderr (distributed may still log there, e.g. a
    # worker's heartbeat that outlived its cluster on a loaded machine).
    assert "\r" not in result.stderr and "━" not in result.stderr, result.stderr
    assert "" not in result.stdout.splitlines()
    if importlib.util.find_spec("dask._task_spec") is None:
        assert "dask cluster: skipped (dask._task_spec is missing" in result.stdout
        return
    assert "dask cluster: 200 tasks of __main__ functions" in result.stdout
    assert "2 runs of each, in turns, each in a fresh LocalCluster (2 worker processes)" in (
        " ".join(result.stdout.split())
    )
    table = _tables(result.stdout)["cluster"]
    stock, ours = table["stock"], table["+ graphpickle"]
    for row in (stock, ours):
        wall, runs, cpu, per_task, _, results = row
        assert re.fullmatch(r"\d+\.\d\d s", wall)
        assert re.fullmatch(r"\d+\.\d\d-\d+\.\d\d s", runs)
        assert re.fullmatch(r"\d+ ms", cpu) and re.fullmatch(r"\d+ µs", per_task)
        assert results == "100 ok"
    # Checked in every process of each cluster, not assumed.
    assert stock[4] == "none" and ours[4] == "client, scheduler, workers"
    verdict = [line for line in result.stdout.splitlines() if line.startswith("End to end")]
    assert len(verdict) == 1
    assert re.search(r"within noise|is faster in every run", verdict[0]), verdict
    assert re.search(
        r"^The scheduler's own task dumps: \d+ ms of CPU stock, \d+ ms with graphpickle",
        result.stdout,
        re.M,
    )


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


# -- what a newcomer meets: a missing extra, a closed pipe, --version ---------------------

# Runs the command line with these modules unimportable, as in a plain install.
WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "from graphpickle.cli.main import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def _run_without(modules: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, modules, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_demo_and_bench_without_their_extra_say_which_to_install(tmp_path):
    cases = [
        ("numpy", ("demo",), "needs numpy, which is not installed"),
        ("numpy", ("bench", "--quick"), "needs numpy, which is not installed"),
        ("dask", ("bench", "--quick"), "needs dask, which is not installed"),
        ("distributed", ("demo", "--engine", "dask"), "needs distributed, which"),
        ("matplotlib", ("bench", "--plot", str(tmp_path / "b.png")), "needs matplotlib"),
    ]
    for modules, args, says in cases:
        result = _run_without(modules, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stdout == ""
        line = result.stderr.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in line, line
        assert line.startswith(f"graphpickle {args[0]}: {says}"), line
        assert line.endswith('pip install "graphpickle[bench]"'), line


def test_the_extra_named_installs_what_the_commands_need():
    import tomllib
    from pathlib import Path

    from graphpickle.cli import main

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    installs = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in extras[main.EXTRA]}
    needed = {name for names in main.NEEDS.values() for name in names}
    assert needed <= set(main.EXTRA_MODULES) <= installs


def _with_closed_stdout(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run with a standard output whose reader has gone before anything is written
    (what `| head -1` does to the rest of a long output)."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "graphpickle", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write)


def test_a_closed_standard_output_ends_quietly(tmp_path):
    import pickle

    path = tmp_path / "big.pkl"
    path.write_bytes(pickle.dumps([{"a": i} for i in range(1000)], 5))
    for args in (("inspect", str(path)), ("inspect", "--json", str(path)), ("--version",)):
        result = _with_closed_stdout(*args)
        assert result.stderr == b"", result.stderr.decode()
        assert result.returncode == 141, args  # 128 + SIGPIPE, as a shell reports it
    # Documented, and none of inspect's own statuses (0-3).
    assert "141" in _run("inspect", "--help").stdout and "141" in _run("--help").stdout
    # A pipe closed after the first line, as a shell runs it.
    shell = subprocess.run(
        f"{shlex.quote(sys.executable)} -m graphpickle inspect --json {shlex.quote(str(path))} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shell.stdout == "{\n" and shell.stderr == "", shell.stderr


def test_version_shows_the_version_and_the_native_parts():
    import graphpickle

    result = _run("--version")
    assert result.returncode == 0, result.stderr
    first, parts = result.stdout.splitlines()
    assert first.startswith(f"graphpickle {graphpickle.__version__} (Python ")
    status = graphpickle.native_parts()
    active = sum(s == "active" for s in status.values())
    assert parts == f"native parts ({active} of {len(status)} active): " + ", ".join(
        f"{part} {s}" for part, s in status.items()
    )


def test_inspect_imports_no_benchmark_dependency(tmp_path):
    # A gate that scans thousands of files pays its imports per file: building the
    # parser imported distributed through cli/bench.py (0.57 s of 0.96 s).
    path = tmp_path / "tiny.pkl"
    path.write_bytes(b"\x80\x04K\x01.")
    child = (
        "import sys\n"
        "from graphpickle.cli.main import main\n"
        f"status = main(['inspect', {str(path)!r}])\n"
        "heavy = {'distributed', 'dask', 'numpy', 'pandas', 'matplotlib'}\n"
        "print(status, sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout
