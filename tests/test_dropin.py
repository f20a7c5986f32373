"""``import graphpickle as cloudpickle``: the names, signatures and semantics that
engines and users call behave as cloudpickle's (each test runs on both modules,
so a difference fails on one side)."""

from __future__ import annotations

import copyreg
import io
import pickle
import sys
import types
from typing import ClassVar

import cloudpickle
import pytest

import graphpickle

MODULES = pytest.mark.parametrize("module", [cloudpickle, graphpickle], ids=lambda m: m.__name__)


class Opaque:
    def __init__(self, value):
        self.value = value


def test_every_public_name_of_cloudpickle_exists():
    used = {*cloudpickle.__all__, "DEFAULT_PROTOCOL", "list_registry_pickle_by_value"}
    missing = {name for name in used if not hasattr(graphpickle, name)}
    assert not missing
    assert graphpickle.CloudPickler is graphpickle.Pickler
    assert graphpickle.DEFAULT_PROTOCOL == cloudpickle.DEFAULT_PROTOCOL == pickle.HIGHEST_PROTOCOL


@MODULES
def test_buffer_callback_by_position(module):
    buffers: list[pickle.PickleBuffer] = []
    value = pickle.PickleBuffer(bytearray(b"abc"))
    data = module.dumps(value, 5, buffers.append)
    out = io.BytesIO()
    module.dump(value, out, 5, buffers.append)
    module.Pickler(io.BytesIO(), 5, buffers.append).dump(value)
    assert len(buffers) == 3
    assert bytes(module.loads(data, buffers=buffers[:1])) == b"abc"
    assert bytes(module.load(io.BytesIO(out.getvalue()), buffers=buffers[1:2])) == b"abc"


@MODULES
def test_protocol_defaults_and_negative(module):
    assert module.dumps([1])[1] == module.DEFAULT_PROTOCOL
    assert module.dumps([1], -1)[1] == pickle.HIGHEST_PROTOCOL
    assert module.loads(module.dumps(lambda: 3, 2))() == 3


@MODULES
def test_subclass_extends_reducer_override(module):
    class Custom(module.Pickler):
        def reducer_override(self, obj):
            if type(obj) is Opaque:
                return (str, (f"opaque {obj.value}",))
            return super().reducer_override(obj)

    out = io.BytesIO()
    Custom(out).dump({"o": Opaque(1), "f": lambda x: x + 1})
    loaded = pickle.loads(out.getvalue())
    assert loaded["o"] == "opaque 1" and loaded["f"](1) == 2


# Two places where graphpickle keeps pickle's semantics and cloudpickle does not
# (docs/api.md lists them): each test pins cloudpickle's behaviour too, so that a
# change on either side is noticed.


def test_subclass_with_its_own_dispatch_table():
    def custom(module):
        class Custom(module.Pickler):
            dispatch_table: ClassVar = {Opaque: lambda obj: (str, (f"table {obj.value}",))}

        return Custom

    out = io.BytesIO()
    custom(graphpickle)(out).dump([Opaque(2), lambda: 5])
    loaded = pickle.loads(out.getvalue())
    assert loaded[0] == "table 2" and loaded[1]() == 5
    # cloudpickle's own reducers live in its class-level table, which this replaces.
    with pytest.raises(TypeError, match="cannot pickle code objects"):
        custom(cloudpickle)(io.BytesIO()).dump([Opaque(2), lambda: 5])


def test_pickle_style_dispatch_table_on_an_instance():
    # pickle's documented recipe: a per-pickler copy of copyreg's table.
    def dump(module):
        out = io.BytesIO()
        pickler = module.Pickler(out)
        pickler.dispatch_table = copyreg.dispatch_table.copy()
        pickler.dispatch_table[Opaque] = lambda obj: (str, (f"instance {obj.value}",))
        pickler.dump(Opaque(3))
        return pickle.loads(out.getvalue())

    assert dump(pickle) == dump(graphpickle) == "instance 3"
    assert type(dump(cloudpickle)) is Opaque  # cloudpickle ignores the assignment


@MODULES
def test_registry_of_modules_pickled_by_value(module, monkeypatch):
    local = types.ModuleType("gp_dropin_local")
    exec("def f(x):\n    return x * 3\n", local.__dict__)
    monkeypatch.setitem(sys.modules, "gp_dropin_local", local)
    module.register_pickle_by_value(local)
    try:
        assert "gp_dropin_local" in module.list_registry_pickle_by_value()
        data = module.dumps(local.f)
    finally:
        module.unregister_pickle_by_value(local)
    assert "gp_dropin_local" not in module.list_registry_pickle_by_value()
    monkeypatch.delitem(sys.modules, "gp_dropin_local")
    assert pickle.loads(data)(2) == 6  # by value: loads without the module
    for call in (module.register_pickle_by_value, module.unregister_pickle_by_value):
        with pytest.raises(ValueError):
            call("not a module")
    with pytest.raises(ValueError):
        module.unregister_pickle_by_value(local)  # not registered


@MODULES
def test_loads_and_load_are_pickles(module):
    data = b"\x80\x02U\x04caf\xe9q\x00."  # a Python 2 str
    assert module.loads(data, encoding="latin1") == "caf\xe9"
    assert module.load(io.BytesIO(data), encoding="bytes") == b"caf\xe9"
    with pytest.raises(EOFError):
        module.loads(b"")
    with pytest.raises(pickle.UnpicklingError):
        module.loads(b"\x80\x05garbage")


@MODULES
def test_errors_of_unpicklable_objects(module):
    import multiprocessing
    import threading

    with pytest.raises(TypeError, match=r"cannot pickle '_thread\.lock' object"):
        module.dumps({"a": [threading.Lock()]})
    with pytest.raises(RuntimeError, match="through inheritance"):
        module.dumps(multiprocessing.Lock())
    deep: list = []
    # From 3.14 the C pickler goes as deep as the C stack allows (20,000 pickles).
    for _ in range(300_000 if sys.version_info >= (3, 14) else 20_000):
        deep = [deep]
    with pytest.raises(pickle.PicklingError, match="deep recursion"):
        module.dumps(deep)
