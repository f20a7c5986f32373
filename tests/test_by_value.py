"""What goes by value, and cloudpickle's semantics where they are right
(properties 1, 2 and 5)."""

from __future__ import annotations

import abc
import collections
import dataclasses
import enum
import functools
import pickle
import sys
import types
import typing
import weakref

import pytest

import graphpickle
from graphpickle.core.policy import ByValueReason, class_reason, function_reason


def roundtrip(obj, protocol=5):
    return graphpickle.loads(graphpickle.dumps(obj, protocol=protocol))


def make_closure(n):
    def add(x):
        return x + n

    return add


def make_class():
    class Local:
        attr = 5

        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v + self.attr

    return Local


def test_reasons():
    assert function_reason(pickle.dumps) is None
    assert function_reason(functools.wraps) is None
    assert function_reason(lambda: 1) == ByValueReason.LAMBDA
    assert function_reason(make_closure(1)) == ByValueReason.CLOSURE

    def local():
        return 1

    assert function_reason(local) == ByValueReason.LOCAL
    assert class_reason(make_class()) == ByValueReason.LOCAL
    assert class_reason(collections.OrderedDict) is None
    dynamic = type("Dynamic", (), {"__module__": __name__})
    assert class_reason(dynamic) == ByValueReason.NOT_IMPORTABLE
    assert class_reason(types.FunctionType) == ByValueReason.NOT_IMPORTABLE
    assert class_reason(type(None)) is None  # the C pickler has a recipe for it


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_lambda_closure_local_class(protocol):
    f = roundtrip(lambda x, y=2: x * y, protocol)
    assert f(3) == 6
    assert roundtrip(make_closure(10), protocol)(1) == 11
    cls = make_class()
    obj = roundtrip(cls(1), protocol)
    assert obj.get() == 6
    assert type(obj).__name__ == "Local"


def test_recursive_and_mutually_recursive_functions():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    def is_even(n):
        return True if n == 0 else is_odd(n - 1)

    def is_odd(n):
        return False if n == 0 else is_even(n - 1)

    fact2, even2 = roundtrip([fact, is_even])
    assert fact2(6) == 720
    assert even2(10) is True and even2(7) is False


GLOBAL_COUNTER = 0


def test_functions_pickled_together_share_globals():
    def bump():
        global GLOBAL_COUNTER
        GLOBAL_COUNTER += 1
        return GLOBAL_COUNTER

    def read():
        return GLOBAL_COUNTER

    bump2, read2 = roundtrip([bump, read])
    assert bump2.__globals__ is read2.__globals__
    start = read2()
    bump2()
    assert read2() == start + 1


def test_dynamic_class_state_and_isinstance():
    cls = make_class()
    instance = cls(2)
    cls2, instance2 = roundtrip([cls, instance])
    assert isinstance(instance2, cls2)
    # Separate payloads: cloudpickle's class tracker keeps one class per process.
    cls3 = roundtrip(cls)
    instance3 = roundtrip(instance)
    assert type(instance3) is cls3


def test_dynamic_enum_dataclass_abc():
    def build():
        class Mode(enum.Enum):
            A = "a"
            B = "b"

        @dataclasses.dataclass(frozen=True)
        class Spec:
            name: str
            size: int = 3

        class Base(abc.ABC):
            @abc.abstractmethod
            def run(self): ...

            @property
            def twice(self):
                return self.run() * 2

            @classmethod
            def make(cls):
                return cls()

            @staticmethod
            def helper():
                return "h"

        class Impl(Base):
            def run(self):
                return 21

        return Mode, Spec, Impl

    Mode, Spec, Impl = roundtrip(build())
    assert Mode("b") is Mode.B
    assert Spec("x") == Spec("x", 3)
    assert dataclasses.fields(Spec)[1].default == 3
    impl = Impl.make()
    assert impl.twice == 42 and Impl.helper() == "h"
    with pytest.raises(TypeError):
        Impl.__mro__[1]()  # still abstract


