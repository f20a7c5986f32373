"""dask.distributed on graphpickle, with a real LocalCluster of worker processes."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("distributed")

from conftest import run_python

MYLIB = """
import math

def process(x):
    return math.floor(x) * 2
"""


def test_stock_distributed_misses_a_nested_by_value_module(tmp_path, receiver):
    # distributed pickles by reference when the bytes hold no "__main__" and the
    # top-level object's module is not registered: the worker cannot import mylib.
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "mylib.py").write_text(MYLIB)
    out = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path / "lib")!r})
        import cloudpickle, mylib
        from distributed.protocol import pickle as stock
        import graphpickle.integrations.dask_distributed as gpd
        cloudpickle.register_pickle_by_value(mylib)
        graph = {{"task": (mylib.process, 2.5)}}
        open("stock.pkl", "wb").write(stock.dumps(graph))
        open("ours.pkl", "wb").write(gpd.dumps(graph))
        print("written")
        """,
        cwd=tmp_path,
    )
    assert out.strip() == "written"
    with pytest.raises(AssertionError, match="No module named 'mylib'"):
        receiver((tmp_path / "stock.pkl").read_bytes())
    check = "func, arg = obj['task']; print(func(arg))"
    assert receiver((tmp_path / "ours.pkl").read_bytes(), check).strip() == "4"


_CLUSTER_SCRIPT = """
import sys, threading
import numpy as np
from distributed import Client, LocalCluster
from distributed.protocol.serialize import dask_deserialize, dask_serialize
import graphpickle
import graphpickle.integrations.dask_distributed as gpd

OFFSET = 7

class Point:
    def __init__(self, x):
        self.x = x

class Guarded:
    # plain pickle refuses it (a lock); dask_serialize knows it
    def __init__(self, value):
        self.value = value
        self.lock = threading.Lock()

    def __dask_tokenize__(self):  # dask hashes graph arguments by pickling them otherwise
        return ("Guarded", self.value)

@dask_serialize.register(Guarded)
def _serialize_guarded(obj):
    return {}, [str(obj.value).encode()]

@dask_deserialize.register(Guarded)
def _deserialize_guarded(header, frames):
    return Guarded(int(bytes(frames[0])))

def make_adder(n):
    def add(x):
        return x + n
    return add

def call_nested(spec, x):
    return spec["func"](x)

if __name__ == "__main__":
    n = int(sys.argv[1])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        gpd.install(client)
        assert all(client.run(gpd.installed).values()) and client.run_on_scheduler(gpd.installed)
        # A module registered by value that the workers cannot import: it joins
        # sys.path only after they were started.
        sys.path.insert(0, sys.argv[2])
        import mylib
        graphpickle.register_pickle_by_value(mylib)

        add = make_adder(OFFSET)
        dsk = {}
        for i in range(n):
            kind = i % 6
            if kind == 0:
                dsk[("t", i)] = (lambda x: x * 3, i)
            elif kind == 1:
                dsk[("t", i)] = (add, i)
            elif kind == 2:
                dsk[("t", i)] = (lambda p: p.x + 1, Point(i))
            elif kind == 3:
                dsk[("t", i)] = (call_nested, {"func": mylib.process}, i)
            elif kind == 4:
                dsk[("t", i)] = (lambda a, s: float(a.sum()) + len(s), np.full(10, i), "__main__")
            else:
                dsk[("t", i)] = (lambda g: g.value * 2 + OFFSET, Guarded(i))
        expected = []
        for i in range(n):
            kind = i % 6
            expected.append([3 * i, i + OFFSET, i + 1, 2 * i, 10.0 * i + 8, 2 * i + OFFSET][kind])
        results = client.get(dsk, list(dsk))
        assert list(results) == expected
        arrays = client.gather(client.map(lambda a: a * 2, [np.arange(5) + i for i in range(20)]))
        assert all((a == (np.arange(5) + i) * 2).all() for i, a in enumerate(arrays))
    print("ok", n)
"""


def test_local_cluster_runs_a_graph_on_graphpickle(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "mylib.py").write_text(MYLIB)
    # 3,000 tasks: 500 of each kind, each kind's code sent again and again on each
    # worker's connection (scale runs are benchmarks/bench_scheduler.py's)
    out = run_python(_CLUSTER_SCRIPT, "3000", str(lib), cwd=tmp_path, timeout=600)
    assert out.split()[-2:] == ["ok", "3000"]


