"""graphpickle.integrations.ray on a real local Ray: one Ray for the module.

Ray is not in the default test environments (240 MB): there these tests skip.
``.ci/run``'s Ray stages set GRAPHPICKLE_RAY_TESTS=1, where a missing Ray fails.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_python

from graphpickle.integrations.ray import SUPPORTED_RAY

if os.environ.get("GRAPHPICKLE_RAY_TESTS") != "1":
    _ray = pytest.importorskip(
        "ray", reason="Ray is not installed (pip install 'graphpickle[ray]')"
    )
    if tuple(int(p) for p in _ray.__version__.split(".")[:2]) not in SUPPORTED_RAY:
        pytest.skip(
            f"Ray {_ray.__version__} is not one the integration knows ({SUPPORTED_RAY})",
            allow_module_level=True,
        )

import cloudpickle
import numpy as np
import ray

import graphpickle
import graphpickle.integrations.ray as gpray
from graphpickle import LargeCaptureWarning
from graphpickle.core import policy

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    gpray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        gpray.uninstall()


@pytest.fixture
def stock_then_graphpickle(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Leave the driver installed whatever the test did (to Ray too)."""
    yield
    monkeypatch.undo()
    gpray.install()


@ray.remote
def identity(x: Any) -> Any:
    return x


@ray.remote
def value_of(x: Any) -> Any:
    return x.value


@ray.remote
def worker_state() -> tuple[bool, int]:
    import graphpickle.integrations.ray as g

    return g.installed(), os.getpid()


def _targets() -> dict[tuple[str, str], Any]:
    return {(m, n): vars(sys.modules[m])[n] for m, n in gpray._TARGETS}


def test_driver_and_workers_are_installed() -> None:
    assert gpray.installed()
    states = ray.get([worker_state.remote() for _ in range(8)])
    assert all(installed for installed, _ in states)


def test_locally_defined_objects_round_trip_through_tasks_and_the_store() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        y: list[int]

    offset = 10

    @ray.remote
    def shift(p: Point) -> Point:
        return Point(p.x + offset, p.y)

    points = [Point(i, [i]) for i in range(100)]
    assert ray.get(shift.remote(points[3])) == Point(13, [3])
    assert ray.get(ray.put(points)) == points
    assert ray.get(identity.remote({"p": points})) == {"p": points}


def test_object_refs_nested_in_arguments_are_found_and_tracked() -> None:
    inner = ray.put([1, 2, 3])
    context = ray._private.worker.global_worker.get_serialization_context()
    serialized = context.serialize({"deep": [(inner,)]})
    assert inner in serialized.contained_object_refs

    @ray.remote
    def fetch(d: dict[str, Any]) -> Any:
        return ray.get(d["deep"][0][0])

    assert ray.get(fetch.remote({"deep": [(inner,)]})) == [1, 2, 3]
    # Borrowed by the worker: the outer object keeps the inner one alive.
    outer = ray.put({"ref": ray.put("kept")})
    assert ray.get(ray.get(identity.remote(outer))["ref"]) == "kept"


@dataclasses.dataclass
class _Pair:
    a: int
    b: str


def test_graphs_ray_would_only_pickle_are_pickled_whole_with_refs_and_buffers() -> None:
    from ray._private import ray_constants

    context = ray._private.worker.global_worker.get_serialization_context()
    python = ray_constants.OBJECT_METADATA_TYPE_PYTHON
    pairs = [_Pair(i, str(i)) for i in range(1000)]
    # One ExtType for the whole list, not one per item (Ray's msgpack walk).
    whole = context.serialize(pairs)
    per_item = gpray._serializer_originals["_serialize_to_msgpack"](context, pairs)
    assert whole.metadata == per_item.metadata == python
    # (per item: an ExtType of 3 to 5 bytes each in Ray's msgpack part)
    assert per_item.total_bytes - whole.total_bytes > 2_000
    assert ray.get(ray.put(pairs)) == pairs
    by_key = {str(i): (i, [i]) for i in range(100)}
    assert ray.get(identity.remote(by_key)) == by_key
    # What msgpack writes itself stays msgpack (other languages read it).
    assert context.serialize([1, "a", {"b": [2.0]}]).metadata != python
    assert ray.get(ray.put([1, _Pair(1, "x")])) == [1, _Pair(1, "x")]  # (item by item)
    # Refs in such a list are found and tracked, and borrowed by a worker.
    inner = ray.put("kept")
    assert inner in context.serialize([inner, inner]).contained_object_refs
    outer = ray.put([ray.put("also kept")])
    assert ray.get(ray.get(identity.remote(outer))[0]) == "also kept"
    assert ray.get(identity.remote([inner]))[0] == inner
    # Arrays in it go out of band and come back zero-copy.
    array = np.arange(100_000, dtype=np.float64)
    back = ray.get(ray.put([array, _Pair(0, "z")]))
    assert not back[0].flags.writeable and not back[0].flags.owndata
    assert np.array_equal(back[0], array) and back[1] == _Pair(0, "z")


