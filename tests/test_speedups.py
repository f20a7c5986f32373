"""The C reducer_override and the pure-Python one write the same bytes."""

from __future__ import annotations

import io
import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphpickle
from graphpickle import _pickler


def test_speedups_are_built_unless_disabled():
    # The extension is optional at install time; in this project's environments
    # it must build, so that a broken build does not go unnoticed.
    if os.environ.get("GRAPHPICKLE_NO_SPEEDUPS"):
        assert _pickler._speedups is None
    else:
        assert _pickler._speedups is not None


def test_subclass_overriding_reducer_override_is_respected(implementation):
    seen = []

    class Spy(graphpickle.Pickler):
        def reducer_override(self, obj):
            seen.append(type(obj).__name__)
            return super().reducer_override(obj)

    Spy(io.BytesIO()).dump([lambda: 1, np.int8(3)])
    assert seen[0] == "function" and "int8" in seen


def _make_values(seed: int):
    def closure():
        return seed

    class Local:
        value = seed

    return [closure, Local, Local(), np.arange(seed % 7), memoryview(b"ab" * seed), len]


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 1000), protocol=st.integers(2, 5))
def test_same_bytes_from_both(seed, protocol):
    values = _make_values(seed)
    # The first pickling of an instance caches __slotnames__ on its class (copyreg),
    # which changes the class's by-value payload: warm up first.
    graphpickle.dumps(values, protocol)
    with_c = graphpickle.dumps(values, protocol)
    saved = _pickler._speedups
    _pickler._speedups = None
    try:
        pure = graphpickle.dumps(values, protocol)
    finally:
        _pickler._speedups = saved
    # Dynamic classes get a tracker id that is stable within this process.
    assert with_c == pure


def test_errors_and_paths_are_the_same(implementation):
    import threading

    with pytest.raises(TypeError) as info:
        graphpickle.dumps({"a": [threading.Lock()]})
    assert info.value.graphpickle_path == "root['a'][0]"


def test_bad_arguments_to_dispatch():
    if _pickler._speedups is None:
        pytest.skip("not built")
    dispatch = _pickler._speedups.Dispatch({}, lambda t: None, None)
    with pytest.raises(TypeError):
        dispatch()
    with pytest.raises(TypeError):
        dispatch(1, 2)
    with pytest.raises(TypeError):
        _pickler._speedups.Dispatch([], lambda t: None, None)
    with pytest.raises(TypeError):
        _pickler._speedups.Dispatch({}, 3, None)
    assert dispatch(object()) is NotImplemented
    assert pickle.dumps(1)  # nothing above broke the interpreter


def test_buffer_nbytes_matches_the_python_version():
    from graphpickle import wire

    frames = [
        b"abc",
        bytearray(10),
        memoryview(np.arange(6, dtype="f8")),
        pickle.PickleBuffer(np.zeros((3, 4))),
        np.arange(5, dtype="i2"),
    ]
    expected = [3, 10, 48, 96, 10]
    fortran = [np.asfortranarray(np.ones((3, 4)))]  # contiguous, in Fortran order
    assert wire._buffer_nbytes_in_python(fortran) == [96]
    if _pickler._speedups is not None:
        assert _pickler._speedups.buffer_nbytes(fortran) == [96]
    assert wire._buffer_nbytes_in_python(frames) == expected
    strided = [memoryview(bytearray(10))[::2]]
    with pytest.raises(BufferError):
        wire._buffer_nbytes_in_python(strided)
    if _pickler._speedups is None:
        pytest.skip("not built")
    assert _pickler._speedups.buffer_nbytes(frames) == expected
    assert _pickler._speedups.buffer_nbytes(iter([b"x"])) == [1]
    with pytest.raises(BufferError):
        _pickler._speedups.buffer_nbytes(strided)
    with pytest.raises(TypeError):
        _pickler._speedups.buffer_nbytes([1])
    released = pickle.PickleBuffer(b"abc")
    released.release()
    with pytest.raises(ValueError):
        _pickler._speedups.buffer_nbytes([released])
    with pytest.raises(ValueError):
        wire._buffer_nbytes_in_python([released])
    with pytest.raises(BufferError):
        _pickler._speedups.buffer_nbytes([pickle.PickleBuffer(strided[0])])


def test_frames_have_lengths_matches_the_python_version():
    import array

    from graphpickle import wire

    frames = [b"abc", bytearray(10), pickle.PickleBuffer(np.zeros(4))]
    cases = [
        (array.array("Q", [3, 10, 32]), True),
        (array.array("Q", [3, 10, 31]), False),
        (array.array("Q", [3, 10]), False),
        (array.array("Q", [3, 10, 32, 1]), False),
    ]
    for expected, answer in cases:
        assert wire._frames_have_lengths_in_python(frames, expected) is answer
        if _pickler._speedups is not None:
            assert _pickler._speedups.frames_have_lengths(frames, expected) is answer
    if _pickler._speedups is not None:
        with pytest.raises(TypeError):
            _pickler._speedups.frames_have_lengths(frames, array.array("I", [3, 10, 32]))
        with pytest.raises(BufferError):
            _pickler._speedups.frames_have_lengths(
                [memoryview(bytearray(4))[::2]], array.array("Q", [2])
            )


