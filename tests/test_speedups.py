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
from graphpickle.core import pickler as _pickler


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


def test_each_part_declares_whether_it_needs_the_gil_as_native_says():
    """Each C part's Py_mod_gil slot (_extension.h) and _native.GIL_FREE agree."""
    import re
    from pathlib import Path

    from graphpickle import _native

    root = Path(_native.__file__).parent
    declared = {}
    for part, (extension, _) in _native.PARTS.items():
        source = root.joinpath(*extension.split(".")[1:]).with_suffix(".c").read_text()
        (gil,) = re.findall(r"GRAPHPICKLE_MODULE_SLOTS\(\w+, \w+, GRAPHPICKLE_(GIL_\w+)\)", source)
        declared[part] = gil
    assert {part for part, gil in declared.items() if gil == "GIL_NOT_USED"} == _native.GIL_FREE
    assert set(declared.values()) <= {"GIL_USED", "GIL_NOT_USED"}


def test_a_part_that_needs_the_gil_is_not_imported_where_the_gil_is_off(monkeypatch):
    from graphpickle import _native
    from graphpickle.wire import _frames as frames  # (imported first: it records its status)

    monkeypatch.setattr(_native, "_status", {})
    monkeypatch.setattr(_native, "gil_is_off", lambda: True)
    if os.environ.get("GRAPHPICKLE_NO_SPEEDUPS"):
        pytest.skip("the extensions are switched off")

    def must_not_import():
        raise AssertionError("imported: it would turn the GIL back on")

    assert _native.load("core", must_not_import, 0, ()) is None
    assert _native.load("wire", lambda: frames, frames.VERSION, ()) is frames
    assert _native._status == {"core": "needs the GIL", "wire": "active"}


def test_a_snapshot_whose_lookups_change_the_function_fails_cleanly():
    """function_snapshot holds the function's __dict__ while it looks names up:
    a name whose __eq__ replaces that dict makes it fail, not read freed memory."""
    if _pickler._speedups is None:
        pytest.skip("the extension is switched off")

    def func():
        return 1

    func.attribute = 1

    class Rebinding(str):
        def __hash__(self):
            return hash("pytest")  # (a key of func's globals: __eq__ runs)

        def __eq__(self, other):
            func.__dict__ = {"a": 1, "b": 2, "c": 3}
            return False

    with pytest.raises(RuntimeError, match="changed size"):
        _pickler._speedups.function_snapshot(func, (Rebinding("x"),), object())
