"""The wire's frame sizes in C (``wire/_frames.c``) give what the Python
versions beside them (``wire/frames.py``) give."""

from __future__ import annotations

import array
import pickle
import struct

import numpy as np
import pytest

from graphpickle.wire import frames as wire_frames


def test_buffer_nbytes_matches_the_python_version():
    frames = [
        b"abc",
        bytearray(10),
        memoryview(np.arange(6, dtype="f8")),
        pickle.PickleBuffer(np.zeros((3, 4))),
        np.arange(5, dtype="i2"),
    ]
    expected = [3, 10, 48, 96, 10]
    fortran = [np.asfortranarray(np.ones((3, 4)))]  # contiguous, in Fortran order
    assert wire_frames._buffer_nbytes_in_python(fortran) == [96]
    if wire_frames._frames is not None:
        assert wire_frames._frames.buffer_nbytes(fortran) == [96]
    assert wire_frames._buffer_nbytes_in_python(frames) == expected
    strided = [memoryview(bytearray(10))[::2]]
    with pytest.raises(BufferError):
        wire_frames._buffer_nbytes_in_python(strided)
    if wire_frames._frames is None:
        pytest.skip("not built")
    assert wire_frames._frames.buffer_nbytes(frames) == expected
    assert wire_frames._frames.buffer_nbytes(iter([b"x"])) == [1]
    with pytest.raises(BufferError):
        wire_frames._frames.buffer_nbytes(strided)
    with pytest.raises(TypeError):
        wire_frames._frames.buffer_nbytes([1])
    released = pickle.PickleBuffer(b"abc")
    released.release()
    with pytest.raises(ValueError):
        wire_frames._frames.buffer_nbytes([released])
    with pytest.raises(ValueError):
        wire_frames._buffer_nbytes_in_python([released])
    with pytest.raises(BufferError):
        wire_frames._frames.buffer_nbytes([pickle.PickleBuffer(strided[0])])


def test_frames_have_lengths_matches_the_python_version():

    frames = [b"abc", bytearray(10), pickle.PickleBuffer(np.zeros(4))]
    cases = [
        (array.array("Q", [3, 10, 32]), True),
        (array.array("Q", [3, 10, 31]), False),
        (array.array("Q", [3, 10]), False),
        (array.array("Q", [3, 10, 32, 1]), False),
    ]
    for expected, answer in cases:
        assert wire_frames._frames_have_lengths_in_python(frames, expected) is answer
        if wire_frames._frames is not None:
            assert wire_frames._frames.frames_have_lengths(frames, expected) is answer
    if wire_frames._frames is not None:
        with pytest.raises(TypeError):
            wire_frames._frames.frames_have_lengths(frames, array.array("I", [3, 10, 32]))
        with pytest.raises(BufferError):
            wire_frames._frames.frames_have_lengths(
                [memoryview(bytearray(4))[::2]], array.array("Q", [2])
            )


def test_frame_table_matches_the_python_version():

    buffers = [pickle.PickleBuffer(np.zeros(4)), b"abc", bytearray(7)]
    table, largest = wire_frames._frame_table_in_python(100, buffers)
    assert table == struct.pack("<4Q", 100, 32, 3, 7) and largest == 32
    assert wire_frames._frame_table_in_python(5, []) == (struct.pack("<Q", 5), 0)
    if wire_frames._frames is None:
        pytest.skip("not built")
    assert wire_frames._frames.frame_table(100, buffers) == (table, largest)
    assert wire_frames._frames.frame_table(5, []) == (struct.pack("<Q", 5), 0)
    with pytest.raises(BufferError):
        wire_frames._frames.frame_table(1, [memoryview(bytearray(4))[::2]])
    with pytest.raises(OverflowError):
        wire_frames._frames.frame_table(-1, [])


def test_frame_views_matches_the_python_version():

    message = memoryview(bytes(range(40)))
    cases = [
        (4, array.array("Q", [3, 0, 10])),
        (0, array.array("Q", [40])),
        (38, array.array("Q", [1, 5])),  # the second frame does not fit
        (40, array.array("Q", [])),
        (0, array.array("Q", [2**63])),
    ]
    for start, lengths in cases:
        views, end = wire_frames._frame_views_in_python(message, start, lengths)
        expected = ([bytes(v) for v in views], end)
        if wire_frames._frames is None:
            continue
        c_views, c_end = wire_frames._frames.frame_views(message, start, lengths)
        assert ([bytes(v) for v in c_views], c_end) == expected
        assert all(type(v) is memoryview and v.obj is message.obj for v in c_views)
    if wire_frames._frames is not None:
        with pytest.raises(TypeError):
            wire_frames._frames.frame_views(b"abc", 0, array.array("Q", [1]))
        with pytest.raises(TypeError):
            wire_frames._frames.frame_views(message, 0, array.array("I", [1]))
