"""dumps and loads in C (``_speedups.Dumper``/``Loader``): pooled picklers write
what a new pickler writes, whatever the previous message was, and every call
the fast path does not take behaves as the Python functions do."""

from __future__ import annotations

import inspect
import io
import pickle
import sys
import threading
import types

import cloudpickle
import numpy as np
import pytest

import graphpickle
from graphpickle.core import pickler as _pickler

pytestmark = pytest.mark.skipif(
    _pickler._speedups is None, reason="graphpickle._speedups not built"
)


def reference_dumps(obj, *args, **kwargs):
    """What the Python dumps writes (a new Pickler per call)."""
    return graphpickle.dumps.__wrapped__(obj, *args, **kwargs)


def test_dumps_and_loads_are_the_c_stand_ins_with_the_python_signatures():
    assert isinstance(graphpickle.dumps, _pickler._speedups.Dumper)
    assert isinstance(graphpickle.loads, _pickler._speedups.Loader)
    assert str(inspect.signature(graphpickle.dumps)) == str(
        inspect.signature(graphpickle.dumps.__wrapped__)
    )
    assert "deterministic" in inspect.signature(graphpickle.dumps).parameters
    assert "allowed" in inspect.signature(graphpickle.loads).parameters
    assert graphpickle.dumps.__name__ == "dumps" and graphpickle.dumps.__doc__
    # Pickled by reference, as functions are.
    assert pickle.loads(pickle.dumps(graphpickle.dumps)) is graphpickle.dumps
    assert pickle.loads(pickle.dumps(graphpickle.loads)) is graphpickle.loads


@pytest.mark.parametrize("protocol", [None, 0, 2, 4, 5, -1])
def test_pooled_bytes_are_a_new_picklers_bytes(protocol):
    def local(x):
        return x + 1

    values = [(1, 2), {"a": [1.5, b"xy"]}, local, np.arange(4), memoryview(b"abc")]
    for _ in range(3):  # the second and third calls run on a reused pickler
        for value in values:
            assert graphpickle.dumps(value, protocol) == reference_dumps(value, protocol)


def test_a_big_payload_then_small_ones():
    big = [str(i) for i in range(100_000)]  # frames flushed during the dump, a big memo
    assert graphpickle.dumps(big) == pickle.dumps(big, protocol=5)
    assert graphpickle.loads(graphpickle.dumps(big)) == big
    shared = [1, 2]
    small = [shared, shared]
    assert graphpickle.dumps(small) == pickle.dumps(small, protocol=5)  # memo from 0 again
    large_bytes = b"x" * 300_000  # written to the sink on its own, between frames
    assert graphpickle.dumps([large_bytes, bytearray(b"y" * 200_000)]) == pickle.dumps(
        [large_bytes, bytearray(b"y" * 200_000)], protocol=5
    )


def test_buffer_callbacks_belong_to_their_call():
    array = np.arange(10.0)
    first: list[pickle.PickleBuffer] = []
    data = graphpickle.dumps(array, buffer_callback=first.append)
    assert len(first) == 1
    assert (graphpickle.loads(data, buffers=first) == array).all()
    # The next call has no callback: the buffer goes in band, as with pickle.
    assert graphpickle.dumps(array) == pickle.dumps(array, protocol=5)
    assert len(first) == 1
    kept = []
    assert graphpickle.dumps(array, 5, lambda b: kept.append(b) or True) == pickle.dumps(
        array, protocol=5
    )
    assert len(kept) == 1  # a true answer keeps the buffer in band


def test_by_value_payloads_share_nothing_between_calls(receiver):
    namespace: dict = {"__name__": "__main__"}
    exec("G = 1\ndef f():\n    return G\ndef g():\n    return G + 1\n", namespace)
    f, g = namespace["f"], namespace["g"]
    one = graphpickle.dumps([f, g])
    two = graphpickle.dumps(g)
    assert two == reference_dumps(g)  # nothing of the first payload's globals map
    out = receiver(one, "print(obj[0].__globals__ is obj[1].__globals__, obj[1]())")
    assert out.split() == ["True", "2"]
    assert receiver(two, "print(obj())").strip() == "2"


def test_dumps_inside_a_reduction_and_from_threads():
    class Outer:
        def __reduce__(self):
            return (bytes, (graphpickle.dumps([1, 2, 3]),))

    data = graphpickle.dumps([Outer(), Outer()])
    assert [pickle.loads(x) for x in pickle.loads(data)] == [[1, 2, 3], [1, 2, 3]]

    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(300):
                value = {"seed": seed, "i": i, "items": list(range(i % 17))}
                assert graphpickle.loads(graphpickle.dumps(value)) == value
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert graphpickle.dumps.pooled() <= 4 * 6


