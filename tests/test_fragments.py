"""A remembered by-value class embedded as a fragment (graphpickle.core.fragments),
in the dask integration's payloads: the payload always carries the class's
current state, shares the receiver's globals with the rest of the payload, and
shares no object it should not. ``graphpickle.dumps`` never writes one."""

from __future__ import annotations

import io
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphpickle
from graphpickle.core import fragments as _fragments
from graphpickle.core import reducers as _reducers
from graphpickle.core.native import speedups
from graphpickle.integrations import dask_distributed

CELL = """
from dataclasses import dataclass, field
CONFIG = {"scale": 2}
counter = 0
def helper(x):
    return x + 1
def bump():
    global counter
    counter += 1
    return counter
def read():
    return counter
@dataclass
class Point:
    x: int
    y: float = 0.5
    tags: list = field(default_factory=list)
    def scaled(self):
        return self.x * CONFIG["scale"]
    def helped(self):
        return helper(self.x)
    def count(self):
        return bump()
"""


@pytest.fixture
def cell():
    namespace: dict = {"__name__": "__main__"}
    exec(CELL, namespace)
    yield namespace
    _reducers.forget_by_value()


def dumps(obj, **kwargs) -> bytes:
    """As a scheduler sends a message."""
    return dask_distributed.dumps(obj, protocol=5, **kwargs)


def fragment_of(cls: type) -> _fragments.Fragment | None:
    entry = _reducers._recall(_reducers._classes, cls)
    if entry is None:
        return None
    found: _fragments.Fragment | None = entry[2][1].get(
        (5, dask_distributed._dask_serialize_lookup)
    )
    return found


def send(obj, times: int = 3) -> bytes:
    data = b""
    for _ in range(times):
        data = dumps(obj)
    return data


def test_the_third_payload_embeds_the_fragment_and_loads_without_graphpickle(
    cell, receiver, implementation
):
    Point = cell["Point"]
    data = send(Point(3, 1.5))
    fragment = fragment_of(Point)
    assert fragment is not None and not fragment.conflicted
    assert fragment.data in data
    out = receiver(data, "print(obj, obj.scaled(), obj.helped(), obj == type(obj)(3, 1.5))")
    assert out.split() == ["Point(x=3,", "y=1.5,", "tags=[])", "6", "4", "True"]


def test_every_change_between_payloads_is_in_the_next_one(cell, receiver, implementation):
    Point = cell["Point"]
    send(Point(1))
    assert fragment_of(Point) is not None
    check = (
        "import dataclasses; P = type(obj)\n"
        "print(P.__dataclass_fields__['y'].default, obj.scaled(), obj.helped(), P.extra)"
    )
    Point.extra = "set on the class"  # a class attribute: the class snapshot
    Point.__dataclass_fields__["y"].default = 7.0  # a field, changed in place
    cell["CONFIG"]["scale"] = 10  # a global dict, changed in place
    cell["helper"] = lambda x: x - 1  # a global, rebound
    out = receiver(dumps(Point(1)), check)
    assert out.split() == ["7.0", "10", "0", "set", "on", "the", "class"]


def test_an_object_the_payload_also_holds_stays_one_object(cell, receiver, implementation):
    Point = cell["Point"]
    send(Point(1))
    message = (Point(2), cell["CONFIG"], cell["helper"])
    data = dumps(message)
    assert fragment_of(Point).conflicted
    out = receiver(
        data,
        "point, config, helper = obj; g = type(point).scaled.__globals__\n"
        "print(g['CONFIG'] is config, g['helper'] is helper, point.scaled())",
    )
    assert out.split() == ["True", "True", "4"]
    assert dumps(message) == data  # marked: written whole from now on


def test_the_fragment_shares_its_globals_dict_with_the_payloads_functions(
    cell, receiver, implementation
):
    Point = cell["Point"]
    send(Point(1))
    data = dumps((Point(1), cell["read"]))
    assert not fragment_of(Point).conflicted
    out = receiver(data, "point, read = obj; point.count(); print(read())")
    assert out.split() == ["1"]  # one `counter` for both


def test_a_payload_written_again_hands_each_buffer_once(cell, receiver, implementation):
    Point = cell["Point"]
    send(Point(1))
    payload = bytearray(b"out of band")
    buffers: list = []
    message = (pickle.PickleBuffer(payload), Point(5), cell["CONFIG"], pickle.PickleBuffer(payload))
    data = dumps(message, buffer_callback=buffers.append)
    made = _reducers._recall(_reducers._classes, Point)[2][1].values()
    assert any(f is not None and f.conflicted for f in made)  # the payload was written again
    assert len(buffers) == 2
    loaded = pickle.loads(data, buffers=buffers)
    assert bytes(loaded[0]) == bytes(loaded[3]) == b"out of band"
    assert loaded[1].scaled() == 10