def test_dumps_keeps_distributed_semantics():

    import numpy as np

    import graphpickle.integrations.dask_distributed as gpd

    array = np.arange(100)
    buffers: list[pickle.PickleBuffer] = []
    data = gpd.dumps(array, buffer_callback=buffers.append, protocol=5)
    assert len(buffers) == 1
    np.testing.assert_array_equal(gpd.loads(data, buffers=buffers), array)
    buffers.clear()
    data = gpd.dumps(array, buffer_callback=buffers.append, protocol=4)  # in band, as stock
    assert buffers == []
    np.testing.assert_array_equal(gpd.loads(data), array)


def test_a_numpy_subclass_follows_its_module_in_a_warm_process():
    # Stock distributed pickles a numpy subclass as is when it is defined in
    # numpy, through dask_serialize (a plain ndarray on loading) otherwise: the
    # per-type answer reads the class's __module__, and is checked against it.
    import numpy as np

    import graphpickle.integrations.dask_distributed as gpd

    sub = type("Sub", (np.ndarray,), {"__module__": "gp_elsewhere"})
    array = np.arange(3).view(sub)
    for module, loaded_as in [
        ("gp_elsewhere", np.ndarray), ("numpy.gp", sub), ("gp_elsewhere", np.ndarray)
    ]:  # fmt: skip
        sub.__module__ = module
        for _ in range(3):  # the first resolution may be dropped (dask caches it in its registry)
            assert type(gpd.loads(gpd.dumps(array))) is loaded_as, module


def test_fast_dumps_and_loads_take_every_argument_as_stock_does():
    import pickle

    import numpy as np
    from distributed.protocol import pickle as stock

    import graphpickle.integrations.dask_distributed as gpd

    array = np.arange(10)
    for protocol in (None, 0, 4, 5):  # `protocol or HIGHEST_PROTOCOL`; buffers in band below 5
        ours: list[pickle.PickleBuffer] = []
        theirs: list[pickle.PickleBuffer] = []
        data = gpd.dumps([array, (1, 2)], buffer_callback=ours.append, protocol=protocol)
        expected = stock.dumps([array, (1, 2)], buffer_callback=theirs.append, protocol=protocol)
        assert data == expected and len(ours) == len(theirs)
        loaded = gpd.loads(data, buffers=ours)
        np.testing.assert_array_equal(loaded[0], array)
        assert gpd.dumps((1, 2)) == stock.dumps((1, 2))  # nothing left of the call before
    with pytest.raises(TypeError):
        gpd.dumps((1, 2), 5)  # keyword-only, as stock's
    with pytest.raises(EOFError) as info:
        gpd.loads(b"")
    assert "truncated or empty" in info.value.__notes__[0]
    assert gpd.loads(pickle.dumps(b"x"), buffers=[]) == b"x"


def test_serialization_family():
    import numpy as np
    from distributed.protocol import deserialize, serialize

    import graphpickle.integrations.dask_distributed as gpd

    gpd.install()
    try:
        obj = {"f": lambda x: x + 1, "a": np.arange(10)}
        header, frames = serialize(obj, serializers=["graphpickle"])
        assert header["serializer"] == "graphpickle" and len(frames) == 2
        loaded = deserialize(header, frames, deserializers=["graphpickle"])
        assert loaded["f"](1) == 2 and loaded["a"].flags.writeable
    finally:
        gpd.uninstall()
    assert not gpd.installed()


def test_dask_serialize_types_next_to_a_main_function():
    # Stock distributed: pickle fails on the lock, its dask_serialize-aware pickler
    # succeeds, but "__main__" in the bytes sends the whole graph to cloudpickle,
    # which fails on the lock. One graphpickle pass applies dask_serialize in place.
    import threading

    from distributed.protocol import pickle as stock
    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    import graphpickle.integrations.dask_distributed as gpd

    class Guarded:
        def __init__(self, value):
            self.value = value
            self.lock = threading.Lock()

    dask_serialize.register(Guarded)(lambda g: ({}, [str(g.value).encode()]))
    dask_deserialize.register(Guarded)(lambda header, frames: Guarded(int(bytes(frames[0]))))
    graph = {"task": (lambda g: g.value + 1, Guarded(41))}
    graph["task"][0].__module__ = "__main__"
    with pytest.raises(Exception, match="lock"):
        stock.dumps(graph)
    func, guarded = gpd.loads(gpd.dumps(graph))["task"]
    assert func(guarded) == 42


