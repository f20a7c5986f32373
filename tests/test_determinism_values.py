"""Deterministic bytes depend on values, never on identity (determinism/values.py).

Equal graphs whose equal strings, bytes, tuples and frozensets are shared
differently (interned or not, one object or copies, loaded back or not) give the
same deterministic bytes, in one process and across processes; mutable objects
keep the sharing of the graph. The C walk and its Python reference give the same
bytes on any payload.
"""

from __future__ import annotations

import pickle
import pickletools
import random
import textwrap
from typing import Any

import cloudpickle
import pytest
from conftest import run_python
from hypothesis import given, settings
from hypothesis import strategies as st

import graphpickle
from graphpickle.determinism import values

NATIVE = values._values is not None

# -- graphs as specs, built with one sharing or another -------------------------------

# A small alphabet, so that equal values meet often.
leaves = st.one_of(
    st.sampled_from(["a", "bc", "def", "x" * 40, "é", ""]),
    st.sampled_from([b"", b"ab", b"xyz" * 30]),
    st.integers(-300, 300) | st.sampled_from([2**70, -(2**40)]),
    st.sampled_from([0.5, -0.0, 1e300]),
    st.sampled_from([None, True, False]),
)
hashables = st.recursive(
    leaves,
    lambda inner: (
        st.tuples(st.just("tuple"), st.lists(inner, max_size=3))
        | st.tuples(st.just("frozenset"), st.lists(inner, max_size=3))
    ),
    max_leaves=6,
)
specs = st.recursive(
    hashables,
    lambda inner: (
        st.tuples(st.just("tuple"), st.lists(inner, max_size=4))
        | st.tuples(st.just("list"), st.lists(inner, max_size=4))
        | st.tuples(st.just("dict"), st.lists(st.tuples(hashables, inner), max_size=3))
    ),
    max_leaves=25,
)


def build(spec: Any, share: Any) -> Any:
    """The object a spec describes. ``share(value)`` picks, for each immutable
    value built, which equal object to use: the one given, or one met before."""
    if (
        isinstance(spec, tuple)
        and len(spec) == 2
        and spec[0] in ("tuple", "frozenset", "list", "dict")
    ):
        kind, items = spec
        if kind == "dict":
            return {build(key, share): build(value, share) for key, value in items}
        built = [build(item, share) for item in items]
        if kind == "list":
            return built
        return share(tuple(built) if kind == "tuple" else frozenset(built))
    if type(spec) is str:
        return share("".join(list(spec)) + "")  # a new object (but for 0 and 1 character)
    if type(spec) is bytes:
        return share(bytes(bytearray(spec)))
    return spec


def fresh(value: Any) -> Any:
    return value


def shared() -> Any:
    seen: dict[Any, Any] = {}

    def share(value: Any) -> Any:
        if not _hashable(value):  # (holds a list: no equal one is met again)
            return value
        return seen.setdefault(_same_value_key(value), value)

    return share


def randomly_shared(rng: random.Random) -> Any:
    seen: dict[Any, list[Any]] = {}

    def share(value: Any) -> Any:
        if not _hashable(value):
            return value
        copies = seen.setdefault(_same_value_key(value), [])
        if copies and rng.random() < 0.5:
            return rng.choice(copies)
        copies.append(value)
        return value

    return share


def _hashable(value: Any) -> bool:
    """Whether ``value`` may be shared: hashable, and no frozenset of two or more
    members in it (their number of copies shows in a payload that has sets to
    sort: docs/determinism.md's limits)."""
    try:
        hash(value)
    except TypeError:
        return False
    if type(value) is frozenset:
        return len(value) < 2 and all(_hashable(member) for member in value)
    return type(value) is not tuple or all(_hashable(item) for item in value)


def _same_value_key(value: Any) -> bytes:
    """Equal only for values that are the same value: ``0 == -0.0`` but they
    are not (``==`` alone would share one for the other)."""
    return pickle.dumps(value, 4)