def test_a_class_whose_state_changes_every_time_goes_whole(cell, implementation):
    Point = cell["Point"]
    for i in range(2 + _fragments._MAX_REBUILDS + 2):
        cell["CONFIG"][f"key{i}"] = i
        dumps(Point(1))
    entry = _reducers._recall(_reducers._classes, Point)
    assert entry[2][1] == {(5, dask_distributed._dask_serialize_lookup): None}


def test_no_fragment_where_a_payload_cannot_be_written_again(cell, implementation):
    Point = cell["Point"]
    for _ in range(3):
        graphpickle.dump(Point(1), io.BytesIO())  # a file: what it wrote stays written
        dask_distributed.dumps(Point(1), protocol=4)  # NEXT_BUFFER is protocol 5's
        graphpickle.dumps(Point(1), deterministic=True)
    entry = _reducers._recall(_reducers._classes, Point)
    assert entry is not None and entry[2][1] == {}


def test_graphpickle_dumps_writes_what_cloudpickle_writes_whatever_was_sent_before(
    cell, implementation
):
    # cloudpickle's own tests pickle a class loaded in another process and compare
    # the bytes with the original's: a payload must not depend on earlier ones.
    Point = cell["Point"]
    first = graphpickle.dumps(Point)
    send(Point)  # fragments for the dask integration
    assert graphpickle.dumps(Point) == graphpickle.dumps(Point) == first
    assert b"_pickle" not in first


def test_state_of_in_c_is_the_python_reference(cell):
    if speedups is None:
        pytest.skip("graphpickle._speedups is not built")
    Point = cell["Point"]
    send(Point(1))
    watched = fragment_of(Point).watched
    kinds = {kind for kind, _, _ in watched}
    assert kinds == set(range(6)) - {_fragments.WATCH_COLLECTION} or len(kinds) >= 5
    missing = object()
    in_c = speedups.state_of(watched, missing)
    in_python = _fragments.state_of_in_python(watched, missing)
    assert speedups.same_objects(in_c, in_python)
    cell["CONFIG"]["new"] = 1
    assert not speedups.same_objects(speedups.state_of(watched, missing), in_c)


@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
        ),
        max_leaves=30,
    )
)
@settings(max_examples=100, deadline=None)
def test_the_memo_read_in_place_is_memo_copy(value):
    # _speedups reads the C pickler's memo table in place (a CPython layout):
    # this fails loudly if that layout ever changes.
    if speedups is None:
        pytest.skip("graphpickle._speedups is not built")
    assert _fragments.memo_read_in_place
    pickler = graphpickle.Pickler(io.BytesIO(), 5)
    pickler.dump([value, value])
    memoized = set(pickler.memo.copy())
    table = _fragments.pointer_table
    assert all(speedups.memo_holds(pickler, table([key])) for key in memoized)
    others = table([id(memoized), id(pickler)])
    assert speedups.memo_holds(pickler, others) is False
    assert speedups.memo_holds(pickler, table([*memoized, id(pickler)])) is True
    assert speedups.memo_holds(pickler, table([])) is False
    assert speedups.memo_holds(object(), others) is None


# --- inspect reads a fragment as a pickle of its own ---------------------------


def test_inspect_reads_the_fragment_and_judges_the_payload_by_it(cell):
    Point = cell["Point"]
    data = send(Point(1))
    report = graphpickle.inspect(data)
    assert report.verdict == "imports"
    assert report.dangerous == ()
    assert ("class", "Point") in {(o.kind, o.name) for o in report.by_value}
    assert "__main__.Point.scaled" in {o.name for o in report.by_value}
    assert "cloudpickle.cloudpickle._make_skeleton_class" in report.globals
    assert any("as a fragment" in f.what for f in report.findings)


class _Reduces:
    """An object whose pickle is the reduction it is given."""

    def __init__(self, reduction):
        self.reduction = reduction

    def __reduce__(self):
        return self.reduction


def _loader():
    import _pickle
    import functools

    return functools.partial(_pickle.loads, buffers=())


def test_inspect_finds_what_a_nested_pickle_in_the_fragment_shape_would_do():
    import os

    evil = pickle.dumps(_Reduces((os.system, ("echo owned",))))
    report = graphpickle.inspect(pickle.dumps(_Reduces((_loader(), (evil,)))))
    assert report.verdict == "code"
    assert {d.name for d in report.dangerous} >= {f"{os.name}.system"}


@pytest.mark.parametrize(
    "payload",
    [
        # _pickle.loads called directly, not as a fragment's loader
        lambda: (__import__("_pickle").loads, (pickle.dumps(1),)),
        # the loader called on something other than bytes
        lambda: (_loader(), ("text",)),
        # the loader handed on, to be called by something the scan does not follow
        lambda: (map, (_loader(), [pickle.dumps(1)])),
    ],
    ids=["loads called", "loader on text", "loader handed on"],
)
def test_inspect_keeps_the_nested_loads_dangerous_in_any_other_shape(payload):
    report = graphpickle.inspect(pickle.dumps(_Reduces(payload())))
    assert report.verdict == "code"
    assert {"_pickle.loads", "functools.partial"} & {d.name for d in report.dangerous}


