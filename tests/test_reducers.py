"""Custom reducers: global registration and per-pickler tables that never leak."""

from __future__ import annotations

import io
import pickle
import threading

import pytest

import graphpickle
from graphpickle._switches import CACHING


class Handle:
    """Stands for an object that refuses to pickle (an open connection)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._lock = threading.Lock()


class SubHandle(Handle):
    pass


def reconnect(address: str) -> Handle:
    return Handle(address)


def reduce_handle(handle: Handle):
    return (reconnect, (handle.address,))


@pytest.fixture
def registered():
    graphpickle.register_reducer(Handle, reduce_handle)
    yield
    graphpickle.unregister_reducer(Handle)


def test_unregistered_handle_fails_with_path():
    with pytest.raises(TypeError, match=r"_thread\.lock") as info:
        graphpickle.dumps({"h": Handle("db:1")})
    assert info.value.graphpickle_path == "root['h']._lock"


def test_global_reducer_applies_anywhere_in_the_graph(registered):
    graph = {"a": [(1, Handle("db:1"))], "b": {"deep": [SubHandle("db:2")]}}
    loaded = graphpickle.loads(graphpickle.dumps(graph))
    assert loaded["a"][0][1].address == "db:1"
    assert loaded["b"]["deep"][0].address == "db:2"  # subclasses use the base's reducer


def test_unregister(registered):
    graphpickle.unregister_reducer(Handle)
    with pytest.raises(TypeError, match=r"_thread\.lock"):
        graphpickle.dumps(Handle("x"))
    graphpickle.register_reducer(Handle, reduce_handle)  # for the fixture's teardown
    with pytest.raises(KeyError):
        graphpickle.unregister_reducer(SubHandle)


def test_per_pickler_reducers_do_not_leak():
    out = io.BytesIO()
    graphpickle.Pickler(out, reducers={Handle: reduce_handle}).dump(Handle("db:3"))
    assert graphpickle.loads(out.getvalue()).address == "db:3"
    with pytest.raises(TypeError, match=r"_thread\.lock"):
        graphpickle.dumps(Handle("db:3"))  # the module-level dumps has no such reducer
    with pytest.raises(TypeError, match=r"_thread\.lock"):
        graphpickle.Pickler(io.BytesIO()).dump(Handle("db:3"))


def test_per_pickler_reducer_overrides_global(registered):
    out = io.BytesIO()
    graphpickle.Pickler(out, reducers={Handle: lambda h: (str, (h.address,))}).dump(Handle("z"))
    assert graphpickle.loads(out.getvalue()) == "z"


def test_reducer_may_decline_and_may_be_a_lambda(registered):
    graphpickle.register_reducer(
        complex, lambda c: NotImplemented if c.imag else (float, (c.real,))
    )
    try:
        assert graphpickle.loads(graphpickle.dumps([1 + 0j, 1 + 2j])) == [1.0, 1 + 2j]
    finally:
        graphpickle.unregister_reducer(complex)


def test_reducer_with_lambda_reconstructor_goes_by_value(sender, receiver):
    payload = sender(
        """
        import sys, threading, graphpickle

        class Conn:
            def __init__(self, url):
                self.url = url
                self.lock = threading.Lock()

        graphpickle.register_reducer(Conn, lambda c: (lambda url: f"reopened {url}", (c.url,)))
        with open(sys.argv[1], "wb") as f:
            f.write(graphpickle.dumps({"conn": Conn("db://x")}))
        """
    )
    assert receiver(payload, "print(obj['conn'])").strip() == "reopened db://x"


def test_bad_registrations_are_rejected():
    with pytest.raises(TypeError, match="needs a class"):
        graphpickle.register_reducer(Handle("x"), reduce_handle)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not callable"):
        graphpickle.register_reducer(Handle, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="map classes to callables"):
        graphpickle.Pickler(io.BytesIO(), reducers={"Handle": reduce_handle})  # type: ignore[dict-item]


def test_subclassing_pickler_like_pickle():
    class WithPersistentId(graphpickle.Pickler):
        def persistent_id(self, obj):
            return "HANDLE" if isinstance(obj, Handle) else None

    class Loader(pickle.Unpickler):
        def persistent_load(self, pid):
            return f"resolved {pid}"

    out = io.BytesIO()
    WithPersistentId(out).dump([Handle("x"), lambda: 1])
    handle, func = Loader(io.BytesIO(out.getvalue())).load()
    assert handle == "resolved HANDLE" and func() == 1


def test_dispatch_table_on_a_subclass_is_honoured():
    import copyreg

    class WithTable(graphpickle.Pickler):
        dispatch_table = copyreg.dispatch_table.copy()
        dispatch_table[Handle] = reduce_handle

    out = io.BytesIO()
    WithTable(out).dump(Handle("db:9"))
    assert graphpickle.loads(out.getvalue()).address == "db:9"


def test_reducer_lookup_is_asked_once_per_type_and_never_leaks():
    asked = []

    def lookup(cls):
        asked.append(cls)
        return reduce_handle if issubclass(cls, Handle) else None

    out = io.BytesIO()
    graphpickle.Pickler(out, reducer_lookup=lookup).dump(
        [Handle("a"), SubHandle("b"), Handle("c"), 1j]
    )
    loaded = graphpickle.loads(out.getvalue())
    assert [h.address for h in loaded[:3]] == ["a", "b", "c"]
    assert asked.count(Handle) == 1 and asked.count(SubHandle) == 1 and complex in asked
    with pytest.raises(TypeError, match=r"_thread\.lock"):
        graphpickle.dumps(Handle("d"))  # other picklers do not see it
    # explicit reducers win over the lookup
    out = io.BytesIO()
    graphpickle.Pickler(
        out, reducers={Handle: lambda h: (str, (h.address,))}, reducer_lookup=lookup
    ).dump(Handle("e"))
    assert graphpickle.loads(out.getvalue()) == "e"


@pytest.mark.skipif(not CACHING, reason="each pickler resolves types with a table of its own")
def test_a_lookups_answer_is_asked_again_only_when_a_name_it_read_changes():
    # A lookup may read the MRO and each class's __module__/__qualname__ (the
    # dask integration's does): checked on every use, and nothing else asks again.
    import numpy as np

    class Plain:
        pass

    class Meta(type):
        pass

    class WithMeta(metaclass=Meta):  # a metaclass other than type: names read by getattr
        pass

    asked = []

    def lookup(cls):
        asked.append(cls)
        return None

    dtype = np.dtype("int64")  # a static type of numpy's metaclass: names made at each read
    objects = [Plain(), WithMeta(), dtype]
    for _ in range(3):
        graphpickle.Pickler(io.BytesIO(), reducer_lookup=lookup).dump(objects)
    assert asked.count(Plain) == asked.count(WithMeta) == asked.count(type(dtype)) == 1
    for cls, name in [(Plain, "__module__"), (WithMeta, "__qualname__")]:
        setattr(cls, name, getattr(cls, name) + "_moved")
        graphpickle.Pickler(io.BytesIO(), reducer_lookup=lookup).dump(objects)
        assert asked.count(cls) == 2, name


def test_a_reducer_registered_after_the_type_was_seen_applies_to_the_next_dumps():
    class Late:
        def __init__(self):
            self.lock = threading.Lock()

    with pytest.raises(TypeError, match=r"_thread\.lock"):
        graphpickle.dumps([Late()])  # the shared table now remembers Late
    graphpickle.register_reducer(Late, lambda obj: (Late, ()))
    try:
        assert type(graphpickle.loads(graphpickle.dumps([Late()]))[0]) is Late
    finally:
        graphpickle.unregister_reducer(Late)
    with pytest.raises(TypeError, match=r"_thread\.lock"):
        graphpickle.dumps([Late()])