class Refuses:
    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        raise TypeError("nope")


class HoldsRefuses:
    def __init__(self, value):
        self.stuff = {"foo": Refuses(value)}


def test_dask_serialize_registered_after_a_failure_applies_to_the_next_dumps():
    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    import graphpickle.integrations.dask_distributed as gpd

    for graph in (Refuses(1), HoldsRefuses(1), [1, Refuses(1)]):
        with pytest.raises(TypeError, match="nope"):  # distributed's contract
            gpd.dumps(graph)
    dask_serialize.register(Refuses)(lambda r: ({}, [str(r.value).encode()]))
    dask_deserialize.register(Refuses)(lambda header, frames: Refuses(int(bytes(frames[0]))))
    try:
        assert gpd.loads(gpd.dumps(Refuses(5))).value == 5
        assert gpd.loads(gpd.dumps(HoldsRefuses(6))).stuff["foo"].value == 6
    finally:
        del dask_serialize._lookup[Refuses]
        del dask_deserialize._lookup[Refuses]
    # and a registration removed applies too
    with pytest.raises(TypeError, match="nope"):
        gpd.dumps(HoldsRefuses(7))


def test_lazy_dask_serialize_registration_after_a_failure(tmp_path, monkeypatch):
    import sys
    import types

    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    import graphpickle.integrations.dask_distributed as gpd

    module = types.ModuleType("gp_lazy_lib")
    exec(
        "class Opaque:\n"
        "    def __init__(self, v): self.v = v\n"
        "    def __reduce__(self): raise TypeError('opaque')\n",
        module.__dict__,
    )
    monkeypatch.setitem(sys.modules, "gp_lazy_lib", module)
    with pytest.raises(TypeError, match="opaque"):
        gpd.dumps([module.Opaque(1)])

    @dask_serialize.register_lazy("gp_lazy_lib")
    def _register_serialize():
        dask_serialize.register(module.Opaque)(lambda o: ({}, [bytes([o.v])]))

    @dask_deserialize.register_lazy("gp_lazy_lib")
    def _register_deserialize():
        dask_deserialize.register(module.Opaque)(lambda h, frames: module.Opaque(frames[0][0]))

    try:
        assert gpd.loads(gpd.dumps([module.Opaque(9)]))[0].v == 9
    finally:
        for registry in (dask_serialize, dask_deserialize):
            registry._lookup.pop(module.Opaque, None)
            registry._lazy.pop("gp_lazy_lib", None)


