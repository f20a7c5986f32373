"""Property 3: when nothing needs pickling by value, graphpickle writes exactly
the bytes ``pickle.dumps`` writes, whatever the data says (``__main__`` included)."""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import io
import logging
import os.path
import pickle
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphpickle

IMPORTABLE = [
    len,
    os.path.join,
    collections.OrderedDict,
    datetime.datetime(2026, 11, 29, 18, 0),
    datetime.timedelta(days=3),
    decimal.Decimal("1.25"),
    fractions.Fraction(3, 7),
    uuid.UUID(int=12345),
    collections.Counter("abracadabra"),
    range(3, 30, 4),
    slice(1, None, 2),
    complex(1, 2),
    np.arange(12).reshape(3, 4),
    np.float64(2.5),
    np.datetime64("2026-11-29"),
    logging.getLogger("graphpickle.test"),
    "".join,  # a bound builtin method
    str.upper,  # a method descriptor
    int,
    type(None),
    type(Ellipsis),
    type(NotImplemented),
]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
    st.sampled_from(["__main__", b"__main__", "__mp_main__", "<lambda>", "<locals>"]),
    st.sampled_from(IMPORTABLE),
)
graphs = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children),
        st.tuples(children, children),
        st.dictionaries(st.one_of(st.text(), st.integers(), st.just("__main__")), children),
        st.frozensets(st.one_of(st.integers(), st.text())),
    ),
    max_leaves=40,
)


@pytest.fixture(autouse=True)
def _both_implementations(implementation):
    """Every test here runs with the C and the pure-Python reducer_override."""


def _same_bytes(obj: object, protocol: int) -> None:
    expected = pickle.dumps(obj, protocol=protocol)
    assert graphpickle.dumps(obj, protocol=protocol) == expected
    out = io.BytesIO()
    graphpickle.dump(obj, out, protocol)
    assert out.getvalue() == expected


@settings(max_examples=300, deadline=None)
@given(graph=graphs, protocol=st.integers(0, 5))
def test_random_graphs_are_byte_identical(graph, protocol):
    _same_bytes(graph, protocol)


@pytest.mark.parametrize("obj", IMPORTABLE, ids=lambda o: type(o).__name__)
def test_importable_objects_are_byte_identical(obj):
    _same_bytes(obj, 5)


def test_default_protocol_is_5():
    obj = {"a": [1, 2.0, "x"]}
    assert graphpickle.dumps(obj) == pickle.dumps(obj, protocol=5)
    assert graphpickle.DEFAULT_PROTOCOL == 5


def test_large_payload_framing_is_identical():
    # Past 64 KiB the C pickler commits frames and writes large bytes outside of
    # them; writing to a file and to memory must agree.
    obj = {"blob": b"x" * 300_000, "items": list(range(50_000)), "s": "y" * 100_000}
    _same_bytes(obj, 5)
    _same_bytes(obj, 4)


class Importable:
    """Instances of an importable class, with a method bound to one."""

    def __init__(self, v: int) -> None:
        self.v = v

    def method(self) -> int:
        return self.v

    @classmethod
    def build(cls) -> Importable:
        return cls(1)


def test_bound_methods_of_importable_classes_keep_stdlib_reduction():
    obj = Importable(3)
    _same_bytes([obj, obj.method, Importable.build], 5)


def test_main_text_in_data_changes_nothing():
    graph = {"__main__": "__main__", b"__main__": [b"__main__." * 10], ("__main__", 1): len}
    _same_bytes(graph, 5)


def test_buffer_callback_identical_to_pickle():
    arrays = [np.arange(100, dtype="f8"), np.ones((10, 10))]
    ours: list[pickle.PickleBuffer] = []
    theirs: list[pickle.PickleBuffer] = []
    data = graphpickle.dumps(arrays, buffer_callback=ours.append)
    assert data == pickle.dumps(arrays, protocol=5, buffer_callback=theirs.append)
    assert [bytes(b.raw()) for b in ours] == [bytes(b.raw()) for b in theirs]
