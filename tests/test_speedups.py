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


def _needs_speedups():
    if _pickler._speedups is None:
        pytest.skip("the extension is switched off")


def test_each_module_object_of_the_core_extension_has_tables_of_its_own(tmp_path):
    """Its caches are per-module state (PEP 630): a second module object made
    from the same file (its exec runs again) remembers on its own, and what it
    remembers neither reaches nor changes the module graphpickle uses. Its
    objects keep its state alive after the module itself is gone."""
    _needs_speedups()
    from conftest import run_python

    out = run_python(
        """
        import gc, importlib.util, json, types
        import graphpickle
        from graphpickle.core import native

        spec = importlib.util.find_spec("graphpickle.core._speedups")
        copy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(copy)
        used = native.speedups
        assert copy is not used and copy.Dispatch is not used.Dispatch

        calls = []
        def handler(state, obj):
            calls.append(obj)
            return NotImplemented

        copy.set_by_reference_policy([set()], handler, None, None, None)
        copy.remember_by_reference(json.dumps)
        in_copy = copy.Dispatch({types.FunctionType: handler}, lambda t: None, None)
        in_used = used.Dispatch({types.FunctionType: handler}, lambda t: None, None)
        del copy, spec
        gc.collect()
        assert in_copy(json.dumps) is NotImplemented and calls == []  # remembered there
        assert in_used(json.dumps) is NotImplemented and calls == [json.dumps]  # not here
        # (3.12+: the copy's dict watchers leave the counts of the used module's
        # trusted: its checks still pass over unchanged dicts, its sys.modules
        # tuple is still kept while sys.modules does not change)
        import sys
        from graphpickle.core import held_classes as held
        if sys.version_info >= (3, 12):
            box = {"a": 1}
            probes = ((held._ITEMS, box),)
            reading = used.held_snapshot(probes, held._MISSING)
            assert used.held_watch(probes)
            since = used.held_unchanged_since(probes, reading, held._MISSING, None)
            assert used.held_unchanged_since(probes, reading, held._MISSING, since) == since
            assert used.modules_items() is used.modules_items()
        print("ok")
        """,
        cwd=tmp_path,
    )
    assert out.strip() == "ok"


@pytest.mark.parametrize("name", ["Dispatch", "Sink", "Dumper", "Loader"])
def test_the_core_types_are_immutable_heap_types_of_their_module(name):
    _needs_speedups()
    cls = getattr(_pickler._speedups, name)
    assert cls.__flags__ & (1 << 9)  # Py_TPFLAGS_HEAPTYPE
    assert cls.__module__ == "graphpickle.core._speedups" and cls.__qualname__ == name
    with pytest.raises(TypeError):
        type("Sub", (cls,), {})  # not a base type: Py_TYPE(obj) is always the module's type
    with pytest.raises(TypeError):
        cls.extra = 1  # immutable


def test_a_cycle_through_a_dumper_is_collected():
    """The heap types traverse what they hold (their type included): a
    reference cycle through a Dumper's __dict__ is freed by the collector."""
    import _pickle
    import gc

    _needs_speedups()
    freed = []

    class Witness:
        def __del__(self):
            freed.append(True)

    dumper = _pickler._speedups.Dumper(
        None,
        None,
        None,
        _pickle.Pickler.dump,
        _pickle.Pickler.clear_memo,
        0,
        0,
        10,
        {"_speedups": _pickler._speedups},
    )
    witness = Witness()
    witness.dumper, dumper.witness = dumper, witness
    del dumper, witness
    gc.collect()
    assert freed == [True]