def test_actor_handles_nested_in_arguments_work() -> None:
    @ray.remote
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def add(self, k: int) -> int:
            self.n += k
            return self.n

    counter = Counter.remote()  # type: ignore[attr-defined]

    @ray.remote
    def use(handles: list[Any]) -> int:
        return int(ray.get(handles[0].add.remote(5)))

    assert ray.get(use.remote([counter])) == 5
    assert ray.get(counter.add.remote(1)) == 6


def test_actors_take_locally_defined_objects() -> None:
    @dataclasses.dataclass
    class Item:
        name: str

    @ray.remote
    class Keeper:
        def __init__(self) -> None:
            self.items: list[Item] = []

        def keep(self, item: Item) -> int:
            self.items.append(item)
            return len(self.items)

        def all(self) -> list[Item]:
            return self.items

    keeper = Keeper.remote()  # type: ignore[attr-defined]
    ray.get([keeper.keep.remote(Item(str(i))) for i in range(20)])
    assert ray.get(keeper.all.remote()) == [Item(str(i)) for i in range(20)]


def test_actor_methods_that_name_their_actor_class() -> None:
    # Ray's test_actor.py::test_actor_class_attributes: the class's methods name the
    # actor class (a closure), whose metadata holds the class's bound methods, so
    # the worker rebuilt the class from a payload that looked "f" up on it too early.
    class Base:
        BASE = 2

    @ray.remote
    class Named(Base):
        X = 3

        @classmethod
        def f(cls) -> int:
            assert Named.BASE == 2
            return 4

        def g(self) -> int:
            assert Named.f() == 4
            return Named.X

    named = Named.remote()  # type: ignore[attr-defined]
    assert ray.get(named.g.remote()) == 3


def test_register_serializer_is_used_and_deregistering_it_applies() -> None:
    class Guarded:
        def __init__(self, value: int) -> None:
            self.value = value
            self.lock = threading.Lock()

    calls = []

    def serialize(obj: Guarded) -> int:
        calls.append(obj.value)
        return obj.value

    with pytest.raises(TypeError, match="lock"):
        ray.put(Guarded(0))
    ray.util.register_serializer(Guarded, serializer=serialize, deserializer=Guarded)
    try:
        back = ray.get(ray.put([Guarded(7)]))
        assert back[0].value == 7 and calls == [7]
        # A worker (without the registration, as with stock Ray) gets it rebuilt.
        assert ray.get(value_of.remote(Guarded(8))) == 8
    finally:
        ray.util.deregister_serializer(Guarded)
    with pytest.raises(TypeError, match="lock"):
        ray.put(Guarded(9))


def test_numpy_arrays_stay_out_of_band_and_zero_copy() -> None:
    array = np.arange(1_000_000, dtype=np.float64)
    buffers: list[pickle.PickleBuffer] = []
    payload = gpray.dumps({"a": array}, 5, buffers.append)
    assert len(payload) < 1000 and len(buffers) == 1
    back = ray.get(ray.put(array))
    # Read from the object store's shared memory, not copied into the process.
    assert not back.flags.writeable and not back.flags.owndata
    assert np.array_equal(back, array)
    assert ray.get(identity.remote(array)).sum() == array.sum()