def deterministic(obj: Any) -> bytes:
    return graphpickle.dumps(obj, deterministic=True)


# -- the property ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(spec=specs, seed=st.integers(0, 2**32))
def test_equal_graphs_shared_differently_give_equal_bytes(spec, seed):
    graphs = [
        build(spec, fresh),
        build(spec, shared()),
        build(spec, randomly_shared(random.Random(seed))),
    ]
    graphs.append(pickle.loads(pickle.dumps(graphs[2])))  # loaded back
    payloads = {deterministic(graph) for graph in graphs}
    assert len(payloads) == 1
    [payload] = payloads
    assert pickle.loads(payload) == graphs[0]


@settings(max_examples=300, deadline=None)
@given(spec=specs, seed=st.integers(0, 2**32))
def test_the_c_walk_writes_what_the_python_reference_writes(spec, seed):
    graph = build(spec, randomly_shared(random.Random(seed)))
    for protocol in (4, 5):
        data = pickle.dumps(graph, protocol)
        canonical = values._canonical_values(data)
        if NATIVE:
            assert values.canonical_values(data) == canonical
        assert pickle.loads(canonical) == graph
        assert values._canonical_values(canonical) == canonical  # a fixed point
        # Every opcode sits wholly inside its frame (3.14's C unpickler checks).
        assert pickle._loads(canonical) == graph


def test_mutable_objects_keep_the_graphs_sharing():
    one = [1]
    assert deterministic([one, one]) != deterministic([[1], [1]])
    loaded = pickle.loads(deterministic([one, one, ("t", one), ("t", one)]))
    assert loaded[0] is loaded[1] is loaded[2][1]
    assert loaded[2] is loaded[3]  # equal tuples (of one list) merge


def test_recursive_structures_load_as_they_were():
    inner: list[Any] = []
    cycle = (inner, "name")
    inner.append(cycle)
    inner.append(("name",))
    loaded = pickle.loads(deterministic([cycle, cycle, inner, ("name",)]))
    assert loaded[0] is loaded[1] and loaded[0][0] is loaded[2]
    assert loaded[2][0] is loaded[0]
    assert loaded[3] == ("name",)


def test_large_data_goes_outside_frames_and_loads():
    big = "y" * 200_000
    graph = [(f"k{i % 50}", i, "v" * 10) for i in range(20_000)] + [
        big,
        "".join(big),
        b"z" * 100_000,
    ]
    payload = deterministic(graph)
    assert payload == deterministic(pickle.loads(payload))
    assert pickle.loads(payload) == graph
    assert payload.count(big.encode()) == 1  # the copy is a reference
    frames = [arg for op, arg, _ in pickletools.genops(payload) if op.name == "FRAME"]
    assert len(frames) > 1 and all(size < 2 * values.FRAME_TARGET for size in frames)
    if NATIVE:
        raw = pickle.dumps(graph, 5)
        assert values.canonical_values(raw) == values._canonical_values(raw)


@pytest.mark.parametrize("implementation", ["c", "python"])
def test_what_is_not_a_whole_protocol_4_or_5_pickle_is_refused(implementation):
    if implementation == "c" and not NATIVE:
        pytest.skip("the C parts are not built")
    walk = values.canonical_values if implementation == "c" else values._canonical_values
    good = pickle.dumps(["a", ("b", 1)], 5)
    for bad in [
        pickle.dumps([1], 2),  # no frames, PUT opcodes
        pickle.dumps([1], 0),
        good[:-1],  # no STOP
        good[:-3] + good[-1:],  # cut inside
        good + b".",  # data after STOP
        b"\x80\x05h\x00.",  # GET of a memo entry never set
        b"\x80\x05(N.",  # a mark left
        b"\x80\x05\x94.",  # MEMOIZE of nothing
        b"\x80\x05\x8c\x01aK\x01a.",  # APPEND to a str
        b"\x80\x05]\x94p0\n.",  # PUT
        b"",
    ]:
        with pytest.raises(ValueError, match="canonical_values"):
            walk(bad)