def test_types_plain_pickle_cannot_handle():
    def outer():
        x = 5

        def inner():
            return x

        return inner

    func = outer()
    cell = func.__closure__[0]
    values = {
        "code": func.__code__,
        "cell": cell,
        "module": sys,
        "mappingproxy": types.MappingProxyType({"a": 1}),
        "keys": {"a": 1, "b": 2}.keys(),
        "values": {"a": 1}.values(),
        "items": {"a": 1}.items(),
        "odict_keys": collections.OrderedDict(a=1).keys(),
        "property": property(lambda self: 1),
        "classmethod": classmethod(len),
        "staticmethod": staticmethod(len),
        "getset": types.FunctionType.__dict__["__globals__"],
        "functiontype": types.FunctionType,
        "weakset": weakref.WeakSet(),
    }
    for name, value in values.items():
        with pytest.raises(Exception):  # noqa: B017 - any failure proves plain pickle cannot
            pickle.dumps(value, protocol=5)
        loaded = roundtrip(value)
        assert type(loaded) is type(value) or name == "functiontype", name
    loaded = roundtrip(values)
    assert loaded["cell"].cell_contents == 5
    assert loaded["module"] is sys
    assert list(loaded["keys"]) == ["a", "b"]
    assert loaded["functiontype"] is types.FunctionType
    rebuilt = types.FunctionType(loaded["code"], {}, None, None, (types.CellType(7),))
    assert rebuilt() == 7
    assert loaded["getset"] is types.FunctionType.__dict__["__globals__"]


def test_bound_methods():
    cls = make_class()
    obj = cls(1)
    assert roundtrip(obj.get)() == 6

    class Private:
        def __secret(self):
            return "s"

        def exposed(self):
            return self.__secret

    method = Private().exposed()
    with pytest.raises(Exception):  # noqa: B017
        pickle.dumps(method)  # getattr(obj, "__secret") cannot find it
    assert roundtrip(method)() == "s"

    bound_by_hand = types.MethodType(lambda self: self.v * 3, obj)
    assert roundtrip(bound_by_hand)() == 3


def test_a_method_bound_to_a_class_still_being_built():
    # Ray's actor classes: the methods' closures reach the actor's metadata, which
    # holds the class's bound methods, so a bound classmethod is pickled while its
    # class is: getattr(cls, "f") would run on load before cls has an "f".
    holder = {}

    class Built:
        @classmethod
        def f(cls):
            return holder["f"]

        def g(self):
            return holder["g"]

    holder["f"] = Built.f
    holder["g"] = Built().g
    loaded = roundtrip(Built)
    assert loaded.f().__self__ is loaded and loaded.f().__func__ is loaded.f.__func__
    assert type(loaded().g().__self__) is loaded
    # Bound to an importable class (or its instance), the reduction stays pickle's.
    assert graphpickle.dumps(dict.fromkeys) == pickle.dumps(dict.fromkeys, protocol=5)


T_IMPORTABLE = typing.TypeVar("T_IMPORTABLE")


def test_typevars():
    assert graphpickle.dumps(T_IMPORTABLE) == pickle.dumps(T_IMPORTABLE, protocol=5)
    local = typing.TypeVar("local", bound=int)
    loaded = roundtrip(local)
    assert loaded.__name__ == "local" and loaded.__bound__ is int


def test_modules_by_reference_and_by_value():
    import json

    assert roundtrip(json) is json
    dynamic = types.ModuleType("gp_dynamic_module")
    exec("def f():\n    return 'dyn'\nVALUE = 3", dynamic.__dict__)
    loaded = roundtrip(dynamic)
    assert loaded is not dynamic
    assert loaded.f() == "dyn" and loaded.VALUE == 3