def test_preload_for_command_line_scheduler_and_worker(tmp_path):
    # `dask scheduler` and `dask worker` started as a user would, with the preload.
    import os
    import subprocess
    import sys
    import time

    bin_dir = os.path.dirname(sys.executable)
    scheduler_file = tmp_path / "scheduler.json"
    common = ["--preload", "graphpickle.integrations.dask_distributed"]
    processes = [
        subprocess.Popen(
            [
                os.path.join(bin_dir, "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
                *common,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        processes.append(
            subprocess.Popen(
                [
                    os.path.join(bin_dir, "dask"),
                    "worker",
                    "--scheduler-file",
                    str(scheduler_file),
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    *common,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        out = run_python(
            f"""
            from distributed import Client
            import graphpickle.integrations.dask_distributed as gpd
            with Client(scheduler_file={str(scheduler_file)!r}, timeout=60) as client:
                client.wait_for_workers(1, timeout=60)
                assert client.run_on_scheduler(gpd.installed)
                assert all(client.run(gpd.installed).values())
                gpd.install()
                offset = 5
                assert client.submit(lambda x: x + offset, 1).result(60) == 6
            print("ok")
            """,
            cwd=tmp_path,
        )
        assert out.strip() == "ok"
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)


_JOINING_WORKERS = """
from distributed import Client, LocalCluster
from graphpickle.integrations import dask_distributed as gpd

def installed_everywhere(client, expected):
    found = client.run(gpd.installed)
    assert len(found) == expected and all(found.values()), found

def kept_code_objects():
    from graphpickle.core import blocks
    return len(blocks._kept)

def blocks_everywhere(client, expected):
    # Each worker said it loads code blocks (its connection is marked), and the
    # tasks' lambda reached each one as a block; the results are right.
    offset = 1
    futures = [client.submit(lambda x: x + offset, i, workers=[w], pure=False)
               for w in client.scheduler_info()["workers"] for i in range(3)]
    assert sorted(client.gather(futures)) == sorted(list(range(1, 4)) * expected)
    marks = client.run_on_scheduler(lambda dask_scheduler: sorted(
        bs.comm.remote_info.get("graphpickle-code-blocks")
        for bs in dask_scheduler.stream_comms.values()))
    from graphpickle.core.blocks import FORMAT
    assert marks == [FORMAT] * expected, marks
    kept = client.run(kept_code_objects)
    assert len(kept) == expected, kept
    import os
    if not os.environ.get("GRAPHPICKLE_NO_CACHE"):  # (else none is kept, nor sent)
        assert all(kept.values()), kept

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        gpd.install(client)
        installed_everywhere(client, 1)
        cluster.scale(2)  # a worker that joins later
        client.wait_for_workers(2, timeout=60)
        installed_everywhere(client, 2)
        blocks_everywhere(client, 2)
        client.restart()  # every worker started again by its nanny
        client.wait_for_workers(2, timeout=60)
        installed_everywhere(client, 2)
        blocks_everywhere(client, 2)
        # A worker that joins from the command line names nothing: the plugin
        # reaches it all the same (registered once, kept by the scheduler).
        assert "graphpickle" in client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.worker_plugins))
    print("ok")
"""


def test_workers_that_join_later_install_graphpickle(tmp_path):
    out = run_python(_JOINING_WORKERS, cwd=tmp_path, timeout=300)
    assert out.split()[-1] == "ok"


_UNLOADABLE_TASK = """
import os, sys, types
from distributed import Client, LocalCluster
from graphpickle.integrations import dask_distributed as gpd

if __name__ == "__main__":
    # A module only this client has: its function goes by reference (it is
    # importable here), and the worker cannot import it.
    mod = types.ModuleType("clientonly")
    exec("def double(x):\\n    return 2 * x\\n", mod.__dict__)
    sys.modules["clientonly"] = mod
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        gpd.install(client)
        pid = client.run(os.getpid)
        try:
            client.submit(mod.double, 3).result(timeout=60)
        except ModuleNotFoundError as exc:
            assert exc.name == "clientonly", exc.name
            notes = " ".join(getattr(exc, "__notes__", []))
            assert "module 'clientonly'" in notes and "register it for pickling by value" in notes, notes
            assert "the task fails; the worker goes on" in notes, notes
        else:
            raise AssertionError("the task ran")
        # The same worker process goes on running the next tasks.
        assert client.submit(lambda x: x + 1, 41).result(timeout=60) == 42
        assert client.run(os.getpid) == pid
    print("ok")
"""


def test_a_task_the_worker_cannot_load_fails_alone(tmp_path):
    pytest.importorskip("dask._task_spec", reason="run specs are dask._task_spec objects")
    # Stock distributed raises inside the worker's connection to the scheduler:
    # the task, and every later one, never ends (seen here: 60 s timeouts).
    out = run_python(_UNLOADABLE_TASK, cwd=tmp_path, timeout=300)
    assert out.split()[-1] == "ok"


_WORKER_WITHOUT_GRAPHPICKLE = """
import subprocess, sys, time, warnings
from distributed import Client, LocalCluster
from graphpickle.integrations import dask_distributed as gpd
from dataclasses import dataclass

@dataclass
class Point:
    x: int
    y: float

def norm(p):
    return p.x + p.y

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        (ours,) = client.scheduler_info()["workers"]
        # A second worker whose Python cannot import graphpickle.
        hide = "hide_graphpickle.py"
        open(hide, "w").write("import sys\\nsys.modules['graphpickle'] = None\\n")
        other = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker",
                                  cluster.scheduler_address, "--nthreads", "1", "--no-nanny",
                                  "--no-dashboard", "--preload", hide])
        try:
            client.wait_for_workers(2, timeout=60)
            (theirs,) = set(client.scheduler_info()["workers"]) - {ours}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                gpd.install(client)  # the plugin fails to load there
            assert any("could not install" in str(w.message) for w in caught), caught
            def has_graphpickle():
                return sys.modules.get("graphpickle") is not None
            assert client.run(has_graphpickle) == {ours: True, theirs: False}
            # The scheduler keeps the plugin for the workers that join later.
            assert "graphpickle" in client.run_on_scheduler(
                lambda dask_scheduler: list(dask_scheduler.worker_plugins))
            for worker in (ours, theirs):
                for func, arg, expected in ((norm, Point(1, 2.5), 3.5), (lambda x: x * 3, 2, 6)):
                    future = client.submit(func, arg, workers=[worker], allow_other_workers=False,
                                           pure=False)
                    assert future.result(timeout=60) == expected, worker
            # Only the worker that said so is sent code blocks.
            from graphpickle.core.blocks import FORMAT
            marks = client.run_on_scheduler(lambda dask_scheduler: {
                w: bs.comm.remote_info.get("graphpickle-code-blocks")
                for w, bs in dask_scheduler.stream_comms.items()})
            assert marks == {ours: FORMAT, theirs: None}, marks
            # ... and only it keeps them: its blocks go once on its connection.
            held = client.run_on_scheduler(lambda dask_scheduler: {
                w: "graphpickle-blocks-held" in bs.comm.remote_info
                for w, bs in dask_scheduler.stream_comms.items()})
            import os
            assert held == {ours: not os.environ.get("GRAPHPICKLE_NO_CACHE"), theirs: False}, held
        finally:
            other.terminate()
            try:
                other.wait(60)
            except subprocess.TimeoutExpired:  # (a loaded machine: it was shutting down)
                other.kill()
                other.wait(30)
    print("ok")
"""


def test_a_worker_without_graphpickle_still_runs_tasks(tmp_path):
    # What the integration writes loads with pickle and cloudpickle alone.
    out = run_python(_WORKER_WITHOUT_GRAPHPICKLE, cwd=tmp_path, timeout=300)
    assert out.split()[-1] == "ok"


def _task_naming_a_missing_module(monkeypatch):
    """A dask Task whose function is in a module the receiver no longer has."""
    import sys
    import types

    from dask._task_spec import Task

    import graphpickle.integrations.dask_distributed as gpd

    mod = types.ModuleType("gone_module")
    exec("def double(x):\n    return 2 * x\n", mod.__dict__)
    monkeypatch.setitem(sys.modules, "gone_module", mod)
    task = Task("k", mod.double, 3)
    payloads = gpd.dumps(task), gpd.dumps([mod.double])
    monkeypatch.delitem(sys.modules, "gone_module")
    return payloads


@pytest.mark.parametrize("fast", [True, False], ids=["C loader", "Python loads"])
def test_an_unloadable_task_payload_loads_as_a_task_that_raises(monkeypatch, fast):
    pytest.importorskip("dask._task_spec", reason="run specs are dask._task_spec objects")
    import graphpickle.integrations.dask_distributed as gpd

    task_payload, list_payload = _task_naming_a_missing_module(monkeypatch)
    loads = gpd.loads if fast else getattr(gpd.loads, "__wrapped__", gpd.loads)
    task = loads(task_payload)
    with pytest.raises(ModuleNotFoundError, match="gone_module") as caught:
        task({})
    notes = " ".join(caught.value.__notes__)
    assert "module 'gone_module'" in notes and "the worker goes on" in notes
    # Anything else that cannot be loaded raises, as before.
    with pytest.raises(ModuleNotFoundError, match="gone_module") as caught:
        loads(list_payload)
    assert "the worker goes on" not in " ".join(caught.value.__notes__)
    # A corrupted task payload fails that task too; nothing of it runs.
    task = loads(task_payload[: len(task_payload) // 2])
    with pytest.raises(pickle.UnpicklingError, match="truncated"):
        task({})
    with pytest.raises(pickle.UnpicklingError):
        loads(b"not a pickle at all")