def test_a_failed_dump_raises_as_the_python_path_and_is_not_reused():
    lock = threading.Lock()
    with pytest.raises(TypeError, match="cannot pickle") as info:
        graphpickle.dumps({"a": [lock]})
    assert info.value.graphpickle_path == "root['a'][0]"
    assert graphpickle.dumps((1, 2)) == pickle.dumps((1, 2), protocol=5)

    class Refuses:
        def __reduce__(self):
            raise KeyboardInterrupt  # not an Exception: propagates as it is

    with pytest.raises(KeyboardInterrupt):
        graphpickle.dumps([Refuses()])
    with pytest.raises(OSError, match="disk"):  # trouble with the output: as it is
        graphpickle.dumps([np.arange(3)], 5, _raise_os_error)
    assert graphpickle.dumps((1, 2)) == pickle.dumps((1, 2), protocol=5)


def _raise_os_error(buffer):
    raise OSError("disk full")


def test_calls_the_fast_path_does_not_take():
    assert graphpickle.dumps({3, 1, 2}, deterministic=True) == reference_dumps(
        {3, 1, 2}, deterministic=True
    )
    with pytest.raises(TypeError, match="unexpected keyword"):
        graphpickle.dumps(1, colour="red")
    with pytest.raises(TypeError):
        graphpickle.dumps()
    with pytest.raises(ValueError, match="protocol"):
        graphpickle.dumps(1, 6)
    with pytest.raises(ValueError, match="buffer_callback"):
        graphpickle.dumps(1, 4, print)
    assert graphpickle.dumps(obj=(1,), protocol=True) == pickle.dumps((1,), protocol=1)


def test_python_hook_switch(monkeypatch):
    # Tests that set _pickler._speedups to None get the Python hook in dumps too.
    seen = []
    monkeypatch.setattr(_pickler, "_speedups", None)
    monkeypatch.setattr(_pickler.Pickler, "reducer_override", _spy(seen))
    graphpickle.dumps([np.int8(1)])
    assert seen[0] == "int8"


def _spy(seen):
    original = _pickler.Pickler.reducer_override

    def reducer_override(self, obj):
        seen.append(type(obj).__name__)
        return original(self, obj)

    return reducer_override


def test_reducer_registrations_reach_pooled_picklers():
    class Point:
        def __init__(self, x):
            self.x = x

    graphpickle.dumps(Point(1))  # a pooled pickler has resolved Point to the default
    graphpickle.register_reducer(Point, lambda p: (int, (p.x,)))
    try:
        assert pickle.loads(graphpickle.dumps(Point(7))) == 7
    finally:
        graphpickle.unregister_reducer(Point)


class _Registered:
    pass


def test_a_registration_during_a_dump_reaches_the_next_dumps():
    # The pickler in the dump that registers holds the old table: it must not
    # go back to the pool (the next dumps would take it and miss the reducer).
    class Registrar:
        def __reduce__(self):
            graphpickle.register_reducer(_Registered, lambda x: (int, (7,)))
            return (int, (0,))

    graphpickle.dumps(_Registered())  # the pooled pickler resolves it to the default
    try:
        assert pickle.loads(graphpickle.dumps(Registrar())) == 0
        assert pickle.loads(graphpickle.dumps(_Registered())) == 7
        assert pickle.loads(reference_dumps(_Registered())) == 7
        graphpickle.unregister_reducer(_Registered)
        # ... and the other way round, within one dump.
        graphpickle.dumps(_Registered())

        class Unregistrar:
            def __reduce__(self):
                graphpickle.register_reducer(_Registered, lambda x: (int, (7,)))
                graphpickle.dumps(_Registered())  # a nested dumps: a pickler of the new table
                graphpickle.unregister_reducer(_Registered)
                return (int, (0,))

        graphpickle.dumps(Unregistrar())
        assert type(pickle.loads(graphpickle.dumps(_Registered()))) is _Registered
    finally:
        graphpickle.core.reducers._global_reducers.pop(_Registered, None)
        graphpickle.core.reducers._tables_changed()


def test_a_registration_while_another_thread_dumps():
    started, go_on = threading.Event(), threading.Event()

    class Slow:
        def __reduce__(self):
            started.set()
            assert go_on.wait(10)
            return (int, (0,))

    graphpickle.dumps(_Registered())
    results = []
    thread = threading.Thread(target=lambda: results.append(graphpickle.dumps(Slow())))
    thread.start()
    try:
        assert started.wait(10)
        graphpickle.register_reducer(_Registered, lambda x: (int, (7,)))
        go_on.set()
        thread.join(10)
        assert pickle.loads(results[0]) == 0
        for _ in range(3):
            assert pickle.loads(graphpickle.dumps(_Registered())) == 7
    finally:
        go_on.set()
        thread.join(10)
        graphpickle.unregister_reducer(_Registered)