def test_exceptions_raised_in_tasks_come_back() -> None:
    class LocalError(ValueError):
        pass

    @ray.remote(max_retries=0)
    def fail() -> None:
        raise LocalError("from the worker")

    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray.get(fail.remote())
    assert isinstance(info.value, ValueError)
    assert "from the worker" in str(info.value)
    assert type(info.value.cause).__name__ == "LocalError"


def _unserializable_errors() -> list[tuple[type[BaseException], str, BaseException | None]]:
    lock = threading.Lock()

    def holds_lock() -> Any:
        return lock

    failures: list[BaseException] = []
    for attempt in (
        lambda: ray.put({"a": [lock]}),
        lambda: identity.remote({"a": [lock]}),
        lambda: ray.remote(holds_lock).remote(),
    ):
        try:
            attempt()
        except Exception as exc:
            failures.append(exc)
        else:
            raise AssertionError("pickling a lock did not fail")
    return [
        (type(exc), str(exc).replace(hex(id(lock)), "ID").split("\n")[0], exc.__cause__)
        for exc in failures
    ]


def test_what_cannot_be_pickled_raises_what_ray_raises_with_the_path(
    stock_then_graphpickle: None,
) -> None:
    ours = _unserializable_errors()
    gpray.uninstall()
    stock = _unserializable_errors()
    assert [(kind, message) for kind, message, _ in ours] == [
        (kind, message) for kind, message, _ in stock
    ]
    assert all(kind is TypeError for kind, _, _ in ours)
    notes = [getattr(cause, "__notes__", []) for _, _, cause in ours]
    # Ray's msgpack layer walks dicts and lists itself and pickles what it cannot
    # write as a list of its own: the path is within that list.
    assert "lock' object at root[0]:" in notes[0][0] and "at root[0]:" in notes[1][0]
    assert "root.__closure__[0].cell_contents" in notes[2][0]


class _Link:
    def __init__(self, next_: Any) -> None:
        self.next = next_


def _deep_errors() -> list[BaseException]:
    deep: Any = None
    for _ in range(100_000):
        deep = _Link(deep)
    failures = []
    for attempt in (lambda: ray.put(deep), lambda: identity.remote([deep])):
        with pytest.raises(Exception) as info:
            attempt()
        failures.append(info.value)
    return failures


def test_a_graph_too_deep_raises_what_ray_raises(stock_then_graphpickle: None) -> None:
    from graphpickle.errors import DeepRecursionError

    ours = _deep_errors()
    gpray.uninstall()
    stock = _deep_errors()
    for mine, theirs in zip(ours, stock, strict=True):
        assert isinstance(mine, pickle.PicklingError) and isinstance(mine, DeepRecursionError)
        assert type(theirs) is pickle.PicklingError
        assert str(mine).startswith(str(theirs).rstrip(".")), (str(mine), str(theirs))


def test_inspect_serializability_still_works() -> None:
    lock = threading.Lock()

    def holds_lock() -> Any:
        return lock

    ok, failures = ray.util.inspect_serializability(holds_lock, name="holds_lock")
    assert not ok and any("lock" in repr(failure) for failure in failures)


def test_large_remote_functions_are_refused_as_ray_refuses_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ray._private import ray_constants

    big = b"x" * 2_000_000
    monkeypatch.setattr(ray_constants, "FUNCTION_SIZE_WARN_THRESHOLD", 100_000)
    monkeypatch.setattr(ray_constants, "FUNCTION_SIZE_ERROR_THRESHOLD", 1_000_000)

    def captures() -> int:
        return len(big)

    # Ray's error, and graphpickle's warning naming the capture on top.
    with (
        pytest.raises(ValueError, match="is too large"),
        pytest.warns(LargeCaptureWarning, match="captures closure 'big'"),
    ):
        ray.remote(captures).remote()


def test_large_remote_functions_get_rays_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray._private import ray_constants
    from ray._private import utils as ray_utils

    big = b"y" * 300_000
    pushed: list[str] = []
    monkeypatch.setattr(ray_constants, "FUNCTION_SIZE_WARN_THRESHOLD", 100_000)
    monkeypatch.setattr(
        ray_utils,
        "push_error_to_driver",
        lambda worker, kind, message, **kw: pushed.append(message),
    )

    def captures_less() -> int:
        return len(big)

    assert ray.get(ray.remote(captures_less).remote()) == 300_000
    assert any("captures_less is very large" in message for message in pushed), pushed


