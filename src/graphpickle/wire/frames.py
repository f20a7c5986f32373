"""The sizes of a message's frames: what ``pack`` writes in the header's table,
and what ``unpack`` checks and slices. In C when ``_frames.c`` (beside this
file) is built; these Python versions give the same results.

- ``buffer_nbytes(frames)``: each frame's size in bytes (contiguous frames only).
- ``frame_table(first_length, buffers)``: the header's little-endian u64 table
  of frame sizes, and the largest buffer.
- ``frames_have_lengths(frames, expected)``: whether the frames have the sizes
  the header declares.
- ``frame_views(view, start, lengths)``: the frames of a contiguous message, and
  where the last ends (fewer frames than lengths if it is truncated).
"""

from __future__ import annotations

import array
import sys
import types
from collections.abc import Sequence
from typing import Any

from .. import _native

#: The VERSION of ``_frames.c`` this file expects.
VERSION = 1
NAMES = ("buffer_nbytes", "frame_table", "frame_views", "frames_have_lengths")


def _import() -> types.ModuleType:
    from . import _frames

    return _frames


def little_endian(table: array.array[int]) -> bytes:
    """``table``'s items as little-endian bytes, on any machine."""
    if sys.byteorder == "big":
        table = array.array(table.typecode, table)
        table.byteswap()
    return table.tobytes()


def _buffer_nbytes_in_python(frames: Sequence[Any]) -> list[int]:
    sizes = []
    for frame in frames:
        view = memoryview(frame)
        if not view.contiguous:
            raise BufferError("memoryview: underlying buffer is not contiguous")
        sizes.append(view.nbytes)
    return sizes


def _frame_table_in_python(first_length: int, buffers: Sequence[Any]) -> tuple[bytes, int]:
    sizes = _buffer_nbytes_in_python(buffers)
    return little_endian(array.array("Q", [first_length, *sizes])), max(sizes, default=0)


def _frames_have_lengths_in_python(frames: Sequence[Any], expected: array.array[int]) -> bool:
    return _buffer_nbytes_in_python(frames) == expected.tolist()


def _frame_views_in_python(
    view: memoryview, start: int, lengths: array.array[int]
) -> tuple[list[Any], int]:
    frames: list[Any] = []
    end = start
    for declared in lengths:
        if view.nbytes < end + declared:
            break  # truncated: fewer frames than lengths
        frames.append(view[end : end + declared])
        end += declared
    return frames, end


# In C when _frames.c is built (the same results).
_frames = _native.load("wire", _import, VERSION, NAMES)
buffer_nbytes = _buffer_nbytes_in_python if _frames is None else _frames.buffer_nbytes
frames_have_lengths = (
    _frames_have_lengths_in_python if _frames is None else _frames.frames_have_lengths
)
frame_table = _frame_table_in_python if _frames is None else _frames.frame_table
frame_views = _frame_views_in_python if _frames is None else _frames.frame_views