def test_inspect_stops_at_fragments_nested_too_deep():
    data = pickle.dumps(1)
    for _ in range(6):
        data = pickle.dumps(_Reduces((_loader(), (data,))))
    report = graphpickle.inspect(data)
    assert report.verdict == "code"
    assert any("nested more than" in f.what for f in report.findings)


# --- what a review found: each of these loaded stale or split objects once -------

TWO_CLASSES = """
CONFIG = {"k": 1}
class A:
    cfg = CONFIG
class B:
    cfg = CONFIG
"""


def test_two_fragments_never_hold_the_same_object(receiver, implementation):
    namespace: dict = {"__name__": "__main__"}
    exec(TWO_CLASSES, namespace)
    message = [namespace["A"](), namespace["B"]()]
    data = send(message)
    out = receiver(data, "a, b = obj; print(type(a).cfg is type(b).cfg)")
    assert out.split() == ["True"]


@pytest.mark.parametrize("how", ["register_reducer", "copyreg", "__reduce__"])
def test_a_new_reduction_for_what_the_class_holds_is_seen(cell, receiver, implementation, how):
    import argparse
    import copyreg

    Point = cell["Point"]
    Point.options = argparse.Namespace(a=1)
    send(Point(1))
    assert fragment_of(Point) is not None

    def reduce(obj):
        return (dict, ({"reduced": True},))

    try:
        if how == "register_reducer":
            graphpickle.register_reducer(argparse.Namespace, reduce)
        elif how == "copyreg":
            copyreg.pickle(argparse.Namespace, reduce)
        else:
            argparse.Namespace.__reduce__ = reduce  # type: ignore[method-assign]
        out = receiver(dumps(Point(1)), "print(type(obj).options)")
    finally:
        if how == "register_reducer":
            graphpickle.unregister_reducer(argparse.Namespace)
        elif how == "copyreg":
            del copyreg.dispatch_table[argparse.Namespace]
        else:
            del argparse.Namespace.__reduce__
    assert out.strip() == "{'reduced': True}"


def test_an_instance_given_another_class_is_seen(cell, receiver, implementation):
    import argparse
    import string

    Point = cell["Point"]
    Point.options = argparse.Namespace(a=1)
    send(Point(1))
    Point.options.__class__ = string.Formatter
    out = receiver(dumps(Point(1)), "print(type(type(obj).options).__name__)")
    assert out.strip() == "Formatter"


def test_an_immutable_the_payload_also_holds_stays_one_object(cell, receiver, implementation):
    Point = cell["Point"]
    Point.pair = ("a", 1.5)
    send(Point(1))
    data = dumps((Point(1), Point.pair, Point.scaled.__code__))
    out = receiver(
        data, "p, pair, code = obj; print(type(p).pair is pair, type(p).scaled.__code__ is code)"
    )
    assert out.split() == ["True", "True"]


def test_a_change_while_the_fragment_is_built_is_in_the_next_payload(
    cell, receiver, monkeypatch, implementation
):
    Point = cell["Point"]
    Point.log = []
    dumps(Point(1))
    describe = _fragments._describe

    def another_thread_meanwhile(*args):
        Point.log.append("appended meanwhile")
        return describe(*args)

    monkeypatch.setattr(_fragments, "_describe", another_thread_meanwhile)
    dumps(Point(1))  # builds the fragment
    monkeypatch.setattr(_fragments, "_describe", describe)
    out = receiver(dumps(Point(1)), "print(type(obj).log)")
    assert out.strip() == "['appended meanwhile']"


def test_a_long_list_keeps_its_fragment(cell, implementation):
    Point = cell["Point"]
    Point.table = list(range(1000))  # lengths above 256 are new int objects each time
    send(Point(1), times=8)
    fragment = fragment_of(Point)
    assert fragment is not None and fragment.rebuilds == 0 and fragment.current()


def test_a_base_rebinding_what_the_class_shares_with_it_is_seen(cell, tmp_path, monkeypatch):
    # cloudpickle leaves out of a class's dict an entry that is the very object
    # its base holds: when the base rebinds it, the class's payload must carry it.
    import sys
    import types

    base_module = types.ModuleType("gp_fragment_base")
    exec("class Base:\n    shared = ('from', 'the base')\n", base_module.__dict__)
    monkeypatch.setitem(sys.modules, "gp_fragment_base", base_module)
    namespace: dict = {"__name__": "__main__", "Base": base_module.Base}
    exec("class Child(Base):\n    shared = Base.shared\n", namespace)
    Child = namespace["Child"]
    data = send(Child)
    assert b"from" not in data  # left out: the base has it
    base_module.Base.shared = ("rebound",)
    assert b"from" in dumps(Child)