def test_a_payload_the_worker_cannot_load_fails_that_task_only(tmp_path: Path) -> None:
    (tmp_path / "gp_driver_only.py").write_text("class Thing:\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import gp_driver_only  # type: ignore[import-not-found]

        @ray.remote(max_retries=0)
        def take(x: Any) -> int:
            return os.getpid()

        with pytest.raises(ray.exceptions.RayTaskError) as info:
            ray.get(take.remote(gp_driver_only.Thing()))
        assert isinstance(info.value, ray.exceptions.RaySystemError)
        assert "No module named 'gp_driver_only'" in str(info.value)
        assert "graphpickle: cannot load the pickle" in str(info.value)
        # The workers keep running: the next tasks are served.
        assert all(installed for installed, _ in ray.get([worker_state.remote()] * 4))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("gp_driver_only", None)


_DRIVER_ONLY_MODULE = """
import math

class Thing:
    def __init__(self, value):
        self.value = value

def triple(x):
    return 3 * x

def area(r):
    return round(math.pi * r * r, 3)
"""


@ray.remote(max_retries=0)
def apply(f: Any, x: Any) -> Any:
    return f(x)


def test_modules_registered_through_ray_cloudpickle_travel_by_value(tmp_path: Path) -> None:
    # A local module only the driver has (added to its path after Ray started,
    # so no worker has it), registered through Ray's vendored cloudpickle after
    # install(): Ray's registry is read live, and so is an unregistration.
    (tmp_path / "gp_ray_registered.py").write_text(_DRIVER_ONLY_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import gp_ray_registered as mod  # type: ignore[import-not-found]

        ray.cloudpickle.register_pickle_by_value(mod)
        try:
            assert ray.get(apply.remote(mod.triple, 4)) == 12  # a function argument
            assert ray.get(ray.remote(mod.area).remote(1)) == 3.142  # a remote function
            assert ray.get(value_of.remote(mod.Thing(5))) == 5  # an instance argument
            assert ray.get(ray.remote(lambda: mod.triple(7)).remote()) == 21  # a lambda
            assert ray.get(ray.put([mod.Thing(6)]))[0].value == 6
            assert "gp_ray_registered" in graphpickle.list_registry_pickle_by_value()
        finally:
            ray.cloudpickle.unregister_pickle_by_value(mod)
        with pytest.raises(
            ray.exceptions.RayTaskError, match="No module named 'gp_ray_registered'"
        ):
            ray.get(value_of.remote(mod.Thing(8)))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("gp_ray_registered", None)


def test_uninstall_restores_every_name_and_install_is_idempotent(
    stock_then_graphpickle: None,
) -> None:
    import ray.cloudpickle

    gpray.install()
    gpray.install()
    assert gpray.installed()
    assert ray.cloudpickle.cloudpickle._PICKLE_BY_VALUE_MODULES in policy.REGISTRIES
    gpray.uninstall()
    assert not gpray.installed()
    assert all(value is ray.cloudpickle for value in _targets().values())
    assert policy.REGISTRIES == [cloudpickle.cloudpickle._PICKLE_BY_VALUE_MODULES]
    context = ray._private.serialization.SerializationContext
    assert context._serialize_to_msgpack.__module__ == "ray._private.serialization"


def test_an_unknown_ray_version_is_refused_without_changes(
    monkeypatch: pytest.MonkeyPatch, stock_then_graphpickle: None
) -> None:
    gpray.uninstall()
    before = _targets()
    monkeypatch.setattr(ray, "__version__", "2.99.0")
    with pytest.raises(gpray.RayIntegrationError, match=r"knows Ray 2\.60, not 2\.99\.0"):
        gpray.install()
    assert _targets() == before and not gpray.installed()


@pytest.mark.parametrize("moved", ["ray._raylet", "ray.job_config"])
def test_moved_internals_are_refused_without_changes(
    moved: str, monkeypatch: pytest.MonkeyPatch, stock_then_graphpickle: None
) -> None:
    gpray.uninstall()
    name = dict(gpray._TARGETS)[moved]
    monkeypatch.delattr(sys.modules[moved], name)
    with pytest.raises(gpray.RayIntegrationError, match=re.escape(f"{moved}.{name} is None")):
        gpray.install()
    monkeypatch.undo()
    assert all(value is ray.cloudpickle for value in _targets().values())
    assert not gpray.installed()


def test_a_moved_serializer_is_refused(
    monkeypatch: pytest.MonkeyPatch, stock_then_graphpickle: None
) -> None:
    gpray.uninstall()
    context = ray._private.serialization.SerializationContext
    monkeypatch.delattr(context, "_serialize_to_pickle5")
    with pytest.raises(gpray.RayIntegrationError, match="SerializationContext"):
        gpray.install()
    assert not gpray.installed()
    assert context._serialize_to_msgpack.__module__ == "ray._private.serialization"


def test_a_moved_reducer_table_is_refused(
    monkeypatch: pytest.MonkeyPatch, stock_then_graphpickle: None
) -> None:
    gpray.uninstall()
    monkeypatch.setattr(ray.cloudpickle.CloudPickler, "dispatch", {})
    with pytest.raises(gpray.RayIntegrationError, match="_dispatch_table"):
        gpray.install()
    assert not gpray.installed()


def test_runtime_env_chains_an_existing_hook() -> None:
    env = gpray.runtime_env({"worker_process_setup_hook": "mine.setup", "env_vars": {"A": "1"}})
    assert env == {
        "worker_process_setup_hook": "graphpickle.integrations.ray.worker_setup",
        "env_vars": {"A": "1", "GRAPHPICKLE_RAY_NEXT_SETUP_HOOK": "mine.setup"},
    }
    assert gpray.runtime_env(env) == env
    # A callable (as Ray takes it) is wrapped: graphpickle's install, then it.
    ran = []
    chained = gpray.runtime_env({"worker_process_setup_hook": lambda: ran.append(1)})
    hook = chained["worker_process_setup_hook"]
    assert callable(hook) and hook.__name__ == "<lambda>"
    assert gpray.runtime_env(chained) == chained  # not wrapped twice
    hook()
    assert ran == [1] and gpray.installed()
    with pytest.raises(TypeError, match=r"callable or a 'module\.function' string"):
        gpray.runtime_env({"worker_process_setup_hook": 3})


def test_init_starts_ray_without_a_runtime_env() -> None:
    # A runtime_env makes every new worker wait for Ray's agent: init() names
    # graphpickle's module in the workers' preloads instead.
    assert not ray.get_runtime_context().runtime_env


_FRESH_DRIVER = """
import dataclasses, os, sys, time
import ray
import graphpickle.integrations.ray as gpray

HOW = sys.argv[1]

@dataclasses.dataclass
class Point:
    x: int

def double(p):
    return Point(p.x * 2)

def setup():  # a __main__ function as the user's own setup hook
    os.environ['GP_USER_HOOK_RAN'] = 'yes'

@ray.remote
def run(p):
    import graphpickle.integrations.ray as g
    return double(p), g.installed(), os.getpid()

@ray.remote
class Acc:
    def __init__(self):
        self.points = []
    def add(self, p):
        import graphpickle.integrations.ray as g
        self.points.append(p)
        return g.installed(), os.getpid()
    def die(self):
        os._exit(1)

@ray.remote(max_retries=0)
def crash():
    os._exit(1)

options = dict(num_cpus=2, include_dashboard=False, log_to_driver=False)
hook = setup if HOW.endswith("callable") else "gp_user_hook.setup"
env = {"worker_process_setup_hook": hook, "env_vars": {"PYTHONPATH": os.getcwd()}}
if HOW.startswith("init"):
    gpray.init(runtime_env=env, **options)
else:
    gpray.install()
    ray.init(runtime_env=gpray.runtime_env(env), **options)
point, inst, pid = ray.get(run.remote(Point(21)))
assert point == Point(42) and inst, (point, inst)
assert ray.get(ray.put([Point(1)])) == [Point(1)]
acc = Acc.options(max_restarts=1).remote()
inst_a, pid_a = ray.get(acc.add.remote(Point(3)))
assert inst_a
if HOW == "init callable":
    # A worker that dies is replaced; the new process has graphpickle too.
    try:
        ray.get(crash.remote())
    except ray.exceptions.WorkerCrashedError:
        pass
    acc.die.remote()
    for _ in range(100):
        try:
            inst_b, pid_b = ray.get(acc.add.remote(Point(4)))
            break
        except ray.exceptions.RayActorError:
            time.sleep(0.2)
    assert inst_b and pid_b != pid_a, (inst_b, pid_a, pid_b)
states = ray.get([run.remote(Point(i)) for i in range(10)])
assert all(s[1] for s in states)
hooked = ray.get(ray.remote(lambda: os.environ.get("GP_USER_HOOK_RAN")).remote())
print("ok", hooked)
"""


@pytest.mark.parametrize("how", ["init callable", "runtime_env callable", "runtime_env string"])
def test_a_fresh_driver_main_module_restarted_workers_and_a_setup_hook(
    tmp_path: Path, how: str
) -> None:
    (tmp_path / "gp_user_hook.py").write_text(
        "import os\ndef setup():\n    os.environ['GP_USER_HOOK_RAN'] = 'yes'\n"
    )
    # The user's hook, a __main__ function or a module beside the driver script
    # (on the workers' PYTHONPATH), runs as with stock Ray, and graphpickle too.
    out = run_python(_FRESH_DRIVER, how, cwd=tmp_path, timeout=200)
    assert "ok yes" in out.splitlines(), out


_RAY_DATA_DRIVER = """
import dataclasses, json
import numpy as np
import ray
import graphpickle.integrations.ray as gpray

@dataclasses.dataclass
class Offset:
    by: int

OFFSET = Offset(10)

def shift(row):
    return {"x": row["x"] + OFFSET.by, "kind": type(OFFSET).__name__}

def square(batch):
    return {"x": batch["x"] ** 2}

class Scale:  # a __main__ class: map_batches runs it in an actor pool
    def __init__(self, k):
        self.k = Offset(k)
    def __call__(self, batch):
        return {"x": batch["x"] * self.k.by}

def pipeline():
    ray.data.DataContext.get_current().enable_progress_bars = False
    ds = ray.data.from_items([{"x": i} for i in range(40)])
    mapped = ds.map(shift)
    kinds = sorted({row["kind"] for row in mapped.take_all()})
    squared = mapped.map_batches(square).map_batches(
        Scale, fn_constructor_args=(3,), concurrency=1, batch_size=8
    )
    return kinds, sorted(int(row["x"]) for row in squared.take_all())

options = dict(num_cpus=2, include_dashboard=False, log_to_driver=False)
gpray.init(**options)
ours = pipeline()
assert gpray.installed()
ray.shutdown()
gpray.uninstall()
ray.init(**options)
stock = pipeline()
ray.shutdown()
print(json.dumps([ours, stock]))
"""


def test_ray_data_map_and_map_batches_of_main_code_as_stock(tmp_path: Path) -> None:
    import json

    out = run_python(_RAY_DATA_DRIVER, cwd=tmp_path, timeout=200)
    ours, stock = json.loads(out.strip().splitlines()[-1])
    assert ours == stock == [["Offset"], sorted(3 * (i + 10) ** 2 for i in range(40))]


def test_the_ray_examples_of_the_docs_run(tmp_path: Path) -> None:
    import json

    import test_docs_code as docs

    blocks = [
        (f"{path.relative_to(docs.ROOT)}:{line}", code)
        for path in docs.DOCUMENTS
        for lang, line, code in docs._blocks(path)
        if lang == "python ray"
    ]
    assert blocks, "no ```python ray block in the docs: the check would be empty"
    listing = tmp_path / "blocks.json"
    listing.write_text(json.dumps(blocks))
    work = tmp_path / "work"
    work.mkdir()
    out = run_python(docs._RUNNER, str(listing), cwd=work, timeout=200)
    assert out.splitlines()[-1] == f"ran {len(blocks)}", out
    assert "7" in out.splitlines(), out
