"""``graphpickle demo``: every cell from something that ran, a verdict on noise
that says so, and nothing imported beyond what the ``demo`` extra installs."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from graphpickle.cli import demo

ROOT = Path(__file__).resolve().parent.parent

# A worker without the sender's __main__.step (3.14 words it "module ... has no attribute").
MISSING_STEP = (
    r"FAILS: AttributeError: (Can't get attribute 'step'|module '__\w+__' has no attribute 'step')"
)


def _runs(**walls: list[float]) -> dict[str, list[demo._ClusterRun]]:
    return {config: [demo._ClusterRun(wall=w) for w in values] for config, values in walls.items()}


CPU = {"stock": 200.0, "graphpickle": 60.0}


def test_the_cluster_verdict_says_when_the_difference_is_noise():
    overlap = demo._cluster_verdict(_runs(stock=[2.1, 2.4, 2.2], graphpickle=[2.0, 2.15, 2.2]), CPU)
    first, second = overlap.splitlines()
    assert first.startswith("End to end (client.get): within noise. The ranges of the runs overlap")
    assert "stock 2.10-2.40 s, graphpickle 2.00-2.20 s" in first
    assert second == (
        "The scheduler's own task dumps: 200 ms of CPU stock, 60 ms with graphpickle "
        "(3.3x less): 9% and 3% of the wall time."
    )
    # Apart, but by less than 5% at the median.
    close = demo._cluster_verdict(_runs(stock=[2.00, 2.01], graphpickle=[1.95, 1.96]), CPU)
    assert "within noise. The medians differ by 2.5%" in close
    assert "less than the 5% a shared machine varies by" in close
    apart = demo._cluster_verdict(_runs(stock=[2.0, 2.1], graphpickle=[1.5, 1.6]), CPU)
    assert "graphpickle is faster in every run" in apart and "by 24% at the median" in apart
    slower = demo._cluster_verdict(_runs(stock=[1.5, 1.6], graphpickle=[2.0, 2.1]), CPU)
    assert "stock distributed is faster in every run" in slower
    once = demo._cluster_verdict(_runs(stock=[2.0], graphpickle=[1.0]), CPU)
    assert "one run each" in once and "no spread of runs to judge a difference by" in once


def test_the_recorder_times_the_tasks_the_scheduler_pickles_and_puts_dumps_back():
    pytest.importorskip("dask._task_spec")
    import operator

    import distributed.protocol.pickle as protocol_pickle
    from dask._task_spec import Task

    original = protocol_pickle.dumps
    demo.start_recording()
    try:
        assert isinstance(protocol_pickle.dumps, demo.TaskDumpsRecorder)
        protocol_pickle.dumps({"op": "not a task"})  # passed on, not recorded
        payload = protocol_pickle.dumps(Task("k", operator.add, 1, 2))
    finally:
        recorded = demo.stop_recording()
    assert protocol_pickle.dumps is original
    assert len(recorded) == 1 and recorded[0] >= 0
    assert protocol_pickle.loads(payload)() == 3
    assert demo.stop_recording() == []  # nothing to put back


# The one-graph table with a wrong __main__ function: what the workers report.
_WRONG_STEP = """
from graphpickle.cli import demo

if __name__ == "__main__":
    main = demo.notebook()
    exec("def step(previous, i):\\n    return i\\n", main)  # every result off by one
    print("returns", demo._big_graph(main, 50, 1))
"""


def test_the_workers_cells_come_from_the_workers(tmp_path):
    script = tmp_path / "wrong_step.py"
    script.write_text(_WRONG_STEP)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    rows = {
        cells[0]: cells[1:]
        for line in done.stdout.splitlines()
        if line.startswith("│")
        for cells in [[c.strip() for c in line.strip("│").split("│")]]
        if cells[0]
    }
    for name in ("graphpickle", "cloudpickle"):
        assert re.fullmatch(r"\d+\.\d\d s", rows[name][3])  # loaded on the worker
        assert rows[name][4] == "FAILS: 50 wrong"  # and every task run there
    assert re.match(MISSING_STEP, rows["pickle"][4]), rows["pickle"][4]
    assert done.stdout.splitlines()[-1] == "returns False"


# Runs the whole demo, small, with every installed module that the demo extra
# does not bring made unimportable (here, and in the workers, which the spawn
# start method starts by running this script again).
_WITHIN_THE_EXTRA = """
import json, sys

for _name in json.loads(sys.argv[1]):
    sys.modules[_name] = None

if __name__ == "__main__":
    from graphpickle.cli.main import main

    sys.exit(main(["demo", "--tasks", "200", "--graph-tasks", "200", "--repeat", "1"]))
"""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_by(requirements: list[str]) -> set[str]:
    """The distributions that installing ``requirements`` brings, as installed here."""
    from packaging.requirements import Requirement

    found: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = _canonical(requirement.name)
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            nested = Requirement(text)
            if nested.marker is None or nested.marker.evaluate({"extra": ""}):
                todo.append(nested)
    return found


def test_the_demo_needs_nothing_beyond_its_extra(tmp_path):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["demo"]
    # What scripts/demo installs: the demo extra, none of the test suite's tools.
    assert {_canonical(r.split(">")[0].split("=")[0]) for r in extra} == {
        "numpy",
        "dask",
        "distributed",
        "rich",
    }
    assert "GP_EXTRAS=demo" in (ROOT / "scripts" / "demo").read_text()
    allowed = _installed_by(project["dependencies"] + extra) | {"graphpickle"}
    at_start = set(
        subprocess.run(
            [sys.executable, "-c", "import sys; print(' '.join(sys.modules))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )
    blocked = sorted(
        module
        for module, dists in metadata.packages_distributions().items()
        if not {_canonical(d) for d in dists} & allowed
        and module not in at_start
        and module not in sys.stdlib_module_names
    )
    assert blocked, "nothing outside the extra is installed here: the check would be empty"
    script = tmp_path / "within_the_extra.py"
    script.write_text(_WITHIN_THE_EXTRA)
    done = subprocess.run(
        [sys.executable, str(script), json.dumps(blocked)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, (blocked, done.stdout, done.stderr)
    # At the dask floor (2024.8, no dask._task_spec) the cluster section says it is skipped.
    has_task_spec = importlib.util.find_spec("dask._task_spec") is not None
    cluster = "dask cluster: 200 tasks" if has_task_spec else "dask cluster: skipped"
    for title in ("200 tasks in 1 payload", cluster, "one graph of 200 tasks"):
        assert title in done.stdout