def test_one_pass_and_precision_in_a_script(sender):
    """Properties 1 and 2: a 100,000-task graph with one __main__ function pickles
    in one traversal, the function by value exactly once, and everything else as
    the plain C pickler writes it."""
    payload = sender(
        """
        import pickle, pickletools, sys, io, types
        import graphpickle
        from graphpickle import _cloudpickle_internals as cpi

        def inc(x):
            return x + 1

        graph = {("t", i): (inc, ("t", i - 1), i) for i in range(100_000)}

        # Count how often each object reaches the hook: one pass means the
        # graph's task tuples are never traversed twice (they do not reach the
        # hook at all), and the function reaches it once.
        seen = []
        class Counting(graphpickle.Pickler):
            def reducer_override(self, obj):
                seen.append(obj)
                return super().reducer_override(obj)
        out = io.BytesIO()
        Counting(out, 5).dump(graph)
        data = out.getvalue()
        assert data == graphpickle.dumps(graph)
        assert seen.count(inc) == 1, seen.count(inc)

        # Reference: the plain C pickler, told to reduce only `inc` (and the
        # code object and such that make it up) by value.
        class OnlyInc(pickle.Pickler):
            globals_ref = {}
            def reducer_override(self, obj):
                if obj is inc:
                    return cpi.reduce_function_by_value(self, obj)
                if type(obj) in cpi.TYPE_REDUCERS:
                    return cpi.TYPE_REDUCERS[type(obj)](obj)
                if type(obj) is types.CodeType:
                    return cpi.reduce_code(obj)
                if obj in cpi.BUILTIN_TYPES:  # types.CodeType, for the code object
                    return cpi.reduce_class_by_value(obj)
                return NotImplemented
        ref = io.BytesIO()
        OnlyInc(ref, 5).dump(graph)
        assert data == ref.getvalue()

        made = sum(1 for op, arg, _ in pickletools.genops(data)
                   if op.name == "SHORT_BINUNICODE" and arg == "_make_function")
        assert made == 1, made
        with open(sys.argv[1], "wb") as f:
            f.write(data)
        """
    )
    graph = pickle.loads(payload)
    assert len(graph) == 100_000
    func, dep, i = graph[("t", 99_999)]
    assert func(i) == 100_000 and dep == ("t", 99_998)


def test_not_found_by_name_goes_by_value(monkeypatch):
    module = types.ModuleType("gp_decorated_module")
    exec(
        "def register(func):\n"
        "    registry.append(func)\n"
        "    return lambda *a: ('wrapped', func(*a))\n"
        "registry = []\n"
        "@register\n"
        "def work(x):\n"
        "    return x * 2\n"
        "class Kept:\n"
        "    pass\n",
        module.__dict__,
    )
    monkeypatch.setitem(sys.modules, "gp_decorated_module", module)
    original = module.registry[0]  # the module attribute `work` is the wrapper
    assert function_reason(original) == ByValueReason.NOT_IMPORTABLE
    assert roundtrip(original)(4) == 8
    assert class_reason(module.Kept) is None  # found by name: by reference
    assert roundtrip(module.Kept) is module.Kept
    monkeypatch.delitem(sys.modules, "gp_decorated_module")
    assert class_reason(module.Kept) == ByValueReason.NOT_IMPORTABLE
    assert b"_make_skeleton_class" in graphpickle.dumps(module.Kept)


def test_dynamic_class_identity_across_payloads_in_another_process(sender, receiver):
    # Pickled in separate payloads, a class and its instances load as one class in
    # the receiver (cloudpickle's class tracker); two distinct classes that share
    # a name stay distinct.
    payload = sender(
        """
        import pickle, sys, graphpickle

        def make(tag):
            class Thing:
                kind = tag
            return Thing

        A, B = make("a"), make("b")
        payloads = [graphpickle.dumps(A), graphpickle.dumps(A()), graphpickle.dumps([A(), B()])]
        with open(sys.argv[1], "wb") as f:
            f.write(pickle.dumps(payloads))
        """
    )
    out = receiver(
        payload,
        """
        cls = _pickle.loads(obj[0])
        inst = _pickle.loads(obj[1])
        a, b = _pickle.loads(obj[2])
        print(type(inst) is cls, isinstance(a, cls), type(b) is cls, b.kind)
        """,
    )
    assert out.split() == ["True", "True", "False", "b"]


def test_a_dynamic_module_whose_builtins_hold_an_unpicklable_object(sender, receiver):
    # Some libraries (scipy among them) put such objects into builtins, which every
    # module's __dict__ holds as __builtins__: the module still travels, as with
    # cloudpickle, and the receiver gives it its own builtins.
    payload = sender(
        """
        import builtins, sys, types
        import graphpickle

        class Unpicklable:
            def __reduce__(self):
                raise ValueError("unpicklable")

        builtins.gp_unpicklable = Unpicklable()
        module = types.ModuleType("gp_dynamic")
        exec("f = lambda x: abs(x)\\ndef g(items):\\n    return len(items)", module.__dict__)
        with open(sys.argv[1], "wb") as out:
            out.write(graphpickle.dumps({"module": module, "f": module.f, "g": module.g}))
        """
    )
    out = receiver(
        payload,
        """
        module = obj["module"]
        print(module.f(-3), obj["f"](-4), obj["g"]([1, 2]), "__builtins__" in vars(module))
        """,
    )
    assert out.split() == ["3", "4", "2", "True"]
