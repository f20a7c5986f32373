"""dask's tokenize on graphpickle: the same notebook code gives the same keys in
every process (fresh interpreters, other hash seeds and directories, spawned
children), and other code other keys."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_python

pytest.importorskip("dask")

SCRIPT = """
import dataclasses, enum, json, multiprocessing, sys
import dask
import dask.array as da
from dask.base import tokenize
import graphpickle.integrations.dask_tokenize

if sys.argv[1] == "graphpickle":
    graphpickle.integrations.dask_tokenize.install()

SCALE = 10

@dataclasses.dataclass
class Point:
    x: int
    y: int = 0

class Plain:
    unit = "m"
    def __init__(self, value):
        self.value = value
    @property
    def doubled(self):
        return self.value * 2

class Colour(enum.Enum):
    RED = 1
    BLUE = 2

def scale(x):
    return x * SCALE

def make_adder(n):
    def add(x):
        return x + n
    return add

def uses_point(p):
    return Point(p.x + 1)

def objects():
    return {
        "function": scale,
        "lambda": lambda x: x + 1,
        "closure": make_adder(3),
        "dataclass": Point,
        "dataclass instance": Point(1, 2),
        "plain class": Plain,
        "plain instance": Plain(4),
        "enum": Colour,
        "enum member": Colour.BLUE,
        "function using a class": uses_point,
    }

def tokens():
    out = {name: tokenize(obj) for name, obj in objects().items()}
    out["delayed key"] = dask.delayed(uses_point, pure=True)(Point(5)).key
    out["map_blocks name"] = da.ones(8, chunks=4).map_blocks(scale).name
    return out

def child_tokens(mode):
    if mode == "graphpickle":
        graphpickle.integrations.dask_tokenize.install()
    return tokens()

if __name__ == "__main__":
    with dask.config.set({"tokenize.ensure-deterministic": True}):
        parent = tokens()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        child = pool.apply(child_tokens, (sys.argv[1],))
    print(json.dumps({"parent": parent, "child": child}))
"""


def _tokens(where: Path, mode: str, seed: str) -> dict[str, dict[str, str]]:
    where.mkdir()
    out = run_python(SCRIPT, mode, cwd=where, env={"PYTHONHASHSEED": seed})
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, dict[str, str]]]]:
    base = tmp_path_factory.mktemp("tokenize")
    return {
        mode: [_tokens(base / f"{mode}-{seed}", mode, seed) for seed in ("0", "1")]
        for mode in ("graphpickle", "stock")
    }


def test_equal_tokens_in_every_process_directory_seed_and_spawned_child(runs):
    first, second = runs["graphpickle"]
    reference = first["parent"]
    assert len(reference) == 12
    for tokens in (first["child"], second["parent"], second["child"]):
        assert tokens == reference


def test_stock_dask_gives_other_tokens_so_the_comparison_can_fail(runs):
    first, second = runs["stock"]
    differ = {name for name, token in first["parent"].items() if second["parent"][name] != token}
    # cloudpickle's random class ids (and the sender's paths in code objects)
    assert {"dataclass", "plain class", "plain instance", "enum"} <= differ


def test_different_code_gives_a_different_token():
    from dask.base import tokenize

    import graphpickle.integrations.dask_tokenize

    graphpickle.integrations.dask_tokenize.install()
    try:
        namespace: dict = {"__name__": "__main__"}
        variants = [
            "def f(x):\n    return x + 1\n",
            "def f(x):\n    return x + 2\n",  # code
            "def f(x=1):\n    return x + 1\n",  # a default
            "K = 1\ndef f(x):\n    return x + K\n",
            "K = 2\ndef f(x):\n    return x + K\n",  # a captured global
            "class C:\n    unit = 'm'\n",
            "class C:\n    unit = 'km'\n",  # a class attribute
        ]
        seen = []
        for source in variants:
            exec(source, namespace)
            obj = namespace.get("C") if "class" in source else namespace["f"]
            namespace.pop("C", None)
            seen.append(tokenize(obj))
        assert len(set(seen)) == len(seen)

        def outer(n):
            return lambda x: x + n

        assert tokenize(outer(1)) != tokenize(outer(2))  # a closure value
        assert tokenize(outer(1)) == tokenize(outer(1))
    finally:
        graphpickle.integrations.dask_tokenize.uninstall()
    assert not graphpickle.integrations.dask_tokenize.installed()


LINES = """\
import json
import graphpickle
import graphpickle.integrations.dask_tokenize
from dask.base import tokenize
graphpickle.integrations.dask_tokenize.install()

def inc(x):
    return x + 1

first = inc
first_payload = graphpickle.dumps(inc, deterministic=True)

def inc(x):
    return x + 1