def test_the_c_paths_hold_no_reference_they_do_not_give_back(tmp_path):
    """Dumping importable functions and classes (the remembered by-reference
    answers), a by-value function (its remembered reduction) and the small
    fast path a few hundred times leaves every object they read with the
    reference count it had or fewer: a leak in the C paths shows up as a count
    that grows with the number of dumps. (A count may fall: with some hash
    seeds a code reduction's arguments that hold the function's name are
    released during the loop.)"""
    _needs_speedups()
    from conftest import run_python

    out = run_python(
        """
        import collections, json, sys
        import graphpickle

        scale = 3

        def by_value(x):
            return json.dumps(x) * scale

        class Local:
            pass

        watched = [json.dumps, collections.OrderedDict, by_value, by_value.__code__,
                   by_value.__globals__, by_value.__qualname__, by_value.__module__, Local,
                   Local.__qualname__, json, "json", "dumps"]
        messages = [json.dumps, collections.OrderedDict, by_value, Local, [by_value, Local()]]
        for message in messages * 3:  # remembered from here on
            graphpickle.dumps(message)
        before = [sys.getrefcount(obj) for obj in watched]
        for _ in range(300):
            for message in messages:
                graphpickle.dumps(message)
        after = [sys.getrefcount(obj) for obj in watched]
        # (a leak grows a count; a cache may drop what it held: a count falls)
        print([(repr(o)[:40], a - b) for o, b, a in zip(watched, before, after) if a > b])
        """,
        cwd=tmp_path,
    )
    assert out.strip() == "[]"


SUBINTERPRETER = """
import sys
try:
    from concurrent import interpreters  # (3.14+)
    run = lambda code: interpreters.create().exec(code)
except ImportError:
    try:
        import _interpreters as low  # (3.13)
    except ImportError:
        import _xxsubinterpreters as low  # (3.11, 3.12)
    run = lambda code: (low.exec if hasattr(low, "exec") else low.run_string)(low.create(), code)
run('''
import pickle, warnings
warnings.simplefilter("error")  # (nothing may warn)
import graphpickle
from graphpickle import _native
square = lambda x: x * x
result = (graphpickle.native_parts(), pickle.loads(graphpickle.dumps(square))(7))
with open(%r, "w") as out:
    out.write(repr(result))
''')
"""


def test_a_subinterpreter_runs_the_python_parts_without_a_warning(tmp_path):
    """3.14's InterpreterPoolExecutor, mod_wsgi: the C parts are not loaded in an
    interpreter other than the main one (they declare that they cannot be), and
    nothing warns; the main interpreter is not mistaken for one."""
    import subprocess
    import sys

    from graphpickle import _native

    # (The child's main interpreter imports nothing after: CPython 3.12.1's
    # _decimal crashes a process that imports it in a subinterpreter and then in
    # the main one, graphpickle or not.)
    result = tmp_path / "result.txt"
    (tmp_path / "child.py").write_text(SUBINTERPRETER % str(result))
    done = subprocess.run([sys.executable, "child.py"], cwd=tmp_path, capture_output=True)
    if done.returncode != 0:
        # CPython 3.12.1 crashes at exit a process that imported hashlib in a
        # subinterpreter: accepted only where hashlib alone does the same.
        control = SUBINTERPRETER.split("run(" + "'" * 3)[0] + "run('import hashlib')"
        (tmp_path / "control.py").write_text(control)
        alone = subprocess.run([sys.executable, "control.py"], cwd=tmp_path, capture_output=True)
        assert alone.returncode == done.returncode, done.stderr[-2000:]
    parts, squared = eval(result.read_text())
    off = bool(os.environ.get("GRAPHPICKLE_NO_SPEEDUPS"))
    assert set(parts.values()) == {"off" if off else "subinterpreter"} and squared == 49
    assert not _native.in_subinterpreter()
    assert set(graphpickle.native_parts().values()) == {"off" if off else "active"}


def test_a_pooled_pickler_starts_each_payload_with_no_globals_dict_of_the_last():
    # The dumps of a pooled pickler (_speedups.Dumper) forgets each payload's base
    # globals: a module's name changed between two payloads reaches the second.
    module: dict[str, object] = {"__name__": "before"}
    exec("def f():\n    return 1\n", module)
    first = graphpickle.loads(graphpickle.dumps(module["f"]))
    module["__name__"] = "after"
    second = graphpickle.loads(graphpickle.dumps(module["f"]))
    assert (first.__globals__["__name__"], second.__globals__["__name__"]) == ("before", "after")