def test_frame_table_matches_the_python_version():
    import struct

    from graphpickle import wire

    buffers = [pickle.PickleBuffer(np.zeros(4)), b"abc", bytearray(7)]
    table, largest = wire._frame_table_in_python(100, buffers)
    assert table == struct.pack("<4Q", 100, 32, 3, 7) and largest == 32
    assert wire._frame_table_in_python(5, []) == (struct.pack("<Q", 5), 0)
    if _pickler._speedups is None:
        pytest.skip("not built")
    assert _pickler._speedups.frame_table(100, buffers) == (table, largest)
    assert _pickler._speedups.frame_table(5, []) == (struct.pack("<Q", 5), 0)
    with pytest.raises(BufferError):
        _pickler._speedups.frame_table(1, [memoryview(bytearray(4))[::2]])
    with pytest.raises(OverflowError):
        _pickler._speedups.frame_table(-1, [])


def _sets_to_sort_reference(data: bytes) -> bool:
    """sets_to_sort in Python, from pickletools' description of each opcode."""
    import pickletools

    above = [0]  # items above each mark
    found = False
    for op, _, _ in pickletools.genops(data):
        if op.name == "MARK":
            above.append(0)
        elif pickletools.markobject in op.stack_before:
            found |= op.name in ("ADDITEMS", "FROZENSET") and above[-1] >= 2
            above.pop()
            above[-1] += len(op.stack_after)
        elif op.name == "POP" and above[-1] == 0:
            above.pop()
        else:
            above[-1] += len(op.stack_after) - len(op.stack_before)
    return found


_hashable = st.recursive(
    st.integers() | st.text(max_size=3) | st.none(),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=4),
    max_leaves=12,
)
_data = st.recursive(
    _hashable | st.sets(_hashable, max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_data, st.integers(0, 5))
def test_sets_to_sort_counts_set_members_as_pickletools_does(obj, protocol):
    if _pickler._speedups is None:
        pytest.skip("not built")
    data = pickle.dumps(obj, protocol)
    assert _pickler._speedups.sets_to_sort(data) is _sets_to_sort_reference(data)


def test_sets_to_sort_refuses_what_is_not_a_whole_pickle():
    if _pickler._speedups is None:
        pytest.skip("not built")
    whole = pickle.dumps([{1}, "x" * 300])
    for bad in (b"", whole[:-1], whole[:20], b"\xff.", b"(.", b"0.", b"X\xff\xff\xff\xff"):
        with pytest.raises(ValueError, match="whole, valid pickle"):
            _pickler._speedups.sets_to_sort(bad)
    # It stops at the first set to sort: what follows is not read.
    assert _pickler._speedups.sets_to_sort(pickle.dumps([{1, 2}, "x"])[:-3]) is True
    assert _pickler._speedups.sets_to_sort(pickle.dumps([{1}, frozenset()])) is False


def test_note_set_keeps_exact_sets_only():
    if _pickler._speedups is None:
        pytest.skip("not built")

    class SubSet(set):
        pass

    sink: list = []
    for obj in ({1}, frozenset(), SubSet(), [1], "s", None):
        assert _pickler._speedups.note_set(sink, obj) is None
    assert sink == [{1}, frozenset()]
    with pytest.raises(TypeError):
        _pickler._speedups.note_set((), {1})


def test_frame_views_matches_the_python_version():
    import array

    from graphpickle import wire

    message = memoryview(bytes(range(40)))
    cases = [
        (4, array.array("Q", [3, 0, 10])),
        (0, array.array("Q", [40])),
        (38, array.array("Q", [1, 5])),  # the second frame does not fit
        (40, array.array("Q", [])),
        (0, array.array("Q", [2**63])),
    ]
    for start, lengths in cases:
        views, end = wire._frame_views_in_python(message, start, lengths)
        expected = ([bytes(v) for v in views], end)
        if _pickler._speedups is None:
            continue
        c_views, c_end = _pickler._speedups.frame_views(message, start, lengths)
        assert ([bytes(v) for v in c_views], c_end) == expected
        assert all(type(v) is memoryview and v.obj is message.obj for v in c_views)
    if _pickler._speedups is not None:
        with pytest.raises(TypeError):
            _pickler._speedups.frame_views(b"abc", 0, array.array("Q", [1]))
        with pytest.raises(TypeError):
            _pickler._speedups.frame_views(message, 0, array.array("I", [1]))