def test_loads_behaves_as_pickle_loads():
    data = pickle.dumps({"a": 1}, protocol=5)
    assert graphpickle.loads(data) == {"a": 1}
    assert graphpickle.loads(bytearray(data)) == {"a": 1}
    assert graphpickle.loads(pickle.dumps("caf\xe9", 2), encoding="latin1") == "caf\xe9"
    assert graphpickle.loads(data, allowed=graphpickle.DATA_ONLY) == {"a": 1}
    with pytest.raises(graphpickle.ForbiddenGlobalError):
        graphpickle.loads(pickle.dumps(print), allowed=graphpickle.DATA_ONLY)
    with pytest.raises(EOFError) as info:
        graphpickle.loads(b"")
    assert "truncated or empty" in info.value.__notes__[0]
    with pytest.raises(TypeError) as type_info:
        graphpickle.loads(123)
    assert not getattr(type_info.value, "__notes__", None)
    with pytest.raises(TypeError, match="unexpected keyword"):
        graphpickle.loads(data, colour="red")
    with pytest.raises(TypeError):
        graphpickle.loads(data, data)


# --- functions and classes remembered as importable ----------------------------


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(source, module.__dict__)
    return module


@pytest.fixture
def local_module():
    name = "graphpickle_test_fast_module"
    module = _module(name, "def f():\n    return 1\nclass C:\n    pass\n")
    yield module
    sys.modules.pop(name, None)


def _by_reference(data: bytes) -> bool:
    return b"cloudpickle" not in data


def test_a_rebound_name_is_seen(local_module, receiver):
    f = local_module.f
    assert _by_reference(graphpickle.dumps(f))
    assert _by_reference(graphpickle.dumps(f))  # remembered
    local_module.f = lambda: 2  # the old function is not found under its name any more
    data = graphpickle.dumps(f)
    assert not _by_reference(data)
    assert receiver(data, "print(obj())").strip() == "1"


def test_a_module_gone_from_sys_modules_is_seen(local_module, receiver):
    cls = local_module.C
    assert _by_reference(graphpickle.dumps(cls))
    del sys.modules[local_module.__name__]
    data = graphpickle.dumps(cls)
    assert not _by_reference(data)
    assert receiver(data, "print(obj.__name__)").strip() == "C"


def test_a_changed_module_name_is_seen(local_module):
    f = local_module.f
    assert _by_reference(graphpickle.dumps(f))
    f.__module__ = "__main__"
    assert not _by_reference(graphpickle.dumps(f))


@pytest.mark.parametrize("register", [graphpickle.register_pickle_by_value, "cloudpickle"])
def test_registration_by_value_is_seen(local_module, register):
    f, cls = local_module.f, local_module.C
    assert _by_reference(graphpickle.dumps([f, cls]))
    if register == "cloudpickle":  # its registry is graphpickle's
        cloudpickle.register_pickle_by_value(local_module)
    else:
        register(local_module)
    try:
        assert not _by_reference(graphpickle.dumps(f))
        assert not _by_reference(graphpickle.dumps(cls))
    finally:
        graphpickle.unregister_pickle_by_value(local_module)
    assert _by_reference(graphpickle.dumps([f, cls]))


def test_a_reducer_for_all_functions_is_not_bypassed(local_module):
    f = local_module.f
    assert _by_reference(graphpickle.dumps(f))  # remembered
    out = io.BytesIO()
    by_name = {types.FunctionType: lambda fn: (str, (fn.__name__,))}
    graphpickle.Pickler(out, reducers=by_name).dump(f)
    assert pickle.loads(out.getvalue()) == "f"


def test_a_big_payload_leaves_no_big_buffer_behind():
    import gc
    import tracemalloc

    small = [np.arange(8.0), (1, 2)]

    def peak(call):
        call()
        gc.collect()
        tracemalloc.start()
        try:
            call()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    graphpickle.dumps(list(range(200_000)))  # grows the pooled pickler's output buffer
    # A new pickler's first buffer, as pickle.dumps's: not the ~1 MB the big one needed.
    assert peak(lambda: graphpickle.dumps(small)) < 2 * peak(
        lambda: pickle.dumps(small, protocol=5)
    )


class _Tagged:
    pass


def test_class_level_pickler_settings_set_after_a_dump_reach_pooled_picklers():
    # A pickler reads dispatch_table and persistent_id from its class when it
    # is made: a pooled one is made again once its class changes.
    graphpickle.dumps(_Tagged())  # pooled picklers now exist, made without either
    graphpickle.dumps(_Tagged())

    def fresh(obj):
        out = io.BytesIO()
        graphpickle.Pickler(out).dump(obj)
        return out.getvalue()

    try:
        graphpickle.Pickler.dispatch_table = {_Tagged: lambda obj: (str, ("by table",))}
        assert graphpickle.dumps(_Tagged()) == fresh(_Tagged())
        assert pickle.loads(graphpickle.dumps(_Tagged())) == "by table"
        graphpickle.Pickler.persistent_id = lambda self, obj: "id" if type(obj) is _Tagged else None
        assert graphpickle.dumps(_Tagged()) == fresh(_Tagged())
        assert b"id" in graphpickle.dumps(_Tagged())
    finally:
        for name in ("dispatch_table", "persistent_id"):
            if name in vars(graphpickle.Pickler):
                delattr(graphpickle.Pickler, name)
    assert graphpickle.dumps(_Tagged()) == fresh(_Tagged()) == pickle.dumps(_Tagged(), 5)