print(json.dumps({
    "same function": tokenize(first) == tokenize(first),
    "redefined at another line": tokenize(inc) != tokenize(first),
    "one payload": graphpickle.dumps(inc, deterministic=True) == first_payload,
}))
"""


def test_a_function_defined_again_at_another_line_gets_a_new_token(tmp_path):
    # dask's semantics (its test_tokenize_functions_main): cloudpickle writes the
    # line, so stock tokens change with it. Deterministic payloads write line 1
    # (moving a function leaves its payload alone); tokens add the lines.
    out = json.loads(run_python(LINES, cwd=tmp_path).strip().splitlines()[-1])
    assert out == {"same function": True, "redefined at another line": True, "one payload": True}


def test_equal_local_classes_made_by_separate_calls_get_one_token():
    # dask asserts this, and marks it xfail (cloudpickle#453: random class ids):
    # with graphpickle it holds.
    from dask.base import tokenize

    import graphpickle.integrations.dask_tokenize

    def make(instance):
        class C:
            pass

        return C() if instance else C

    graphpickle.integrations.dask_tokenize.install()
    try:
        assert tokenize(make(False)) == tokenize(make(False))
        assert tokenize(make(True)) == tokenize(make(True))
    finally:
        graphpickle.integrations.dask_tokenize.uninstall()


def test_changing_an_object_between_two_calls_changes_its_token():
    # The same objects, changed in place: nothing remembered from the first
    # call may stand for them in the second.
    from dask.base import tokenize

    import graphpickle.integrations.dask_tokenize

    class Unit:
        name = "m"

        def show(self):
            return self.name

    def scaled(x, factor=2):
        return x * factor * OFFSET

    def outer(n):
        return lambda x: x + n

    graphpickle.integrations.dask_tokenize.install()
    try:
        instance = Unit()
        closure = outer(1)
        changes = [
            lambda: setattr(Unit, "name", "km"),  # a class attribute
            lambda: setattr(Unit, "show", lambda self: self.name.upper()),  # a method
            lambda: setattr(instance, "extra", 1),  # an instance attribute
            lambda: setattr(scaled, "__defaults__", (3,)),  # a default
            lambda: globals().__setitem__("OFFSET", 2),  # a global it reads
            lambda: setattr(closure.__closure__[0], "cell_contents", 2),  # a closure value
        ]
        objects = [Unit, Unit, instance, scaled, scaled, closure]
        for change, obj in zip(changes, objects, strict=True):
            before = tokenize(obj)
            assert tokenize(obj) == before
            change()
            assert tokenize(obj) != before, change
    finally:
        graphpickle.integrations.dask_tokenize.uninstall()
        globals()["OFFSET"] = 1


OFFSET = 1


def test_what_cannot_be_made_deterministic_keeps_dasks_behaviour():
    import threading

    import dask
    from dask.base import tokenize

    import graphpickle.integrations.dask_tokenize

    class HoldsLock:
        def __init__(self):
            self.lock = threading.Lock()

    graphpickle.integrations.dask_tokenize.install()
    try:
        with (
            dask.config.set({"tokenize.ensure-deterministic": True}),
            pytest.raises(RuntimeError, match="cannot be deterministically hashed"),
        ):
            tokenize(HoldsLock())
        assert tokenize(HoldsLock()) != tokenize(HoldsLock())  # dask's random fallback
    finally:
        graphpickle.integrations.dask_tokenize.uninstall()


def test_importable_objects_keep_their_tokens():
    # Objects plain pickle writes by reference are hashed from that payload, as
    # dask's first step does: no slower, and the same as without graphpickle.
    from dask.base import tokenize

    import graphpickle.integrations.dask_tokenize

    before = [tokenize(os.path.join), tokenize(Path), tokenize(Path("/tmp"))]
    graphpickle.integrations.dask_tokenize.install()
    try:
        assert [tokenize(os.path.join), tokenize(Path), tokenize(Path("/tmp"))] == before
    finally:
        graphpickle.integrations.dask_tokenize.uninstall()


CLIENT_SCRIPT = """
import dataclasses, sys
import dask
from distributed import Client
import graphpickle.integrations.dask_tokenize

address, mode, role = sys.argv[1:4]
if mode == "graphpickle":
    graphpickle.integrations.dask_tokenize.install()

@dataclasses.dataclass
class Point:
    x: int

def shift(p):
    return p.x + 1

work = dask.delayed(shift, pure=True)(Point(41))
with Client(address) as client:
    held = client.run_on_scheduler(lambda dask_scheduler: sorted(map(str, dask_scheduler.tasks)))
    if role == "first":
        future = client.compute(work)
        assert future.result() == 42
        client.publish_dataset(future, name=f"kept-{mode}")  # stays on the scheduler
    print(work.key in held)
"""


@pytest.mark.parametrize("mode", ["graphpickle", "stock"])
def test_two_client_processes_share_a_pure_computation(tmp_path, mode):
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        address = cluster.scheduler_address
        first = run_python(CLIENT_SCRIPT, address, mode, "first", cwd=tmp_path, timeout=120)
        second = run_python(CLIENT_SCRIPT, address, mode, "second", cwd=tmp_path, timeout=120)
    assert first.split()[-1] == "False"  # nothing held yet
    # The second client finds the first one's result under the key it computes
    # itself; stock dask names a __main__ dataclass differently in each process.
    assert second.split()[-1] == ("True" if mode == "graphpickle" else "False")
