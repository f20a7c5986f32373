"""Property 6: out-of-band buffers with protocol 5."""

from __future__ import annotations

import array
import pickle

import numpy as np
import pytest

import graphpickle


def dumps_oob(obj):
    buffers: list[pickle.PickleBuffer] = []
    data = graphpickle.dumps(obj, buffer_callback=buffers.append)
    return data, buffers


def test_numpy_arrays_travel_out_of_band_without_copy():
    arrays = [np.arange(1000, dtype="f8"), np.ones((50, 20), dtype="i4", order="F")]
    data, buffers = dumps_oob(arrays)
    assert len(buffers) == 2
    assert len(data) < 1000  # the 8 kB of array data is not in the payload
    # zero copy: the buffer exposes the array's own memory
    assert np.shares_memory(np.asarray(buffers[0].raw()), arrays[0])
    loaded = graphpickle.loads(data, buffers=buffers)
    for a, b in zip(arrays, loaded, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.flags.f_contiguous == b.flags.f_contiguous


def test_in_band_without_callback():
    arr = np.arange(10)
    loaded = graphpickle.loads(graphpickle.dumps(arr))
    np.testing.assert_array_equal(arr, loaded)


def test_readonly_stays_readonly_and_writable_stays_writable():
    ro = np.arange(10)
    ro.flags.writeable = False
    rw = np.arange(10)
    views = [memoryview(b"readonly bytes"), memoryview(bytearray(b"writable"))]
    data, buffers = dumps_oob([ro, rw, *views])
    assert len(buffers) == 4
    assert [b.raw().readonly for b in buffers] == [True, False, True, False]
    # The receiver passes what arrived (here bytes for read-only, bytearray for
    # writable, as a transport would).
    received = [bytes(b.raw()) if b.raw().readonly else bytearray(b.raw()) for b in buffers]
    ro2, rw2, view_ro, view_rw = graphpickle.loads(data, buffers=received)
    assert not ro2.flags.writeable and rw2.flags.writeable
    assert view_ro.readonly and not view_rw.readonly
    assert bytes(view_ro) == b"readonly bytes" and bytes(view_rw) == b"writable"
    # Even if the transport hands over writable memory, read-only is enforced.
    _, _, view_ro3, _ = graphpickle.loads(
        data, buffers=[bytearray(bytes(b.raw())) for b in buffers]
    )
    assert view_ro3.readonly


def test_memoryview_in_band_keeps_type_and_writability():
    for protocol in (2, 4, 5):
        ro, rw = graphpickle.loads(
            graphpickle.dumps([memoryview(b"ab"), memoryview(bytearray(b"cd"))], protocol)
        )
        assert isinstance(ro, memoryview) and ro.readonly and bytes(ro) == b"ab"
        assert isinstance(rw, memoryview) and not rw.readonly and bytes(rw) == b"cd"


@pytest.mark.parametrize(
    "view",
    [
        memoryview(array.array("d", [1.5, 2.5, 3.5])),
        memoryview(array.array("i", range(12))).cast("B").cast("i", (3, 4)),
        memoryview(bytearray(range(20)))[::2],  # not contiguous: copied
        memoryview(b""),
        memoryview(np.arange(24, dtype="i8").reshape(2, 3, 4)),
    ],
    ids=["doubles", "2d-ints", "strided", "empty", "numpy-3d"],
)
def test_memoryview_formats_and_shapes(view):
    for oob in (True, False):
        if oob:
            data, buffers = dumps_oob(view)
            loaded = graphpickle.loads(data, buffers=buffers)
        else:
            loaded = graphpickle.loads(graphpickle.dumps(view))
        assert loaded.format == view.format
        assert loaded.shape == view.shape
        assert loaded.tolist() == view.tolist()
        assert loaded.readonly == view.readonly


def test_unrebuildable_memoryview_format_is_a_clear_error():
    structured = np.zeros(3, dtype=[("a", "i4"), ("b", "f8")])
    with pytest.raises(graphpickle.PicklingError, match="memoryview of format") as info:
        graphpickle.dumps({"v": memoryview(structured)})
    assert info.value.path == "root['v']"


def test_pickle_buffer_objects():
    buf = pickle.PickleBuffer(bytearray(b"abc"))
    data, buffers = dumps_oob([buf])
    assert len(buffers) == 1
    (loaded,) = graphpickle.loads(data, buffers=buffers)
    assert bytes(loaded) == b"abc"


def test_by_value_closure_and_class_holding_arrays_go_out_of_band():
    big = np.arange(10_000, dtype="f8")

    def uses_big(i):
        return big[i]

    class Holder:
        data = np.arange(5000, dtype="i8")

        def total(self):
            return int(self.data.sum())

    data, buffers = dumps_oob([uses_big, Holder()])
    assert len(buffers) == 2
    assert len(data) < 20_000  # 120 kB of arrays are out of band
    func, holder = graphpickle.loads(data, buffers=buffers)
    assert func(9999) == 9999.0
    assert holder.total() == sum(range(5000))


def test_protocol_4_keeps_buffers_in_band():
    arr = np.arange(100)
    buffers: list[pickle.PickleBuffer] = []
    with pytest.raises(ValueError, match="buffer_callback needs protocol >= 5"):
        graphpickle.dumps(arr, protocol=4, buffer_callback=buffers.append)
    np.testing.assert_array_equal(graphpickle.loads(graphpickle.dumps(arr, protocol=4)), arr)


def test_buffer_callback_returning_true_keeps_buffer_in_band():
    arr = np.arange(100)
    data = graphpickle.dumps(arr, buffer_callback=lambda buf: True)
    np.testing.assert_array_equal(graphpickle.loads(data), arr)


def test_missing_buffers_is_a_clear_error():
    data, _ = dumps_oob(np.arange(3))
    with pytest.raises(pickle.UnpicklingError, match="out-of-band") as info:  # pickle's
        graphpickle.loads(data)
    assert "as buffers=" in info.value.__notes__[-1]