def test_a_class_dict_re_applied_by_cloudpickle_keeps_the_bytes():
    # cloudpickle re-applies the loaded class dict onto the class it tracks, with
    # new but equal strings for __slots__ and field names (dask's tokenize tests).
    def make():
        class Slotted:
            __slots__ = ("x", "y")

            def __init__(self, x):
                self.x = x

        return Slotted

    cls = make()
    before = deterministic(cls(1))
    cloudpickle.loads(cloudpickle.dumps(cls(1)))
    assert deterministic(cls(1)) == before
    cloudpickle.loads(cloudpickle.dumps(cls(1)))
    assert deterministic(cls(1)) == before != deterministic(cls(2))


GRAPHS = textwrap.dedent(
    """
    import json, sys
    import graphpickle
    strings = ["".join(["tas", "k"]), "task"]
    graph = {
        "keys": [(strings[i % 2], i // 2) for i in range(10)],
        "tuples": [tuple(["a", 1]), ("a", 1)],
        "nested": [frozenset({("a", 1)}), frozenset({tuple(["a", 1])})],
    }
    if sys.argv[1] == "shared":
        graph["keys"] = [(strings[1], i // 2) for i in range(10)]
        graph["tuples"] = [graph["tuples"][1]] * 2
    print(graphpickle.dumps(graph, deterministic=True).hex())
    """
)


def test_equal_graphs_give_equal_bytes_across_processes(tmp_path):
    outputs = {
        run_python(GRAPHS, how, cwd=tmp_path, env={"PYTHONHASHSEED": seed}).strip()
        for how, seed in [("copies", "0"), ("shared", "1"), ("copies", "77")]
    }
    assert len(outputs) == 1


_with_sets = st.recursive(
    hashables | st.sets(st.integers(-3, 3) | st.text(max_size=2), max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(spec=_with_sets, seed=st.integers(0, 2**32))
def test_one_walk_checks_for_sets_and_writes_each_value_once(spec, seed):
    # canonical_values_unless_sets: None exactly where sets_to_sort finds a set
    # in hash order (the C walk stops there), else canonical_values.
    from graphpickle.determinism import sets

    graph = build(spec, randomly_shared(random.Random(seed)))
    for protocol in (4, 5):
        data = pickle.dumps(graph, protocol)
        result = values.canonical_values_unless_sets(data)
        if sets.sets_to_sort(data):
            assert result is None
        else:
            assert result == values._canonical_values(data)


def test_the_walk_ahead_leaves_the_bytes_alone():
    # The C walk prefetches with a second walk ahead of it, whose hashes need no
    # table: large payloads (the table grows under it), frozensets written by
    # FROZENSET and by calls of builtins.frozenset (deterministic payloads),
    # equal values far apart and near, give the reference's bytes.
    keys = [("k", i, float(i), None, True) for i in range(30_000)]
    graph = {
        "tasks": {key: (len, ("k", key[1] - 1, float(key[1] - 1), None, True)) for key in keys},
        "sets": [frozenset({i, -i, str(i)}) for i in range(3_000)],
        "again": [frozenset({str(i), i, -i}) for i in range(3_000)],
        "nested": [frozenset({frozenset({i, 1}), (i, "x")}) for i in range(1_000)],
        "big": [10**30 + i for i in range(1_000)],
    }
    for data in (pickle.dumps(graph, 4), pickle.dumps(graph, 5), deterministic(graph)):
        canonical = values._canonical_values(data)
        if NATIVE:
            assert values.canonical_values(data) == canonical
        assert pickle.loads(canonical) == graph
    payload = deterministic(graph)
    assert values._canonical_values(payload) == payload  # a fixed point
